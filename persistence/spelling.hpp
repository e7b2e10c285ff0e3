#pragma once

// The one lookup of an enum's spelling in its table of names (index = value),
// shared by the codecs of the outcome enums. Plain C++.

#include <cstddef>
#include <string>

namespace canopy::core {

/// Sets `x` to the value whose name in `names` is `s`.
/// @returns false (and leaves `x`) when no name matches.
template <class Enum, size_t N>
bool parse_spelling(const char* const (&names)[N], const std::string& s, Enum& x) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) {
      x = static_cast<Enum>(i);
      return true;
    }
  return false;
}

/// @returns the name of `x` in `names`, "" when out of range.
template <class Enum, size_t N>
const char* spelling_of(const char* const (&names)[N], Enum x) {
  auto i = static_cast<size_t>(x);
  return i < N ? names[i] : "";
}

} // namespace canopy::core
