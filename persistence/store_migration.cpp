// Migrating a home of an earlier schema to schema 4: schema-1 JSON text
// records are rewritten in the binary encoding (schema 2), then the status
// index, its counts and the interrupted roots are built; a schema-3 home,
// which has the index, gets its interrupted roots listed. See the top of
// store.hpp.

#include "persistence/store.hpp"

#include <lmdb.h>

#include <mutex>
#include <optional>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "persistence/store_index.hpp"
#include "persistence/store_lmdb.hpp"

namespace canopy::core {

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

/// Visits up to `migration_chunk` records of `dbi` in key order, from key
/// `from` on ("": the first), calling `visit(key, value)` for each; `next`
/// becomes the first key not visited ("": none left).
/// @returns 0, or the LMDB code of a failed read.
template <class Visit>
int visit_chunk(MDB_txn* txn, MDB_dbi dbi, const std::string& from, std::string& next,
                Visit&& visit) {
  MDB_cursor* cur;
  int rc = mdb_cursor_open(txn, dbi, &cur);
  if (rc != 0)
    return rc;
  MDB_val k = as_val(from), v;
  rc = mdb_cursor_get(cur, &k, &v, from.empty() ? MDB_FIRST : MDB_SET_RANGE);
  for (size_t n = 0; rc == 0 && n < migration_chunk;
       ++n, rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
    visit(as_view(k), as_view(v));
  next = rc == 0 ? as_string(k) : std::string{};
  mdb_cursor_close(cur);
  return rc == MDB_NOTFOUND ? 0 : rc;
}

/// The `meta` key of the first execution id the index build has not
/// visited yet (absent: from the first).
const std::string index_from_key = "index_from";

/// The `meta` key of the first stopped root the listing of interrupted
/// roots has not visited yet (absent: from the first).
const std::string interrupted_from_key = "interrupted_from";

/// Empties the status index and its counts, to build them from scratch.
/// @returns an LMDB code.
int reset_status_index(MDB_txn* txn, unsigned by_status, unsigned meta) {
  int rc = mdb_drop(txn, by_status, 0);
  for (size_t i = 0; rc == 0 && i < 6; ++i) {
    auto key = store_index::count_key(static_cast<execution_status>(i));
    MDB_val k = as_val(key);
    rc = mdb_del(txn, meta, &k, nullptr);
    rc = rc == MDB_NOTFOUND ? 0 : rc;
  }
  MDB_val k = as_val(index_from_key);
  if (rc == 0 && (rc = mdb_del(txn, meta, &k, nullptr)) == MDB_NOTFOUND)
    rc = 0;
  return rc;
}

/// Sets the schema to `to` when it reads `from`, emptying the status index
/// when `to` is `indexing_schema`. @returns an LMDB code.
int advance_schema(MDB_txn* txn, unsigned meta, unsigned by_status, const char* from,
                   const char* to) {
  MDB_val k = as_val(schema_key), v;
  int rc = mdb_get(txn, meta, &k, &v);
  if (rc != 0 || as_string(v) != from)
    return rc;
  if (std::string{to} == indexing_schema && (rc = reset_status_index(txn, by_status, meta)) != 0)
    return rc;
  std::string next = to;
  v = as_val(next);
  return mdb_put(txn, meta, &k, &v, 0);
}

} // namespace

caf::error store::open_status_index() {
  if (has_by_status_)
    return caf::none;
  // No other transaction of this process may open a database meanwhile.
  std::lock_guard<std::mutex> guard{dbi_mtx_};
  MDB_dbi dbi = 0;
  auto err = write_once(
    [&](MDB_txn* txn) { return mdb_dbi_open(txn, "by_status", MDB_CREATE, &dbi); },
    "creating the status index");
  if (err)
    return err;
  by_status_ = dbi;
  has_by_status_ = true;
  return caf::none;
}

caf::error store::build_in_chunks(const char* marker, const std::string& from_key,
                                  const char* what, const chunk_step& step) {
  for (bool done = false; !done;) {
    auto err = write_once([&](MDB_txn* txn) {
      MDB_val sk = as_val(schema_key), sv;
      int rc = mdb_get(txn, meta_, &sk, &sv);
      if (rc != 0)
        return rc;
      done = as_string(sv) != marker; // another process finished it
      if (done)
        return 0;
      std::string from, next;
      MDB_val fk = as_val(from_key), fv;
      if (mdb_get(txn, meta_, &fk, &fv) == 0)
        from = as_string(fv);
      if ((rc = step(txn, from, next)) != 0)
        return rc;
      done = next.empty();
      if (!done) {
        fv = as_val(next);
        return mdb_put(txn, meta_, &fk, &fv, 0);
      }
      // The new schema last, with the end of the build.
      if ((rc = mdb_del(txn, meta_, &fk, nullptr)) != 0 && rc != MDB_NOTFOUND)
        return rc;
      std::string version = schema_version;
      sv = as_val(version);
      return mdb_put(txn, meta_, &sk, &sv, 0);
    }, what);
    if (err)
      return err;
  }
  return caf::none;
}

caf::error store::build_status_index() {
  return build_in_chunks(indexing_schema, index_from_key, "building the status index",
                         [this](MDB_txn* txn, const std::string& from, std::string& next) {
    std::vector<std::pair<std::string, execution_record>> chunk;
    int rc = visit_chunk(txn, executions_, from, next, [&](std::string_view k, std::string_view v) {
      if (auto rec = decode_execution(v))
        chunk.emplace_back(k, std::move(*rec));
    });
    if (rc != 0)
      return rc;
    store_index::status_counts added{};
    for (auto& [id, rec] : chunk) {
      auto key = store_index::status_key(rec.status, rec.parent_id.empty(), id);
      std::string empty;
      MDB_val ik = as_val(key), iv = as_val(empty);
      if ((rc = mdb_put(txn, by_status_, &ik, &iv, 0)) != 0)
        return rc;
      if (store_index::entry_of(rec).interrupted_root
          && (rc = store_index::mark_interrupted(txn, by_status_, id, true)) != 0)
        return rc;
      ++added[static_cast<size_t>(rec.status)];
    }
    for (size_t i = 0; i < added.size(); ++i)
      if ((rc = store_index::add_count(txn, meta_, static_cast<execution_status>(i),
                                       static_cast<int64_t>(added[i])))
          != 0)
        return rc;
    return 0;
  });
}

caf::error store::build_interrupted_roots() {
  return build_in_chunks(interrupted_schema, interrupted_from_key, "listing the interrupted roots",
                         [this](MDB_txn* txn, const std::string& from, std::string& next) {
    const auto prefix = store_index::status_prefix(execution_status::stopped,
                                                   store_index::root_kind);
    MDB_cursor* cur;
    int rc = mdb_cursor_open(txn, by_status_, &cur);
    if (rc != 0)
      return rc;
    auto start = prefix + from;
    MDB_val k = as_val(start), v;
    rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    auto in_range = [&] {
      return rc == 0 && k.mv_size > prefix.size()
             && as_view(k).substr(0, prefix.size()) == prefix;
    };
    std::vector<std::string> interrupted;
    for (size_t n = 0; in_range() && n < migration_chunk;
         ++n, rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
      auto id = as_view(k).substr(prefix.size());
      MDB_val ek{id.size(), const_cast<char*>(id.data())}, ev;
      if (mdb_get(txn, executions_, &ek, &ev) != 0)
        continue;
      auto rec = decode_execution(as_view(ev));
      if (rec && store_index::entry_of(*rec).interrupted_root)
        interrupted.emplace_back(id);
    }
    next = in_range() ? std::string{as_view(k).substr(prefix.size())} : std::string{};
    mdb_cursor_close(cur);
    if (rc != 0 && rc != MDB_NOTFOUND)
      return rc;
    for (auto& id : interrupted)
      if ((rc = store_index::mark_interrupted(txn, by_status_, id, true)) != 0)
        return rc;
    return 0;
  });
}

caf::error store::migrate() {
  if (!needs_migration_)
    return caf::none;
  if (auto err = open_status_index())
    return err;
  // 1. Mark a schema-1 home as migrating (a schema-1 binary refuses it from
  //    now on), a schema-2 one (or one an older release was indexing) as
  //    being indexed, a schema-3 one as having its interrupted roots listed
  //    (the binaries of those schemas refuse them), unless another process
  //    finished the migration meanwhile.
  std::string found;
  auto err = write_once([&](MDB_txn* txn) {
    MDB_val k = as_val(schema_key), v;
    int rc = mdb_get(txn, meta_, &k, &v);
    if (rc != 0)
      return rc;
    found = as_string(v);
    if (found == text_schema)
      return advance_schema(txn, meta_, by_status_, text_schema, migrating_schema);
    if (found == binary_schema || found == old_indexing_schema)
      return advance_schema(txn, meta_, by_status_, found.c_str(), indexing_schema);
    if (found == indexed_schema)
      return advance_schema(txn, meta_, by_status_, indexed_schema, interrupted_schema);
    return 0;
  }, "migrating the store");
  if (err)
    return err;
  if (found == text_schema || found == migrating_schema)
    if ((err = rewrite_text_records()))
      return err;
  // 3. The status index, its counts and the interrupted roots; or, for a
  //    schema-3 home, the interrupted roots. The schema becomes "4" with
  //    the last transaction.
  if (found == indexed_schema || found == interrupted_schema)
    err = build_interrupted_roots();
  else if (found != schema_version)
    err = build_status_index();
  if (err)
    return err;
  indexed_ = true;
  needs_migration_ = false;
  return caf::none;
}

caf::error store::rewrite_text_records() {
  caf::error err;
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
    for (bool at_end = false; !at_end;) {
      std::string next;
      err = write_once([&, dbi = dbi, convert = convert](MDB_txn* txn) {
        std::vector<std::pair<std::string, std::string>> rewritten;
        int rc = visit_chunk(txn, dbi, from, next, [&](std::string_view k, std::string_view v) {
          if (is_text_record(v))
            if (auto bin = convert(v))
              rewritten.emplace_back(k, std::move(*bin));
        });
        if (rc != 0)
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
      at_end = next.empty();
      from = std::move(next);
    }
  }
  // The index next: a crash before this line leaves "1>2", and the next
  // writer rewrites the records again from the start (rewritten ones are
  // skipped).
  return write_once([&](MDB_txn* txn) {
    return advance_schema(txn, meta_, by_status_, migrating_schema, indexing_schema);
  }, "migrating the store");
}

} // namespace canopy::core
