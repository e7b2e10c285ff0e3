// The stored encoding of records (schema 2): one MessagePack map per record
// with short, stable keys, written and read directly (no intermediate
// `json`); JSON payloads are embedded as plain MessagePack. Decoders also read
// the schema-1 JSON text, told apart by the first byte. See records.hpp.

#include "persistence/records.hpp"

#include "persistence/error.hpp"
#include "persistence/json_text.hpp"
#include "persistence/msgpack.hpp"
#include "persistence/records_into.hpp"

namespace canopy {

namespace {

// -- writing ------------------------------------------------------------------------

/// Writes one record: a map16 header (patched with the field count at the
/// end, so the first byte of every record is 0xde) and its fields.
struct record_writer {
  std::string own;
  std::string& out; ///< `own`, or a buffer of the caller's (encode_into)
  msgpack::writer w{out};
  unsigned count = 0;

  record_writer() : record_writer(own) {}
  explicit record_writer(std::string& into) : out(into) {
    out.clear();
    out.reserve(160);
    out.append("\xde\0\0", 3);
  }
  msgpack::writer& field(std::string_view k) {
    ++count;
    w.key(k);
    return w;
  }
  void str(std::string_view k, const std::string& v) { field(k).str(v); }
  void str_if(std::string_view k, const std::string& v) {
    if (!v.empty())
      str(k, v);
  }
  void num(std::string_view k, int64_t v) { field(k).integer(v); }
  void num_if(std::string_view k, int64_t v) {
    if (v != 0)
      num(k, v);
  }
  void unum_if(std::string_view k, uint64_t v) {
    if (v != 0)
      field(k).uinteger(v);
  }
  void value_if(std::string_view k, const json& v) {
    if (!v.is_null())
      field(k).value(v);
  }
  /// Completes `out`.
  void end() {
    w.flush();
    out[1] = static_cast<char>(count >> 8);
    out[2] = static_cast<char>(count & 0xff);
  }
  std::string finish() {
    end();
    return std::move(out);
  }
};

void write_files(msgpack::writer& w, const json& files) {
  if (!files.is_object()) {
    w.map(0);
    return;
  }
  w.map(files.size());
  for (auto i = files.begin(); i != files.end(); ++i) {
    w.str(i.key());
    w.value(i.value());
  }
}

void write_files(msgpack::writer& w, const std::map<std::string, json>& files) {
  w.map(files.size());
  for (auto& kv : files) {
    w.str(kv.first);
    w.value(kv.second);
  }
}

/// `{document, base_dir, files}` as a map (a record, or nested in an agent).
template <class Files>
void write_graph(msgpack::writer& w, const json& document, const std::string& base_dir,
                 const Files& files) {
  w.map(3);
  w.key("document");
  w.value(document);
  w.key("base_dir");
  w.str(base_dir);
  w.key("files");
  write_files(w, files);
}

// -- reading ------------------------------------------------------------------------

/// An enum stored as its index; out of range is corrupt.
template <class E>
E enum_at(msgpack::reader& r, unsigned count) {
  auto i = r.integer();
  if (i < 0 || i >= static_cast<int64_t>(count))
    throw msgpack::format_error("enum value out of range");
  return static_cast<E>(i);
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

// -- encoders -----------------------------------------------------------------------

std::string encode(const execution_record& x) {
  record_writer w;
  w.str("id", x.id);
  w.str("graph", x.graph);
  w.num("status", static_cast<int64_t>(x.status));
  w.str("root", x.root_id);
  w.num_if("depth", x.depth);
  w.field("inputs").value(x.inputs);
  w.num("created", x.created_at);
  w.str_if("reason", x.reason);
  w.str_if("error", x.error);
  w.str_if("parent", x.parent_id);
  w.str_if("pstep", x.parent_step);
  w.value_if("outputs", x.outputs);
  w.num_if("started", x.started_at);
  w.num_if("ended", x.ended_at);
  w.num_if("pid", x.owner_pid);
  w.unum_if("pstart", x.owner_start);
  w.str_if("owner", x.owner);
  w.num_if("gver", x.graph_version);
  w.str_if("agent", x.agent);
  w.str_if("node", x.node);
  return w.finish();
}

namespace {

void write_step(record_writer& w, const step_record& x) {
  w.str("ex", x.execution_id);
  w.str("step", x.step);
  w.num("status", static_cast<int64_t>(x.status));
  w.num_if("attempt", x.attempt);
  w.value_if("result", x.result);
  w.value_if("error", x.error);
  w.str_if("reason", x.reason);
  if (x.node != "local")
    w.str("node", x.node);
  w.str_if("child", x.child_id);
  w.num_if("pid", x.pid);
  w.unum_if("pstart", x.pid_start);
  w.num_if("started", x.started_at);
  w.num_if("ended", x.ended_at);
}

void write_event(record_writer& w, const event_record& x) {
  w.field("seq").uinteger(x.seq);
  w.num("time", x.time);
  w.str("type", x.type);
  w.str("ex", x.execution_id);
  w.str("root", x.root_id);
  w.str_if("parent", x.parent_id);
  w.str_if("step", x.step);
  w.str_if("status", x.status);
  w.str_if("reason", x.reason);
  w.value_if("data", x.data);
}

} // namespace

std::string encode(const step_record& x) {
  record_writer w;
  write_step(w, x);
  return w.finish();
}

std::string encode(const event_record& x) {
  record_writer w;
  write_event(w, x);
  return w.finish();
}

void encode_into(std::string& out, const step_record& x) {
  record_writer w{out};
  write_step(w, x);
  w.end();
}

void encode_into(std::string& out, const event_record& x) {
  record_writer w{out};
  write_event(w, x);
  w.end();
}

std::string encode(const stored_graph& x) {
  std::string out;
  msgpack::writer w{out};
  write_graph(w, x.document, x.base_dir, x.files);
  w.flush();
  return out;
}

std::string encode_graph(const json& document, const std::string& base_dir,
                         const std::map<std::string, json>& files) {
  std::string out;
  msgpack::writer w{out};
  write_graph(w, document, base_dir, files);
  w.flush();
  return out;
}

std::string encode(const stop_record& x) {
  record_writer w;
  w.str("id", x.id);
  w.str("target", x.target);
  w.field("force").boolean(x.force);
  w.field("handled").boolean(x.handled);
  w.str_if("result", x.result);
  w.num("requested", x.requested_at);
  w.num_if("handled_at", x.handled_at);
  w.str_if("who", x.who);
  return w.finish();
}

std::string encode(const tree_counters& x) {
  record_writer w;
  w.field("steps").uinteger(x.steps);
  w.field("spent").real(x.spent);
  w.num("run_ms", x.run_ms);
  w.field("budget").real(x.budget);
  return w.finish();
}

std::string encode(const registered_graph& x) {
  record_writer w;
  w.str("owner", x.owner);
  w.str("name", x.name);
  w.num("version", x.version);
  w.field("document").value(x.document);
  w.num("created", x.created_at);
  return w.finish();
}

std::string encode(const agent_record& x) {
  record_writer w;
  w.str("owner", x.owner);
  w.str("name", x.name);
  write_graph(w.field("graph"), x.graph.document, x.graph.base_dir, x.graph.files);
  w.num("on_busy", static_cast<int64_t>(x.on_busy));
  w.str_if("node", x.node);
  w.num("created", x.created_at);
  w.num("updated", x.updated_at);
  return w.finish();
}

std::string encode(const subtree_stop& x) {
  record_writer w;
  w.str("target", x.target);
  w.str("root", x.root_id);
  w.str_if("reason", x.child_reason);
  w.num("time", x.time);
  w.field("events").uinteger(x.events);
  w.field("first").uinteger(x.first_seq);
  return w.finish();
}

std::string encode(const history_entry& x) {
  record_writer w;
  w.str("owner", x.owner);
  w.str("agent", x.agent);
  w.field("seq").uinteger(x.seq);
  w.str("role", x.role);
  // Always written: a null message is still a message.
  w.field("content").value(x.content);
  w.str_if("ex", x.execution_id);
  w.num("time", x.time);
  return w.finish();
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
          if (k == "reason") return x.reason = r.str(), 0u;
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
          break;
        case 'r':
          if (k == "result") return x.result = r.value(), 0u;
          if (k == "reason") return x.reason = r.str(), 0u;
          break;
        case 's':
          if (k == "step") return x.step = r.str(), 2u;
          if (k == "status") return x.status = enum_at<step_status>(r, 5), 4u;
          if (k == "started") return x.started_at = r.integer(), 0u;
          break;
      }
      return unknown;
    });
}

