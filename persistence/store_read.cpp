// The store's reads of executions, steps, events, stop requests, live
// executions and counters, each in one read transaction.

#include "persistence/store.hpp"

#include <lmdb.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "persistence/store_detail.hpp"
#include "persistence/store_lmdb.hpp"
#include "persistence/store_subtree.hpp"

namespace canopy::core {

using namespace store_lmdb;
using namespace store_detail;


// -- reads ---------------------------------------------------------------------------

store_subtree::dbs store::subtree_dbs() const {
  if (!has_subtrees_) {
    // Another process may have created it since: look once more. Never
    // waits: while this process's writer is creating it, nothing of it is
    // committed yet.
    std::unique_lock<std::mutex> lock{dbi_mtx_, std::try_to_lock};
    if (lock.owns_lock() && !has_subtrees_) {
      std::shared_lock<std::shared_mutex> guard{resize_mtx_};
      MDB_txn* txn = nullptr;
      if (env_ != nullptr && mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn) == 0) {
        MDB_dbi dbi;
        if (mdb_dbi_open(txn, "subtrees", 0, &dbi) != 0) {
          mdb_txn_abort(txn);
        } else if (mdb_txn_commit(txn) == 0) {
          // Committing (even a read-only transaction) keeps the handle.
          subtrees_ = dbi;
          has_subtrees_ = true;
        }
      }
    }
  }
  return subtree_handles();
}

store_subtree::dbs store::subtree_handles() const {
  store_subtree::dbs d;
  d.executions = executions_;
  d.steps = steps_;
  d.children = children_;
  d.events = events_;
  d.live = live_;
  d.agent_runs = agent_runs_;
  d.has_subtrees = has_subtrees_;
  d.meta = meta_;
  d.indexed = indexed_ && has_by_status_;
  if (d.indexed)
    d.by_status = by_status_;
  if (d.has_subtrees)
    d.subtrees = subtrees_;
  return d;
}

caf::expected<uint64_t> store::tree_last_seq(const std::string& root_id) const {
  uint64_t out = 0;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    if (int rc = store_lmdb::last_log_seq(txn, events_, root_id, out); rc != 0)
      return store_lmdb::lmdb_error("last_log_seq", rc);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

size_t store::map_size() const {
  std::shared_lock<std::shared_mutex> guard{resize_mtx_};
  if (env_ == nullptr)
    return 0;
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  return info.me_mapsize;
}

caf::expected<execution_record> store::execution(const std::string& id) const {
  auto d = subtree_dbs();
  execution_record out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    MDB_val k = as_val(id), v;
    int rc = mdb_get(txn, executions_, &k, &v);
    if (rc == MDB_NOTFOUND)
      return make_error(persistence_errc::not_found, "no execution '" + id + "'");
    if (rc != 0)
      return lmdb_error("mdb_get", rc);
    auto rec = decode_execution(as_view(v));
    if (!rec)
      return rec.error();
    out = std::move(*rec);
    // A terminal record is returned as stored without another read.
    if (!is_terminal(out.status) && d.has_subtrees)
      store_subtree::resolver{txn, d}.resolve(out);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

caf::expected<std::vector<step_record>> store::steps(const std::string& id) const {
  auto d = subtree_dbs();
  std::vector<step_record> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    auto bad = decode_prefix(txn, steps_, id + '\0', decode_step, out);
    if (!bad && d.has_subtrees)
      store_subtree::resolver{txn, d}.resolve_steps(id, out);
    return bad;
  });
  if (err)
    return err;
  return out;
}

caf::expected<std::vector<std::string>> store::children(const std::string& id) const {
  std::vector<std::string> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    append_children(txn, children_, id, out);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

caf::expected<std::set<std::string>> store::subtree_ids(const std::string& id) const {
  std::vector<std::string> ids;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    ids = walk_subtree(txn, children_, id);
    return caf::none;
  });
  if (err)
    return err;
  return std::set<std::string>(ids.begin(), ids.end());
}

caf::expected<stored_graph> store::graph(const std::string& id) const {
  return get_record<stored_graph>(graphs_, id, "no graph for execution '" + id + "'",
                                  decode_graph);
}

caf::expected<std::vector<event_record>>
store::tree_events(const std::string& root_id, uint64_t after, size_t limit) const {
  std::vector<event_record> out;
  if (after == ~uint64_t{0})
    return out;
  auto d = subtree_dbs();
  auto err = read([&](MDB_txn* txn) -> caf::error {
    auto prefix = root_id + '\0';
    auto full = [&] { return limit != 0 && out.size() >= limit; };
    // Takes one stored entry, expanding a compact one; false once full.
    auto take = [&](event_record&& e) {
      if (auto s = store_subtree::from_compact_entry(e)) {
        auto evs = expansion_of(txn, d, *s);
        auto i = std::upper_bound(evs->begin(), evs->end(), after,
                                  [](uint64_t a, const event_record& x) { return a < x.seq; });
        for (; i != evs->end(); ++i) {
          if (full())
            return false;
          out.push_back(*i);
        }
      } else if (e.seq > after) {
        out.push_back(std::move(e));
      }
      return !full();
    };
    auto start = prefix + seq_key(after + 1);
    caf::error bad;
    // A compact entry before `after + 1` may stand for events after it: its
    // range holds no other entry, so only the one right before can.
    if (after > 0) {
      MDB_cursor* cur;
      if (int rc = mdb_cursor_open(txn, events_, &cur); rc != 0)
        return lmdb_error("mdb_cursor_open", rc);
      MDB_val k = as_val(start), v;
      int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
      rc = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mdb_cursor_get(cur, &k, &v, MDB_LAST);
      if (rc == 0 && k.mv_size == prefix.size() + 8
          && std::memcmp(k.mv_data, prefix.data(), prefix.size()) == 0) {
        if (auto e = decode_event(as_view(v)); e && e->type == store_subtree::compact_type)
          if (auto s = store_subtree::from_compact_entry(*e); s && s->first_seq + s->events > after + 1)
            take(std::move(*e));
      }
      mdb_cursor_close(cur);
    }
    if (full())
      return caf::none;
    scan_prefix(txn, events_, prefix, start, [&](const MDB_val& k, const MDB_val& v) {
      if (k.mv_size != prefix.size() + 8)
        return true;
      auto e = decode_event(as_view(v));
      if (!e) {
        bad = e.error();
        return false;
      }
      return take(std::move(*e));
    });
    return bad;
  });
  if (err)
    return err;
  return out;
}

