// The graph parser's steps: one step's fields, its kind (run, tool, plan,
// agent, fn; wait in graph_parse_wait.cpp) and its child graph (inline, a
// file, or a registered name).

#include "persistence/graph_parser.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <utility>

#include "persistence/error.hpp"
#include "persistence/graph_paths.hpp"
#include "persistence/reference.hpp"
#include "persistence/shell_argv.hpp"
#include "persistence/suggest.hpp"

namespace canopy::core::detail {

namespace fs = std::filesystem;

namespace {

// -- constants -----------------------------------------------------------------

/// `a` then `b`.
std::vector<std::string> concat(const std::vector<std::string>& a,
                                const std::vector<std::string>& b) {
  auto out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

const std::vector<std::string> kind_keys{"run", "tool", "graph", "plan",
                                         "agent", "fn", "wait", "llm"};

const std::vector<std::string> step_field_keys{"needs",   "when",    "after",       "with",
                                               "message", "env",     "stdin",       "cwd",
                                               "timeout", "retries", "retry_delay", "cost",
                                               "grace",   "repeat"};

const std::vector<std::string> grace_keys{"interrupt", "terminate"};

const std::vector<std::string> builtin_fns{"echo", "fail", "noop", "sleep"};

} // namespace

// -- steps ---------------------------------------------------------------------

void graph_parser::parse_step(const std::string& id, const json& v) {
  work_index_.emplace(id, work_.size());
  work_.emplace_back(defs_.emplace_back());
  needs_.emplace_back();
  auto& w = work_.back();
  w.path = "/steps/" + escape_pointer(id);
  w.def.id = id;
  const auto& path = w.path;
  if (!is_name(id))
    fail(path, "invalid step id '" + id + "' (use letters, digits, '_' and '-')");
  if (!v.is_object()) {
    fail(path, "a step must be an object, " + got(v));
    return;
  }
  std::vector<std::string> kinds;
  for (auto& [key, val] : v.items()) {
    if (contains(kind_keys, key))
      kinds.push_back(key);
    else if (!contains(step_field_keys, key))
      fail(path + "/" + escape_pointer(key),
           "unknown key '" + key + "' (a step has one kind of " + join(kind_keys)
             + " and the fields " + join(step_field_keys) + ")"
             + did_you_mean(key, concat(kind_keys, step_field_keys)));
  }
  if (kinds.empty())
    fail(path, "step '" + id + "' has no kind (expected exactly one of " + join(kind_keys)
                 + ")");
  else if (kinds.size() > 1)
    fail(path, "step '" + id + "' has " + std::to_string(kinds.size()) + " kinds ("
                 + join(kinds) + "); expected exactly one");
  bool is_wait = kinds.size() == 1 && kinds.front() == "wait";
  if (is_wait)
    refuse_wait_fields(w, v);
  if (kinds.size() == 1 && kinds.front() == "llm")
    refuse_llm_fields(w, v);
  parse_step_fields(w, v, contains(kinds, "agent"), is_wait);
  if (kinds.size() == 1)
    parse_kind(w, kinds.front(), v.at(kinds.front()));
  if (auto it = v.find("repeat"); it != v.end() && kinds.size() == 1)
    parse_repeat(w, *it, path + "/repeat");
}

void graph_parser::parse_step_fields(step_work& w, const json& v, bool is_agent,
                                     bool deps_only) {
  parse_step_deps(w, v);
  if (deps_only)
    return; // a wait step: `refuse_wait_fields` reported the other fields
  parse_step_inputs(w, v, is_agent);
  parse_step_limits(w, v);
}

void graph_parser::parse_step_deps(step_work& w, const json& v) {
  const auto& path = w.path;
  auto& def = w.def;
  if (auto it = v.find("needs"); it != v.end()) {
    if (!it->is_array()) {
      fail(path + "/needs", "expected an array of step ids, " + got(*it));
    } else {
      for (size_t i = 0; i < it->size(); ++i) {
        const auto& x = (*it)[i];
        if (x.is_string())
          w.raw_needs.emplace_back(i, &x.get_ref<const std::string&>());
        else
          fail(path + "/needs/" + std::to_string(i), "expected a step id, " + got(x));
      }
    }
  }
  if (auto it = v.find("when"); it != v.end()) {
    def.when = *it;
    check_condition(
      *it, path + "/when", [this](std::string p, std::string m) { fail(p, std::move(m)); },
      [&w, &path](std::string p, const std::string* text) {
        w.texts.emplace_back(p.substr(path.size()), text);
      });
  }
  if (auto it = v.find("after"); it != v.end()) {
    if (!it->is_string() || !from_string(it->get<std::string>(), def.after))
      fail(path + "/after", "expected \"all_completed\" or \"any_completed\", "
                              + (it->is_string() ? "got \"" + it->get<std::string>() + "\""
                                                 : got(*it)));
    else if (!v.contains("needs"))
      fail(path + "/after", "'after' says how a step treats its needs: this step has none");
  }
}

void graph_parser::parse_step_inputs(step_work& w, const json& v, bool is_agent) {
  const auto& path = w.path;
  auto& def = w.def;
  if (auto it = v.find("with"); it != v.end()) {
    if (!it->is_object()) {
      fail(path + "/with", "expected an object, " + got(*it));
      w.bad_with = true;
    } else {
      def.with = *it;
      collect_texts(w, *it, "/with");
    }
  }
  if (auto it = v.find("message"); it != v.end()) {
    if (!is_agent) {
      fail(path + "/message", "'message' is only valid on agent steps");
    } else {
      def.message = *it;
      collect_texts(w, *it, "/message");
    }
  }
  if (auto it = v.find("env"); it != v.end()) {
    if (!it->is_object()) {
      fail(path + "/env", "expected an object of strings, " + got(*it));
    } else {
      for (auto& [key, val] : it->items()) {
        auto vpath = path + "/env/" + escape_pointer(key);
        if (!val.is_string()) {
          fail(vpath, "expected a string, " + got(val));
          continue;
        }
        def.env.emplace(key, val.get<std::string>());
        w.texts.emplace_back(vpath.substr(path.size()), &val.get_ref<const std::string&>());
      }
    }
  }
  if (auto it = v.find("stdin"); it != v.end()) {
    if (!it->is_string()) {
      fail(path + "/stdin", "expected a string, " + got(*it));
    } else {
      def.stdin_data = it->get<std::string>();
      w.texts.emplace_back("/stdin", &*def.stdin_data);
    }
  }
  if (auto it = v.find("cwd"); it != v.end()) {
    if (!it->is_string()) {
      fail(path + "/cwd", "expected a string, " + got(*it));
    } else {
      def.cwd = it->get<std::string>();
      w.texts.emplace_back("/cwd", &*def.cwd);
    }
  }
}

void graph_parser::parse_step_limits(step_work& w, const json& v) {
  const auto& path = w.path;
  auto& def = w.def;
  if (auto it = v.find("timeout"); it != v.end())
    def.timeout = duration(*it, path + "/timeout");
  if (auto it = v.find("retries"); it != v.end()) {
    auto x = non_negative_integer(*it);
    if (!x || *x > static_cast<uint64_t>(std::numeric_limits<int>::max()))
      fail(path + "/retries", "expected an integer >= 0, " + got(*it));
    else
      def.retries = static_cast<int>(*x);
  }
  if (auto it = v.find("retry_delay"); it != v.end())
    if (auto d = duration(*it, path + "/retry_delay"))
      def.retry_delay = *d;
  if (auto it = v.find("cost"); it != v.end()) {
    auto x = non_negative_number(*it);
    if (!x)
      fail(path + "/cost", "expected a number >= 0, " + got(*it));
    else
      def.cost = *x;
  }
  if (auto it = v.find("grace"); it != v.end()) {
    def.grace_set = true;
    if (auto grace = parse_grace_periods(*it, path + "/grace", errors_))
      def.grace = *grace;
  }
}

std::optional<grace_periods> parse_grace_periods(const json& v, const std::string& path,
                                                 std::vector<graph_error>& errors) {
  auto fail = [&](std::string p, std::string message) {
    errors.push_back(graph_error{std::move(p), std::move(message), {}});
  };
  if (!v.is_object()) {
    fail(path, "expected an object such as {\"interrupt\": \"10s\", \"terminate\": \"5s\"}, "
                 + got(v));
    return std::nullopt;
  }
  grace_periods grace;
  auto before = errors.size();
  for (auto& [key, val] : v.items()) {
    auto kpath = path + "/" + escape_pointer(key);
    auto* field = key == "interrupt" ? &grace.interrupt
                  : key == "terminate" ? &grace.terminate
                                       : nullptr;
    if (field == nullptr) {
      fail(kpath, "unknown key '" + key + "' (expected one of: " + join(grace_keys) + ")"
                    + did_you_mean(key, grace_keys));
    } else if (auto d = duration_from_json(val)) {
      *field = *d;
    } else {
      fail(kpath, message_of(d.error()));
    }
  }
  if (errors.size() != before)
    return std::nullopt;
  return grace;
}

void graph_parser::collect_texts(step_work& w, const json& v, const std::string& path) {
  for_each_string(v, path, [&w](const std::string& p, const std::string& text) {
    w.texts.emplace_back(p, &text);
  });
}

// -- kinds ---------------------------------------------------------------------

void graph_parser::parse_kind(step_work& w, const std::string& key, const json& v) {
  auto path = w.path + "/" + key;
  auto& def = w.def;
  if (key == "run") {
    def.kind = step_kind::run;
    if (!opts_.allow_inline)
      refuse_inline(path, detail::run_refusal);
    if (parse_argv(w, v, path))
      def.argv = v;
  } else if (key == "tool") {
    def.kind = step_kind::tool;
    if (auto name = non_empty_string(v, path, "a tool name")) {
      def.target = *name;
      check_tool(*name, path);
    }
  } else if (key == "plan") {
    def.kind = step_kind::plan;
    if (v.is_string()) {
      if (auto name = non_empty_string(v, path, "a tool name")) {
        def.target = *name;
        def.argv = v;
        check_tool(*name, path);
      }
    } else if (v.is_array()) {
      if (!opts_.allow_inline)
        refuse_inline(path, detail::plan_refusal);
      if (parse_argv(w, v, path))
        def.argv = v;
    } else {
      fail(path, "expected a tool name or a non-empty argv array, " + got(v));
    }
  } else if (key == "agent") {
    def.kind = step_kind::agent;
    if (auto name = non_empty_string(v, path, "an agent name"))
      def.target = *name;
  } else if (key == "wait") {
    def.kind = step_kind::wait;
    parse_wait(w, v, path);
  } else if (key == "llm") {
    def.kind = step_kind::llm;
    parse_llm(w, v, path);
  } else if (key == "fn") {
    def.kind = step_kind::fn;
    if (auto name = non_empty_string(v, path, "a function name")) {
      def.target = *name;
      if (!opts_.any_fn && !contains(builtin_fns, *name) && opts_.fns.count(*name) == 0) {
        std::set<std::string> known{builtin_fns.begin(), builtin_fns.end()};
        known.insert(opts_.fns.begin(), opts_.fns.end());
        fail(path, "unknown function '" + *name + "' (known: " + join(known) + ")"
                     + did_you_mean(*name, {known.begin(), known.end()}));
      }
    }
  } else {
    def.kind = step_kind::graph;
    parse_child(w, v, path);
  }
}

std::optional<std::string> graph_parser::non_empty_string(const json& v,
                                                          const std::string& path,
                                                          const char* what) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
    fail(path, std::string{"expected "} + what + " (a non-empty string), "
                 + (v.is_string() ? std::string{"got an empty string"} : got(v)));
    return std::nullopt;
  }
  return v.get<std::string>();
}

