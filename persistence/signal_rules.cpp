#include "persistence/signal_rules.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "persistence/error.hpp"
#include "persistence/graph.hpp"
#include "persistence/reference.hpp"
#include "persistence/suggest.hpp"
#include "persistence/value_schema.hpp"

namespace canopy::core {

namespace {

/// A wait step of the tree that a signal may reach.
struct candidate {
  std::string path;         ///< its step path in the tree
  std::string execution_id; ///< empty: its execution does not exist yet
  std::shared_ptr<const graph> g; ///< keeps `def` alive
  const wait_def* def = nullptr;
  step_status status = step_status::pending;
  step_reason reason = step_reason::none;
};

bool unfinished(const candidate& c) {
  return c.status != step_status::completed && c.status != step_status::failed
         && c.status != step_status::skipped;
}

/// The tree's executions and their waits, read from `db`.
class tree_waits {
public:
  tree_waits(const store& db, const execution_record& root) : db_(db) {
    recs_.emplace(root.id, root);
    if (auto ids = db.subtree_ids(root.id))
      for (auto& id : *ids)
        if (id != root.id)
          if (auto r = db.execution(id))
            recs_.emplace(id, std::move(*r));
    for (auto& kv : recs_)
      add_execution(kv.second);
  }

  const std::vector<candidate>& all() const { return waits_; }

private:
  std::string path_of(const execution_record& r) {
    if (r.parent_id.empty())
      return {};
    auto p = recs_.find(r.parent_id);
    return (p == recs_.end() ? std::string{} : path_of(p->second)) + r.parent_step + "/";
  }

  void add_execution(const execution_record& r) {
    auto sg = db_.graph(r.id);
    if (!sg)
      return;
    auto parsed = load_stored_graph(std::move(sg->document), sg->base_dir, sg->files);
    if (!parsed.value)
      return;
    std::map<std::string, step_record> steps;
    if (auto s = db_.steps(r.id))
      for (auto& x : *s)
        steps.emplace(x.step, std::move(x));
    walk(parsed.value, path_of(r), r.id, &steps);
  }

  /// The waits of `g` at `prefix`; `steps` are the stored steps of its
  /// execution `exec` (null for a child graph not created yet).
  void walk(const std::shared_ptr<const graph>& g, const std::string& prefix,
            const std::string& exec, const std::map<std::string, step_record>* steps) {
    for (auto& def : g->steps) {
      const step_record* rec = nullptr;
      if (steps != nullptr)
        if (auto i = steps->find(def.id); i != steps->end())
          rec = &i->second;
      if (def.wait) {
        candidate c;
        c.path = prefix + def.id;
        c.execution_id = exec;
        c.g = g;
        c.def = def.wait.get();
        if (rec != nullptr) {
          c.status = rec->status;
          c.reason = rec->reason;
        }
        waits_.push_back(std::move(c));
      }
      // A child graph whose execution exists is read from its own record.
      if (def.child && (rec == nullptr || rec->child_id.empty()
                        || recs_.count(rec->child_id) == 0))
        walk(def.child, prefix + def.id + "/", {}, nullptr);
    }
  }

