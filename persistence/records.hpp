#pragma once

// Records kept in the store: executions, steps, events, and each execution's
// graph. Plain data with their stored codec (binary, schema 2), the schema-1
// JSON text codec and the JSON documents of the API (runtime/docs/reference/statuses.md).

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

#include "persistence/outcomes.hpp"

namespace canopy::core {

using json = nlohmann::json;

// -- status values -------------------------------------------------------------

/// Execution status (runtime/docs/reference/statuses.md).
enum class execution_status : uint8_t { queued, running, stopping, stopped, completed, failed };

/// Step status (runtime/docs/reference/statuses.md).
/// `skipped`: its condition (`when`) was false, or needs it relies on were
/// skipped; final, like `completed` and `failed`, and it never started.
/// `waiting`: a `wait` step armed for its signal; it holds no process and no
/// slot, and a stop sets it back to `pending` at once.
enum class step_status : uint8_t { pending, queued, running, completed, failed, skipped,
                                   waiting };

const char* to_string(execution_status x);
const char* to_string(step_status x);

/// True for `running`, `queued` and `waiting`: what a stop, a crash's
/// recovery or a compact snapshot sets back to `pending`.
inline bool is_active(step_status x) {
  return x == step_status::running || x == step_status::queued || x == step_status::waiting;
}

/// Parses a status name; @returns false for an unknown name.
bool from_string(const std::string& s, execution_status& x);
bool from_string(const std::string& s, step_status& x);

/// True for `completed`, `failed` and `stopped`: nothing of it runs.
bool is_terminal(execution_status x);

/// True for `queued`, `running` and `stopping`: a stop has something to do
/// (runtime/docs/reference/statuses.md#stop-results); any other status answers `no_execution`.
inline bool is_stoppable(execution_status x) {
  return !is_terminal(x);
}

// -- records -------------------------------------------------------------------

/// One execution, without its steps. Times are ms since the epoch, 0 = unset.
struct execution_record {
  std::string id;
  std::string graph;        ///< the graph's name
  execution_status status = execution_status::queued;
  step_reason reason = step_reason::none;
  std::string error;        ///< failure message, empty = none
  std::string parent_id;    ///< empty for a root
  std::string root_id;
  int depth = 0;
  std::string parent_step;  ///< empty for a root
  json inputs = json::object();
  json outputs;             ///< null unless completed
  int64_t created_at = 0;
  int64_t started_at = 0;
  int64_t ended_at = 0;
  /// The process that owns the live actor: pid and its start time (from
  /// /proc/PID/stat), so a dead owner is recognised even if the pid is reused.
  int64_t owner_pid = 0;
  uint64_t owner_start = 0;
  /// The user that owns it (HTTP API); empty for executions started by the
  /// CLI or the library. Children inherit their root's owner.
  std::string owner;
  /// The registered graph version it runs (0: a graph file or inline graph).
  int graph_version = 0;
  /// The agent whose run this is (runtime/docs/reference/graph-format.md#agent-graphs); empty for other executions.
  std::string agent;
  /// The cluster node its subprocess steps must run on (its agent's node,
  /// inherited by `graph` children); empty: any node.
  std::string node;
  /// Which iteration of its parent step's `repeat` it is (1-based); 0 for
  /// an execution that is not an iteration.
  int iteration = 0;
};

/// How a child is labelled under its parent: the parent step's id, and
/// `#N` for iteration N of a repeating step (`review#2`).
std::string child_label(const execution_record& r);

/// One step of one execution.
struct step_record {
  std::string execution_id;
  std::string step;
  step_status status = step_status::pending;
  int attempt = 0;          ///< attempts started so far (from 1 once started)
  json result;              ///< null until the step produced a result
  json error;               ///< null, or the failure message
  step_reason reason = step_reason::none; ///< why a stop or failure ended or reset it
  std::string node = "local";
  std::string child_id;     ///< the child execution of a `graph` step
  int64_t pid = 0;          ///< process group of the running attempt (`run` steps)
  uint64_t pid_start = 0;   ///< its leader's start time (/proc), to spot pid reuse
  int64_t started_at = 0;
  int64_t ended_at = 0;
  /// A `wait` step's absolute deadline (ms since the epoch, the owner's
  /// clock), set when it was first armed and kept while it is `waiting` or
  /// `pending` after a stop, so a resume re-arms it with the same one; 0:
  /// none.
  int64_t deadline = 0;
  /// A `wait` step's prompt, its references resolved when it was armed;
  /// empty for other steps.
  std::string prompt;
};

/// The rule "an active step (`running`, `queued` or `waiting`) goes back to
/// `pending` with a reason", on a step record: the one definition used by a
/// crash's recovery, a compact snapshot's resolution and, through
/// `is_active`, the execution machine's own reset. Sets `status` to
/// `pending`, `reason` and `ended_at`; keeps everything else as stored
/// (`attempt`, `node`, `pid`, `started_at`, `deadline`, ...), so a resume
/// counts the attempt, kills what is left of the process group and re-arms a
/// wait with the same deadline.
/// @returns true when `r` was active (and is now pending), false when it is
///          left as it was.
bool reset_step_record(step_record& r, step_reason reason, int64_t now);

/// The status an event reports: its execution's, its step's, or none.
using event_status = std::variant<std::monostate, execution_status, step_status>;

/// @returns the spelling of the status `x` holds, "" for none.
const char* to_string(const event_status& x);
/// Parses an event's status: a step status when `of_step` (the event names
/// a step), else an execution status; "" is none. @returns false when unknown.
bool from_string(const std::string& s, bool of_step, event_status& x);

/// One entry of the event log (runtime/docs/reference/events.md). `seq` is assigned at commit.
struct event_record {
  uint64_t seq = 0;
  int64_t time = 0;
  event_type type = event_type::execution_started;
  std::string execution_id;
  std::string root_id;
  std::string parent_id;
  std::string step;
  /// The status the event leaves its execution (no `step`) or step in;
  /// empty for events that change none (output, signals, stop requests,
  /// agents).
  event_status status;
  step_reason reason = step_reason::none;
  json data;
};

/// A stop request in the stop registry (runtime/docs/reference/statuses.md#stop).
struct stop_record {
  std::string id;
  std::string target;       ///< execution id
  bool force = false;
  bool handled = false;     ///< `requested` → `handled`
  stop_result result = stop_result::stopping; ///< `stopping` until handled
  int64_t requested_at = 0;
  int64_t handled_at = 0;
  std::string who;          ///< requester, e.g. "cli:pid 4242" or "user:alice"
};

/// What became of a signal.
enum class signal_state : uint8_t {
  buffered, ///< stored, not taken yet: the next wait armed for its name takes it
  consumed, ///< a wait took it, in the transaction that ended that wait
};

const char* to_string(signal_state x);

/// A signal sent to a tree's `wait` steps (a person's answer, a webhook).
/// Stored before it is answered, with its tree: deleted with the tree's log.
struct signal_record {
  std::string id;          ///< time-ordered, like execution ids
  std::string root_id;     ///< the tree that keeps it
  std::string target;      ///< the execution it was sent to (the root, or one of its tree)
  std::string name;        ///< the signal name a wait declares
  json value;              ///< the value sent; null when `failure`
  bool failure = false;    ///< the sender fails the wait with `message`
  std::string message;     ///< the failure's message, or a note
  std::string step;        ///< non-empty: only the wait at this step path takes it
  std::string who;         ///< the sender: "user:alice", or "cli:pid 42"
  std::string key;         ///< the sender's Idempotency-Key; empty: none
  /// Of name, value, failure, message and step: a request with the same key
  /// and another fingerprint is a conflict.
  std::string fingerprint;
  int64_t received_at = 0;
  signal_state state = signal_state::buffered;
  std::string wait_execution; ///< consumed: the execution of the wait that took it
  std::string wait_step;      ///< consumed: that wait's step id
  int64_t consumed_at = 0;
};

/// A compact snapshot: execution `target` stopped (or failed)
/// and, in the same commit, every execution below it that is stored not
/// terminal became `stopped`, and each of their running/queued steps
/// `pending`, without a record per node. Readers resolve it (store.hpp, "The
/// compact snapshot"); it stands for `events` events at seqs `first_seq` ..
/// `first_seq + events - 1` of the root's log.
struct subtree_stop {
  std::string target;        ///< its own records are written as usual, in the same batch
  std::string root_id;       ///< the tree (keys the event log)
  /// The reason of target's direct children (`parent_stopped` or
  /// `sibling_failed`); deeper executions get `parent_stopped`.
  step_reason child_reason = step_reason::none;
  int64_t time = 0;          ///< ended_at of every execution and step it ends
  uint64_t events = 0;       ///< how many events it stands for (given by the batch's writer)
  uint64_t first_seq = 0;    ///< assigned at commit
};

/// The owner of a tree: the process whose actors may write it while it is
/// live. Stored per root id (store.hpp, `meta`), written in the same
/// transaction as every transition that makes the tree live (start, resume,
/// an agent's run) and by recovery when it takes a dead owner's tree over.
struct tree_lease {
  /// The fencing token: drawn from the home's counter, so each new owner of
  /// any tree holds a higher one than every owner before it. 0: never leased
  /// (a tree written by a release without leases).
  uint64_t epoch = 0;
  int64_t pid = 0;    ///< the owner process
  uint64_t start = 0; ///< its start time (/proc/PID/stat), so a reused pid is no owner
};

/// What became of a write's lease claim at commit (`lease_claim::outcome`).
enum class lease_outcome : uint8_t {
  none,     ///< no claim, or not committed yet
  held,     ///< the stored epoch was the writer's: the write is applied
  acquired, ///< taken over (compare-and-set): the write is applied under a new epoch
  fenced,   ///< the stored epoch is another's: nothing of the write is applied
};

/// A write's claim on the tree it changes (`write_batch::lease`). The store
/// applies a write with a claim only when, inside its transaction, the
/// tree's stored lease still has the claimed epoch; else it skips that write
/// (and its nested ones) and marks it `fenced`. Acquiring is a
/// compare-and-set: the epoch the acquirer read must still be stored; the
/// tree then gets a new epoch from the home's counter and the new owner.
struct lease_claim {
  std::string root;     ///< the tree's root id; empty: no claim
  /// The epoch the writer holds; when acquiring, the epoch it read (0: no
  /// lease stored). A held claim of 0 stands for "the epoch this writer
  /// acquired for `root` earlier in the same transaction".
  uint64_t epoch = 0;
  bool acquire = false; ///< take the tree over (a start, a resume, recovery)
  tree_lease owner;     ///< acquiring: the new owner (epoch assigned at commit)
  /// Acquiring, when not 0: the seq of the last event of the tree's log as
  /// the writer read it. The claim is fenced when the log has grown since:
  /// recovery takes over only a tree that nobody wrote after it looked.
  uint64_t log_end = 0;
  /// The writer's last write of the tree (its root's final record): the
  /// store writer forgets the epoch it holds once it is committed.
  bool last = false;
  lease_outcome outcome = lease_outcome::none; ///< assigned at commit
};

/// What a tree (or a subtree with limits of its own) has used, kept across
/// resumes (runtime/docs/reference/graph-format.md#limits). Merged by maximum on commit: values only grow.
struct tree_counters {
  uint64_t steps = 0;  ///< attempts started
  double spent = 0;    ///< cost charged
  int64_t run_ms = 0;  ///< running time, for the deadline
  double budget = 0;   ///< a budget raised by `resume --budget` (0: none)
};

/// The graph an execution runs, kept so resume never rereads files.
struct stored_graph {
  json document;
  std::string base_dir;
  json files = json::object(); ///< absolute path → document
};

/// One version of a graph registered over the API (runtime/docs/reference/http.md#graphs).
struct registered_graph {
  std::string owner;
  std::string name;     ///< the graph's id per owner
  int version = 0;      ///< from 1; assigned at commit when 0
  json document;
  int64_t created_at = 0;
};

/// What an agent does with a message that arrives while one of its runs is
/// live (runtime/docs/reference/graph-format.md#agent-graphs).
enum class busy_policy : uint8_t { cancel_previous, queue, reject };

const char* to_string(busy_policy x);

/// Parses a policy name; @returns false for an unknown name.
bool from_string(const std::string& s, busy_policy& x);

/// A named agent (runtime/docs/reference/graph-format.md#agent-graphs): the graph its runs execute and its busy policy.
/// Its conversation is kept apart, as `history_entry` records.
struct agent_record {
  std::string owner;    ///< the user that owns it (HTTP API); empty for the CLI
  std::string name;
  stored_graph graph;   ///< the graph of its runs, with the files it included
  busy_policy on_busy = busy_policy::cancel_previous;
  /// The cluster node it lives on: its runs' subprocess steps run there
  /// (runtime/docs/reference/graph-format.md#agent-graphs); empty: any node.
  std::string node;
  int64_t created_at = 0;
  int64_t updated_at = 0;
};

/// One entry of an agent's conversation history (runtime/docs/reference/graph-format.md#agent-graphs).
struct history_entry {
  std::string owner;
  std::string agent;
  uint64_t seq = 0;          ///< per agent, from 1; assigned at commit
  std::string role;          ///< "user" or "agent"
  json content;              ///< the message, or the run's `reply` output
  std::string execution_id;  ///< the run that answered it
  int64_t time = 0;
};

/// The events of the log are built here. `seq` is assigned at commit.
/// An event about execution `rec` at `time` that changes no status.
event_record make_event(const execution_record& rec, event_type type, int64_t time,
                        json data = nullptr);
/// An event about execution `rec` that leaves it `status`.
event_record make_execution_event(const execution_record& rec, event_type type, int64_t time,
                                  execution_status status,
                                  step_reason reason = step_reason::none, json data = nullptr);
/// An event about step `step` of `rec` that changes no status (output, signals).
event_record make_step_event(const execution_record& rec, event_type type, int64_t time,
                             const std::string& step, json data = nullptr);
/// An event about step `step` of `rec` that leaves it `status`.
event_record make_step_event(const execution_record& rec, event_type type, int64_t time,
                             const std::string& step, step_status status,
                             step_reason reason = step_reason::none, json data = nullptr);

// -- codecs --------------------------------------------------------------------

json to_json(const execution_record& x);
json to_json(const step_record& x);
json to_json(const event_record& x);
json to_json(const stored_graph& x);
json to_json(const registered_graph& x);

/// Encoders to the stored form (schema 2): one MessagePack map per record
/// with short, stable keys, written directly without building a `json`;
/// JSON payloads (inputs, outputs, results, errors, event data, documents)
/// are embedded as MessagePack. Empty and zero fields are left out. Enums are
/// stored as their index, so their values are only ever appended. Invalid
/// UTF-8 in any string is replaced with U+FFFD, so every record decodes and
/// every decoded `json` dumps without throwing.
std::string encode(const execution_record& x);
std::string encode(const step_record& x);
std::string encode(const event_record& x);
std::string encode(const stored_graph& x);
std::string encode(const stop_record& x);
std::string encode(const tree_counters& x);
std::string encode(const registered_graph& x);
std::string encode(const agent_record& x);
std::string encode(const history_entry& x);
std::string encode(const subtree_stop& x);
std::string encode(const signal_record& x);

/// Encodes a stored graph from its parts without copying them (the document
/// of a large graph is megabytes); the same bytes as `encode(stored_graph)`.
std::string encode_graph(const json& document, const std::string& base_dir,
                         const std::map<std::string, json>& files);

/// Decoders of the stored form. They read the binary encoding and the
/// schema-1 JSON text alike (told apart by the first byte, see
/// `is_text_record`), so a home written before schema 2, or a record its
/// migration has not reached yet, reads as before. Unknown keys are skipped
/// and missing optional keys keep their defaults (schema evolution).
/// @returns the record, or `persistence_errc::corrupt_record`; never throws.
caf::expected<execution_record> decode_execution(std::string_view bytes);
caf::expected<step_record> decode_step(std::string_view bytes);
caf::expected<event_record> decode_event(std::string_view bytes);
caf::expected<stored_graph> decode_graph(std::string_view bytes);
caf::expected<stop_record> decode_stop(std::string_view bytes);
caf::expected<tree_counters> decode_counters(std::string_view bytes);
caf::expected<registered_graph> decode_registered_graph(std::string_view bytes);
caf::expected<agent_record> decode_agent(std::string_view bytes);
caf::expected<history_entry> decode_history(std::string_view bytes);
/// Binary only: no schema-1 home holds one.
caf::expected<subtree_stop> decode_subtree_stop(std::string_view bytes);
/// Binary only: no schema-1 home holds one.
caf::expected<signal_record> decode_signal(std::string_view bytes);

/// The `execution_id` of a stored event, without decoding the rest.
/// @returns it, or `persistence_errc::corrupt_record`.
caf::expected<std::string> decode_event_execution(std::string_view bytes);

/// True when `bytes` is a schema-1 text record: a JSON object, first byte
/// '{' (0x7b, which never starts a binary record: those are maps, 0x80-0x8f
/// or 0xde-0xdf).
bool is_text_record(std::string_view bytes);

/// The schema-1 text encoders (compact JSON, as canopy stored records before
/// schema 2). The store no longer writes it; kept as the reference of the
/// old format for the migration tests and the codec benchmark.
std::string encode_json(const execution_record& x);
std::string encode_json(const step_record& x);
std::string encode_json(const event_record& x);
std::string encode_json(const stored_graph& x);
std::string encode_json(const stop_record& x);
std::string encode_json(const tree_counters& x);
std::string encode_json(const registered_graph& x);
std::string encode_json(const agent_record& x);
std::string encode_json(const history_entry& x);

/// Compact JSON text of `v`; invalid UTF-8 is replaced, never thrown.
std::string dump_json(const json& v);

/// Decoders of the schema-1 text, parsed: the key names of `encode_json`
/// (and of `to_json`, for the records that have one).
/// @returns the record or `persistence_errc::corrupt_record`.
caf::expected<execution_record> execution_from_json(const json& j);
caf::expected<step_record> step_from_json(const json& j);
caf::expected<event_record> event_from_json(const json& j);
caf::expected<stored_graph> stored_graph_from_json(const json& j);
caf::expected<stop_record> stop_from_json(const json& j);
caf::expected<tree_counters> counters_from_json(const json& j);
caf::expected<registered_graph> registered_graph_from_json(const json& j);
caf::expected<agent_record> agent_from_json(const json& j);
caf::expected<history_entry> history_from_json(const json& j);

/// Renders a stop request as the SPEC describes it.
json stop_document(const stop_record& x);

/// Renders a signal: `{id, execution_id, name, value | fail, step, who,
/// received_at, status, consumed_by: {execution_id, step} | null,
/// consumed_at}` (RFC 3339 times; the idempotency key and fingerprint stay
/// inside).
json signal_document(const signal_record& x);

/// Renders a history entry as runtime/docs/reference/graph-format.md#agent-graphs describes it:
/// `{role, content, execution_id, time}` (RFC 3339 time).
json history_document(const history_entry& x);

/// Renders an agent without its history: `{name, graph, on_busy, created_at,
/// updated_at}`, `graph` being the graph's name.
json agent_document(const agent_record& x);

/// Renders an event as runtime/docs/reference/events.md describes it (RFC 3339 time, null fields omitted).
json event_document(const event_record& x);

} // namespace canopy::core
