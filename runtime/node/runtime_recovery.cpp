// Recovering the executions a dead owner left live, when a home opens.

#include "runtime/node/runtime.hpp"

#include <sys/types.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <string>
#include <map>

#include "actors/execution/machine.hpp"
#include "actors/process/subprocess.hpp"

namespace canopy::core {

// -- free functions ------------------------------------------------------------

namespace {

/// True when `pid` is a zombie: it has exited and waits to be reaped (an
/// owner whose parent is gone may stay one for a while).
bool zombie(int64_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string text;
  if (!in || !std::getline(in, text))
    return false;
  auto pos = text.rfind(')');
  return pos != std::string::npos && pos + 2 < text.size() && text[pos + 2] == 'Z';
}

/// True when `pid`, started at `start`, still runs (a reused pid has
/// another start time; an exited one that is not reaped yet does not run).
bool alive(int64_t pid, uint64_t start) {
  if (pid <= 0)
    return false;
  auto now = process_start_time(pid);
  return now != 0 && now == start && !zombie(pid);
}

/// The live executions of one tree and its lease as read.
struct live_tree {
  tree_lease lease;
  uint64_t log_end = 0; ///< the last seq of its log before its records were read
  std::vector<execution_record> live;
};

/// True when the owner of `t` still runs: its lease's process, or, for a
/// tree a release without leases started (epoch 0), any live execution's
/// recorded owner.
bool owner_alive(const live_tree& t) {
  if (t.lease.epoch != 0)
    return alive(t.lease.pid, t.lease.start);
  for (auto& rec : t.live)
    if (alive(rec.owner_pid, rec.owner_start))
      return true;
  return false;
}

/// Kills the process group a dead owner's step left behind, unless its pid
/// now belongs to another process (its start time differs).
void kill_left_group(const step_record& s) {
  if (s.pid <= 0)
    return;
  auto start = process_start_time(s.pid);
  bool leader_is_ours = start != 0 && start == s.pid_start;
  bool leader_gone = start == 0;
  if (leader_is_ours || leader_gone)
    ::kill(static_cast<pid_t>(-s.pid), SIGKILL);
}

// -- phases of recover_interrupted ---------------------------------------------

/// Trees by root id.
using live_trees = std::map<std::string, live_tree>;

/// The trees with a live execution whose owner does not run, each with its
/// lease as read before the check; their `live` is left empty, to be read
/// again after the check.
caf::expected<live_trees> trees_of_dead_owners(const store& db) {
  auto first = db.live();
  if (!first)
    return first.error();
  live_trees trees;
  for (auto& rec : *first) {
    auto root = rec.root_id.empty() ? rec.id : rec.root_id;
    trees[root].live.push_back(std::move(rec));
  }
  for (auto i = trees.begin(); i != trees.end();) {
    auto lease = db.lease(i->first);
    if (!lease)
      return lease.error();
    i->second.lease = *lease;
    if (owner_alive(i->second)) {
      i = trees.erase(i);
    } else {
      i->second.live.clear();
      ++i;
    }
  }
  return trees;
}

/// Reads, after the owners were found dead, where each tree's log ends and
/// then its live executions.
caf::error read_after_check(const store& db, live_trees& trees) {
  // Where each tree's log ends, before its records are read: the takeover
  // is refused if anything was written to the tree after this point,
  // whoever wrote it (the epoch alone does not change on an owner's writes).
  for (auto& [root, t] : trees) {
    auto end = db.tree_last_seq(root);
    if (!end)
      return end.error();
    t.log_end = *end;
  }
  if (trees.empty())
    return caf::error{};
  auto again = db.live();
  if (!again)
    return again.error();
  for (auto& rec : *again) {
    auto root = rec.root_id.empty() ? rec.id : rec.root_id;
    if (auto t = trees.find(root); t != trees.end())
      t->second.live.push_back(std::move(rec));
  }
  return caf::error{};
}

/// The batch that takes tree `root` over from its dead owner, with a
/// compare-and-set on the epoch read before: each live execution stopped as
/// interrupted, its steps back to pending. Adds to `running` the steps whose
/// process groups may live on.
caf::expected<write_batch> takeover_batch(const store& db, const std::string& root,
                                          live_tree& t, int64_t now,
                                          std::vector<step_record>& running) {
  const step_reason interrupted = step_reason::interrupted;
  write_batch batch;
  batch.lease.root = root;
  batch.lease.acquire = true;
  batch.lease.epoch = t.lease.epoch;
  batch.lease.log_end = t.log_end;
  batch.lease.owner.pid = ::getpid();
  batch.lease.owner.start = process_start_time(::getpid());
  for (auto& rec : t.live) {
    auto steps = db.steps(rec.id);
    if (!steps)
      return steps.error();
    for (auto& s : *steps) {
      if (s.pid > 0 && s.status == step_status::running)
        running.push_back(s);
      if (!reset_step_record(s, interrupted, now))
        continue;
      batch.events.push_back(make_step_event(rec, event_type::step_pending, now, s.step,
                                             step_status::pending, interrupted));
      batch.steps.push_back(std::move(s));
    }
    rec.status = execution_status::stopped;
    rec.reason = interrupted;
    rec.ended_at = now;
    batch.events.push_back(make_execution_event(rec, event_type::execution_stopped, now,
                                                execution_status::stopped, interrupted));
    batch.executions.push_back(std::move(rec));
  }
  return batch;
}

/// The store answers the stop requests of what this commit ends, and any
/// request an older release left pending for an execution that ended.
void settle_ended_stops(const store& db, write_batch& all) {
  if (auto pending = db.pending_stops())
    for (auto& r : *pending)
      if (auto target = db.execution(r.target); !target || is_terminal(target->status))
        all.settle_stops.push_back(r.target);
}

/// After the commit: kills the process groups left by the owners of the
/// trees taken over (`left[i]` for `all.nested[i]`).
/// @returns the ids of the executions recovered.
std::vector<std::string> finish_takeovers(const write_batch& all,
                                          const std::vector<std::vector<step_record>>& left) {
  std::vector<std::string> recovered;
  for (size_t i = 0; i < left.size(); ++i) {
    auto& b = all.nested[i];
    if (b.lease.outcome != lease_outcome::acquired)
      continue; // its owner (or another recovery) wrote it meanwhile
    // The dead owner's subprocess groups may live on.
    for (auto& s : left[i])
      kill_left_group(s);
    for (auto& rec : b.executions)
      recovered.push_back(rec.id);
  }
  return recovered;
}

} // namespace

caf::expected<std::vector<std::string>> recover_interrupted(store& db) {
  // The order of the reads is the proof. For each tree: its lease, then
  // whether the lease's owner runs, then (second pass) the tree's records.
  // An owner found dead writes nothing after that check, so the records
  // read after it hold all its writes; any other process that writes the
  // tree after the lease was read has taken it over first, which changes
  // the epoch, and the compare-and-set below fences this batch. Records
  // read before the check could miss what a dying owner wrote last (a step
  // it completed would be reset and run again). The end of the tree's log,
  // read after the check and before the records, closes what the epoch
  // cannot see: an owner judged dead that still wrote (a pid check is only
  // as good as /proc at that instant) changes the log, and the takeover is
  // refused; the next reader that opens the home tries again.
  auto trees = trees_of_dead_owners(db);
  if (!trees)
    return trees.error();
  if (auto err = read_after_check(db, *trees))
    return err;
  // One batch per tree whose owner is dead, each taking its tree over with
  // a compare-and-set on the epoch read above.
  write_batch all;
  std::vector<std::vector<step_record>> left; // the steps to kill, per batch
  auto now = now_ms();
  for (auto& [root, t] : *trees) {
    if (t.live.empty())
      continue; // it settled before it died
    std::vector<step_record> running;
    auto batch = takeover_batch(db, root, t, now, running);
    if (!batch)
      return batch.error();
    left.push_back(std::move(running));
    all.nested.push_back(std::move(*batch));
  }
  settle_ended_stops(db, all);
  if (all.empty())
    return std::vector<std::string>{};
  if (auto err = db.commit(all))
    return err;
  return finish_takeovers(all, left);
}

bool only_waits_interrupted(const store& db, const std::string& root) {
  auto ids = db.subtree_ids(root);
  if (!ids)
    return false;
  size_t waits = 0;
  for (auto& id : *ids) {
    auto steps = db.steps(id);
    if (!steps)
      return false;
    std::shared_ptr<const graph> g;
    for (auto& s : *steps) {
      if (s.status != step_status::pending || s.reason != step_reason::interrupted)
        continue;
      if (!g) {
        auto sg = db.graph(id);
        if (!sg)
          return false;
        g = load_stored_graph(std::move(sg->document), sg->base_dir, sg->files).value;
        if (!g)
          return false;
      }
      auto* def = g->find(s.step);
      if (def == nullptr || def->kind != step_kind::wait)
        return false;
      ++waits;
    }
  }
  return waits > 0;
}

} // namespace canopy::core
