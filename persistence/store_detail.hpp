#pragma once

// Helpers shared by the store's read and write files (store_read.cpp,
// store_registry.cpp, store_commit_txn.cpp), with `store::read` and
// `store::get_record`. Internal: not installed.

#include <lmdb.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "persistence/store.hpp"
#include "persistence/store_lmdb.hpp"

namespace canopy::core::store_detail {

using store_lmdb::as_string;
using store_lmdb::as_val;
using store_lmdb::as_view;
using store_lmdb::scan_prefix;
using store_lmdb::seq_key;
using store_lmdb::seq_of;

// -- transactions and records --------------------------------------------------------

/// A read-only transaction that aborts when it goes out of scope.
struct read_txn {
  MDB_txn* txn = nullptr;
  ~read_txn() {
    if (txn)
      mdb_txn_abort(txn);
  }
};

/// Execution `id` as stored in `txn`, or nothing.
inline std::optional<execution_record> load_execution(MDB_txn* txn, unsigned executions,
                                                      const std::string& id) {
  MDB_val k = as_val(id), v;
  if (mdb_get(txn, executions, &k, &v) != 0)
    return std::nullopt;
  auto rec = decode_execution(as_view(v));
  if (!rec)
    return std::nullopt;
  return std::move(*rec);
}

/// Decodes every record of `dbi` whose key starts with `prefix`, in key
/// order, into `out`. @returns nothing, or the first decoding error.
template <class T, class Decode>
caf::error decode_prefix(MDB_txn* txn, unsigned dbi, const std::string& prefix, Decode decode,
                         std::vector<T>& out) {
  caf::error bad;
  scan_prefix(txn, dbi, prefix, prefix, [&](const MDB_val&, const MDB_val& v) {
    auto rec = decode(as_view(v));
    if (!rec) {
      bad = rec.error();
      return false;
    }
    out.push_back(std::move(*rec));
    return true;
  });
  return bad;
}

/// Appends the children of `id` (the children index `dbi`) to `out`.
inline void append_children(MDB_txn* txn, unsigned dbi, const std::string& id,
                            std::vector<std::string>& out) {
  auto prefix = id + '\0';
  scan_prefix(txn, dbi, prefix, prefix, [&](const MDB_val& k, const MDB_val&) {
    out.emplace_back(static_cast<const char*>(k.mv_data) + prefix.size(),
                     k.mv_size - prefix.size());
    return true;
  });
}

/// `id` and every execution below it in the children index `dbi`, parents
/// before their children.
inline std::vector<std::string> walk_subtree(MDB_txn* txn, unsigned dbi, const std::string& id) {
  std::vector<std::string> ids{id};
  for (size_t i = 0; i < ids.size(); ++i)
    append_children(txn, dbi, ids[i], ids);
  return ids;
}

// -- the seq counter -----------------------------------------------------------------

inline const std::string seq_meta_key = "seq";

/// Reads the last assigned seq from `meta` (0 when none).
inline uint64_t read_seq(MDB_txn* txn, unsigned meta) {
  MDB_val k = as_val(seq_meta_key), v;
  if (mdb_get(txn, meta, &k, &v) != 0 || v.mv_size != 8)
    return 0;
  return seq_of(v);
}

// -- leases -------------------------------------------------------------------------

/// The `meta` key of the last lease epoch issued.
inline const std::string epoch_meta_key = "epoch";

/// The `meta` key of tree `root`'s lease.
inline std::string lease_key(const std::string& root) {
  std::string k = "lease";
  k += '\0';
  k += root;
  return k;
}

/// The `meta` prefix of tree `root`'s signals (`signal` \0 root \0).
inline std::string signal_prefix(const std::string& root) {
  std::string k = "signal";
  k += '\0';
  k += root;
  k += '\0';
  return k;
}

inline std::string encode_lease(const tree_lease& l) {
  return seq_key(l.epoch) + seq_key(static_cast<uint64_t>(l.pid)) + seq_key(l.start);
}

/// Decodes a stored lease; zeros for a value of another size.
inline tree_lease decode_lease(std::string_view v) {
  tree_lease l;
  if (v.size() != 24)
    return l;
  auto at = [&](size_t i) {
    uint64_t x = 0;
    for (size_t j = i; j < i + 8; ++j)
      x = (x << 8) | static_cast<unsigned char>(v[j]);
    return x;
  };
  l.epoch = at(0);
  l.pid = static_cast<int64_t>(at(8));
  l.start = at(16);
  return l;
}

/// Reads tree `root`'s lease from `meta` (zeros when none).
inline tree_lease read_lease(MDB_txn* txn, unsigned meta, const std::string& root) {
  auto key = lease_key(root);
  MDB_val k = as_val(key), v;
  if (mdb_get(txn, meta, &k, &v) != 0)
    return tree_lease{};
  return decode_lease(as_view(v));
}

// -- the registry's keys -------------------------------------------------------------

inline std::string version_key(int version) {
  std::string out(4, '\0');
  auto v = static_cast<uint32_t>(version);
  for (int i = 3; i >= 0; --i, v >>= 8)
    out[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
  return out;
}

inline std::string registry_prefix(const std::string& owner, const std::string& name) {
  return owner + '\0' + name + '\0';
}

/// The newest version stored under `prefix` (0 when none).
inline int newest_version(MDB_txn* txn, unsigned dbi, const std::string& prefix) {
  int newest = 0;
  scan_prefix(txn, dbi, prefix, prefix, [&](const MDB_val& k, const MDB_val&) {
    if (k.mv_size == prefix.size() + 4) {
      auto p = static_cast<const unsigned char*>(k.mv_data) + prefix.size();
      newest = static_cast<int>((uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16)
                                | (uint32_t{p[2]} << 8) | uint32_t{p[3]});
    }
    return true;
  });
  return newest;
}


/// The newest history seq stored under `prefix` (0 when none), found from
/// the end of the prefix's range: O(log n), whatever the history's length.
inline uint64_t newest_history_seq(MDB_txn* txn, unsigned dbi, const std::string& prefix) {
  MDB_cursor* cur;
  if (mdb_cursor_open(txn, dbi, &cur) != 0)
    return 0;
  auto past = prefix + std::string(8, '\xff');
  MDB_val k = as_val(past), v;
  int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  // The first key >= past is outside the prefix (or past itself, seq 2^64-1).
  if (rc == 0 && as_string(k) == past) {
    mdb_cursor_close(cur);
    return ~uint64_t{0};
  }
  rc = rc == 0 ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mdb_cursor_get(cur, &k, &v, MDB_LAST);
  uint64_t newest = 0;
  if (rc == 0 && k.mv_size == prefix.size() + 8
      && std::memcmp(k.mv_data, prefix.data(), prefix.size()) == 0)
    newest = seq_of(k);
  mdb_cursor_close(cur);
  return newest;
}

} // namespace canopy::core::store_detail

namespace canopy::core {

// -- store::read and store::get_record -----------------------------------------------

template <class F>
caf::error store::read(F&& f) const {
  std::shared_lock<std::shared_mutex> guard{resize_mtx_};
  if (env_ == nullptr)
    return unusable();
  store_detail::read_txn t;
  int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &t.txn);
  if (rc == MDB_MAP_RESIZED) {
    // Another process grew the map: adopt its size (needs no open txn here).
    guard.unlock();
    {
      std::unique_lock<std::shared_mutex> excl{resize_mtx_};
      mdb_env_set_mapsize(env_, 0);
    }
    guard.lock();
    rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &t.txn);
  }
  if (rc != 0)
    return store_lmdb::lmdb_error("mdb_txn_begin (read)", rc);
  return f(t.txn);
}

template <class T, class Decode>
caf::expected<T> store::get_record(unsigned dbi, const std::string& key,
                                   const std::string& missing, Decode decode) const {
  T out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    MDB_val k = store_lmdb::as_val(key), v;
    int rc = mdb_get(txn, dbi, &k, &v);
    if (rc == MDB_NOTFOUND)
      return make_error(persistence_errc::not_found, missing);
    if (rc != 0)
      return store_lmdb::lmdb_error("mdb_get", rc);
    auto rec = decode(store_lmdb::as_view(v));
    if (!rec)
      return rec.error();
    out = std::move(*rec);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

} // namespace canopy::core
