#pragma once

// "Did you mean ...?": the known name closest to a misspelt one,
// for the errors that name an unknown key, step, function, tool or command.
// Plain functions, no state.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace canopy::core {

/// The number of single-character insertions, deletions, substitutions and
/// swaps of two adjacent characters that turn `a` into `b` (optimal string
/// alignment distance). Thread-safe.
size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word` when it is close enough to be a typo of
/// it: at most 1 edit for a word of up to 4 characters, 2 up to 8, else 3
/// (and fewer edits than the word has characters). Ties go to the first
/// candidate. @returns it, or nullopt when none is that close. Thread-safe.
std::optional<std::string> nearest(std::string_view word,
                                   const std::vector<std::string>& candidates);

/// `"; did you mean 'X'?"` for nearest(word, candidates), or "" when there
/// is no close candidate. Thread-safe.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

} // namespace canopy::core