  const store& db_;
  std::map<std::string, execution_record> recs_;
  std::vector<candidate> waits_;
};

signal_decision fail(signal_outcome o, std::string message) {
  signal_decision d;
  d.outcome = o;
  d.message = std::move(message);
  return d;
}

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

/// True when `user` may answer wait `c` of a tree owned by `owner`.
bool may_answer(const candidate& c, const std::string& user, const std::string& owner) {
  if (user.empty())
    return true; // the home's own user
  return c.def->approvers.empty() ? owner == user : contains(c.def->approvers, user);
}

} // namespace

const char* to_string(signal_outcome x) {
  constexpr const char* names[] = {"store",         "replay",   "not_found", "unknown_signal",
                                   "forbidden",     "invalid_value", "too_large", "ended",
                                   "ambiguous",     "key_conflict"};
  return names[static_cast<size_t>(x)];
}

namespace {

/// The wait steps of `g` and of the child graphs it holds, recursively.
void waits_of(const graph& g, std::vector<const wait_def*>& out) {
  for (auto& def : g.steps) {
    if (def.wait)
      out.push_back(def.wait.get());
    if (def.child)
      waits_of(*def.child, out);
  }
}

} // namespace

std::vector<graph_error> check_start_signals(const graph& g, const json& signals) {
  std::vector<graph_error> errors;
  if (!signals.is_object()) {
    errors.push_back({"/signals", std::string{"expected an object of signal name → value, got "}
                                    + signals.type_name(),
                      {}});
    return errors;
  }
  std::vector<const wait_def*> waits;
  waits_of(g, waits);
  std::vector<std::string> names;
  for (auto* w : waits)
    names.push_back(w->signal);
  for (auto& [name, value] : signals.items()) {
    auto path = "/signals/" + escape_pointer(name);
    bool declared = false;
    for (auto* w : waits) {
      if (w->signal != name)
        continue;
      declared = true;
      if (w->schema.is_null())
        continue;
      auto bad = validate_value(w->schema, value);
      if (!bad.empty()) {
        errors.push_back({path + bad.front().path,
                          "the value does not satisfy the wait's schema: " + bad.front().message,
                          {}});
        break;
      }
    }
    if (!declared)
      errors.push_back({path, "no wait of the graph takes signal '" + name + "'"
                                + did_you_mean(name, names),
                        {}});
  }
  return errors;
}

std::vector<signal_record> start_signals(const std::string& root, const json& signals,
                                         const std::string& who, int64_t now) {
  std::vector<signal_record> out;
  if (!signals.is_object())
    return out;
  for (auto& [name, value] : signals.items()) {
    signal_request req;
    req.name = name;
    req.value = value;
    signal_record r;
    r.id = make_execution_id();
    r.root_id = root;
    r.target = root;
    r.name = name;
    r.value = value;
    r.who = who;
    r.fingerprint = signal_fingerprint(req);
    r.received_at = now;
    out.push_back(std::move(r));
  }
  return out;
}

void add_received(write_batch& batch, const execution_record& target, signal_record sig) {
  json data(json::value_t::object);
  auto& o = data.get_ref<json::object_t&>();
  o.emplace("signal_id", sig.id);
  o.emplace("name", sig.name);
  o.emplace("by", sig.who);
  o.emplace("step", sig.step.empty() ? json(nullptr) : json(sig.step));
  o.emplace("fail", sig.failure);
  batch.events.push_back(
    make_event(target, event_type::signal_received, sig.received_at, std::move(data)));
  batch.signals.push_back(std::move(sig));
}

std::string signal_fingerprint(const signal_request& req) {
  json body = {{"name", req.name}, {"step", req.step}};
  if (req.failure)
    body["fail"] = req.message;
  else
    body["value"] = req.value;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : dump_json(body)) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

namespace {

// -- phases of decide_signal --------------------------------------------------

/// The waits a signal to an execution may reach: those of the execution, or
/// of the whole tree when it is the root.
struct reachable_waits {
  std::vector<const candidate*> named; ///< those taking the signal (at the step, if given)
  std::vector<std::string> names;      ///< the signals all of them take, for messages
  bool approver_somewhere = false;     ///< the user approves some wait of the tree
};

reachable_waits reachable(const tree_waits& tree, const signal_request& req,
                          const std::string& target_id, const std::string& root_id) {
  reachable_waits out;
  for (auto& c : tree.all()) {
    if (!req.user.empty() && contains(c.def->approvers, req.user))
      out.approver_somewhere = true;
    if (target_id != root_id && c.execution_id != target_id)
      continue;
    out.names.push_back(c.def->signal);
    if (c.def->signal == req.name && (req.step.empty() || c.path == req.step))
      out.named.push_back(&c);
  }
  return out;
}

/// The failure for a signal no reachable wait takes; `names` are the
/// signals the reachable waits take.
signal_decision unknown_signal(const signal_request& req, std::vector<std::string> names) {
  if (!req.step.empty())
    return fail(signal_outcome::unknown_signal,
                "no wait at step '" + req.step + "' takes signal '" + req.name + "'");
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return fail(signal_outcome::unknown_signal,
              "no wait of execution '" + req.target + "' takes signal '" + req.name + "'"
                + (names.empty() ? std::string{" (it has no wait steps)"}
                                 : " (its waits take: " + [&] {
                                     std::string s;
                                     for (auto& n : names)
                                       s += (s.empty() ? "" : ", ") + n;
                                     return s;
                                   }() + ")" + did_you_mean(req.name, names)));
}

/// A signal stored before with the request's key: its replay when it is the
/// same signal, else a key conflict. @returns nothing without such a signal.
std::optional<signal_decision> same_key(const std::vector<signal_record>& stored,
                                        const signal_request& req,
                                        const std::string& fingerprint) {
  if (req.key.empty())
    return std::nullopt;
  for (auto& s : stored)
    if (s.key == req.key) {
      if (s.fingerprint != fingerprint)
        return fail(signal_outcome::key_conflict,
                    "Idempotency-Key '" + req.key
                      + "' was used for another signal (another name, step or value)");
      signal_decision d;
      d.outcome = signal_outcome::replay;
      d.record = s;
      return d;
    }
  return std::nullopt;
}

/// Fills `open` with the allowed waits not finished yet.
/// @returns the failure when the execution completed, every allowed wait
///          ended, or more than one of them is armed; else nothing.
std::optional<signal_decision> check_open(const execution_record& target,
                                          const std::vector<const candidate*>& allowed,
                                          const signal_request& req,
                                          std::vector<const candidate*>& open) {
  if (target.status == execution_status::completed) {
    auto d = fail(signal_outcome::ended, "execution '" + target.id + "' completed");
    d.status = execution_status::completed;
    return d;
  }
  for (auto* c : allowed)
    if (unfinished(*c))
      open.push_back(c);
  if (open.empty()) {
    auto* c = allowed.back();
    auto d = fail(signal_outcome::ended, "the wait at step '" + c->path + "' is "
                                           + to_string(c->status)
                                           + (c->reason == step_reason::none
                                                ? ""
                                                : std::string{" ("} + to_string(c->reason) + ")"));
    d.status = c->status;
    d.reason = c->reason;
    return d;
  }
  std::vector<std::string> armed;
  for (auto* c : open)
    if (c->status == step_status::waiting)
      armed.push_back(c->path);
  if (armed.size() > 1) {
    auto d = fail(signal_outcome::ambiguous,
                  "waits at steps '" + armed[0] + "' and '" + armed[1]
                    + "' both wait for signal '" + req.name + "': pick one with step");
    d.steps = armed;
    return d;
  }
  return std::nullopt;
}

/// The value's size and the schemas of the `open` waits (not for a failure).
/// @returns the failure of the first check that fails, else nothing.
std::optional<signal_decision> check_value(const signal_request& req,
                                           const std::vector<const candidate*>& open,
                                           const signal_limits& lim) {
  if (req.failure)
    return std::nullopt;
  if (dump_json(req.value).size() > lim.max_value_bytes)
    return fail(signal_outcome::too_large, "the value is over "
                                             + std::to_string(lim.max_value_bytes)
                                             + " bytes as JSON");
  for (auto* c : open) {
    if (c->def->schema.is_null())
      continue;
    auto errors = validate_value(c->def->schema, req.value);
    if (!errors.empty()) {
      auto d = fail(signal_outcome::invalid_value,
                    "the value does not satisfy the schema of the wait at step '" + c->path
                      + "': " + to_string(errors.front()));
      d.path = "/value" + errors.front().path;
      return d;
    }
  }
  return std::nullopt;
}

/// The tree's bounds on stored signals: per name while buffered, and in all.
/// @returns the failure when the signal would exceed one, else nothing.
std::optional<signal_decision> check_bounds(const std::vector<signal_record>& stored,
                                            const signal_request& req,
                                            const signal_limits& lim) {
  size_t buffered = 0;
  for (auto& s : stored)
    buffered += s.state == signal_state::buffered && s.name == req.name ? 1 : 0;
  if (buffered >= lim.per_name)
    return fail(signal_outcome::too_large, std::to_string(buffered) + " '" + req.name
                                             + "' signals wait to be consumed already (at most "
                                             + std::to_string(lim.per_name) + ")");
  if (stored.size() >= lim.per_tree)
    return fail(signal_outcome::too_large, "the tree keeps " + std::to_string(stored.size())
                                             + " signals already (at most "
                                             + std::to_string(lim.per_tree) + ")");
  return std::nullopt;
}

/// The decision to store `req` as a new signal of the tree `root_id`.
signal_decision store_signal(const signal_request& req, const std::string& root_id,
                             execution_record target, const std::string& fingerprint) {
  signal_decision d;
  d.outcome = signal_outcome::store;
  auto& r = d.record;
  r.id = make_execution_id();
  r.root_id = root_id;
  r.target = target.id;
  r.name = req.name;
  r.failure = req.failure;
  if (req.failure)
    r.message = req.message;
  else
    r.value = req.value;
  r.step = req.step;
  r.who = req.who;
  r.key = req.key;
  r.fingerprint = fingerprint;
  r.received_at = req.now;
  d.target = std::move(target);
  return d;
}

} // namespace

signal_decision decide_signal(const store& db, const signal_request& req,
                              const signal_limits& lim) {
  auto target = db.execution(req.target);
  if (!target)
    return fail(signal_outcome::not_found,
                is(target.error(), persistence_errc::not_found)
                  ? "no execution '" + req.target + "'"
                  : message_of(target.error()));
  auto root_id = target->root_id.empty() ? target->id : target->root_id;
  auto root = root_id == target->id ? caf::expected<execution_record>{*target}
                                    : db.execution(root_id);
  if (!root)
    return fail(signal_outcome::not_found, "no execution '" + req.target + "'");
  tree_waits tree{db, *root};
  // The waits it may reach, and who may answer them.
  auto reach = reachable(tree, req, target->id, root_id);
  bool sees_tree = req.user.empty() || root->owner == req.user || reach.approver_somewhere;
  if (!sees_tree)
    return fail(signal_outcome::not_found, "no execution '" + req.target + "'");
  if (reach.named.empty())
    return unknown_signal(req, std::move(reach.names));
  std::vector<const candidate*> allowed;
  for (auto* c : reach.named)
    if (may_answer(*c, req.user, root->owner))
      allowed.push_back(c);
  if (allowed.empty())
    return fail(signal_outcome::forbidden, "user '" + req.user
                                             + "' may not answer the wait at step '"
                                             + reach.named.front()->path + "'");
  // The same key: the first answer, or a conflict.
  auto stored = db.signals(root_id);
  if (!stored)
    return fail(signal_outcome::not_found, message_of(stored.error()));
  auto fingerprint = signal_fingerprint(req);
  if (auto d = same_key(*stored, req, fingerprint))
    return std::move(*d);
  std::vector<const candidate*> open;
  if (auto d = check_open(*target, allowed, req, open))
    return std::move(*d);
  if (auto d = check_value(req, open, lim))
    return std::move(*d);
  if (auto d = check_bounds(*stored, req, lim))
    return std::move(*d);
  return store_signal(req, root_id, std::move(*target), fingerprint);
}

} // namespace canopy::core
