// `canopy logs ID [STEP] [--follow] [--tail N] [--stderr|--stdout]`: the
// output of steps as the store keeps it (`step.output` events, data
// `{stream, line}`), from the local home or a server (`--server URL`).
//
// Without STEP: every step of ID's subtree (its child executions too, as
// `canopy events ID` shows them), each line as `PATH | LINE`, where PATH is
// the step's name, or for a step of a child execution the steps that lead to
// it from ID (`review/draft`: step `draft` of the child that step `review`
// runs). STEP is such a path; one that names a `run`, `tool` or `fn` step
// prints its lines raw; one that runs child executions (`graph`, `plan`,
// `agent`) prints its own lines and its children's, prefixed as above.
// `--follow` keeps printing until STEP completed or failed, or else until
// ID's tree is no longer running. An unknown step is `not_found` (exit 4),
// named with the closest step.

#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "persistence/error.hpp"
#include "persistence/suggest.hpp"
#include "runtime/cli/cli_common.hpp"
#include "runtime/node/document.hpp"

namespace canopy::core::cli {

namespace {

// -- what to print ------------------------------------------------------------------------

std::string text_of(const json& doc, const char* key) {
  auto i = doc.is_object() ? doc.find(key) : doc.end();
  return doc.is_object() && i != doc.end() && i->is_string() ? i->get<std::string>()
                                                             : std::string{};
}

/// The lines `logs` prints from a tree's events: which events count, and how
/// each is labelled. Built from the asked execution's tree document; an
/// execution it does not know (a child created since) makes it reload the
/// document once. Not thread-safe.
class log_selection {
public:
  /// Loads the tree document of the asked execution again.
  using loader = std::function<caf::expected<json>()>;

  /// Resolves `o.step` in `tree`. @returns the selection, or `not_found`
  /// naming an unknown step (with the closest one).
  static caf::expected<log_selection> make(json tree, loader reload, const logs_options& o) {
    log_selection s{std::move(reload), o.stream};
    s.top_id_ = text_of(tree, "id");
    s.index(tree, "");
    if (o.step.empty())
      return s;
    // The path as events are labelled (`review#3/draft` for `review/draft`).
    std::string labelled;
    const json* doc = &tree;
    size_t begin = 0;
    for (;;) {
      auto slash = o.step.find('/', begin);
      auto name = o.step.substr(begin, slash == std::string::npos ? slash : slash - begin);
      // `review#2`: iteration 2 of a repeating step (without `#N`: the newest).
      std::string iteration;
      if (auto hash = name.find('#'); hash != std::string::npos && slash != std::string::npos) {
        iteration = name.substr(hash + 1);
        name.resize(hash);
      }
      static const json no_steps = json::object();
      auto found = doc->find("steps");
      auto& steps = found != doc->end() && found->is_object() ? *found : no_steps;
      auto where = doc == &tree ? "execution " + s.top_id_
                                : "the child execution " + text_of(*doc, "id") + " of step '"
                                    + o.step.substr(0, begin - 1) + "'";
      if (!steps.contains(name)) {
        std::vector<std::string> names;
        for (auto& kv : steps.items())
          names.push_back(kv.key());
        return make_error(persistence_errc::not_found,
                          where + " has no step '" + name + "'" + did_you_mean(name, names));
      }
      auto& step = steps.at(name);
      if (slash == std::string::npos) {
        auto kind = text_of(step, "kind");
        s.prefixed_ = kind == "graph" || kind == "plan" || kind == "agent"
                      || !text_of(step, "child_id").empty();
        auto status = step_status::pending;
        from_string(text_of(step, "status"), status);
        s.settled_ = status == step_status::completed || status == step_status::failed;
        s.target_ = labelled + name;
        return s;
      }
      // Down into the step's child (the newest, when it ran several).
      const json* child = nullptr;
      if (auto kids = doc->find("children"); kids != doc->end() && kids->is_array())
        for (auto& c : *kids)
          if (text_of(c, "parent_step") == name
              && (iteration.empty() || c.value("iteration", json()).dump() == iteration))
            child = &c;
      if (child == nullptr)
        return make_error(persistence_errc::not_found,
                          "step '" + o.step.substr(0, slash) + "' of " + where
                            + " has no child execution (yet)");
      doc = child;
      labelled += child_label(execution_of(*child)) + "/";
      begin = slash + 1;
    }
  }

