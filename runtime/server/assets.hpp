#pragma once

// Files compiled into the binary and served as they are by `canopy serve`:
// the OpenAPI document at /v1/openapi.json and the dashboard's files under
// /ui/ (runtime/web). runtime/server/embed_assets.cmake generates their table at
// build time from the source tree, so the binary needs no files at run time.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace canopy::core {

/// One embedded file.
struct asset {
  const char* path;         ///< where it is served, e.g. `/ui/app.js`
  const unsigned char* data;
  size_t size;

  std::string_view body() const {
    return {reinterpret_cast<const char*>(data), size};
  }
};

/// The table (generated).
extern const asset embedded_assets[];
extern const size_t embedded_asset_count;

/// The asset served at `path`, or null. Thread-safe.
const asset* find_asset(std::string_view path);

/// The content type of a served file by its name's extension (the one
/// table, for embedded files and `$CANOPY_WEB_DIR`'s); empty for an
/// extension that is not served.
std::string_view content_type_of(std::string_view name);

/// Reads the dashboard file `name` from the folder `dir` instead of the
/// binary (`$CANOPY_WEB_DIR`, for working on the pages without a rebuild).
/// `name` must be a plain file name (`[A-Za-z0-9._-]`, not starting with a
/// dot) with a served extension. @returns the bytes, or nothing when it is
/// not such a name or cannot be read. Thread-safe.
std::optional<std::string> read_web_file(const std::string& dir, std::string_view name);

} // namespace canopy::core
