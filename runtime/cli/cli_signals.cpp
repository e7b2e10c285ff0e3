// `canopy signal`, `approve`, `reject` and `waits`: on the home (the store
// directly, like `canopy stop`: the process that owns the tree finds the
// signal within its desk's poll interval) or on a server (`--server`).

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "persistence/json_text.hpp"
#include "persistence/signal_rules.hpp"
#include "persistence/value_schema.hpp"
#include "runtime/cli/cli_common.hpp"
#include "runtime/client/client.hpp"
#include "runtime/cli/render.hpp"
#include "runtime/node/error.hpp"

namespace canopy::core::cli {

namespace {

/// The CLI's error for a refused signal (exit 4 not found, 2 invalid, 1 else).
caf::error error_of(const signal_decision& d) {
  switch (d.outcome) {
    case signal_outcome::not_found:
    case signal_outcome::unknown_signal:
      return make_error(persistence_errc::not_found, d.message);
    case signal_outcome::invalid_value:
    case signal_outcome::too_large:
      return make_error(runtime_errc::invalid_input, d.message);
    default:
      return make_error(runtime_errc::wrong_state, d.message);
  }
}

/// What a signal carries: a value or a failure.
struct payload {
  json value;
  bool failure = false;
  std::string message;
  json body() const {
    return failure ? json{{"fail", {{"message", message}}}} : json{{"value", value}};
  }
};

int print_answer(const json& doc, bool as_json) {
  if (as_json) {
    std::cout << doc.dump(2) << "\n";
    return 0;
  }
  if (doc.value("status", "") == "consumed" && doc.contains("consumed_by")) {
    auto& by = doc["consumed_by"];
    std::cout << "consumed by " << by.value("execution_id", "") << " step "
              << by.value("step", "") << "\n";
  } else {
    std::cout << "buffered: no wait has taken it yet\n";
  }
  return 0;
}

json answer_doc(const signal_record& r) {
  auto doc = signal_document(r);
  if (r.state == signal_state::consumed)
    doc["status"] = "consumed";
  else
    doc["status"] = "buffered";
  return doc;
}

/// Sends `p` to `name` on the home, then waits up to `wait_s` for a wait to take it.
int local_signal(const global_options& g, const signal_commands& c, const std::string& name,
                 const payload& p, const std::string& step) {
  auto db = open_store(g, store_use::write);
  if (!db)
    return fail(db.error());
  signal_request req;
  req.target = c.id;
  req.name = name;
  req.value = p.value;
  req.failure = p.failure;
  req.message = p.message;
  req.step = step;
  req.who = "cli:pid " + std::to_string(::getpid());
  req.key = c.key;
  req.now = now_ms();
  auto d = decide_signal(**db, req);
  if (d.outcome == signal_outcome::replay)
    return print_answer(answer_doc(d.record), c.json);
  if (d.outcome != signal_outcome::store)
    return fail(error_of(d));
  write_batch batch;
  add_received(batch, d.target, d.record);
  if (auto err = (*db)->commit(batch))
    return fail(err);
  // The owner takes it within its desk's poll interval when a wait is armed.
  auto until = std::chrono::steady_clock::now()
               + std::chrono::milliseconds(static_cast<int64_t>(c.wait_s * 1000));
  auto last = d.record;
  while (std::chrono::steady_clock::now() < until) {
    auto all = (*db)->signals(d.record.root_id);
    if (!all)
      return fail(all.error());
    for (auto& s : *all)
      if (s.id == d.record.id)
        last = s;
    if (last.state == signal_state::consumed)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
  }
  return print_answer(answer_doc(last), c.json);
}

int remote_signal(const remote_options& r, const signal_commands& c, const std::string& name,
                  const payload& p, const std::string& step) {
  auto api = open_client(r);
  if (!api)
    return fail(api.error());
  auto a = api->signal(c.id, name, p.body(), step, c.key);
  if (!a)
    return fail(a.error());
  return print_answer(a->body, c.json);
}

/// Every open wait the user may answer, as `wait_document`s: from the
/// server (`--server`), or from the home.
caf::expected<std::vector<json>> all_waits(const global_options& g, const remote_options& r) {
  if (!r.server.empty()) {
    auto api = open_client(r);
    if (!api)
      return api.error();
    return api->waits();
  }
  auto db = open_store(g, store_use::read);
  if (!db)
    return db.error();
  auto w = open_waits(**db, std::nullopt);
  if (!w)
    return w.error();
  std::vector<json> out;
  for (auto& x : *w)
    out.push_back(wait_document(x));
  return out;
}

/// The open waits of execution `id`'s tree (as `wait_document`s) that
/// `step` (if set) names.
caf::expected<std::vector<json>> waits_of(const global_options& g, const remote_options& r,
                                          const std::string& id, const std::string& step) {
  std::string root = id;
  if (r.server.empty()) {
    auto db = open_store(g, store_use::read);
    if (!db)
      return db.error();
    auto rec = (*db)->execution(id);
    if (!rec)
      return rec.error();
    root = rec->root_id.empty() ? rec->id : rec->root_id;
  }
  auto all = all_waits(g, r);
  if (!all)
    return all.error();
  std::vector<json> out;
  for (auto& w : *all)
    if ((w.value("execution_id", "") == id || w.value("root_id", "") == id
         || w.value("root_id", "") == root)
        && (step.empty() || w.value("path", "") == step))
      out.push_back(std::move(w));
  return out;
}

/// `canopy approve` / `reject`: `{"approved": B, "note": M}` to the one wait
/// armed in the tree (or at `--step`), when its schema admits that value.
int approve(const global_options& g, const remote_options& r, const signal_commands& c,
            bool approved) {
  auto waits = waits_of(g, r, c.id, c.step);
  if (!waits)
    return fail(waits.error());
  if (waits->empty())
    return fail(make_error(persistence_errc::not_found,
                           "no wait is armed in execution '" + c.id + "'"
                             + (c.step.empty() ? "" : " at step '" + c.step + "'")));
  if (waits->size() > 1) {
    std::string paths;
    for (auto& w : *waits)
      paths += (paths.empty() ? "" : ", ") + w.value("path", "");
    return fail(make_error(runtime_errc::wrong_state,
                           "several waits are armed (" + paths + "): pick one with --step"));
  }
  auto& w = waits->front();
  payload p;
  p.value = {{"approved", approved}};
  if (!c.message.empty())
    p.value["note"] = c.message;
  auto schema = w.value("schema", json{});
  if (!schema.is_null()) {
    auto errors = validate_value(schema, p.value);
    if (!errors.empty())
      return fail(make_error(runtime_errc::invalid_input,
                             std::string{approved ? "approve" : "reject"} + " sends "
                               + p.value.dump() + ", which the schema of the wait at step '"
                               + w.value("path", "") + "' does not admit ("
                               + to_string(errors.front()) + "; schema " + schema.dump()
                               + "): use 'canopy signal'"));
  }
  auto name = w.value("signal", "");
  auto path = w.value("path", "");
  return r.server.empty() ? local_signal(g, c, name, p, path) : remote_signal(r, c, name, p, path);
}

int list_waits(const global_options& g, const remote_options& r, bool as_json) {
  auto all = all_waits(g, r);
  if (!all)
    return fail(all.error());
  auto& docs = *all;
  if (as_json) {
    std::cout << json(docs).dump(2) << "\n";
    return 0;
  }
  if (docs.empty()) {
    std::cout << "no wait is armed\n";
    return 0;
  }
  auto now = now_ms();
  for (auto& d : docs) {
    auto left = time_left(ms_of_rfc3339(d["deadline"]), now);
    std::cout << d.value("execution_id", "") << "  " << d.value("path", "") << "  waiting · "
              << d.value("signal", "") << " · " << left << "\n";
    if (d["prompt"].is_string())
      std::cout << "    " << d["prompt"].get<std::string>() << "\n";
    std::cout << "    canopy signal " << d.value("execution_id", "") << " "
              << d.value("signal", "") << " --value JSON --step " << d.value("path", "") << "\n";
  }
  return 0;
}

} // namespace

void add_signal_commands(CLI::App& app, signal_commands& c,
                         const std::function<void(CLI::App*)>& add_remote) {
  c.signal = app.add_subcommand("signal", "send a signal to the waits of an execution");
  c.signal->add_option("id", c.id, "execution id")->required();
  c.signal->add_option("name", c.name, "signal name")->required();
  auto value = c.signal->add_option("--value", c.value, "the value, as JSON");
  auto failure = c.signal->add_option("--fail", c.fail, "fail the wait with this message");
  value->excludes(failure);
  c.signal->add_option("--step", c.step, "only the wait at this step path (review/approve)");
  c.signal->add_option("--key", c.key, "idempotency key: the same key sends once");
  c.signal->add_option("--wait", c.wait_s, "seconds to wait for a wait to take it (default 5)")
    ->check(CLI::Range(0.0, 3600.0));
  c.signal->add_flag("--json", c.json, "print the signal as JSON");
  add_remote(c.signal);
  for (auto* cmd : {&c.approve, &c.reject}) {
    bool yes = cmd == &c.approve;
    *cmd = app.add_subcommand(yes ? "approve" : "reject",
                              yes ? "answer the execution's waiting approval with yes"
                                  : "answer the execution's waiting approval with no");
    (*cmd)->add_option("id", c.id, "execution id")->required();
    (*cmd)->add_option("--step", c.step, "the wait at this step path, when several wait");
    (*cmd)->add_option("--message", c.message, "a note sent with the answer");
    (*cmd)->add_option("--key", c.key, "idempotency key: the same key sends once");
    (*cmd)->add_option("--wait", c.wait_s, "seconds to wait for the wait to take it (default 5)")
      ->check(CLI::Range(0.0, 3600.0));
    (*cmd)->add_flag("--json", c.json, "print the signal as JSON");
    add_remote(*cmd);
  }
  c.waits = app.add_subcommand("waits", "the waits armed now, with the command that answers each");
  c.waits->add_flag("--json", c.json, "print a JSON array");
  add_remote(c.waits);
}

std::optional<int> run_signal_command(const signal_commands& c, const global_options& g,
                                      const remote_options& r) {
  if (c.signal && c.signal->parsed()) {
    payload p;
    if (!c.fail.empty() || c.signal->count("--fail") > 0) {
      p.failure = true;
      p.message = c.fail;
    } else if (c.signal->count("--value") == 0) {
      return usage_error("signal: give --value JSON or --fail MESSAGE");
    } else {
      auto v = parse_json_text(c.value);
      if (!v)
        return usage_error("signal: --value is not JSON: " + message_of(v.error())
                           + " (a string needs quotes: --value '\"yes\"')");
      p.value = std::move(*v);
    }
    return r.server.empty() ? local_signal(g, c, c.name, p, c.step)
                            : remote_signal(r, c, c.name, p, c.step);
  }
  if (c.approve && c.approve->parsed())
    return approve(g, r, c, true);
  if (c.reject && c.reject->parsed())
    return approve(g, r, c, false);
  if (c.waits && c.waits->parsed())
    return list_waits(g, r, c.json);
  return std::nullopt;
}

} // namespace canopy::core::cli
