// The phases of one commit attempt (store_commit_txn.hpp), in the order
// `store::commit` runs them, then the writes they share, then the stop rule.

#include "persistence/store_commit_txn.hpp"

#include <lmdb.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "persistence/duration.hpp"
#include "persistence/records_into.hpp"
#include "persistence/store_detail.hpp"
#include "persistence/store_index.hpp"
#include "persistence/store_lmdb.hpp"

namespace canopy::core::store_detail {

using namespace store_lmdb;

namespace {

/// The value of the index entries (`live`, `children`, `pending`).
const std::string empty_value;

/// The `stop.requested` / `stop.handled` event of request `r` on `target`.
event_record stop_event(const execution_record& target, const stop_record& r, int64_t time) {
  if (r.handled)
    return make_execution_event(target, event_type::stop_handled, time, target.status,
                                target.reason, {{"stop_id", r.id}});
  auto mode = r.force ? stop_mode::force : stop_mode::graceful;
  return make_event(target, event_type::stop_requested, time,
                    {{"stop_id", r.id}, {"mode", to_string(mode)}, {"who", r.who}});
}

/// The one rule that answers stop requests (runtime/docs/reference/statuses.md#stop): a
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
        req->result = target && target->status == execution_status::stopped
                        ? stop_result::stopped
                        : stop_result::no_execution;
        auto text = encode(*req);
        MDB_val nv = as_val(text);
        if ((rc = mdb_put(txn, stops, &sk, &nv, 0)) != 0)
          break;
        if (target)
          out.push_back(stop_event(*target, *req, req->handled_at));
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

// -- phases ---------------------------------------------------------------------------

int commit_txn::begin(MDB_dbi& created) {
  d_ = s_.subtree_handles();
  if (!d_.has_subtrees) {
    d_.has_subtrees = true; // created by this transaction
    if ((rc_ = mdb_dbi_open(txn_, "subtrees", MDB_CREATE, &created)) != 0)
      return rc_;
    d_.subtrees = created;
  }
  // One counter per store, in the same transaction: seqs are strictly
  // increasing across every process that writes this home.
  seq_ = read_seq(txn_, s_.meta_);
  first_seq_ = seq_;
  generated_.clear();
  // Most commits find no request pending: then ended executions need
  // not be gathered (a stop snapshot ends thousands).
  MDB_stat pending_stat;
  any_pending_ = mdb_stat(txn_, s_.pending_, &pending_stat) == 0 && pending_stat.ms_entries > 0;
  return 0;
}

bool commit_txn::claim(write_batch& b) {
  auto& c = b.lease;
  if (c.root.empty() || rc_ != 0)
    return true;
  auto known = stored_epoch_.find(c.root);
  if (known == stored_epoch_.end())
    known = stored_epoch_.emplace(c.root, read_lease(txn_, s_.meta_, c.root).epoch).first;
  auto stored_epoch = known->second;
  if (c.acquire) {
    if (stored_epoch != c.epoch) {
      c.outcome = lease_outcome::fenced;
      return false;
    }
    if (c.log_end != 0) {
      uint64_t end = 0;
      if ((rc_ = last_log_seq(txn_, s_.events_, c.root, end)) != 0)
        return false;
      if (end != c.log_end) {
        c.outcome = lease_outcome::fenced; // written since it was read
        return false;
      }
    }
    if (!epoch_read_) {
      MDB_val k = as_val(epoch_meta_key), v;
      if (mdb_get(txn_, s_.meta_, &k, &v) == 0 && v.mv_size == 8)
        epoch_ = seq_of(v);
      epoch_read_ = true;
    }
    tree_lease next = c.owner;
    next.epoch = std::max(++epoch_, stored_epoch + 1);
    epoch_ = next.epoch;
    known->second = next.epoch;
    put(s_.meta_, lease_key(c.root), encode_lease(next));
    c.epoch = next.epoch;
    c.outcome = lease_outcome::acquired;
    acquired_[c.root] = next.epoch;
    return true;
  }
  auto epoch = c.epoch;
  if (epoch == 0) {
    // "The epoch this writer acquired earlier in this transaction".
    auto i = acquired_.find(c.root);
    if (i == acquired_.end()) {
      c.outcome = lease_outcome::fenced;
      return false;
    }
    epoch = c.epoch = i->second;
  }
  if (stored_epoch != epoch) {
    c.outcome = lease_outcome::fenced;
    return false;
  }
  c.outcome = lease_outcome::held;
  return true;
}

void commit_txn::materialize_touched(const write_batch& b) {
  if (rc_ != 0 || !store_subtree::any_stops(txn_, d_))
    return;
  std::unordered_set<std::string> seen;
  auto touch = [&](const std::string& root, const std::string& id, const std::string& parent) {
    if (rc_ == 0 && seen.insert(id).second)
      rc_ = store_subtree::materialize_touching(txn_, d_, root, id, parent);
  };
  for (auto& id : b.deleted_executions)
    if (auto rec = load_execution(txn_, s_.executions_, id))
      touch(rec->root_id, id, rec->parent_id);
  for (auto& x : b.executions)
    touch(x.root_id, x.id, x.parent_id);
  for (auto& x : b.steps)
    if (seen.count(x.execution_id) == 0)
      if (auto rec = load_execution(txn_, s_.executions_, x.execution_id))
        touch(rec->root_id, rec->id, rec->parent_id);
}

void commit_txn::delete_executions(const write_batch& b) {
  for (auto& id : b.deleted_executions)
    delete_execution(id);
  for (auto& root : b.deleted_trees)
    for (auto& id : settled_tree(root))
      delete_execution(id);
}

void commit_txn::put_records(write_batch& b) {
  put_executions(b);
  for (auto& x : b.graphs)
    put(s_.graphs_, x.first, encode(x.second));
  for (auto& x : b.encoded_graphs)
    put(s_.graphs_, x.first, x.second);
  put_stop_requests(b);
  for (auto& x : b.signals)
    put(s_.meta_, signal_prefix(x.root_id) + x.id, encode(x));
  for (auto& id : b.settle_stops)
    settle_.insert(id);
  put_counters(b);
  put_registered(b);
  for (auto& x : b.agents)
    put(s_.agents_, pair_key(x.owner, x.name), encode(x));
  put_history(b);
  // Steps and events (most of a batch) share two buffers.
  for (auto& x : b.steps) {
    pair_key_into(kbuf_, x.execution_id, x.step);
    encode_into(vbuf_, x);
    put(s_.steps_, kbuf_, vbuf_);
  }
}

void commit_txn::put_events(write_batch& b) {
  for (auto& e : b.events) {
    e.seq = ++seq_;
    pair_key_into(kbuf_, e.root_id, seq_key(e.seq));
    encode_into(vbuf_, e);
    put_event(s_.events_, kbuf_, vbuf_);
  }
  // Compact snapshots: a reserved seq range, one compact entry at its
  // first seq (none for an empty range) and the record.
  for (auto& x : b.subtree_stops) {
    if (rc_ != 0)
      break;
    x.first_seq = seq_ + 1;
    seq_ += x.events;
    if (x.events > 0) {
      auto key = pair_key(x.root_id, seq_key(x.first_seq));
      auto val = encode(store_subtree::compact_entry(x));
      put_event(s_.events_, key, val);
    }
    put(d_.subtrees, pair_key(x.root_id, x.target), encode(x));
    any_subtree_stop_ = true;
  }
}

void commit_txn::delete_events_of_deleted() {
  for (auto& [root, ids] : deleted_in_tree_)
    delete_events_of(root, ids);
}

void commit_txn::answer_stop_requests() {
  // A pending request whose target a compact snapshot of this commit
  // covers is answered now, like one whose target became terminal.
  if (any_subtree_stop_ && any_pending_ && rc_ == 0)
    scan_prefix(txn_, s_.pending_, {}, {}, [&](const MDB_val& k, const MDB_val&) {
      auto key = as_view(k);
      auto sep = key.find('\0');
      if (sep != std::string_view::npos)
        settle_.emplace(key.substr(0, sep));
      return true;
    });
  if (!settle_.empty() && rc_ == 0)
    rc_ = settle_stops(txn_, d_, s_.stops_, s_.pending_, settle_, generated_);
}

void commit_txn::put_generated_events() {
  for (auto& e : generated_) {
    e.seq = ++seq_;
    put(s_.events_, pair_key(e.root_id, seq_key(e.seq)), encode(e));
  }
}

int commit_txn::finish() {
  if (seq_ != first_seq_)
    put(s_.meta_, seq_meta_key, seq_key(seq_));
  if (!acquired_.empty())
    put(s_.meta_, epoch_meta_key, seq_key(epoch_));
  return rc_;
}

// -- parts of the phases -------------------------------------------------------------

void commit_txn::put_executions(const write_batch& b) {
  for (auto& x : b.executions) {
    if (any_pending_ && is_terminal(x.status))
      settle_.insert(x.id);
    if (d_.indexed && rc_ == 0) {
      // The index follows the stored status (store_index.hpp).
      std::optional<store_index::entry> old;
      if (auto rec = load_execution(txn_, s_.executions_, x.id))
        old = store_index::entry_of(*rec);
      auto entry = store_index::entry_of(x);
      rc_ = store_index::reindex(txn_, d_.by_status, d_.meta, x.id, x.parent_id.empty(),
                                 old ? &*old : nullptr, &entry);
    }
    put(s_.executions_, x.id, encode(x));
    if (is_terminal(x.status))
      del(s_.live_, x.id);
    else
      put(s_.live_, x.id, empty_value);
    // The child index is written while the child lives, not again in
    // the final records (a stop snapshot of a large tree).
    if (!x.parent_id.empty() && !is_terminal(x.status))
      put(s_.children_, pair_key(x.parent_id, x.id), empty_value);
    // An agent's runs that are not terminal, for its busy policy.
    if (!x.agent.empty() && rc_ == 0) {
      auto rk = agent_prefix(x.owner, x.agent) + x.id;
      if (is_terminal(x.status))
        del(s_.agent_runs_, rk);
      else
        put(s_.agent_runs_, rk, x.root_id);
    }
  }
}

void commit_txn::put_stop_requests(write_batch& b) {
  // A request comes before everything it causes: its `stop.requested`
  // event heads its batch's events (the halt that the request starts is
  // written in the same batch, behind it).
  std::vector<event_record> requested;
  for (auto& x : b.stops) {
    if (rc_ != 0)
      break;
    // A request is stored once, however often it is delivered; the
    // store answers it (see `settle_stops`), never its writers.
    MDB_val k = as_val(x.id), v;
    if (mdb_get(txn_, s_.stops_, &k, &v) == 0)
      continue;
    stop_record r = x;
    r.handled = false;
    r.result = stop_result::stopping;
    r.handled_at = 0;
    put(s_.stops_, r.id, encode(r));
    put(s_.pending_, pair_key(r.target, r.id), empty_value);
    if (auto target = load_execution(txn_, s_.executions_, r.target))
      requested.push_back(stop_event(*target, r, r.requested_at));
    settle_.insert(r.target);
  }
  if (!requested.empty())
    b.events.insert(b.events.begin(), std::make_move_iterator(requested.begin()),
                    std::make_move_iterator(requested.end()));
}

void commit_txn::put_counters(const write_batch& b) {
  for (auto& x : b.counters) {
    if (rc_ != 0)
      break;
    auto merged = x.second;
    MDB_val k = as_val(x.first), v;
    if (mdb_get(txn_, s_.counters_, &k, &v) == 0)
      if (auto old = decode_counters(as_view(v))) {
        merged.steps = std::max(merged.steps, old->steps);
        merged.spent = std::max(merged.spent, old->spent);
        merged.run_ms = std::max(merged.run_ms, old->run_ms);
        merged.budget = std::max(merged.budget, old->budget);
      }
    put(s_.counters_, x.first, encode(merged));
  }
}

void commit_txn::put_registered(write_batch& b) {
  for (auto& x : b.registered) {
    if (rc_ != 0)
      break;
    auto prefix = registry_prefix(x.owner, x.name);
    if (x.version <= 0)
      x.version = newest_version(txn_, s_.registry_, prefix) + 1;
    put(s_.registry_, prefix + version_key(x.version), encode(x));
  }
}

void commit_txn::put_history(write_batch& b) {
  for (auto& x : b.history) {
    if (rc_ != 0)
      break;
    // Entries written earlier in this transaction are seen here, so
    // several entries of one agent in one batch get consecutive seqs.
    auto prefix = agent_prefix(x.owner, x.agent);
    x.seq = newest_history_seq(txn_, s_.history_, prefix) + 1;
    put(s_.history_, prefix + seq_key(x.seq), encode(x));
  }
}

void commit_txn::delete_execution(const std::string& id) {
  MDB_val k = as_val(id);
  execution_record rec;
  MDB_val v;
  if (mdb_get(txn_, s_.executions_, &k, &v) == 0) {
    bool decoded = false;
    if (auto r = decode_execution(as_view(v))) {
      rec = std::move(*r);
      decoded = true;
    }
    if (decoded && d_.indexed && rc_ == 0) {
      auto entry = store_index::entry_of(rec);
      rc_ = store_index::reindex(txn_, d_.by_status, d_.meta, id, rec.parent_id.empty(), &entry,
                                 nullptr);
    }
    del(s_.executions_, id);
    if (!rec.parent_id.empty())
      del(s_.children_, pair_key(rec.parent_id, id));
    if (!rec.agent.empty())
      del(s_.agent_runs_, agent_prefix(rec.owner, rec.agent) + id);
  }
  del(s_.graphs_, id);
  del(s_.live_, id);
  if (rec.root_id.empty() || rec.root_id == id) {
    del_prefix(d_.subtrees, id + '\0');
    del(s_.meta_, lease_key(id));
    del_prefix(s_.meta_, signal_prefix(id));
    stored_epoch_.erase(id);
  }
  del_prefix(s_.steps_, id + '\0');
  // Its log goes, and with it the stop requests its events name.
  del_prefix(s_.events_, id + '\0', [&](std::string_view event) { delete_stop_of(event); });
  // Its events in another root's log go after the whole batch, with one
  // scan of that log per commit (`delete_events_of_deleted`).
  if (!rec.root_id.empty() && rec.root_id != id)
    deleted_in_tree_[rec.root_id][id] = seq_;
  del(s_.counters_, id);
}

std::vector<std::string> commit_txn::settled_tree(const std::string& root) {
  auto rec = load_execution(txn_, s_.executions_, root);
  if (!rec || rec->root_id != root || !is_terminal(rec->status))
    return std::vector<std::string>{};
  auto ids = walk_subtree(txn_, s_.children_, root);
  for (auto& id : ids) {
    MDB_val k = as_val(id), v;
    if (mdb_get(txn_, s_.live_, &k, &v) == 0)
      return std::vector<std::string>{};
  }
  return ids;
}

void commit_txn::delete_events_of(const std::string& root,
                                  const std::map<std::string, uint64_t>& ids) {
  uint64_t last = 0;
  for (auto& id : ids)
    last = std::max(last, id.second);
  MDB_cursor* cur;
  if (rc_ != 0 || (rc_ = mdb_cursor_open(txn_, s_.events_, &cur)) != 0)
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
      delete_stop_of(as_view(v));
      if ((rc_ = mdb_cursor_del(cur, 0)) != 0)
        break;
      r = mdb_cursor_get(cur, &k, &v, MDB_GET_CURRENT);
    } else {
      r = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
  }
  mdb_cursor_close(cur);
}

void commit_txn::delete_stop_of(std::string_view event) {
  // Only a `stop.requested` event names a request of its own (its
  // `stop.handled` names the same one): a substring test spares decoding
  // every other event of the tree.
  std::string_view requested = to_string(event_type::stop_requested);
  if (rc_ != 0 || event.find(requested) == std::string_view::npos)
    return;
  auto e = decode_event(event);
  if (!e || e->type != event_type::stop_requested || !e->data.is_object())
    return;
  auto id = e->data.find("stop_id");
  if (id == e->data.end() || !id->is_string())
    return;
  auto stop_id = id->get<std::string>();
  for (auto [dbi, key] : {std::pair<unsigned, std::string>{s_.stops_, stop_id},
                          {s_.pending_, pair_key(e->execution_id, stop_id)}}) {
    MDB_val k = as_val(key);
    int r = mdb_del(txn_, dbi, &k, nullptr);
    if (r != 0 && r != MDB_NOTFOUND) {
      rc_ = r;
      return;
    }
  }
}

// -- writes that keep the first failure ----------------------------------------------

void commit_txn::put(unsigned dbi, const std::string& key, const std::string& val,
                     unsigned flags) {
  if (rc_ != 0)
    return;
  MDB_val k = as_val(key), v = as_val(val);
  rc_ = mdb_put(txn_, dbi, &k, &v, flags);
}

void commit_txn::put_event(unsigned dbi, const std::string& key, const std::string& val) {
  if (rc_ != 0)
    return; // (an earlier MDB_KEYEXIST must not be taken for the append's)
  put(dbi, key, val, MDB_APPEND);
  if (rc_ == MDB_KEYEXIST) { // not after the last key: an ordinary put
    rc_ = 0;
    put(dbi, key, val);
  }
}

void commit_txn::del(unsigned dbi, const std::string& key) {
  if (rc_ != 0)
    return;
  MDB_val k = as_val(key);
  if (int r = mdb_del(txn_, dbi, &k, nullptr); r != 0 && r != MDB_NOTFOUND)
    rc_ = r;
}

void commit_txn::del_prefix(unsigned dbi, const std::string& prefix,
                            const std::function<void(std::string_view)>& each) {
  MDB_cursor* cur;
  if (rc_ != 0 || (rc_ = mdb_cursor_open(txn_, dbi, &cur)) != 0)
    return;
  MDB_val k = as_val(prefix), v;
  int r = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  while (r == 0 && k.mv_size >= prefix.size()
         && std::memcmp(k.mv_data, prefix.data(), prefix.size()) == 0) {
    if (each)
      each(as_view(v));
    if (rc_ != 0 || (rc_ = mdb_cursor_del(cur, 0)) != 0)
      break;
    r = mdb_cursor_get(cur, &k, &v, MDB_GET_CURRENT);
    if (r != 0)
      break;
  }
  mdb_cursor_close(cur);
}

} // namespace canopy::core::store_detail
