// The store's writes: the one write transaction under the writers' lock
// (`write_once`, which grows the map on MDB_MAP_FULL and runs the attempt
// again), `commit` (its phases: store_commit_txn.hpp) and `materialize`.

#include "persistence/store.hpp"

#include <lmdb.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "persistence/store_commit_txn.hpp"
#include "persistence/store_lmdb.hpp"
#include "persistence/store_subtree.hpp"

namespace canopy::core {

using namespace store_lmdb;

namespace {

/// Calls `f` on `b`, then on each of its nested batches the same way: the
/// commit order of a batch's parts. A batch for which `f` returns false
/// (fenced) is not descended into.
template <class F>
void for_each_batch(write_batch& b, const F& f) {
  if (!f(b))
    return;
  for (auto& n : b.nested)
    for_each_batch(n, f);
}

} // namespace

// -- the write transaction -----------------------------------------------------------

caf::error store::grow() {
  std::unique_lock<std::shared_mutex> excl{resize_mtx_};
  MDB_envinfo info;
  mdb_env_info(env_, &info);
  int rc = mdb_env_set_mapsize(env_, info.me_mapsize * 2);
  if (rc != 0)
    return lmdb_error("mdb_env_set_mapsize", rc);
  return caf::none;
}

caf::error store::grow_ahead() {
  {
    std::shared_lock<std::shared_mutex> guard{resize_mtx_};
    if (env_ == nullptr)
      return unusable();
    MDB_envinfo info;
    MDB_stat st;
    mdb_env_info(env_, &info);
    mdb_env_stat(env_, &st);
    size_t used = (info.me_last_pgno + 1) * static_cast<size_t>(st.ms_psize);
    if (used <= info.me_mapsize / 4 * 3)
      return caf::none;
  }
  return grow();
}

caf::error store::write_once(const std::function<int(MDB_txn*)>& f, const char* what) {
  if (auto err = lock_writers())
    return err;
  struct unlock_at_exit {
    store* self;
    ~unlock_at_exit() { self->unlock_writers(); }
  } unlock{this};
  if (auto err = grow_ahead())
    return err;
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

// -- commit --------------------------------------------------------------------------

caf::error store::commit(write_batch& batch) {
  // A home of the previous schema is rewritten before the first write, so
  // no binary record is ever written under schema 1.
  if (needs_migration_)
    if (auto err = migrate())
      return err;
  auto began = std::chrono::steady_clock::now();
  // Events the store writes itself after the batch's own (`stop.handled`);
  // handed to the batch once committed.
  std::vector<event_record> generated;
  // The first write of this process in a home without `subtrees` creates it
  // (its handle is private to the transaction until it commits, and no other
  // transaction of this process may open a database meanwhile).
  std::unique_lock<std::mutex> creating{dbi_mtx_, std::defer_lock};
  if (!has_subtrees_)
    creating.lock();
  MDB_dbi created_subtrees = 0;
  // An attempt assigns the claims' outcomes (and the epochs acquires draw)
  // into the batch; one that fills the map is run again, from the claims
  // as they were given.
  std::vector<std::pair<uint64_t, lease_outcome>> claims;
  for_each_batch(batch, [&claims](write_batch& b) {
    claims.emplace_back(b.lease.epoch, b.lease.outcome);
    return true;
  });
  auto err = write_once(
    [&](MDB_txn* txn) {
      size_t i = 0;
      for_each_batch(batch, [&claims, &i](write_batch& b) {
        std::tie(b.lease.epoch, b.lease.outcome) = claims[i++];
        return true;
      });
      // One attempt, phase by phase (store_commit_txn.hpp).
      store_detail::commit_txn t{*this, txn, generated};
      if (int rc = t.begin(created_subtrees); rc != 0)
        return rc;
      // The batch, then each nested one (depth first), in order.
      for_each_batch(batch, [&t](write_batch& b) {
        if (!t.claim(b))
          return false;
        t.materialize_touched(b);
        t.delete_executions(b);
        t.put_records(b);
        t.put_events(b);
        return true;
      });
      t.delete_events_of_deleted();
      t.answer_stop_requests();
      t.put_generated_events();
      return t.finish();
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

// -- materialize ---------------------------------------------------------------------

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

} // namespace canopy::core
