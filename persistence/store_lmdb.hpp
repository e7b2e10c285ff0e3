#pragma once

// LMDB helpers and schema constants shared by the store's source files
// (store.cpp, store_read.cpp, store_registry.cpp, store_commit.cpp,
// store_commit_txn.cpp, store_migration.cpp). Internal: not installed.

#include <lmdb.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <caf/error.hpp>

#include "persistence/error.hpp"

namespace canopy::core::store_lmdb {

/// Schema 4: binary records (records.hpp), the status index with its
/// counts and the interrupted roots (store_index.hpp). Schema 3: the same
/// without the interrupted roots; schema 2: binary records without the
/// index; schema 1: JSON text records. While a home is being migrated its
/// schema reads `migrating_schema` (1 to 2), `indexing_schema` (2 to 4, the
/// whole index) or `interrupted_schema` (3 to 4, the interrupted roots),
/// which the binaries of the releases before refuse like any other;
/// `old_indexing_schema` is the mark of the release before's index build
/// (2 to 3), built again from the start.
constexpr const char* schema_version = "4";
constexpr const char* indexed_schema = "3";
constexpr const char* binary_schema = "2";
constexpr const char* text_schema = "1";
constexpr const char* migrating_schema = "1>2";
constexpr const char* indexing_schema = "2>4";
constexpr const char* old_indexing_schema = "2>3";
constexpr const char* interrupted_schema = "3>4";

/// The `meta` key of the schema version.
inline const std::string schema_key = "schema";

inline caf::error lmdb_error(const char* what, int rc) {
  return make_error(persistence_errc::store_error, std::string{what} + ": " + mdb_strerror(rc));
}

inline MDB_val as_val(const std::string& s) {
  return MDB_val{s.size(), const_cast<char*>(s.data())};
}

inline std::string as_string(const MDB_val& v) {
  return {static_cast<const char*>(v.mv_data), v.mv_size};
}

inline std::string_view as_view(const MDB_val& v) {
  return {static_cast<const char*>(v.mv_data), v.mv_size};
}

// -- keys ----------------------------------------------------------------------------

/// A seq as an 8-byte big-endian key suffix (keys sort in seq order).
inline std::string seq_key(uint64_t seq) {
  std::string k(8, '\0');
  for (int i = 7; i >= 0; --i) {
    k[static_cast<size_t>(i)] = static_cast<char>(seq & 0xff);
    seq >>= 8;
  }
  return k;
}

inline uint64_t seq_of(const MDB_val& v) {
  uint64_t seq = 0;
  auto p = static_cast<const unsigned char*>(v.mv_data);
  for (size_t i = v.mv_size - 8; i < v.mv_size; ++i)
    seq = (seq << 8) | p[i];
  return seq;
}

/// `pair_key(a, b)` into `k`, reusing its capacity.
inline void pair_key_into(std::string& k, const std::string& a, std::string_view b) {
  k.assign(a);
  k += '\0';
  k.append(b.data(), b.size());
}

inline std::string pair_key(const std::string& a, const std::string& b) {
  std::string k;
  k.reserve(a.size() + 1 + b.size());
  k += a;
  k += '\0';
  k += b;
  return k;
}

/// `owner \0 agent \0`: the prefix of an agent's history and runs. The
/// trailing separator keeps agent "b" from matching agent "bc".
inline std::string agent_prefix(const std::string& owner, const std::string& name) {
  return owner + '\0' + name + '\0';
}

/// Calls `f(key, value)` for each entry of `dbi` whose key starts with
/// `prefix`, beginning at `start` (>= prefix), in key order, while `f`
/// returns true. An empty `start` scans from the first entry.
template <class F>
void scan_prefix(MDB_txn* txn, unsigned dbi, const std::string& prefix, const std::string& start,
                 F f) {
  MDB_cursor* cur;
  if (mdb_cursor_open(txn, dbi, &cur) != 0)
    return;
  MDB_val k = as_val(start), v;
  for (int rc = mdb_cursor_get(cur, &k, &v, start.empty() ? MDB_FIRST : MDB_SET_RANGE);
       rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    if (k.mv_size < prefix.size() || std::memcmp(k.mv_data, prefix.data(), prefix.size()) != 0)
      break;
    if (!f(k, v))
      break;
  }
  mdb_cursor_close(cur);
}

/// The seq of the last event in the log of tree `root` (keys `root \0 seq`
/// of the events database `dbi`): 0 when the log is empty. @returns an LMDB
/// code (0 on success) with the seq in `out`.
inline int last_log_seq(MDB_txn* txn, unsigned dbi, const std::string& root, uint64_t& out) {
  out = 0;
  MDB_cursor* cur;
  if (int rc = mdb_cursor_open(txn, dbi, &cur); rc != 0)
    return rc;
  auto prefix = root + '\0';
  auto past = prefix + std::string(8, '\xff');
  MDB_val k = as_val(past), v;
  int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  rc = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_PREV)
               : rc == MDB_NOTFOUND ? mdb_cursor_get(cur, &k, &v, MDB_LAST) : rc;
  if (rc == 0 && k.mv_size == prefix.size() + 8
      && std::memcmp(k.mv_data, prefix.data(), prefix.size()) == 0)
    out = seq_of(k);
  mdb_cursor_close(cur);
  return rc == MDB_NOTFOUND ? 0 : rc;
}

} // namespace canopy::core::store_lmdb
