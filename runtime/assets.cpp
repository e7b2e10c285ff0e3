#include "runtime/assets.hpp"

namespace canopy {

const asset* find_asset(std::string_view path) {
  for (size_t i = 0; i < embedded_asset_count; ++i)
    if (path == embedded_assets[i].path)
      return &embedded_assets[i];
  return nullptr;
}

} // namespace canopy
