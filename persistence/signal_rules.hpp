#pragma once

// The rule for a signal sent to an execution's waits
// (`POST /v1/executions/{id}/signals/{name}`, `canopy signal`): what
// becomes of it, decided from the stored tree. Plain functions over the
// store: they read, never write; the caller commits the record it returns
// (with a `signal.received` event) and hands it to the signal desk.
//
// The waits a signal may reach ("candidates") are the `wait` steps of the
// tree's graphs (the root's and those stored for its executions, inline
// child graphs included) that declare its name; sent to a child execution
// rather than the root, only that execution's own waits; with `step`, only
// the wait at that step path (`review/approve`). A graph that a `plan` or
// `agent` step has not created yet declares nothing: a signal for it before
// its execution exists is `unknown_signal`.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "persistence/graph.hpp"
#include "persistence/records.hpp"
#include "persistence/store.hpp"

namespace canopy::core {

/// Bounds of what a tree keeps.
struct signal_limits {
  size_t per_name = 64;   ///< buffered (not yet consumed) signals per name and tree
  size_t per_tree = 1000; ///< signals a tree keeps, consumed ones included
  size_t max_value_bytes = 64u * 1024u; ///< a value's size as compact JSON text
};

/// A signal as a sender gives it.
struct signal_request {
  std::string target;  ///< the execution it is sent to
  std::string name;
  json value;          ///< ignored with `failure`
  bool failure = false;
  std::string message; ///< the failure's message
  std::string step;    ///< empty: any wait of that name
  /// The server user sending it; empty: the home's own user (the CLI and
  /// the library), who may answer every wait.
  std::string user;
  std::string who;     ///< how the record names the sender: "user:alice", "cli:pid 42"
  std::string key;     ///< Idempotency-Key; empty: none
  int64_t now = 0;
};

/// What becomes of a signal. Each has its HTTP status in the API.
enum class signal_outcome : uint8_t {
  store,          ///< new: store `record` (answered 200 once a wait took it, else 202)
  replay,         ///< same Idempotency-Key and body as before: `record` is the stored one
  not_found,      ///< no such execution, or not one the user may see or answer: 404
  unknown_signal, ///< no wait the signal may reach declares its name: 404
  forbidden,      ///< the user sees the tree but may not answer its waits: 403
  invalid_value,  ///< the value does not satisfy a candidate's schema: 400
  too_large,      ///< the value, or the tree's buffer, is over its bound: 413
  ended,          ///< the execution completed, or every candidate ended: 409
  ambiguous,      ///< two candidates are armed and no `step` picks one: 409
  key_conflict,   ///< the Idempotency-Key was used with another body: 409
};

const char* to_string(signal_outcome x);

/// The decision on one signal.
struct signal_decision {
  signal_outcome outcome = signal_outcome::not_found;
  std::string message;            ///< what is wrong (not for `store`/`replay`)
  std::string path;               ///< invalid_value: where, as a JSON pointer into the body
  signal_record record;           ///< store: the new record (id set); replay: the stored one
  execution_record target;        ///< store: the execution it was sent to
  std::vector<std::string> steps; ///< ambiguous: the armed candidates' step paths
  event_status status;            ///< ended: the status that ended it
  step_reason reason = step_reason::none; ///< ended: its reason, if any
};

/// Decides what becomes of `req` from what `db` stores now.
/// @returns the decision; a read error of the store is `not_found` with its
///          message. Threading: any thread (reads only). Two deciders racing
///          on one tree may both decide `store` where one of them would see
///          the other's record (a bound, a key): the caller serialises its
///          own decisions; across processes the bound may be passed by one.
signal_decision decide_signal(const store& db, const signal_request& req,
                              const signal_limits& lim = {});

/// A wait armed now (a `waiting` step of a live execution), as an inbox
/// shows it.
struct open_wait {
  std::string execution_id;
  std::string root_id;
  std::string owner;   ///< the tree's owner (empty: started outside the API)
  std::string step;    ///< the step id
  std::string path;    ///< its step path in the tree (`review/approve`)
  std::string prompt;  ///< as rendered when it was armed
  int64_t armed_at = 0;
  int64_t deadline = 0; ///< 0: none
  wait_def def;         ///< signal, schema, options, approvers, timeout rule
};

/// @returns the waits armed in the live executions of `db`, oldest armed
///          first; with `user`, only those that user may answer (the tree's
///          owner where the wait names no approvers, else its approvers);
///          a store error. Threading: any thread (reads only).
caf::expected<std::vector<open_wait>> open_waits(const store& db,
                                                 const std::optional<std::string>& user);

/// The executions of `f` that wait: a root whose tree holds a `waiting`
/// step (with `f.roots_only`), else every execution holding one; `f.status`
/// is ignored (they are `running`), the other fields of `f` apply. Newest
/// first. Costs a read of every running execution's steps: `ls --status
/// waiting` and `GET /v1/executions?status=waiting`.
/// @returns them, or a store error. Threading: any thread (reads only).
caf::expected<std::vector<execution_record>> list_waiting(const store& db,
                                                          const execution_filter& f);

/// Checks the signals a start carries (`{"NAME": VALUE}`, sent to the new
/// root with its first record): each NAME must be declared by a wait of `g`
/// or of a child graph it holds inline or in a file (a registered graph,
/// a plan's or an agent's declares nothing yet), and VALUE must satisfy
/// the schema of every such wait. @returns the errors, each at
/// `/signals/NAME` (and the value's JSON pointer below it); empty: fine.
/// Thread-safe.
std::vector<graph_error> check_start_signals(const graph& g, const json& signals);

/// The records of the signals a start carries, sent to root `root` by `who`
/// at `now` (ids assigned), in the order of their names.
/// @pre check_start_signals(g, signals) is empty.
std::vector<signal_record> start_signals(const std::string& root, const json& signals,
                                         const std::string& who, int64_t now);

/// Renders an open wait: `{execution_id, root_id, step, path, signal,
/// prompt, armed_at, deadline, schema, options, on_timeout, approvers}`
/// (RFC 3339 times; null where none).
json wait_document(const open_wait& w);

/// Adds new signal `sig`, sent to execution `target`, to `batch` with its
/// `signal.received` event (data: signal_id, name, by, step, fail).
void add_received(write_batch& batch, const execution_record& target, signal_record sig);

/// The fingerprint of a request's body (name, step, value or failure), which
/// an Idempotency-Key is checked against: 16 hex digits (FNV-1a, 64 bit).
std::string signal_fingerprint(const signal_request& req);

} // namespace canopy::core
