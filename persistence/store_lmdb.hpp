#pragma once

// LMDB helpers and schema constants shared by the store's source files
// (store.cpp, store_migration.cpp). Internal: not installed.

#include <lmdb.h>

#include <string>
#include <string_view>

#include <caf/error.hpp>

#include "persistence/error.hpp"

namespace canopy::store_lmdb {

/// Schema 2: binary records (records.hpp). Schema 1: JSON text records (the
/// release before). While a schema-1 home is being migrated its schema reads
/// `migrating_schema`, which a schema-1 binary refuses like any other.
constexpr const char* schema_version = "2";
constexpr const char* text_schema = "1";
constexpr const char* migrating_schema = "1>2";

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

} // namespace canopy::store_lmdb