std::shared_ptr<const std::vector<event_record>>
store::expansion_of(MDB_txn* txn, const store_subtree::dbs& d, const subtree_stop& s) const {
  auto key = pair_key(s.root_id, seq_key(s.first_seq));
  {
    std::lock_guard<std::mutex> guard{expansion_mtx_};
    if (expansion_ && expansion_key_ == key)
      return expansion_;
  }
  auto evs = std::make_shared<const std::vector<event_record>>(
    store_subtree::expand(txn, d, s, false).events);
  std::lock_guard<std::mutex> guard{expansion_mtx_};
  expansion_key_ = std::move(key);
  expansion_ = evs;
  return evs;
}

caf::expected<std::vector<event_record>> store::subtree_events(const subtree_stop& s) const {
  if (s.events == 0 || s.first_seq == 0)
    return std::vector<event_record>{};
  auto evs = tree_events(s.root_id, s.first_seq - 1, s.events);
  if (!evs)
    return evs;
  auto end = s.first_seq + s.events;
  evs->erase(std::remove_if(evs->begin(), evs->end(),
                            [&](const event_record& e) { return e.seq >= end; }),
             evs->end());
  return evs;
}

caf::expected<std::vector<subtree_stop>> store::subtree_stops(const std::string& root_id) const {
  std::vector<subtree_stop> out;
  auto d = subtree_dbs();
  if (!d.has_subtrees)
    return out;
  auto err = read([&](MDB_txn* txn) {
    return decode_prefix(txn, d.subtrees, root_id + '\0', decode_subtree_stop, out);
  });
  if (err)
    return err;
  return out;
}

caf::expected<stop_record> store::stop(const std::string& id) const {
  return get_record<stop_record>(stops_, id, "no stop request '" + id + "'", decode_stop);
}

caf::expected<std::vector<stop_record>> store::pending_stops() const {
  std::vector<stop_record> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    caf::error bad;
    scan_prefix(txn, pending_, {}, {}, [&](const MDB_val& k, const MDB_val&) {
      auto key = as_string(k);
      auto sep = key.find('\0');
      if (sep == std::string::npos)
        return true;
      auto sid = key.substr(sep + 1);
      MDB_val sk = as_val(sid), sv;
      if (mdb_get(txn, stops_, &sk, &sv) != 0)
        return true;
      auto rec = decode_stop(as_view(sv));
      if (!rec) {
        bad = rec.error();
        return false;
      }
      out.push_back(std::move(*rec));
      return true;
    });
    return bad;
  });
  if (err)
    return err;
  std::sort(out.begin(), out.end(),
            [](const stop_record& a, const stop_record& b) { return a.id < b.id; });
  return out;
}

caf::expected<std::vector<signal_record>> store::signals(const std::string& root_id) const {
  std::vector<signal_record> out;
  auto prefix = signal_prefix(root_id);
  auto err = read([&](MDB_txn* txn) -> caf::error {
    return decode_prefix(txn, meta_, prefix, decode_signal, out);
  });
  if (err)
    return err;
  return out;
}

caf::expected<tree_counters> store::counters(const std::string& id) const {
  auto x = get_record<tree_counters>(counters_, id, "", decode_counters);
  if (!x && x.error().category() == persistence_category
      && x.error().code() == static_cast<uint8_t>(persistence_errc::not_found))
    return tree_counters{};
  return x;
}

caf::expected<std::vector<execution_record>> store::live() const {
  auto d = subtree_dbs();
  std::vector<execution_record> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    caf::error bad;
    // Covered executions keep their `live` entry until materialised.
    store_subtree::resolver resolve{txn, d};
    scan_prefix(txn, live_, {}, {}, [&](const MDB_val& k, const MDB_val&) {
      MDB_val kk = k, ev;
      if (mdb_get(txn, executions_, &kk, &ev) != 0)
        return true;
      auto rec = decode_execution(as_view(ev));
      if (!rec) {
        bad = rec.error();
        return false;
      }
      if (!resolve.resolve(*rec))
        out.push_back(std::move(*rec));
      return true;
    });
    return bad;
  });
  if (err)
    return err;
  return out;
}

} // namespace canopy::core
