#pragma once

// The cluster (runtime/docs/reference/config.md#cluster): a supervisor (`canopy serve
// --cluster`) and workers (`canopy worker --join`) joined through CAF's
// middleman. The supervisor owns the store and every execution; workers run
// the subprocess steps placed on them.
//
// Transport. Plain BASP over TCP, or, with `tls_files` on both sides, BASP
// over TLS through CAF's openssl module: the supervisor publishes with
// caf::openssl::publish, workers connect through the openssl manager's
// middleman actor, and each side requires a certificate from the other that
// chains to its CA (mutual authentication), so the secret and every step
// travel encrypted and only holders of a certificate get to present it.
//
// Membership. The supervisor publishes its cluster actor. A worker's node
// actor connects, sends (join_atom ...) with the cluster secret, its slots and
// tools; a wrong secret is refused (and logged by both sides). Liveness is
// checked twice: CAF's heartbeat and connection timeout on the connection,
// and the node's own pings every `heartbeat`. A member that sent nothing for
// `timeout`, or whose actor is down (connection closed), is lost; a worker
// that hears nothing from the supervisor for `timeout` kills its running
// steps (SIGKILL to their groups) and joins again.
//
// Cluster actor (supervisor), handles:
//   (join_atom, node_info, string secret, actor node) -> bool
//       admits a worker (true) or refuses it (an error naming the reason)
//   (alive_atom, string name)                 a member is alive
//   (nodes_atom) -> std::vector<node_info>    the members, the supervisor first
//   (place_atom, string tool, string pin, uint64_t ticket)
//       -> (string node, actor node_actor)
//       from an execution actor: a node that has `tool` (empty: any node) and
//       a free slot, least loaded first, the supervisor on ties; only the
//       member named `pin` when it is not empty (an agent's home node);
//       answered when there is one (the step waits `queued`, also while the
//       pinned node is not a member). `node_actor` is null for the supervisor
//       itself.
//   (release_atom, string node, uint64_t ticket)   the placed attempt ended
// Sends (lost_atom, string node) to every execution actor holding a slot on
// a member when that member is lost; the slot is gone with it.
//
// Node actor (worker), handles:
//   (run_atom, remote_job, actor parent) -> actor
//       spawns a step runner for `job`, linked to `parent` (an execution actor
//       on the supervisor), which reports to `parent` in wire form:
//       (started_atom, step, attempt, pid, pid_start),
//       (output_atom, step, attempt, string lines_json),
//       (done_atom, step, attempt, string result_json, string error),
//       (signalled_atom, step, attempt, int signal, int next, int64 next_in_ms)

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/meta/type_name.hpp>

#include "actors/tls.hpp"
#include "persistence/duration.hpp"
#include "persistence/tools.hpp"

