// Listing executions (`store::list`), over the status index when the home
// has it (see store.hpp and store_index.hpp), and the status counts.

#include "persistence/store.hpp"

#include <lmdb.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "persistence/store_detail.hpp"
#include "persistence/store_index.hpp"
#include "persistence/store_lmdb.hpp"
#include "persistence/store_subtree.hpp"

namespace canopy::core {

using namespace store_lmdb;
using namespace store_detail;

namespace {

/// `execution_filter::created_after`: how much older than the bound an id's
/// time may be before the walk stops (an id's time precedes its record's
/// `created_at` by the few instructions between them).
constexpr int64_t created_after_margin_ms = 60'000;

/// One range of the status index walked newest first: its cursor stays on
/// the current entry while `ok`.
struct lane {
  MDB_cursor* cur = nullptr;
  std::string prefix;
  MDB_val k{0, nullptr};
  bool ok = false;

  lane() = default;
  lane(const lane&) = delete;
  lane& operator=(const lane&) = delete;
  ~lane() {
    if (cur)
      mdb_cursor_close(cur);
  }

  std::string_view id() const {
    return as_view(k).substr(prefix.size());
  }

  /// Keeps `ok` only while the cursor's key is in the range.
  void check(int rc) {
    ok = rc == 0 && k.mv_size > prefix.size()
         && std::memcmp(k.mv_data, prefix.data(), prefix.size()) == 0;
  }

  /// Moves to the last entry whose id sorts before `before` ("": the last).
  int seek(MDB_txn* txn, unsigned dbi, const std::string& before) {
    if (int rc = mdb_cursor_open(txn, dbi, &cur); rc != 0)
      return rc;
    std::string bound = prefix;
    if (before.empty())
      bound.back() = static_cast<char>(bound.back() + 1);
    else
      bound += before;
    MDB_val v;
    k = as_val(bound);
    int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    rc = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mdb_cursor_get(cur, &k, &v, MDB_LAST);
    check(rc);
    return rc == 0 || rc == MDB_NOTFOUND ? 0 : rc;
  }

