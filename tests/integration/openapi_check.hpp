#pragma once

// Every HTTP answer the tests receive is checked against the published API
// document: runtime/server/openapi.json, by Debian's python3-jsonschema
// in tests/openapi/check_responses.py. One checker process per test process,
// started at the first answer and fed one answer per line over a pipe.
//
// Only the test binary checks (it defines CANOPY_OPENAPI_CHECK); the
// benchmarks, which share the HTTP helpers, do not.

#include <string>

namespace canopy::core::test {

/// What an answer's status, content type and body break in the document
/// for `method path` (the path may carry a query); empty when it conforms.
/// A checker that cannot start or dies is a mismatch too (naming why), so
/// a missing python3-jsonschema fails the tests instead of skipping them.
/// Thread-safe (answers are checked one at a time).
std::string openapi_mismatch(const std::string& method, const std::string& path, int status,
                             const std::string& content_type, const std::string& body);

} // namespace canopy::core::test
