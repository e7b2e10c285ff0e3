// Migrating a schema-1 home (JSON text records) to schema 2 (binary
// records): see the top of store.hpp.

#include "persistence/store.hpp"

#include <lmdb.h>

#include <mutex>
#include <optional>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "persistence/store_lmdb.hpp"

namespace canopy {

using namespace store_lmdb;

// -- migration ------------------------------------------------------------------------

namespace {

/// Rewrites a schema-1 text record in the binary encoding. @returns the new
/// bytes, or nothing when the text does not decode: such a record stays as
/// it is and its readers report it as they did before.
template <class Decode>
std::optional<std::string> reencode(std::string_view text, Decode decode) {
  auto rec = decode(text);
  if (!rec)
    return std::nullopt;
  return encode(*rec);
}

/// Records rewritten per migration transaction: each holds the writers' lock
/// for a bounded time (a few ms), so other writers keep their turns.
constexpr size_t migration_chunk = 2000;

} // namespace


caf::error store::migrate() {
  if (!needs_migration_)
    return caf::none;
  // 1. Mark the home as migrating (a schema-1 binary refuses it from now
  //    on), unless another process finished the migration meanwhile.
  bool done = false;
  auto err = write_once([&](MDB_txn* txn) {
    MDB_val k = as_val(schema_key), v;
    int rc = mdb_get(txn, meta_, &k, &v);
    if (rc != 0)
      return rc;
    done = as_string(v) == schema_version;
    if (done)
      return 0;
    std::string marker = migrating_schema;
    MDB_val mv = as_val(marker);
    return mdb_put(txn, meta_, &k, &mv, 0);
  }, "migrating the store");
  if (err)
    return err;
  if (done) {
    needs_migration_ = false;
    return caf::none;
  }
  // 2. Rewrite every text record, database by database, in chunks of
  //    `migration_chunk` records per transaction. Binary records (written by
  //    an earlier, interrupted run of this migration) are skipped.
  using reencoder = std::optional<std::string> (*)(std::string_view);
  const std::pair<unsigned, reencoder> dbs[] = {
    {executions_, [](std::string_view b) { return reencode(b, decode_execution); }},
    {steps_, [](std::string_view b) { return reencode(b, decode_step); }},
    {graphs_, [](std::string_view b) { return reencode(b, decode_graph); }},
    {events_, [](std::string_view b) { return reencode(b, decode_event); }},
    {stops_, [](std::string_view b) { return reencode(b, decode_stop); }},
    {counters_, [](std::string_view b) { return reencode(b, decode_counters); }},
    {registry_, [](std::string_view b) { return reencode(b, decode_registered_graph); }},
    {agents_, [](std::string_view b) { return reencode(b, decode_agent); }},
    {history_, [](std::string_view b) { return reencode(b, decode_history); }}};
  for (auto& [dbi, convert] : dbs) {
    std::string from; // the first key not visited yet ("": the start)
    bool at_end = false;
    while (!at_end) {
      std::string next;
      err = write_once([&, dbi = dbi, convert = convert](MDB_txn* txn) {
        MDB_cursor* cur;
        int rc = mdb_cursor_open(txn, dbi, &cur);
        if (rc != 0)
          return rc;
        MDB_val k = as_val(from), v;
        rc = mdb_cursor_get(cur, &k, &v, from.empty() ? MDB_FIRST : MDB_SET_RANGE);
        std::vector<std::pair<std::string, std::string>> rewritten;
        for (size_t n = 0; rc == 0 && n < migration_chunk;
             ++n, rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
          if (is_text_record(as_view(v)))
            if (auto bin = convert(as_view(v)))
              rewritten.emplace_back(as_string(k), std::move(*bin));
        at_end = rc == MDB_NOTFOUND;
        next = rc == 0 ? as_string(k) : std::string{};
        mdb_cursor_close(cur);
        if (rc != 0 && rc != MDB_NOTFOUND)
          return rc;
        for (auto& [key, val] : rewritten) {
          MDB_val kk = as_val(key), vv = as_val(val);
          if ((rc = mdb_put(txn, dbi, &kk, &vv, 0)) != 0)
            return rc;
        }
        return 0;
      }, "migrating the store");
      if (err)
        return err;
      from = std::move(next);
    }
  }
  // 3. The new schema last: a crash before this line leaves the marker, and
  //    the next writer runs the migration again from the start.
  err = write_once([&](MDB_txn* txn) {
    MDB_val k = as_val(schema_key);
    std::string version = schema_version;
    MDB_val v = as_val(version);
    return mdb_put(txn, meta_, &k, &v, 0);
  }, "migrating the store");
  if (err)
    return err;
  needs_migration_ = false;
  return caf::none;
}

} // namespace canopy