  /// The line(s) to print for `e`, or nullopt when it is not output
  /// selected. A model's text (`stream: "model"`) comes in pieces: they are
  /// joined, and printed by whole lines, the rest once its step ends.
  std::optional<std::string> line(const event_record& e) {
    if (e.type != event_type::step_output || !e.data.is_object())
      return std::nullopt;
    if (!stream_.empty() && text_of(e.data, "stream") != stream_)
      return std::nullopt;
    auto label = label_of(e);
    if (!label || !selected(*label))
      return std::nullopt;
    if (text_of(e.data, "stream") != "model")
      return shown(*label, text_of(e.data, "line"));
    auto& pending = model_[*label];
    pending += text_of(e.data, "text");
    auto nl = pending.rfind('\n');
    if (nl == std::string::npos)
      return std::nullopt;
    auto whole = pending.substr(0, nl);
    pending.erase(0, nl + 1);
    return shown(*label, whole);
  }

  /// The rest of a model's text once its step ended (see `line`), or nullopt.
  std::optional<std::string> ended(const event_record& e) {
    if (model_.empty() || e.step.empty() || e.type == event_type::step_output
        || family_of(e.type) != event_family::step)
      return std::nullopt;
    auto label = label_of(e);
    if (!label)
      return std::nullopt;
    auto i = model_.find(*label);
    if (i == model_.end())
      return std::nullopt;
    auto rest = std::move(i->second);
    model_.erase(i);
    if (rest.empty())
      return std::nullopt;
    return shown(*label, rest);
  }

  /// True when output labelled `label` is selected.
  bool selected(const std::string& label) const {
    if (target_.empty())
      return true;
    if (!prefixed_)
      return label == target_;
    // Below the step: its child (`review/...`) or its iterations (`review#2/...`).
    return label == target_ || label.rfind(target_ + "/", 0) == 0
           || label.rfind(target_ + "#", 0) == 0;
  }

  /// `text` as printed for `label`: with its label unless one step was chosen.
  /// Each line of a text of several lines gets the label.
  std::string shown(const std::string& label, const std::string& text) const {
    if (!target_.empty() && !prefixed_)
      return text;
    std::string out;
    size_t from = 0;
    for (;;) {
      auto nl = text.find('\n', from);
      out += label + " | " + text.substr(from, nl == std::string::npos ? nl : nl - from);
      if (nl == std::string::npos)
        return out;
      out += "\n";
      from = nl + 1;
    }
  }

  /// Follows the chosen step's life: it settles with `step.completed` or
  /// `step.failed` and is live again when it starts over (a retry, a resume).
  void observe(const event_record& e) {
    if (target_.empty() || e.step.empty() || family_of(e.type) != event_family::step
        || e.type == event_type::step_output)
      return;
    auto label = label_of(e);
    if (!label || *label != target_)
      return;
    settled_ = e.type == event_type::step_completed || e.type == event_type::step_failed;
  }

  /// True when a step was chosen and it completed or failed (as of the
  /// document, then of the events observed since).
  bool settled() const { return settled_; }

private:
  log_selection(loader reload, std::string stream)
    : reload_(std::move(reload)), stream_(std::move(stream)) {
  }

  /// Records the path of every execution in `doc`, from `path`.
  void index(const json& doc, const std::string& path) {
    paths_[text_of(doc, "id")] = path;
    if (auto kids = doc.find("children"); kids != doc.end() && kids->is_array())
      for (auto& c : *kids)
        index(c, path + child_label(execution_of(c)) + "/");
  }

  /// `PATH/STEP` of `e`'s step from the asked execution, or nullopt when its
  /// execution is outside the asked subtree.
  std::optional<std::string> label_of(const event_record& e) {
    auto i = paths_.find(e.execution_id);
    if (i == paths_.end()) {
      if (outside_.count(e.execution_id) > 0)
        return std::nullopt;
      // Lineage never changes: the child of an execution outside is outside.
      bool maybe_inside = e.parent_id.empty() || paths_.count(e.parent_id) > 0;
      if (maybe_inside && reload_)
        if (auto doc = reload_())
          index(*doc, "");
      i = paths_.find(e.execution_id);
      if (i == paths_.end()) {
        outside_.insert(e.execution_id);
        return std::nullopt;
      }
    }
    return i->second + e.step;
  }

