// The store's reads of registered graphs, agents, their history and runs,
// and of the store itself (usage, last seq, schema).

#include "persistence/store.hpp"

#include <lmdb.h>

#include <cstring>

#include "persistence/store_detail.hpp"
#include "persistence/store_lmdb.hpp"
#include "persistence/store_subtree.hpp"

namespace canopy::core {

using namespace store_lmdb;
using namespace store_detail;

namespace {

/// The graph name in a registry key `owner \0 name \0 version`.
std::string_view registry_name(const MDB_val& k, size_t owner_prefix) {
  auto rest = std::string_view{static_cast<const char*>(k.mv_data), k.mv_size}.substr(owner_prefix);
  return rest.substr(0, rest.find('\0'));
}

} // namespace

// -- reads ---------------------------------------------------------------------------

/// Reads a sequence log (`prefix` + 8-byte seq keys): the records with seq >
/// `after`, in seq order, at most `limit` (0: all), decoded by `decode`.
template <class T, class Decode>
caf::expected<std::vector<T>> store::read_log(unsigned dbi, const std::string& prefix,
                                              uint64_t after, size_t limit,
                                              Decode decode) const {
  std::vector<T> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    caf::error bad;
    scan_prefix(txn, dbi, prefix, prefix + seq_key(after + 1),
                [&](const MDB_val& k, const MDB_val& v) {
                  if (k.mv_size != prefix.size() + 8)
                    return true;
                  auto rec = decode(as_view(v));
                  if (!rec) {
                    bad = rec.error();
                    return false;
                  }
                  out.push_back(std::move(*rec));
                  return limit == 0 || out.size() < limit;
                });
    return bad;
  });
  if (err)
    return err;
  return out;
}

caf::expected<registered_graph> store::registered(const std::string& owner,
                                                  const std::string& name, int version) const {
  if (version <= 0) {
    int newest = 0;
    auto err = read([&](MDB_txn* txn) -> caf::error {
      newest = newest_version(txn, registry_, registry_prefix(owner, name));
      return caf::none;
    });
    if (err)
      return err;
    if (newest == 0)
      return make_error(persistence_errc::not_found, "no graph '" + name + "'");
    version = newest;
  }
  return get_record<registered_graph>(registry_,
                                      registry_prefix(owner, name) + version_key(version),
                                      "no graph '" + name + "' version "
                                        + std::to_string(version),
                                      decode_registered_graph);
}

caf::expected<std::vector<registered_graph>>
store::registered_graphs(const std::string& owner, const std::string& after,
                         size_t limit) const {
  std::vector<registered_graph> out;
  auto prefix = owner + '\0';
  // A name never holds NUL: `after`'s own keys (after \0 version) sort
  // before `after` \1, every longer or greater name at or after it.
  auto start = after.empty() ? prefix : prefix + after + '\1';
  auto err = read([&](MDB_txn* txn) -> caf::error {
    // Keys are owner \0 name \0 version (big endian): a name's newest
    // version is the last of its run of keys.
    std::string name;
    MDB_val newest{0, nullptr}; // valid until the read ends
    caf::error bad;
    auto emit = [&] {
      if (name.empty())
        return true;
      auto g = decode_registered_graph(as_view(newest));
      if (!g) {
        bad = g.error();
        return false;
      }
      out.push_back(std::move(*g));
      return limit == 0 || out.size() < limit;
    };
    bool more = true;
    scan_prefix(txn, registry_, prefix, start, [&](const MDB_val& k, const MDB_val& v) {
      auto this_name = registry_name(k, prefix.size());
      if (this_name != name) {
        if (!(more = emit()))
          return false;
        name = std::string{this_name};
      }
      newest = v;
      return true;
    });
    if (more)
      emit();
    return bad;
  });
  if (err)
    return err;
  return out;
}

