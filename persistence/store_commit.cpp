// The store's writes: the write batch, the one write transaction under the
// writers' lock, `commit` (and the stop requests it answers) and `materialize`.

#include "persistence/store.hpp"

#include <lmdb.h>

#include <cstring>
#include <mutex>
#include <algorithm>
#include <functional>
#include <map>
#include <unordered_set>

#include "persistence/duration.hpp"
#include "persistence/records_into.hpp"
#include "persistence/store_detail.hpp"
#include "persistence/store_lmdb.hpp"
#include "persistence/store_subtree.hpp"

namespace canopy {

using namespace store_lmdb;
using namespace store_detail;

namespace {

/// The `stop.requested` / `stop.handled` event of request `r` on `target`.
event_record stop_event(const execution_record& target, const stop_record& r, const char* type,
                        int64_t time) {
  if (r.handled)
    return make_event(target, type, time, {}, to_string(target.status), target.reason,
                      {{"stop_id", r.id}});
  return make_event(target, type, time, {}, {}, {},
                    {{"stop_id", r.id}, {"mode", r.force ? "force" : "graceful"}, {"who", r.who}});
}

/// The one rule that answers stop requests (SPEC §4.1, §4.4, §13 rule 10): a
/// request whose target is terminal, or gone, is `handled` in the same
/// transaction that made it so, with result `stopped` when the target is
/// `stopped` and `no_execution` otherwise. So no request stays pending for
/// an execution that has ended, whatever raced with it. Only the requests of
/// `candidates` (executions this transaction ended, targets of new or
/// re-checked requests, every pending target when the commit stored a
/// compact snapshot) are looked at; the scan of the pending index reads keys
/// only. A target is read resolved: one a compact snapshot covers is
/// `stopped`. Appends the `stop.handled` events to `out`.
/// @returns an LMDB code.
int settle_stops(MDB_txn* txn, const store_subtree::dbs& d, unsigned stops, unsigned pending,
                 const std::unordered_set<std::string>& candidates,
                 std::vector<event_record>& out) {
  MDB_stat stat;
  int rc = mdb_stat(txn, pending, &stat);
  if (rc != 0 || stat.ms_entries == 0 || candidates.empty())
    return rc;
  store_subtree::resolver resolve{txn, d};
  MDB_cursor* cur;
  if ((rc = mdb_cursor_open(txn, pending, &cur)) != 0)
    return rc;
  MDB_val k, v;
  int r = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
  while (r == 0) {
    auto key = as_string(k);
    auto sep = key.find('\0');
    if (sep == std::string::npos || candidates.count(key.substr(0, sep)) == 0) {
      r = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
      continue;
    }
    auto target = load_execution(txn, d.executions, key.substr(0, sep));
    // A target covered by a compact snapshot is `stopped`.
    if (target)
      resolve.resolve(*target);
    if (target && !is_terminal(target->status)) {
      r = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
      continue;
    }
    auto sid = key.substr(sep + 1);
    MDB_val sk = as_val(sid), sv;
    if (mdb_get(txn, stops, &sk, &sv) == 0) {
      if (auto req = decode_stop(as_view(sv))) {
        req->handled = true;
        req->handled_at = now_ms();
        req->result = target && target->status == execution_status::stopped ? "stopped"
                                                                            : "no_execution";
        auto text = encode(*req);
        MDB_val nv = as_val(text);
        if ((rc = mdb_put(txn, stops, &sk, &nv, 0)) != 0)
          break;
        if (target)
          out.push_back(stop_event(*target, *req, "stop.handled", req->handled_at));
      }
    }
    if ((rc = mdb_cursor_del(cur, 0)) != 0)
      break;
    r = mdb_cursor_get(cur, &k, &v, MDB_GET_CURRENT);
  }
  mdb_cursor_close(cur);
  return rc;
}

} // namespace

// -- the write batch -----------------------------------------------------------------

void write_batch::append(write_batch&& other) {
  if (other.empty())
    return;
  if (empty()) {
    *this = std::move(other);
    return;
  }
  nested.push_back(std::move(other));
}

namespace {

size_t event_count(const write_batch& b) {
  auto n = b.events.size();
  for (auto& x : b.nested)
    n += event_count(x);
  return n;
}

void move_events(write_batch& b, std::vector<event_record>& out) {
  for (auto& e : b.events)
    out.push_back(std::move(e));
  b.events.clear();
  for (auto& x : b.nested)
    move_events(x, out);
}

} // namespace

void write_batch::take_events(std::vector<event_record>& out) {
  // One allocation of the exact size: a commit's events can be many, and
  // a doubling vector would hold up to twice their size while subscribers
  // read them.
  if (out.empty() && nested.empty()) {
    out = std::move(events);
    events.clear();
    return;
  }
  out.reserve(out.size() + event_count(*this));
  move_events(*this, out);
}

size_t write_batch::weight() const {
  size_t n = executions.size() + steps.size() + graphs.size() + events.size()
             + deleted_executions.size() + deleted_trees.size() + stops.size()
             + settle_stops.size() + counters.size() + registered.size() + agents.size()
             + history.size() + subtree_stops.size();
  for (auto& g : encoded_graphs)
    n += 1 + g.second.size() / 512;
  for (auto& x : nested)
    n += x.weight();
  return n;
}

void write_batch::collect_subtree_stops(std::vector<subtree_stop>& out) const {
  out.insert(out.end(), subtree_stops.begin(), subtree_stops.end());
  for (auto& n : nested)
    n.collect_subtree_stops(out);
}

// -- writes --------------------------------------------------------------------------

caf::error store::grow() {
  std::unique_lock<std::shared_mutex> excl{resize_mtx_};
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  int rc = mdb_env_set_mapsize(env_, info.me_mapsize * 2);
  if (rc != 0)
    return lmdb_error("mdb_env_set_mapsize", rc);
  return caf::none;
}

caf::error store::write_once(const std::function<int(MDB_txn*)>& f, const char* what) {
  if (auto err = lock_writers())
    return err;
  struct unlock_at_exit {
    store* self;
    ~unlock_at_exit() { self->unlock_writers(); }
  } unlock{this};
  for (;;) {
    int rc;
    {
      std::shared_lock<std::shared_mutex> guard{resize_mtx_};
      if (env_ == nullptr)
        return unusable();
      MDB_txn* txn = nullptr;
      rc = mdb_txn_begin(env_, nullptr, 0, &txn);
      if (rc == MDB_MAP_RESIZED) {
        guard.unlock();
        {
          std::unique_lock<std::shared_mutex> excl{resize_mtx_};
          mdb_env_set_mapsize(env_, 0);
        }
        continue;
      }
      if (rc != 0)
        return lmdb_error("mdb_txn_begin", rc);
      rc = f(txn);
      if (rc == 0)
        rc = mdb_txn_commit(txn);
      else
        mdb_txn_abort(txn);
    }
    if (rc == MDB_MAP_FULL) {
      if (auto err = grow())
        return err;
      continue;
    }
    if (rc != 0)
      return lmdb_error(what, rc);
    return caf::none;
  }
}

caf::error store::commit(write_batch& batch) {
  // A home of the previous schema is rewritten before the first write, so
  // no binary record is ever written under schema 1.
  if (needs_migration_)
    if (auto err = migrate())
      return err;
  auto began = std::chrono::steady_clock::now();
  // Events the store writes itself (`stop.requested`, `stop.handled`), after
  // the batch's own; handed to the batch once committed.
  std::vector<event_record> generated;
  // The first write of this process in a home without `subtrees` creates it
  // (its handle is private to the transaction until it commits, and no other
  // transaction of this process may open a database meanwhile).
  std::unique_lock<std::mutex> creating{dbi_mtx_, std::defer_lock};
  if (!has_subtrees_)
    creating.lock();
  MDB_dbi created_subtrees = 0;
  auto err = write_once(
    [&](MDB_txn* txn) {
      int rc = 0;
      store_subtree::dbs d;
      d.executions = executions_;
      d.steps = steps_;
      d.children = children_;
      d.events = events_;
      d.live = live_;
      d.agent_runs = agent_runs_;
      d.has_subtrees = true;
      if (has_subtrees_) {
        d.subtrees = subtrees_;
      } else {
        if ((rc = mdb_dbi_open(txn, "subtrees", MDB_CREATE, &created_subtrees)) != 0)
          return rc;
        d.subtrees = created_subtrees;
      }
      bool any_subtree_stop = false;
      auto put = [&](unsigned dbi, const std::string& key, const std::string& val,
                     unsigned flags = 0) {
        if (rc != 0)
          return;
        MDB_val k = as_val(key), v = as_val(val);
        rc = mdb_put(txn, dbi, &k, &v, flags);
      };
      auto del_prefix = [&](unsigned dbi, const std::string& prefix) {
        MDB_cursor* cur;
        if (rc != 0 || (rc = mdb_cursor_open(txn, dbi, &cur)) != 0)
          return;
        MDB_val k = as_val(prefix), v;
        int r = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        while (r == 0 && k.mv_size >= prefix.size()
               && std::memcmp(k.mv_data, prefix.data(), prefix.size()) == 0) {
          if ((rc = mdb_cursor_del(cur, 0)) != 0)
            break;
          r = mdb_cursor_get(cur, &k, &v, MDB_GET_CURRENT);
          if (r != 0)
            break;
        }
        mdb_cursor_close(cur);
      };
      // Deletes `key` from `dbi`; a key that is not there is no error.
      auto del = [&](unsigned dbi, const std::string& key) {
        if (rc != 0)
          return;
        MDB_val k = as_val(key);
        if (int r = mdb_del(txn, dbi, &k, nullptr); r != 0 && r != MDB_NOTFOUND)
          rc = r;
      };
      static const std::string empty;
      // One counter per store, in the same transaction: seqs are strictly
      // increasing across every process that writes this home.
      uint64_t seq = read_seq(txn, meta_);
      uint64_t first_seq = seq;
      generated.clear();
      // Executions whose pending stop requests this commit may answer.
      std::unordered_set<std::string> settle;
      // Most commits find no request pending: then ended executions need
      // not be gathered (a stop snapshot ends thousands).
      MDB_stat pending_stat;
      bool any_pending = mdb_stat(txn, pending_, &pending_stat) == 0
                         && pending_stat.ms_entries > 0;
      // Deleted executions of another root, by root: id → the last seq
      // assigned when it was deleted. Their events are in that root's log
      // (SPEC §4.9: nothing of them remains); they are removed after the
      // whole batch, with one scan of each such root's log per commit,
      // however many nested batches delete executions of that tree.
      std::map<std::string, std::map<std::string, uint64_t>> deleted_in_tree;
      auto del_events_of = [&](const std::string& root,
                               const std::map<std::string, uint64_t>& ids) {
        uint64_t last = 0;
        for (auto& id : ids)
          last = std::max(last, id.second);
        MDB_cursor* cur;
        if (rc != 0 || (rc = mdb_cursor_open(txn, events_, &cur)) != 0)
          return;
        auto prefix = root + '\0';
        MDB_val k = as_val(prefix), v;
        int r = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        while (r == 0 && k.mv_size == prefix.size() + 8
               && std::memcmp(k.mv_data, prefix.data(), prefix.size()) == 0) {
          auto event_seq = seq_of(k);
          if (event_seq > last)
            break; // written after every deletion: kept
          auto ex = decode_event_execution(as_view(v));
          auto i = ex ? ids.find(*ex) : ids.end();
          if (i != ids.end() && event_seq <= i->second) {
            if ((rc = mdb_cursor_del(cur, 0)) != 0)
              break;
            r = mdb_cursor_get(cur, &k, &v, MDB_GET_CURRENT);
          } else {
            r = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
          }
        }
        mdb_cursor_close(cur);
      };
      // Before a batch touches an execution a stored compact snapshot
      // covers (or its target), that snapshot is materialised: the per-node
      // records the write then changes are there (see store.hpp).
      auto materialize_touched = [&](const write_batch& b) {
        if (rc != 0 || !store_subtree::any_stops(txn, d))
          return;
        std::unordered_set<std::string> seen;
        auto touch = [&](const std::string& root, const std::string& id,
                         const std::string& parent) {
          if (rc == 0 && seen.insert(id).second)
            rc = store_subtree::materialize_touching(txn, d, root, id, parent);
        };
        for (auto& id : b.deleted_executions)
          if (auto rec = load_execution(txn, executions_, id))
            touch(rec->root_id, id, rec->parent_id);
        for (auto& x : b.executions)
          touch(x.root_id, x.id, x.parent_id);
        for (auto& x : b.steps)
          if (seen.count(x.execution_id) == 0)
            if (auto rec = load_execution(txn, executions_, x.execution_id))
              touch(rec->root_id, rec->id, rec->parent_id);
      };
      // One execution and everything keyed by it (see write_batch).
      auto delete_execution = [&](const std::string& id) {
        MDB_val k = as_val(id);
        execution_record rec;
        MDB_val v;
        if (mdb_get(txn, executions_, &k, &v) == 0) {
          if (auto r = decode_execution(as_view(v)))
            rec = std::move(*r);
          del(executions_, id);
          if (!rec.parent_id.empty())
            del(children_, pair_key(rec.parent_id, id));
          if (!rec.agent.empty())
            del(agent_runs_, agent_prefix(rec.owner, rec.agent) + id);
        }
        del(graphs_, id);
        del(live_, id);
        if (rec.root_id.empty() || rec.root_id == id)
          del_prefix(d.subtrees, id + '\0');
        del_prefix(steps_, id + '\0');
        del_prefix(events_, id + '\0');
        if (!rec.root_id.empty() && rec.root_id != id)
          deleted_in_tree[rec.root_id][id] = seq;
        del(counters_, id);
      };
      // `root` and every execution below it (the children index holds every
      // child ever created), when `root` is a root whose stored status is
      // terminal and none of them is live; else nothing.
      auto settled_tree = [&](const std::string& root) {
        auto rec = load_execution(txn, executions_, root);
        if (!rec || rec->root_id != root || !is_terminal(rec->status))
          return std::vector<std::string>{};
        auto ids = walk_subtree(txn, children_, root);
        for (auto& id : ids) {
          MDB_val k = as_val(id), v;
          if (mdb_get(txn, live_, &k, &v) == 0)
            return std::vector<std::string>{};
        }
        return ids;
      };
      std::string kbuf, vbuf;
      std::function<void(write_batch&)> apply = [&](write_batch& b) {
        materialize_touched(b);
        for (auto& id : b.deleted_executions)
          delete_execution(id);
        for (auto& root : b.deleted_trees)
          for (auto& id : settled_tree(root))
            delete_execution(id);
        for (auto& x : b.executions) {
          if (any_pending && is_terminal(x.status))
            settle.insert(x.id);
          put(executions_, x.id, encode(x));
          if (rc == 0) {
            MDB_val lk = as_val(x.id), lv = as_val(empty);
            if (is_terminal(x.status)) {
              int r = mdb_del(txn, live_, &lk, nullptr);
              if (r != 0 && r != MDB_NOTFOUND)
                rc = r;
            } else {
              rc = mdb_put(txn, live_, &lk, &lv, 0);
            }
          }
          // The child index is written while the child lives, not again in
          // the final records (a stop snapshot of a large tree).
          if (!x.parent_id.empty() && !is_terminal(x.status))
            put(children_, pair_key(x.parent_id, x.id), empty);
          // An agent's runs that are not terminal, for its busy policy.
          if (!x.agent.empty() && rc == 0) {
            auto rk = agent_prefix(x.owner, x.agent) + x.id;
            if (is_terminal(x.status)) {
              MDB_val k = as_val(rk);
              int r = mdb_del(txn, agent_runs_, &k, nullptr);
              if (r != 0 && r != MDB_NOTFOUND)
                rc = r;
            } else {
              put(agent_runs_, rk, x.root_id);
            }
          }
        }
        for (auto& x : b.graphs)
          put(graphs_, x.first, encode(x.second));
        for (auto& x : b.encoded_graphs)
          put(graphs_, x.first, x.second);
        for (auto& x : b.stops) {
          if (rc != 0)
            break;
          // A request is stored once, however often it is delivered; the
          // store answers it (see `settle_stops`), never its writers.
          MDB_val k = as_val(x.id), v;
          if (mdb_get(txn, stops_, &k, &v) == 0)
            continue;
          stop_record r = x;
          r.handled = false;
          r.result.clear();
          r.handled_at = 0;
          put(stops_, r.id, encode(r));
          put(pending_, pair_key(r.target, r.id), empty);
          if (auto target = load_execution(txn, executions_, r.target))
            generated.push_back(stop_event(*target, r, "stop.requested", r.requested_at));
          settle.insert(r.target);
        }
        for (auto& id : b.settle_stops)
          settle.insert(id);
        for (auto& x : b.counters) {
          if (rc != 0)
            break;
          auto merged = x.second;
          MDB_val k = as_val(x.first), v;
          if (mdb_get(txn, counters_, &k, &v) == 0)
            if (auto old = decode_counters(as_view(v))) {
              merged.steps = std::max(merged.steps, old->steps);
              merged.spent = std::max(merged.spent, old->spent);
              merged.run_ms = std::max(merged.run_ms, old->run_ms);
              merged.budget = std::max(merged.budget, old->budget);
            }
          put(counters_, x.first, encode(merged));
        }
        for (auto& x : b.registered) {
          if (rc != 0)
            break;
          auto prefix = registry_prefix(x.owner, x.name);
          if (x.version <= 0)
            x.version = newest_version(txn, registry_, prefix) + 1;
          put(registry_, prefix + version_key(x.version), encode(x));
        }
        for (auto& x : b.agents)
          put(agents_, pair_key(x.owner, x.name), encode(x));
        for (auto& x : b.history) {
          if (rc != 0)
            break;
          // Entries written earlier in this transaction are seen here, so
          // several entries of one agent in one batch get consecutive seqs.
          auto prefix = agent_prefix(x.owner, x.agent);
          x.seq = newest_history_seq(txn, history_, prefix) + 1;
          put(history_, prefix + seq_key(x.seq), encode(x));
        }
        // Steps and events (most of a batch) share two buffers.
        for (auto& x : b.steps) {
          pair_key_into(kbuf, x.execution_id, x.step);
          encode_into(vbuf, x);
          put(steps_, kbuf, vbuf);
        }
        for (auto& e : b.events) {
          e.seq = ++seq;
          // The newest tree's events go at the very end of the database:
          // appending skips the search; elsewhere it is a normal insert.
          pair_key_into(kbuf, e.root_id, seq_key(e.seq));
          encode_into(vbuf, e);
          auto& key = kbuf;
          auto& val = vbuf;
          put(events_, key, val, MDB_APPEND);
          if (rc == MDB_KEYEXIST) {
            rc = 0;
            put(events_, key, val);
          }
        }
        // Compact snapshots: a reserved seq range, one compact entry at its
        // first seq (none for an empty range) and the record.
        for (auto& x : b.subtree_stops) {
          if (rc != 0)
            break;
          x.first_seq = seq + 1;
          seq += x.events;
          if (x.events > 0) {
            auto key = pair_key(x.root_id, seq_key(x.first_seq));
            auto val = encode(store_subtree::compact_entry(x));
            put(events_, key, val, MDB_APPEND);
            if (rc == MDB_KEYEXIST) {
              rc = 0;
              put(events_, key, val);
            }
          }
          put(d.subtrees, pair_key(x.root_id, x.target), encode(x));
          any_subtree_stop = true;
        }
        for (auto& n : b.nested)
          apply(n);
      };
      apply(batch);
      for (auto& [root, ids] : deleted_in_tree)
        del_events_of(root, ids);
      // A pending request whose target a compact snapshot of this commit
      // covers is answered now, like one whose target became terminal.
      if (any_subtree_stop && any_pending && rc == 0)
        scan_prefix(txn, pending_, {}, {}, [&](const MDB_val& k, const MDB_val&) {
          auto key = as_view(k);
          auto sep = key.find('\0');
          if (sep != std::string_view::npos)
            settle.emplace(key.substr(0, sep));
          return true;
        });
      if (!settle.empty() && rc == 0)
        rc = settle_stops(txn, d, stops_, pending_, settle, generated);
      for (auto& e : generated) {
        e.seq = ++seq;
        put(events_, pair_key(e.root_id, seq_key(e.seq)), encode(e));
      }
      if (seq != first_seq)
        put(meta_, seq_meta_key, seq_key(seq));
      return rc;
    },
    "commit");
  if (!err && created_subtrees != 0) {
    subtrees_ = created_subtrees;
    has_subtrees_ = true;
  }
  if (creating.owns_lock())
    creating.unlock();
  if (err)
    return err;
  if (!generated.empty()) {
    write_batch tail;
    tail.events = std::move(generated);
    batch.nested.push_back(std::move(tail));
  }
  if (on_commit_)
    on_commit_(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  return caf::none;
}

caf::expected<materialize_outcome> store::materialize(const std::string& root_id,
                                                        const std::function<bool()>& give_way) {
  if (needs_migration_)
    if (auto err = migrate())
      return err;
  auto d = subtree_dbs();
  if (!d.has_subtrees)
    return materialize_outcome::done;
  bool gave = false; // `give_way` answered true
  auto err = write_once(
    [&](MDB_txn* txn) {
      std::vector<std::string> targets;
      auto prefix = root_id + '\0';
      scan_prefix(txn, d.subtrees, prefix, prefix, [&](const MDB_val& k, const MDB_val&) {
        targets.emplace_back(static_cast<const char*>(k.mv_data) + prefix.size(),
                             k.mv_size - prefix.size());
        return true;
      });
      for (auto& t : targets) {
        int rc = store_subtree::materialize(txn, d, root_id, t, give_way);
        gave = rc == store_subtree::gave_way;
        if (rc != 0)
          return rc; // rolled back
      }
      return 0;
    },
    "materialize");
  if (gave)
    return materialize_outcome::gave_way;
  if (err)
    return err;
  {
    // The kept expansion may be of an entry just materialised: one event
    // record per execution of a large subtree, for nothing now.
    std::lock_guard<std::mutex> guard{expansion_mtx_};
    expansion_key_.clear();
    expansion_.reset();
  }
  return materialize_outcome::done;
}

} // namespace canopy
