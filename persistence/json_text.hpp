#pragma once

// Strict JSON text: the one parser for every document read from outside
// (graph files and bodies, configuration and tools files, HTTP bodies,
// `--input K:=JSON`), and the one reader of such files.

#include <cstddef>
#include <string>
#include <string_view>

#include <caf/expected.hpp>
#include <nlohmann/json.hpp>

namespace canopy::core {

/// The key by which a graph, config or tools document may name its JSON
/// Schema (runtime/schema/): editors read it; canopy checks only that it is
/// a string, and otherwise ignores it.
inline constexpr std::string_view schema_key = "$schema";

/// Deepest JSON nesting accepted in a document, against stack exhaustion.
constexpr int max_json_nesting = 128;

/// Parses all of `text` (its full length, NUL bytes included) as one JSON
/// value, strictly: a duplicate key in an object, any byte after the value
/// (a NUL byte anywhere), nesting deeper than `max_json_nesting` and bad
/// syntax are errors. Throws nothing.
/// @returns the document, or an error (`persistence_errc::invalid_graph`)
///          whose message names what is wrong and where: `malformed JSON at
///          byte N (line L, column C): ...`, or for a duplicate key `malformed
///          JSON at /a/0/b/K: duplicate key 'K' ...` (the JSON pointer of the
///          object's second `K`).
/// Thread-safe.
caf::expected<nlohmann::json> parse_json_text(std::string_view text);

/// How an error message names a value it did not expect: a number or a
/// boolean by its text (`got 1.5`, `got true`), anything else by its type
/// (`got string`, `got array`, `got object`, `got null`). The one wording of
/// every document's errors (graphs, tools, configuration).
/// Thread-safe.
std::string got(const nlohmann::json& v);

/// Reads a regular file of at most `max_bytes`; `what` names it in messages
/// ("graph file", "config file"). Anything but a regular file (a FIFO, a
/// device, a folder, `/dev/stdin`) is refused before it is read, so the
/// call never blocks on a writer.
/// @returns the bytes, or `persistence_errc::io_error` ("cannot read WHAT
///          'PATH': REASON") or `invalid_graph` (larger than `max_bytes`).
/// Thread-safe.
caf::expected<std::string> read_regular_file(const std::string& path, size_t max_bytes,
                                             const char* what);

/// Makes `text` valid UTF-8 by escaping every byte of an invalid sequence
/// as `\xHH`, for messages that quote input.
std::string sanitize_utf8(std::string_view text);

} // namespace canopy::core
