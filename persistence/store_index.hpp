#pragma once

// The status index and the status counts of schema 3 (see store.hpp):
//   by_status  status (1 byte) kind ('r' root, 'c' child) id → "" for every
//              execution, under its stored status
//   meta       "count" \0 status (1 byte) → executions stored with that
//              status (8 bytes, big endian)
// Both are written in the transaction that writes (or deletes) the record,
// by `reindex`, from every path that changes an execution's stored status:
// the commit, the materialisation of a compact snapshot and the migration
// that builds them. Internal to the store's source files; not installed.

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

/// Moves execution `id` (a root when `root`) in the index and the counts
/// from status `from` to `to`; a null `from` is a new record, a null `to` a
/// deleted one. @returns an LMDB code.
inline int reindex(MDB_txn* txn, unsigned by_status, unsigned meta, std::string_view id,
                   bool root, const execution_status* from, const execution_status* to) {
  if (from && to && *from == *to)
    return 0;
  int rc = 0;
  if (from) {
    auto key = status_key(*from, root, id);
    MDB_val k = store_lmdb::as_val(key);
    rc = mdb_del(txn, by_status, &k, nullptr);
    if (rc == MDB_NOTFOUND)
      rc = 0;
    if (rc == 0)
      rc = add_count(txn, meta, *from, -1);
  }
  if (to && rc == 0) {
    auto key = status_key(*to, root, id);
    std::string empty;
    MDB_val k = store_lmdb::as_val(key), v = store_lmdb::as_val(empty);
    rc = mdb_put(txn, by_status, &k, &v, 0);
    if (rc == 0)
      rc = add_count(txn, meta, *to, 1);
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