caf::expected<event_record> decode_event(std::string_view bytes) {
  if (is_text_record(bytes))
    return decode_text(bytes, event_from_json);
  return decode_binary<event_record>(
    "event", bytes, 15, [](msgpack::reader& r, std::string_view k, event_record& x) {
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
          if (k == "reason") return x.reason = r.str(), 0u;
          break;
        case 's':
          if (k == "seq") return x.seq = r.uinteger(), 1u;
          if (k == "step") return x.step = r.str(), 0u;
          if (k == "status") return x.status = r.str(), 0u;
          break;
        case 't':
          if (k == "time") return x.time = r.integer(), 2u;
          if (k == "type") return x.type = r.str(), 4u;
          break;
      }
      return unknown;
    });
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
      if (k == "result") return x.result = r.str(), 0u;
      if (k == "requested") return x.requested_at = r.integer(), 0u;
      if (k == "handled_at") return x.handled_at = r.integer(), 0u;
      if (k == "who") return x.who = r.str(), 0u;
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
      if (k == "reason") return x.child_reason = r.str(), 0u;
      if (k == "time") return x.time = r.integer(), 4u;
      if (k == "events") return x.events = r.uinteger(), 8u;
      if (k == "first") return x.first_seq = r.uinteger(), 16u;
      return unknown;
    });
}

} // namespace canopy
