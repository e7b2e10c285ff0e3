// The stored encoding of records (schema 2), reading: one MessagePack map per
// record (records_encode.cpp writes them), unknown keys skipped and missing
// optional ones left at their defaults. Decoders also read the schema-1 JSON
// text, told apart by the first byte. See records.hpp.

#include "persistence/records.hpp"

#include "persistence/error.hpp"
#include "persistence/json_text.hpp"
#include "persistence/msgpack.hpp"
#include "persistence/records_into.hpp"

namespace canopy::core {

namespace {

// -- reading ------------------------------------------------------------------------

/// An enum stored as its index; out of range is corrupt.
template <class E>
E enum_at(msgpack::reader& r, unsigned count) {
  auto i = r.integer();
  if (i < 0 || i >= static_cast<int64_t>(count))
    throw msgpack::format_error("enum value out of range");
  return static_cast<E>(i);
}

/// An enum stored as its spelling; an unknown one is corrupt.
template <class E>
E spelled(msgpack::reader& r) {
  E x{};
  if (!from_string(std::string{r.raw_str()}, x))
    throw msgpack::format_error("unknown value");
  return x;
}

/// Reads the map of a record: `field(reader, key, record)` reads the value
/// of a key it knows and returns its bit in `required` (0 when optional), or
/// returns `unknown` without reading, and the value is skipped. Unknown keys
/// are ignored and missing optional keys keep their defaults (schema
/// evolution); a missing required key is corrupt.
constexpr unsigned unknown = ~0u;

template <class T, class F>
void read_fields(msgpack::reader& r, T& x, unsigned required, F field) {
  unsigned seen = 0;
  for (auto n = r.map(); n > 0; --n) {
    auto k = r.raw_str();
    auto bit = field(r, k, x);
    if (bit == unknown)
      r.skip();
    else
      seen |= bit;
  }
  if ((seen & required) != required)
    throw msgpack::format_error("a required field is missing");
}

template <class T, class F>
caf::expected<T> decode_binary(const char* what, std::string_view bytes, unsigned required,
                               F field) {
  try {
    msgpack::reader r{bytes};
    T x;
    read_fields(r, x, required, field);
    return x;
  } catch (const std::exception& e) {
    return make_error(persistence_errc::corrupt_record,
                      std::string{"corrupt "} + what + " record: " + e.what());
  }
}

/// The schema-1 text: a JSON object, so its first byte is '{' (0x7b, a
/// positive fixint in MessagePack, never the start of a binary record).
template <class F>
auto decode_text(std::string_view bytes, F from_json) {
  auto doc = parse_json_text(bytes);
  return from_json(doc ? std::move(*doc) : json(json::value_t::discarded));
}

unsigned read_graph_field(msgpack::reader& r, std::string_view k, stored_graph& x) {
  if (k == "document") {
    x.document = r.value();
    return 1;
  }
  if (k == "base_dir") {
    x.base_dir = r.str();
    return 2;
  }
  if (k == "files") {
    x.files = r.value();
    if (!x.files.is_object())
      throw msgpack::format_error("files is not a map");
    return 0;
  }
  return unknown;
}

} // namespace

bool is_text_record(std::string_view bytes) {
  return !bytes.empty() && bytes.front() == '{';
}

// -- decoders -----------------------------------------------------------------------

caf::expected<execution_record> decode_execution(std::string_view bytes) {
  if (is_text_record(bytes))
    return decode_text(bytes, execution_from_json);
  return decode_binary<execution_record>(
    "execution", bytes, 7, [](msgpack::reader& r, std::string_view k, execution_record& x) {
      switch (k.size() > 0 ? k[0] : 0) {
        case 'a':
          if (k == "agent") return x.agent = r.str(), 0u;
          break;
        case 'c':
          if (k == "created") return x.created_at = r.integer(), 0u;
          break;
        case 'd':
          if (k == "depth") return x.depth = static_cast<int>(r.integer()), 0u;
          break;
        case 'e':
          if (k == "ended") return x.ended_at = r.integer(), 0u;
          if (k == "error") return x.error = r.str(), 0u;
          break;
        case 'g':
          if (k == "graph") return x.graph = r.str(), 2u;
          if (k == "gver") return x.graph_version = static_cast<int>(r.integer()), 0u;
          break;
        case 'i':
          if (k == "id") return x.id = r.str(), 1u;
          if (k == "inputs") return x.inputs = r.value(), 0u;
          if (k == "iter") return x.iteration = static_cast<int>(r.integer()), 0u;
          break;
        case 'n':
          if (k == "node") return x.node = r.str(), 0u;
          break;
        case 'o':
          if (k == "outputs") return x.outputs = r.value(), 0u;
          if (k == "owner") return x.owner = r.str(), 0u;
          break;
        case 'p':
          if (k == "parent") return x.parent_id = r.str(), 0u;
          if (k == "pstep") return x.parent_step = r.str(), 0u;
          if (k == "pid") return x.owner_pid = r.integer(), 0u;
          if (k == "pstart") return x.owner_start = r.uinteger(), 0u;
          break;
        case 'r':
          if (k == "root") return x.root_id = r.str(), 0u;
          if (k == "reason") return x.reason = spelled<step_reason>(r), 0u;
          break;
        case 's':
          if (k == "status") return x.status = enum_at<execution_status>(r, 6), 4u;
          if (k == "started") return x.started_at = r.integer(), 0u;
          break;
      }
      return unknown;
    });
}

caf::expected<step_record> decode_step(std::string_view bytes) {
  if (is_text_record(bytes))
    return decode_text(bytes, step_from_json);
  return decode_binary<step_record>(
    "step", bytes, 7, [](msgpack::reader& r, std::string_view k, step_record& x) {
      switch (k.size() > 0 ? k[0] : 0) {
        case 'a':
          if (k == "attempt") return x.attempt = static_cast<int>(r.integer()), 0u;
          break;
        case 'c':
          if (k == "child") return x.child_id = r.str(), 0u;
          break;
        case 'd':
          if (k == "deadline") return x.deadline = r.integer(), 0u;
          break;
        case 'e':
          if (k == "ex") return x.execution_id = r.str(), 1u;
          if (k == "error") return x.error = r.value(), 0u;
          if (k == "ended") return x.ended_at = r.integer(), 0u;
          break;
        case 'n':
          if (k == "node") return x.node = r.str(), 0u;
          break;
        case 'p':
          if (k == "pid") return x.pid = r.integer(), 0u;
          if (k == "pstart") return x.pid_start = r.uinteger(), 0u;
          if (k == "prompt") return x.prompt = r.str(), 0u;
          break;
        case 'r':
          if (k == "result") return x.result = r.value(), 0u;
          if (k == "reason") return x.reason = spelled<step_reason>(r), 0u;
          break;
        case 's':
          if (k == "step") return x.step = r.str(), 2u;
          if (k == "status") return x.status = enum_at<step_status>(r, 7), 4u;
          if (k == "started") return x.started_at = r.integer(), 0u;
          break;
      }
      return unknown;
    });
}

caf::expected<event_record> decode_event(std::string_view bytes) {
  if (is_text_record(bytes))
    return decode_text(bytes, event_from_json);
  // The status is read as text and parsed once the map is read: whether it
  // is a step's depends on `step`, whichever order the keys come in.
  std::string status;
  auto e = decode_binary<event_record>(
    "event", bytes, 15, [&status](msgpack::reader& r, std::string_view k, event_record& x) {
      switch (k.size() > 0 ? k[0] : 0) {
        case 'd':
          if (k == "data") return x.data = r.value(), 0u;
          break;
        case 'e':
          if (k == "ex") return x.execution_id = r.str(), 8u;
          break;
        case 'p':
          if (k == "parent") return x.parent_id = r.str(), 0u;
          break;
        case 'r':
          if (k == "root") return x.root_id = r.str(), 0u;
          if (k == "reason") return x.reason = spelled<step_reason>(r), 0u;
          break;
        case 's':
          if (k == "seq") return x.seq = r.uinteger(), 1u;
          if (k == "step") return x.step = r.str(), 0u;
          if (k == "status") return status = r.raw_str(), 0u;
          break;
        case 't':
          if (k == "time") return x.time = r.integer(), 2u;
          if (k == "type") return x.type = spelled<event_type>(r), 4u;
          break;
      }
      return unknown;
    });
  if (e && !from_string(status, !e->step.empty(), e->status))
    return make_error(persistence_errc::corrupt_record, "corrupt event record: unknown status");
  return e;
}

caf::expected<std::string> decode_event_execution(std::string_view bytes) {
  if (is_text_record(bytes)) {
    auto e = decode_event(bytes);
    if (!e)
      return e.error();
    return std::move(e->execution_id);
  }
  try {
    msgpack::reader r{bytes};
    for (auto n = r.map(); n > 0; --n) {
      if (r.raw_str() == "ex")
        return r.str();
      r.skip();
    }
    throw msgpack::format_error("a required field is missing");
  } catch (const std::exception& e) {
    return make_error(persistence_errc::corrupt_record,
                      std::string{"corrupt event record: "} + e.what());
  }
}

caf::expected<stored_graph> decode_graph(std::string_view bytes) {
  if (is_text_record(bytes))
    return decode_text(bytes, stored_graph_from_json);
  return decode_binary<stored_graph>("graph", bytes, 3, read_graph_field);
}

caf::expected<stop_record> decode_stop(std::string_view bytes) {
  if (is_text_record(bytes))
    return decode_text(bytes, stop_from_json);
  return decode_binary<stop_record>(
    "stop", bytes, 3, [](msgpack::reader& r, std::string_view k, stop_record& x) {
      if (k == "id") return x.id = r.str(), 1u;
      if (k == "target") return x.target = r.str(), 2u;
      if (k == "force") return x.force = r.boolean(), 0u;
      if (k == "handled") return x.handled = r.boolean(), 0u;
      if (k == "result") return x.result = spelled<stop_result>(r), 0u;
      if (k == "requested") return x.requested_at = r.integer(), 0u;
      if (k == "handled_at") return x.handled_at = r.integer(), 0u;
      if (k == "who") return x.who = r.str(), 0u;
      return unknown;
    });
}

caf::expected<signal_record> decode_signal(std::string_view bytes) {
  return decode_binary<signal_record>(
    "signal", bytes, 7, [](msgpack::reader& r, std::string_view k, signal_record& x) {
      if (k == "id") return x.id = r.str(), 1u;
      if (k == "root") return x.root_id = r.str(), 2u;
      if (k == "target") return x.target = r.str(), 0u;
      if (k == "name") return x.name = r.str(), 4u;
      if (k == "value") return x.value = r.value(), 0u;
      if (k == "failure") return x.failure = r.boolean(), 0u;
      if (k == "message") return x.message = r.str(), 0u;
      if (k == "step") return x.step = r.str(), 0u;
      if (k == "who") return x.who = r.str(), 0u;
      if (k == "key") return x.key = r.str(), 0u;
      if (k == "fp") return x.fingerprint = r.str(), 0u;
      if (k == "received") return x.received_at = r.integer(), 0u;
      if (k == "state") return x.state = enum_at<signal_state>(r, 2), 0u;
      if (k == "wex") return x.wait_execution = r.str(), 0u;
      if (k == "wstep") return x.wait_step = r.str(), 0u;
      if (k == "consumed") return x.consumed_at = r.integer(), 0u;
      return unknown;
    });
}

caf::expected<tree_counters> decode_counters(std::string_view bytes) {
  if (is_text_record(bytes))
    return decode_text(bytes, counters_from_json);
  return decode_binary<tree_counters>(
    "counters", bytes, 0, [](msgpack::reader& r, std::string_view k, tree_counters& x) {
      if (k == "steps") return x.steps = r.uinteger(), 0u;
      if (k == "spent") return x.spent = r.real(), 0u;
      if (k == "run_ms") return x.run_ms = r.integer(), 0u;
      if (k == "budget") return x.budget = r.real(), 0u;
      return unknown;
    });
}

caf::expected<registered_graph> decode_registered_graph(std::string_view bytes) {
  if (is_text_record(bytes))
    return decode_text(bytes, registered_graph_from_json);
  return decode_binary<registered_graph>(
    "registered graph", bytes, 15,
    [](msgpack::reader& r, std::string_view k, registered_graph& x) {
      if (k == "owner") return x.owner = r.str(), 1u;
      if (k == "name") return x.name = r.str(), 2u;
      if (k == "version") return x.version = static_cast<int>(r.integer()), 4u;
      if (k == "document") return x.document = r.value(), 8u;
      if (k == "created") return x.created_at = r.integer(), 0u;
      return unknown;
    });
}

caf::expected<agent_record> decode_agent(std::string_view bytes) {
  if (is_text_record(bytes))
    return decode_text(bytes, agent_from_json);
  return decode_binary<agent_record>(
    "agent", bytes, 63, [](msgpack::reader& r, std::string_view k, agent_record& x) {
      if (k == "owner") return x.owner = r.str(), 1u;
      if (k == "name") return x.name = r.str(), 2u;
      if (k == "graph") {
        read_fields(r, x.graph, 3, read_graph_field);
        return 4u;
      }
      if (k == "on_busy") return x.on_busy = enum_at<busy_policy>(r, 3), 8u;
      if (k == "node") return x.node = r.str(), 0u;
      if (k == "created") return x.created_at = r.integer(), 16u;
      if (k == "updated") return x.updated_at = r.integer(), 32u;
      return unknown;
    });
}

caf::expected<history_entry> decode_history(std::string_view bytes) {
  if (is_text_record(bytes))
    return decode_text(bytes, history_from_json);
  return decode_binary<history_entry>(
    "history", bytes, 63, [](msgpack::reader& r, std::string_view k, history_entry& x) {
      if (k == "owner") return x.owner = r.str(), 1u;
      if (k == "agent") return x.agent = r.str(), 2u;
      if (k == "seq") return x.seq = r.uinteger(), 4u;
      if (k == "role") return x.role = r.str(), 8u;
      if (k == "content") return x.content = r.value(), 16u;
      if (k == "ex") return x.execution_id = r.str(), 0u;
      if (k == "time") return x.time = r.integer(), 32u;
      return unknown;
    });
}

caf::expected<subtree_stop> decode_subtree_stop(std::string_view bytes) {
  return decode_binary<subtree_stop>(
    "subtree stop", bytes, 31, [](msgpack::reader& r, std::string_view k, subtree_stop& x) {
      if (k == "target") return x.target = r.str(), 1u;
      if (k == "root") return x.root_id = r.str(), 2u;
      if (k == "reason") return x.child_reason = spelled<step_reason>(r), 0u;
      if (k == "time") return x.time = r.integer(), 4u;
      if (k == "events") return x.events = r.uinteger(), 8u;
      if (k == "first") return x.first_seq = r.uinteger(), 16u;
      return unknown;
    });
}

} // namespace canopy::core