namespace canopy::core {

// -- atoms -------------------------------------------------------------------------

using join_atom = caf::atom_constant<caf::atom("join")>;   ///< a worker joins
using alive_atom = caf::atom_constant<caf::atom("alive")>; ///< a member is alive
using nodes_atom = caf::atom_constant<caf::atom("nodes")>; ///< list the members
using place_atom = caf::atom_constant<caf::atom("place")>; ///< place a step on a node
using lost_atom = caf::atom_constant<caf::atom("nodelost")>; ///< a member was lost

// -- wire types --------------------------------------------------------------------

/// A member of the cluster as `GET /v1/nodes` shows it.
struct node_info {
  std::string name;
  uint32_t slots = 0;               ///< subprocess steps it runs at once
  std::vector<std::string> tools;   ///< tool names it has
  uint32_t running = 0;             ///< steps placed on it now
  bool supervisor = false;
  int64_t joined_at = 0;            ///< ms since the epoch
  int64_t last_seen = 0;            ///< ms since the epoch
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_info& x) {
  return f(caf::meta::type_name("canopy_node_info"), x.name, x.slots, x.tools, x.running,
           x.supervisor, x.joined_at, x.last_seen);
}

/// A subprocess attempt placed on a worker: the resolved argv, env, cwd and
/// stdin, and its limits.
struct remote_job {
  uint64_t step = 0;
  int32_t attempt = 1;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cwd;                  ///< empty: the worker's working folder
  bool has_stdin = false;
  std::string stdin_data;
  int64_t timeout_ms = -1;          ///< -1: none
  int64_t grace_interrupt_ms = 10'000;
  int64_t grace_terminate_ms = 5'000;
  bool grace_set = false;           ///< the step set `grace` (else the tool's applies)
  uint64_t max_output_events = 1000;
  /// A `tool` step: the worker fills the tool's argv template from its own
  /// tools file with `with` and `inputs` (JSON text); `argv` is empty then.
  std::string tool;
  std::string with_json;
  std::string inputs_json;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, remote_job& x) {
  return f(caf::meta::type_name("canopy_remote_job"), x.step, x.attempt, x.argv, x.env, x.cwd,
           x.has_stdin, x.stdin_data, x.timeout_ms, x.grace_interrupt_ms, x.grace_terminate_ms,
           x.grace_set, x.max_output_events, x.tool, x.with_json, x.inputs_json);
}

/// Registers the types that cross the middleman. Call on every node's
/// config before the actor system is constructed.
void add_cluster_types(caf::actor_system_config& cfg);

/// Sets CAF's middleman heartbeat and connection timeout (both off by
/// default in CAF) and loads the middleman; with `tls`, also loads CAF's
/// openssl module with those files (peer verification on: CAF requires a
/// peer certificate as soon as a CA is set). Check the files first
/// (check_tls_files): CAF aborts the process when it cannot load them.
/// Call before constructing the system.
void configure_middleman(caf::actor_system_config& cfg, millis heartbeat, millis timeout,
                         const tls_files* tls = nullptr);

// -- supervisor ----------------------------------------------------------------------

/// The tool names the cluster's members announce, for graph validation on
/// the supervisor. Thread-safe.
class member_tools {
public:
  void assign(std::set<std::string> names) {
    std::lock_guard<std::mutex> guard{mtx_};
    names_ = std::move(names);
  }
  std::set<std::string> names() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return names_;
  }

private:
  mutable std::mutex mtx_;
  std::set<std::string> names_;
};

/// Options of the supervisor's cluster actor.
struct cluster_options {
  std::string secret;
  millis heartbeat{1000};
  millis timeout{5000};
  /// The supervisor as a member: its name, slots and tools.
  node_info self;
  /// Kept up to date with the members' tools (may be null).
  std::shared_ptr<member_tools> tools;
  /// Called (on an actor thread) when a worker joins, is refused or is lost,
  /// for the node's log: (event, node name, detail).
  std::function<void(const std::string&, const std::string&, const std::string&)> log;
};

/// Spawns the supervisor's cluster actor. Threading: any thread.
caf::actor spawn_cluster(caf::actor_system& sys, cluster_options opts);

// -- worker --------------------------------------------------------------------------

/// Options of a worker's node actor.
struct worker_options {
  std::string host;                 ///< the supervisor's cluster address
  uint16_t port = 0;
  std::string secret;
  /// Connect over TLS (the system was configured with these files); unset:
  /// plain TCP.
  std::optional<tls_files> tls;
  node_info self;                   ///< name, slots, tools
  /// The tools `self.tools` names: argv templates and limits.
  tool_table tools;
  millis heartbeat{1000};
  millis timeout{5000};
  /// Log lines: (event, detail), e.g. ("joined", "127.0.0.1:4242"),
  /// ("refused", reason), ("lost", reason).
  std::function<void(const std::string&, const std::string&)> log;
  /// Called once when the supervisor refused the secret: the worker stops.
  std::function<void(const std::string&)> on_refused;
};

/// Spawns a worker's node actor: it connects, joins, pings, runs placed
/// steps, and rejoins after losing the supervisor. Threading: any thread.
caf::actor spawn_worker_node(caf::actor_system& sys, worker_options opts);

} // namespace canopy::core
