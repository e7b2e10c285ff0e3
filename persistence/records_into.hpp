#pragma once

// Encoding into a buffer the caller reuses: the store's commit encodes every
// step record and event of a batch through one buffer instead of allocating
// a string per record. The bytes are those of `encode()` (records.hpp).

#include <string>

#include "persistence/records.hpp"

namespace canopy::core {

/// Replaces the contents of `out` with `encode(x)`, reusing its capacity.
/// Threading: pure; any thread.
void encode_into(std::string& out, const step_record& x);

/// Replaces the contents of `out` with `encode(x)`, reusing its capacity.
/// Threading: pure; any thread.
void encode_into(std::string& out, const event_record& x);

} // namespace canopy::core