caf::expected<store_usage> store::usage() const {
  store_usage out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    MDB_envinfo info;
    MDB_stat st;
    if (int rc = mdb_env_info(env_, &info); rc != 0)
      return make_error(persistence_errc::io_error, mdb_strerror(rc));
    if (int rc = mdb_env_stat(env_, &st); rc != 0)
      return make_error(persistence_errc::io_error, mdb_strerror(rc));
    // The free list is database 0: each value is a list of page numbers
    // whose first word is its length (what `mdb_stat -f` sums).
    uint64_t free_pages = 0;
    MDB_cursor* cur;
    if (int rc = mdb_cursor_open(txn, 0, &cur); rc != 0)
      return make_error(persistence_errc::io_error, mdb_strerror(rc));
    MDB_val k, v;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
      size_t n = 0;
      if (v.mv_size >= sizeof(n))
        std::memcpy(&n, v.mv_data, sizeof(n));
      free_pages += n;
    }
    mdb_cursor_close(cur);
    out.file_bytes = (static_cast<uint64_t>(info.me_last_pgno) + 1) * st.ms_psize;
    out.free_bytes = free_pages * st.ms_psize;
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

caf::expected<size_t> store::registered_count(const std::string& owner) const {
  size_t count = 0;
  auto prefix = owner + '\0';
  auto err = read([&](MDB_txn* txn) -> caf::error {
    // Keys are owner \0 name \0 version: a name's versions are adjacent.
    std::string last;
    scan_prefix(txn, registry_, prefix, prefix, [&](const MDB_val& k, const MDB_val&) {
      auto name = registry_name(k, prefix.size());
      if (count == 0 || name != last) {
        ++count;
        last = std::string{name};
      }
      return true;
    });
    return caf::none;
  });
  if (err)
    return err;
  return count;
}

caf::expected<agent_record> store::agent(const std::string& owner,
                                         const std::string& name) const {
  return get_record<agent_record>(agents_, pair_key(owner, name), "no agent '" + name + "'",
                                  decode_agent);
}

caf::expected<std::vector<agent_record>>
store::agents(const std::optional<std::string>& owner) const {
  std::vector<agent_record> out;
  auto err = read([&](MDB_txn* txn) {
    return decode_prefix(txn, agents_, owner ? *owner + '\0' : std::string{}, decode_agent,
                         out);
  });
  if (err)
    return err;
  return out;
}

caf::expected<std::vector<history_entry>> store::history(const std::string& owner,
                                                         const std::string& name,
                                                         uint64_t after, size_t limit) const {
  if (after == ~uint64_t{0})
    return std::vector<history_entry>{};
  return read_log<history_entry>(history_, agent_prefix(owner, name), after, limit,
                                 decode_history);
}

caf::expected<std::vector<std::pair<std::string, std::string>>>
store::agent_runs(const std::string& owner, const std::string& name) const {
  auto d = subtree_dbs();
  std::vector<std::pair<std::string, std::string>> out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    auto prefix = agent_prefix(owner, name);
    // Covered runs keep their entry until materialised.
    store_subtree::resolver resolve{txn, d};
    scan_prefix(txn, agent_runs_, prefix, prefix, [&](const MDB_val& k, const MDB_val& v) {
      std::string id{static_cast<const char*>(k.mv_data) + prefix.size(),
                     k.mv_size - prefix.size()};
      if (resolve.active())
        if (auto rec = load_execution(txn, executions_, id); rec && resolve.covering(*rec))
          return true;
      out.emplace_back(std::move(id), as_string(v));
      return true;
    });
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

caf::expected<tree_lease> store::lease(const std::string& root_id) const {
  tree_lease out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    out = read_lease(txn, meta_, root_id);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

caf::expected<uint64_t> store::last_seq() const {
  uint64_t seq = 0;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    seq = read_seq(txn, meta_);
    return caf::none;
  });
  if (err)
    return err;
  return seq;
}

caf::expected<std::string> store::schema() const {
  std::string out;
  auto err = read([&](MDB_txn* txn) -> caf::error {
    MDB_val k = as_val(schema_key), v;
    if (int rc = mdb_get(txn, meta_, &k, &v); rc != 0)
      return lmdb_error("reading the schema", rc);
    out = as_string(v);
    return caf::none;
  });
  if (err)
    return err;
  return out;
}

} // namespace canopy::core