bool graph_parser::parse_argv(step_work& w, const json& v, const std::string& path) {
  if (!v.is_array() || v.empty()) {
    fail(path, "expected a non-empty array of strings (argv), "
                 + (v.is_array() ? std::string{"got an empty array"} : got(v)));
    return false;
  }
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) {
    auto ipath = path + "/" + std::to_string(i);
    if (!v[i].is_string()) {
      fail(ipath, "expected a string, " + got(v[i]));
      ok = false;
    } else {
      w.texts.emplace_back(ipath.substr(w.path.size()), &v[i].get_ref<const std::string&>());
    }
  }
  if (auto e = ok ? check_shell_argv(v, path, "") : std::nullopt) {
    errors_.push_back(std::move(*e));
    ok = false;
  }
  return ok;
}

void graph_parser::check_tool(const std::string& name, const std::string& path) {
  if (opts_.any_tool || opts_.tools.count(name) > 0)
    return;
  if (opts_.tools.empty())
    fail(path, "unknown tool '" + name + "' (no tools are registered on this node)"
                 + opts_.unknown_tool_hint);
  else
    fail(path, "unknown tool '" + name + "' (registered: " + join(opts_.tools) + ")"
                 + did_you_mean(name, {opts_.tools.begin(), opts_.tools.end()})
                 + opts_.unknown_tool_hint);
}

