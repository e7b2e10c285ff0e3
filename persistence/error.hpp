#pragma once

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/error.hpp>

namespace canopy::core {

/// Errors of the persistence layer (graph documents and the LMDB store).
enum class persistence_errc : uint8_t {
  /// A graph document failed validation; the context holds the messages.
  invalid_graph = 1,
  /// A file could not be read.
  io_error,
  /// LMDB reported an error; the context holds `mdb_strerror`.
  store_error,
  /// A record does not exist.
  not_found,
  /// A stored record could not be decoded.
  corrupt_record,
  /// A reference could not be resolved while a step was prepared.
  bad_reference,
  /// Another process holds the store's write lock for too long.
  store_busy,
  /// A write's lease claim failed: another process took its tree over
  /// (store.hpp, "Leases and fencing"); nothing of the write was stored.
  fenced,
};

/// The error category atom of `persistence_errc`.
constexpr caf::atom_value persistence_category = caf::atom("persist");

/// Returns a `caf::error` with code `x` and a human-readable message.
caf::error make_error(persistence_errc x, std::string message);

/// Returns the name of `x`, e.g. `"invalid_graph"`.
const char* to_string(persistence_errc x);

/// True when `err` is `persistence_errc` `x` (whatever its message).
bool is(const caf::error& err, persistence_errc x);

/// Returns the human-readable message stored with `err`, or `to_string(err)`.
std::string message_of(const caf::error& err);

} // namespace canopy::core
