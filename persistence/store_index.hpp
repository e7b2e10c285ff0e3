#pragma once

// The status index and the status counts (see store.hpp):
//   by_status  status (1 byte) kind ('r' root, 'c' child) id → "" for every
//              execution, under its stored status; and (schema 4) status
//              `stopped` kind 'i' id → "" for every root stored `stopped`
//              with reason `interrupted` (the roots a node start resumes)
//   meta       "count" \0 status (1 byte) → executions stored with that
//              status (8 bytes, big endian)
// All are written in the transaction that writes (or deletes) the record,
// by `reindex`, from every path that changes an execution's stored status:
// the commit, the materialisation of a compact snapshot and the migrations
// that build them. Internal to the store's source files; not installed.

#include <lmdb.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "persistence/records.hpp"
#include "persistence/store_lmdb.hpp"

namespace canopy::core::store_index {

/// The kind byte of a root's and of a child's index entry.
constexpr char root_kind = 'r';
constexpr char child_kind = 'c';

/// The kind byte of an interrupted root's second entry (under `stopped`).
constexpr char interrupted_kind = 'i';

/// What the index holds of one stored record.
struct entry {
  execution_status status = execution_status::queued;
  bool interrupted_root = false; ///< a root, `stopped` with reason `interrupted`
};

/// The index entry of record `x`.
inline entry entry_of(const execution_record& x) {
  return {x.status, x.parent_id.empty() && x.status == execution_status::stopped
                      && x.reason == step_reason::interrupted};
}

/// Executions per status, indexed by `execution_status`.
using status_counts = std::array<uint64_t, 6>;

/// The status byte of an index key.
inline char status_byte(execution_status s) {
  return static_cast<char>('0' + static_cast<int>(s));
}

/// The index prefix of executions of status `s` and kind `kind`.
inline std::string status_prefix(execution_status s, char kind) {
  return std::string{status_byte(s)} + kind;
}

/// The index key of execution `id` (a root when `root`) with status `s`.
inline std::string status_key(execution_status s, bool root, std::string_view id) {
  auto k = status_prefix(s, root ? root_kind : child_kind);
  k.append(id.data(), id.size());
  return k;
}

/// The `meta` key of the count of status `s`.
inline std::string count_key(execution_status s) {
  std::string k = "count";
  k += '\0';
  k += status_byte(s);
  return k;
}

/// Adds `delta` to the stored count of `s` (never below 0).
/// @returns an LMDB code.
inline int add_count(MDB_txn* txn, unsigned meta, execution_status s, int64_t delta) {
  if (delta == 0)
    return 0;
  auto key = count_key(s);
  MDB_val k = store_lmdb::as_val(key), v;
  int64_t n = 0;
  if (mdb_get(txn, meta, &k, &v) == 0 && v.mv_size == 8)
    n = static_cast<int64_t>(store_lmdb::seq_of(v));
  n = n + delta < 0 ? 0 : n + delta;
  auto val = store_lmdb::seq_key(static_cast<uint64_t>(n));
  v = store_lmdb::as_val(val);
  return mdb_put(txn, meta, &k, &v, 0);
}

/// The index key of interrupted root `id`.
inline std::string interrupted_key(std::string_view id) {
  auto k = status_prefix(execution_status::stopped, interrupted_kind);
  k.append(id.data(), id.size());
  return k;
}

/// Adds (`on`) or removes the interrupted-root entry of `id`.
/// @returns an LMDB code.
inline int mark_interrupted(MDB_txn* txn, unsigned by_status, std::string_view id, bool on) {
  auto key = interrupted_key(id);
  MDB_val k = store_lmdb::as_val(key);
  if (!on) {
    int rc = mdb_del(txn, by_status, &k, nullptr);
    return rc == MDB_NOTFOUND ? 0 : rc;
  }
  std::string empty;
  MDB_val v = store_lmdb::as_val(empty);
  return mdb_put(txn, by_status, &k, &v, 0);
}

/// Moves execution `id` (a root when `root`) in the index and the counts
/// from entry `from` to `to`; a null `from` is a new record, a null `to` a
/// deleted one. @returns an LMDB code.
inline int reindex(MDB_txn* txn, unsigned by_status, unsigned meta, std::string_view id,
                   bool root, const entry* from, const entry* to) {
  bool was = from && from->interrupted_root, is = to && to->interrupted_root;
  if (was != is)
    if (int rc = mark_interrupted(txn, by_status, id, is); rc != 0)
      return rc;
  if (from && to && from->status == to->status)
    return 0;
  int rc = 0;
  if (from) {
    auto key = status_key(from->status, root, id);
    MDB_val k = store_lmdb::as_val(key);
    rc = mdb_del(txn, by_status, &k, nullptr);
    if (rc == MDB_NOTFOUND)
      rc = 0;
    if (rc == 0)
      rc = add_count(txn, meta, from->status, -1);
  }
  if (to && rc == 0) {
    auto key = status_key(to->status, root, id);
    std::string empty;
    MDB_val k = store_lmdb::as_val(key), v = store_lmdb::as_val(empty);
    rc = mdb_put(txn, by_status, &k, &v, 0);
    if (rc == 0)
      rc = add_count(txn, meta, to->status, 1);
  }
  return rc;
}

/// The stored counts. @returns an LMDB code.
inline int read_counts(MDB_txn* txn, unsigned meta, status_counts& out) {
  out.fill(0);
  for (size_t i = 0; i < out.size(); ++i) {
    auto key = count_key(static_cast<execution_status>(i));
    MDB_val k = store_lmdb::as_val(key), v;
    int rc = mdb_get(txn, meta, &k, &v);
    if (rc == 0 && v.mv_size == 8)
      out[i] = store_lmdb::seq_of(v);
    else if (rc != 0 && rc != MDB_NOTFOUND)
      return rc;
  }
  return 0;
}

} // namespace canopy::core::store_index