// -- child graphs --------------------------------------------------------------

void graph_parser::parse_child(step_work& w, const json& v, const std::string& path) {
  auto& def = w.def;
  if (v.is_string() && v.get_ref<const std::string&>().empty()) {
    fail(path, "expected a graph object, a file path or a graph name, got an empty string");
    return;
  }
  if (!v.is_string() && !v.is_object()) {
    fail(path, "expected a graph object, a file path or a graph name, " + got(v));
    return;
  }
  if (opts_.depth + 1 > max_depth_) {
    fail(path, "max_depth " + std::to_string(max_depth_) + " exceeded (this step would start a "
                 "child at depth " + std::to_string(opts_.depth + 1) + ")");
    return;
  }
  auto child_opts = opts_;
  child_opts.depth = opts_.depth + 1;
  child_opts.max_depth = max_depth_;
  child_opts.load_file = loader_;
  parse_result result;
  if (v.is_object()) {
    graph_parser child{child_opts, chain_};
    child.cache_ = cache_;
    result = child.run(v, g_->base_dir, w.def.id);
  } else {
    auto target = v.get<std::string>();
    if (!is_file_reference(target)) {
      if (opts_.check_graph_name)
        if (auto why = opts_.check_graph_name(target); !why.empty())
          fail(path, why);
      def.target = std::move(target); // a registered graph, resolved when it runs
      return;
    }
    auto abs = normalize(fs::path(base_abs_) / target);
    if (auto it = std::find(chain_.begin(), chain_.end(), abs); it != chain_.end()) {
      std::vector<std::string> cycle{it, chain_.end()};
      cycle.push_back(abs);
      fail(path, "recursive graph: '" + fs::path(abs).filename().string()
                   + "' includes itself (" + join(cycle, " -> ") + ")");
      return;
    }
    // A file used by many steps (a fan-out of identical sub-graphs) is
    // read and parsed once per depth; the steps share the parsed graph.
    auto key = abs + '\0' + std::to_string(child_opts.depth) + '\0'
               + std::to_string(child_opts.max_depth);
    auto cached = cache_->find(key);
    if (cached == cache_->end()) {
      auto doc = loader_(abs);
      if (!doc) {
        fail(path, message_of(doc.error()));
        return;
      }
      auto chain = chain_;
      chain.push_back(abs);
      graph_parser child{child_opts, std::move(chain)};
      child.cache_ = cache_;
      auto parsed = child.run(*doc, parent_of(abs), detail::stem_of(abs));
      cached = cache_->emplace(key, cached_file{std::move(parsed), std::move(*doc)}).first;
    }
    result = cached->second.result;
    files_.emplace(abs, cached->second.doc);
  }
  for (auto& e : result.errors)
    fail(path + e.path, std::move(e.message), std::move(e.code));
  if (!result.value)
    return;
  for (auto& [file, doc] : result.value->files)
    files_.emplace(file, doc);
  check_child_inputs(w, *result.value);
  def.child = std::move(result.value);
}

void graph_parser::check_child_inputs(const step_work& w, const graph& child) {
  const auto& with = w.def.with;
  if (w.bad_with || !with.is_object())
    return;
  for (auto& input : child.inputs)
    if (!with.contains(input))
      fail(w.path + "/with", "missing input '" + input + "' of graph '" + child.name + "'");
  for (auto& [key, val] : with.items())
    if (std::find(child.inputs.begin(), child.inputs.end(), key) == child.inputs.end())
      fail(w.path + "/with/" + escape_pointer(key),
           "graph '" + child.name + "' declares no input '" + key + "'"
             + (child.inputs.empty() ? std::string{" (it declares no inputs)"}
                                     : " (declared: " + join(child.inputs) + ")"));
}

} // namespace canopy::core::detail
