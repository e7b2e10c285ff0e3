#pragma once

// Files compiled into the binary and served as they are by `canopy serve`:
// the OpenAPI document at /v1/openapi.json and the dashboard's files under
// /ui/ (runtime/web). runtime/embed_assets.cmake generates their table at
// build time from the source tree, so the binary needs no files at run time.

#include <cstddef>
#include <string_view>

namespace canopy {

/// One embedded file.
struct asset {
  const char* path;         ///< where it is served, e.g. `/ui/app.js`
  const char* content_type; ///< e.g. `text/javascript; charset=utf-8`
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

} // namespace canopy