  loader reload_;
  std::string stream_;                        ///< "stdout", "stderr" or "" (both)
  std::string top_id_;
  std::string target_;                        ///< the chosen step's path; "" for all
  bool prefixed_ = true;                      ///< lines labelled `PATH | `
  bool settled_ = false;
  std::map<std::string, std::string> paths_;  ///< execution → `a/b/` ("" for the top)
  std::set<std::string> outside_;
  std::map<std::string, std::string> model_; ///< label → a model's text not printed yet
};

/// Prints the lines of a first batch: all, or the last `tail`.
void print_first(const std::vector<std::string>& lines, const std::optional<size_t>& tail) {
  size_t from = tail && *tail < lines.size() ? lines.size() - *tail : 0;
  for (size_t i = from; i < lines.size(); ++i)
    std::cout << lines[i] << "\n";
  std::cout << std::flush;
}

} // namespace

void add_logs_command(CLI::App& app, logs_options& o,
                      const std::function<void(CLI::App*)>& add_remote) {
  o.cmd = app.add_subcommand("logs", "the output of an execution's steps, as stored");
  o.cmd->add_option("id", o.id, "execution id")->required();
  o.cmd->add_option("step", o.step,
                    "one step (A/B: step B of the child execution of step A); "
                    "default: every step of the tree, lines prefixed `STEP | `");
  o.cmd->add_flag("-f,--follow", o.follow,
                  "keep printing new lines until the step (or else the tree) ends");
  auto whole = CLI::Validator(
    [](std::string& text) {
      bool ok = !text.empty() && text.size() <= 12
                && text.find_first_not_of("0123456789") == std::string::npos;
      return ok ? std::string{}
                : "'" + text + "': expected a whole number of lines (0 or more)";
    },
    "N");
  o.cmd->add_option("--tail", o.tail, "only the last N lines (then follow)")->check(whole);
  auto out = o.cmd->add_flag_callback("--stdout", [&o] { o.stream = "stdout"; },
                                      "only the lines on stdout");
  auto err = o.cmd->add_flag_callback("--stderr", [&o] { o.stream = "stderr"; },
                                      "only the lines on stderr");
  out->excludes(err);
  add_remote(o.cmd);
}

int cmd_logs(const global_options& g, const logs_options& o) {
  auto db = open_store(g, store_use::read);
  if (!db)
    return fail(db.error());
  auto rec = (*db)->execution(o.id);
  if (!rec)
    return fail(rec.error());
  auto reload = [&db, &o] { return load_document(**db, o.id); };
  auto tree = reload();
  if (!tree)
    return fail(tree.error());
  auto sel = log_selection::make(std::move(*tree), reload, o);
  if (!sel)
    return fail(sel.error());
  bool first = true;
  auto err = follow_store(**db, o.id, rec->root_id, o.follow,
                          [&](const execution_record&, const std::vector<event_record>& events) {
                            std::vector<std::string> lines;
                            for (auto& e : events) {
                              if (auto l = sel->line(e))
                                lines.push_back(std::move(*l));
                              if (auto l = sel->ended(e))
                                lines.push_back(std::move(*l));
                              sel->observe(e);
                            }
                            print_first(lines, first ? o.tail : std::optional<size_t>{});
                            first = false;
                            return sel->settled();
                          });
  return err ? fail(err) : 0;
}

int remote_logs(const remote_options& r, const logs_options& o) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto reload = [&api, &o] { return api->tree(o.id); };
  auto tree = reload();
  if (!tree)
    return fail(tree.error());
  auto sel = log_selection::make(std::move(*tree), reload, o);
  if (!sel)
    return fail(sel.error());
  // The log so far (the server filters it to ID's subtree), then the live
  // stream from where it ended.
  auto events = api->events(o.id);
  if (!events)
    return fail(events.error());
  uint64_t last = 0;
  std::vector<std::string> lines;
  for (auto& doc : *events) {
    auto e = event_of(doc);
    last = std::max(last, e.seq);
    if (auto l = sel->line(e))
      lines.push_back(std::move(*l));
    if (auto l = sel->ended(e))
      lines.push_back(std::move(*l));
    sel->observe(e);
  }
  print_first(lines, o.tail);
  if (!o.follow || sel->settled())
    return 0;
  auto err = api->stream_events(o.id, last, [&](const json& doc) {
    auto e = event_of(doc);
    if (auto l = sel->line(e))
      std::cout << *l << "\n" << std::flush;
    if (auto l = sel->ended(e))
      std::cout << *l << "\n" << std::flush;
    sel->observe(e);
    return !sel->settled();
  });
  if (err)
    return fail(err);
  return 0;
}

} // namespace canopy::core::cli
