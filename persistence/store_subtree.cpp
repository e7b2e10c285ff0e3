// The compact snapshot inside the store: expansion, resolution and
// materialisation of a `subtree_stop` (see store_subtree.hpp).

#include "persistence/store_subtree.hpp"

#include <iterator>

#include "persistence/store_index.hpp"
#include "persistence/store_lmdb.hpp"

namespace canopy::core::store_subtree {

using namespace store_lmdb;

namespace {

/// Executions a materialisation writes together (see `materialize`): a few
/// ms of writing, the longest a write waits for it to give way
/// (measured: runtime/docs/benchmarks.md#design-measurements).
constexpr size_t materialize_chunk = 256;

std::optional<execution_record> load_execution(MDB_txn* txn, const dbs& d,
                                               const std::string& id) {
  MDB_val k = as_val(id), v;
  if (mdb_get(txn, d.executions, &k, &v) != 0)
    return std::nullopt;
  auto rec = decode_execution(as_view(v));
  if (!rec)
    return std::nullopt;
  return std::move(*rec);
}

std::vector<std::string> children_of(MDB_txn* txn, const dbs& d, const std::string& id) {
  std::vector<std::string> out;
  auto prefix = id + '\0';
  scan_prefix(txn, d.children, prefix, prefix, [&](const MDB_val& k, const MDB_val&) {
    out.emplace_back(static_cast<const char*>(k.mv_data) + prefix.size(),
                     k.mv_size - prefix.size());
    return true;
  });
  return out;
}

/// The one walk (see the top of store_subtree.hpp): calls `f(rec, direct)`
/// for each covered execution in walk order, `direct` when it is a child of
/// the target, until `f` returns false. Corrupt or missing records are not
/// covered.
template <class F>
void walk(MDB_txn* txn, const dbs& d, const subtree_stop& s, F f) {
  struct level {
    std::vector<std::string> ids;
    size_t next = 0;
  };
  std::vector<level> stack;
  stack.push_back({children_of(txn, d, s.target)});
  while (!stack.empty()) {
    auto& top = stack.back();
    if (top.next == top.ids.size()) {
      stack.pop_back();
      continue;
    }
    auto id = top.ids[top.next++];
    auto rec = load_execution(txn, d, id);
    if (!rec || is_terminal(rec->status))
      continue;
    if (!f(*rec, stack.size() == 1))
      return;
    stack.push_back({children_of(txn, d, id)});
  }
}

} // namespace

// -- the compact entry ---------------------------------------------------------------

event_record compact_entry(const subtree_stop& s) {
  event_record e;
  e.seq = s.first_seq;
  e.time = s.time;
  e.type = compact_type;
  e.execution_id = s.target;
  e.root_id = s.root_id;
  e.reason = s.child_reason;
  e.data = {{"events", s.events}};
  return e;
}

std::optional<subtree_stop> from_compact_entry(const event_record& e) {
  if (e.type != compact_type)
    return std::nullopt;
  subtree_stop s;
  s.target = e.execution_id;
  s.root_id = e.root_id;
  s.child_reason = e.reason;
  s.time = e.time;
  s.first_seq = e.seq;
  if (e.data.is_object()) {
    auto n = e.data.find("events");
    if (n != e.data.end() && n->is_number_unsigned())
      s.events = n->get<uint64_t>();
  }
  return s;
}

// -- resolution -----------------------------------------------------------------------

void resolve_execution(execution_record& rec, step_reason reason, int64_t time) {
  rec.status = execution_status::stopped;
  rec.reason = reason;
  rec.ended_at = time;
  rec.outputs = nullptr;
}

namespace {

/// The expansion of `s`, one covered execution at a time, in walk order:
/// calls `f(rec, steps, events)` with the resolved record, the steps it
/// resets (resolved; only with `records`) and its events (seqs assigned;
/// only those within the reserved range and with seq > `after`), until `f`
/// returns false. @returns the events the walk yielded.
template <class F>
uint64_t expand_each(MDB_txn* txn, const dbs& d, const subtree_stop& s, bool records,
                     uint64_t after, F f) {
  uint64_t n = 0; // events the walk yielded so far
  std::vector<step_record> steps;
  std::vector<event_record> events;
  auto add = [&](event_record e) {
    auto seq = s.first_seq + n++;
    if (n > s.events || seq <= after)
      return;
    e.seq = seq;
    events.push_back(std::move(e));
  };
  walk(txn, d, s, [&](execution_record& rec, bool direct) {
    steps.clear();
    events.clear();
    auto reason = direct ? s.child_reason : step_reason::parent_stopped;
    resolve_execution(rec, reason, s.time);
    auto prefix = rec.id + '\0';
    scan_prefix(txn, d.steps, prefix, prefix, [&](const MDB_val&, const MDB_val& v) {
      auto step = decode_step(as_view(v));
      if (!step || !reset_step_record(*step, reason, s.time))
        return true;
      add(make_step_event(rec, event_type::step_pending, s.time, step->step,
                          step_status::pending, reason));
      if (records)
        steps.push_back(std::move(*step));
      return true;
    });
    add(make_execution_event(rec, event_type::execution_stopped, s.time,
                             execution_status::stopped, reason,
                             rec.error.empty() ? json(nullptr) : json{{"error", rec.error}}));
    return f(rec, steps, events);
  });
  return n;
}

} // namespace

expansion expand(MDB_txn* txn, const dbs& d, const subtree_stop& s, bool records,
                 uint64_t after) {
  expansion out;
  out.walked_events = expand_each(
    txn, d, s, records, after,
    [&](execution_record& rec, std::vector<step_record>& steps,
        std::vector<event_record>& events) {
      for (auto& e : events)
        out.events.push_back(std::move(e));
      if (records) {
        for (auto& x : steps)
          out.steps.push_back(std::move(x));
        out.executions.push_back(std::move(rec));
      }
      return true;
    });
  return out;
}

bool any_stops(MDB_txn* txn, const dbs& d) {
  if (!d.has_subtrees)
    return false;
  MDB_stat st;
  return mdb_stat(txn, d.subtrees, &st) == 0 && st.ms_entries > 0;
}

std::optional<subtree_stop> load_stop(MDB_txn* txn, const dbs& d, const std::string& root,
                                      const std::string& target) {
  if (!d.has_subtrees)
    return std::nullopt;
  auto key = pair_key(root, target);
  MDB_val k = as_val(key), v;
  if (mdb_get(txn, d.subtrees, &k, &v) != 0)
    return std::nullopt;
  auto s = decode_subtree_stop(as_view(v));
  if (!s)
    return std::nullopt;
  return std::move(*s);
}

resolver::resolver(MDB_txn* txn, const dbs& d) : txn_(txn), d_(d) {
  active_ = any_stops(txn, d);
}

bool resolver::root_has_stops(const std::string& root) {
  auto i = roots_.find(root);
  if (i != roots_.end())
    return i->second;
  bool any = false;
  auto prefix = root + '\0';
  scan_prefix(txn_, d_.subtrees, prefix, prefix, [&](const MDB_val&, const MDB_val&) {
    any = true;
    return false;
  });
  roots_.emplace(root, any);
  return any;
}

const subtree_stop* resolver::stop_of(const std::string& root, const std::string& id) {
  auto i = stops_.find(id);
  if (i == stops_.end())
    i = stops_.emplace(id, load_stop(txn_, d_, root, id)).first;
  return i->second ? &*i->second : nullptr;
}

const std::string& resolver::covering_target(const std::string& root, const std::string& id,
                                             const std::string& parent) {
  auto i = targets_.find(id);
  if (i != targets_.end())
    return i->second;
  std::string target;
  if (!parent.empty()) {
    if (stop_of(root, parent)) {
      target = parent;
    } else if (auto p = load_execution(txn_, d_, parent); p && !is_terminal(p->status)) {
      target = covering_target(root, parent, p->parent_id);
    }
  }
  return targets_.emplace(id, std::move(target)).first->second;
}

std::optional<resolver::coverage> resolver::covering(const execution_record& rec) {
  if (!active_ || is_terminal(rec.status) || rec.parent_id.empty()
      || !root_has_stops(rec.root_id))
    return std::nullopt;
  auto& target = covering_target(rec.root_id, rec.id, rec.parent_id);
  if (target.empty())
    return std::nullopt;
  auto s = stop_of(rec.root_id, target);
  return coverage{s, rec.parent_id == target ? s->child_reason : step_reason::parent_stopped};
}

bool resolver::resolve(execution_record& rec) {
  auto c = covering(rec);
  if (!c)
    return false;
  resolve_execution(rec, c->reason, c->stop->time);
  return true;
}

void resolver::resolve_steps(const std::string& id, std::vector<step_record>& steps) {
  if (!active_)
    return;
  bool active_step = false;
  for (auto& s : steps)
    active_step = active_step || is_active(s.status);
  if (!active_step)
    return;
  auto rec = load_execution(txn_, d_, id);
  if (!rec)
    return;
  auto c = covering(*rec);
  if (!c)
    return;
  for (auto& s : steps)
    reset_step_record(s, c->reason, c->stop->time);
}

// -- materialisation ------------------------------------------------------------------

int materialize(MDB_txn* txn, const dbs& d, const std::string& root, const std::string& target,
                const give_way_fn& give_way) {
  auto s = load_stop(txn, d, root, target);
  if (!s)
    return 0;
  int rc = 0;
  auto put = [&](unsigned dbi, const std::string& key, const std::string& val) {
    if (rc != 0)
      return;
    MDB_val k = as_val(key), v = as_val(val);
    rc = mdb_put(txn, dbi, &k, &v, 0);
  };
  auto del = [&](unsigned dbi, const std::string& key) {
    if (rc != 0)
      return;
    MDB_val k = as_val(key);
    int r = mdb_del(txn, dbi, &k, nullptr);
    if (r != 0 && r != MDB_NOTFOUND)
      rc = r;
  };
  // The first event (if any) takes the compact entry's key: delete it first
  // in case the walk yields none.
  if (s->events > 0)
    del(d.events, pair_key(root, seq_key(s->first_seq)));
  // Written as walked, a chunk of executions at a time: each database's
  // records of a chunk are written together, so they sit together in the
  // file (written one execution at a time, interleaved, a later read of the
  // tree maps more pages; measured: runtime/docs/benchmarks.md#design-measurements).
  // The walk reads
  // only the covered executions' stored records (each before it is
  // rewritten), their steps (scanned before they are written) and
  // `children` (never written here).
  std::vector<execution_record> execs;
  std::vector<step_record> steps;
  std::vector<event_record> events;
  auto write_chunk = [&] {
    if (rc != 0)
      return; // given way or failed: nothing of it is committed
    for (auto& x : execs) {
      if (d.indexed && rc == 0) {
        // Covered executions were indexed under their stored status.
        if (auto stored = load_execution(txn, d, x.id)) {
          auto from = store_index::entry_of(*stored), to = store_index::entry_of(x);
          rc = store_index::reindex(txn, d.by_status, d.meta, x.id, x.parent_id.empty(), &from,
                                    &to);
        }
      }
      put(d.executions, x.id, encode(x));
      del(d.live, x.id);
      if (!x.agent.empty())
        del(d.agent_runs, agent_prefix(x.owner, x.agent) + x.id);
    }
    for (auto& x : steps)
      put(d.steps, pair_key(x.execution_id, x.step), encode(x));
    for (auto& e : events)
      put(d.events, pair_key(e.root_id, seq_key(e.seq)), encode(e));
    execs.clear();
    steps.clear();
    events.clear();
  };
  expand_each(txn, d, *s, true, 0,
              [&](execution_record& x, std::vector<step_record>& xs,
                  std::vector<event_record>& es) {
                if (give_way && give_way()) {
                  rc = gave_way;
                  return false;
                }
                execs.push_back(std::move(x));
                std::move(xs.begin(), xs.end(), std::back_inserter(steps));
                std::move(es.begin(), es.end(), std::back_inserter(events));
                if (execs.size() == materialize_chunk)
                  write_chunk();
                return rc == 0;
              });
  write_chunk();
  del(d.subtrees, pair_key(root, target));
  return rc;
}

int materialize_touching(MDB_txn* txn, const dbs& d, const std::string& root,
                         const std::string& id, const std::string& parent) {
  if (!d.has_subtrees || root.empty())
    return 0;
  bool any = false;
  auto prefix = root + '\0';
  scan_prefix(txn, d.subtrees, prefix, prefix, [&](const MDB_val&, const MDB_val&) {
    any = true;
    return false;
  });
  if (!any)
    return 0;
  if (int rc = materialize(txn, d, root, id); rc != 0)
    return rc;
  auto up = parent;
  while (!up.empty()) {
    if (load_stop(txn, d, root, up))
      return materialize(txn, d, root, up);
    auto p = load_execution(txn, d, up);
    if (!p || is_terminal(p->status))
      return 0;
    up = p->parent_id;
  }
  return 0;
}

} // namespace canopy::core::store_subtree
