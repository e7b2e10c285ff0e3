// libFuzzer target: the store's record decoders (persistence/records_decode.cpp
// over msgpack.cpp, and the schema-1 JSON text form) on arbitrary bytes, as
// a damaged or hostile LMDB file would hand them over. A decoder answers a
// record or corrupt_record and never throws; what it accepts must encode
// again, decode again, and render as JSON (what `show`, the API and the
// event stream do with it).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "persistence/msgpack.hpp"
#include "persistence/records.hpp"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_records: %s\n", what);
    std::abort();
  }
}

/// Decodes `bytes` with `decode`; an accepted record must survive
/// encode → decode.
template <class Decode>
void round_trip(std::string_view bytes, Decode decode, const char* what) {
  auto x = decode(bytes);
  if (!x)
    return;
  auto again = decode(canopy::core::encode(*x));
  check(static_cast<bool>(again), what);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes{reinterpret_cast<const char*>(data), size};
  round_trip(bytes, canopy::core::decode_execution, "execution does not re-decode");
  round_trip(bytes, canopy::core::decode_step, "step does not re-decode");
  round_trip(bytes, canopy::core::decode_event, "event does not re-decode");
  round_trip(bytes, canopy::core::decode_stop, "stop does not re-decode");
  round_trip(bytes, canopy::core::decode_counters, "counters do not re-decode");
  round_trip(bytes, canopy::core::decode_registered_graph, "registered graph does not re-decode");
  round_trip(bytes, canopy::core::decode_agent, "agent does not re-decode");
  round_trip(bytes, canopy::core::decode_history, "history entry does not re-decode");
  round_trip(bytes, canopy::core::decode_subtree_stop, "subtree stop does not re-decode");
  round_trip(bytes, canopy::core::decode_graph, "stored graph does not re-decode");
  (void) canopy::core::decode_event_execution(bytes);
  if (auto e = canopy::core::decode_execution(bytes))
    (void) canopy::core::to_json(*e).dump();
  if (auto s = canopy::core::decode_step(bytes))
    (void) canopy::core::to_json(*s).dump();
  if (auto ev = canopy::core::decode_event(bytes))
    (void) canopy::core::event_document(*ev).dump();
  // Any JSON value read back from MessagePack dumps (strings are sanitised).
  try {
    canopy::core::msgpack::reader r{bytes};
    (void) r.value().dump();
  } catch (const canopy::core::msgpack::format_error&) {
  }
  return 0;
}