  void prev() {
    MDB_val v;
    check(mdb_cursor_get(cur, &k, &v, MDB_PREV));
  }
};

} // namespace

// -- listing ---------------------------------------------------------------------------

namespace {

/// Whether the home in `txn` lists its interrupted roots (schema 4).
bool lists_interrupted(MDB_txn* txn, unsigned meta) {
  MDB_val k = as_val(schema_key), v;
  return mdb_get(txn, meta, &k, &v) == 0 && as_view(v) == schema_version;
}

/// Whether `rec` passes `f`'s `interrupted_only`.
bool interrupted_pass(const execution_filter& f, const execution_record& rec) {
  return !f.interrupted_only || store_index::entry_of(rec).interrupted_root;
}

} // namespace

caf::error store::list_indexed(MDB_txn* txn, const execution_filter& f,
                               std::vector<execution_record>& out) const {
  // One lane per status asked for and kind (roots; children too unless
  // roots only), merged newest first: ids are time-ordered. Interrupted
  // roots have a lane of their own once the home lists them.
  std::array<lane, 6 * 2> lanes;
  size_t n = 0;
  bool own_lane = f.interrupted_only && lists_interrupted(txn, meta_);
  if (own_lane) {
    auto& l = lanes[n++];
    l.prefix = store_index::status_prefix(execution_status::stopped,
                                          store_index::interrupted_kind);
    if (int rc = l.seek(txn, by_status_, f.before); rc != 0)
      return lmdb_error("mdb_cursor_get (status index)", rc);
  }
  for (size_t s = 0; s < 6 && !own_lane; ++s) {
    auto status = static_cast<execution_status>(s);
    if (f.status && *f.status != status)
      continue;
    for (char kind : {store_index::root_kind, store_index::child_kind}) {
      if (kind == store_index::child_kind && f.roots_only)
        continue;
      auto& l = lanes[n++];
      l.prefix = store_index::status_prefix(status, kind);
      if (int rc = l.seek(txn, by_status_, f.before); rc != 0)
        return lmdb_error("mdb_cursor_get (status index)", rc);
    }
  }
  for (;;) {
    lane* next = nullptr;
    for (size_t i = 0; i < n; ++i)
      if (auto& l = lanes[i]; l.ok && (next == nullptr || l.id() > next->id()))
        next = &l;
    if (next == nullptr)
      break;
    auto id = next->id();
    if (f.created_after != 0) {
      // Every older id is older still: past the margin, nothing qualifies.
      auto id_ms = execution_id_ms(id);
      if (id_ms >= 0 && id_ms + created_after_margin_ms < f.created_after)
        break;
    }
    MDB_val k{id.size(), const_cast<char*>(id.data())}, v;
    if (mdb_get(txn, executions_, &k, &v) == 0) {
      auto rec = decode_execution(as_view(v));
      if (!rec)
        return rec.error();
      bool keep = (!f.owner || rec->owner == *f.owner)
                  && (f.graph.empty() || rec->graph == f.graph)
                  && rec->created_at >= f.created_after && interrupted_pass(f, *rec);
      if (keep) {
        out.push_back(std::move(*rec));
        if (f.limit != 0 && out.size() >= f.limit)
          break;
      }
    }
    next->prev();
  }
  return caf::none;
}

caf::expected<std::vector<execution_record>> store::list(const execution_filter& asked) const {
  auto f = asked;
  if (f.interrupted_only) {
    f.roots_only = true;
    f.status = execution_status::stopped;
  }
  auto d = subtree_dbs();
  std::vector<execution_record> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    // The index holds stored statuses: right for roots (never covered),
    // and for children while no compact snapshot is stored.
    if (d.indexed && (f.roots_only || (f.status && !store_subtree::any_stops(txn, d))))
      return list_indexed(txn, f, out);
    // Roots are never covered (a root target is written as it is).
    std::optional<store_subtree::resolver> resolve;
    if (!f.roots_only && d.has_subtrees)
      resolve.emplace(txn, d);
    MDB_cursor* cur;
    if (int rc = mdb_cursor_open(txn, executions_, &cur); rc != 0)
      return lmdb_error("mdb_cursor_open", rc);
    MDB_val k, v;
    // Ids are time-ordered: walk backwards for newest first, from the
    // cursor when one is given.
    int rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
    if (!f.before.empty()) {
      k = as_val(f.before);
      rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
      rc = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mdb_cursor_get(cur, &k, &v, MDB_LAST);
    }
    for (; rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_PREV)) {
      if (f.created_after != 0) {
        // Every older id is older still: past the margin, nothing qualifies.
        auto id_ms = execution_id_ms(as_view(k));
        if (id_ms >= 0 && id_ms + created_after_margin_ms < f.created_after)
          break;
      }
      auto rec = decode_execution(as_view(v));
      if (!rec) {
        mdb_cursor_close(cur);
        return rec.error();
      }
      if (f.roots_only && !rec->parent_id.empty())
        continue;
      if (f.owner && rec->owner != *f.owner)
        continue;
      if (resolve)
        resolve->resolve(*rec);
      if (f.status && rec->status != *f.status)
        continue;
      if (!f.graph.empty() && rec->graph != f.graph)
        continue;
      if (rec->created_at < f.created_after || !interrupted_pass(f, *rec))
        continue;
      out.push_back(std::move(*rec));
      if (f.limit != 0 && out.size() >= f.limit)
        break;
    }
    mdb_cursor_close(cur);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}


caf::expected<std::array<uint64_t, 6>> store::status_counts() const {
  store_index::status_counts out{};
  bool indexed = indexed_ && has_by_status_;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    if (indexed) {
      if (int rc = store_index::read_counts(txn, meta_, out); rc != 0)
        return lmdb_error("mdb_get (status counts)", rc);
      return caf::none;
    }
    caf::error bad;
    scan_prefix(txn, executions_, {}, {}, [&](const MDB_val&, const MDB_val& v) {
      auto rec = decode_execution(as_view(v));
      if (!rec) {
        bad = rec.error();
        return false;
      }
      ++out[static_cast<size_t>(rec->status)];
      return true;
    });
    return bad;
  });
  if (err)
    return err;
  return out;
}

} // namespace canopy::core
