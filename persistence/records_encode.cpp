// The stored encoding of records (schema 2), writing: one MessagePack map per
// record with short, stable keys, written directly (no intermediate `json`);
// JSON payloads are embedded as plain MessagePack. Reading: records_decode.cpp.
// See records.hpp.

#include "persistence/records.hpp"

#include "persistence/error.hpp"
#include "persistence/json_text.hpp"
#include "persistence/msgpack.hpp"
#include "persistence/records_into.hpp"

namespace canopy::core {

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
  void str(std::string_view k, std::string_view v) { field(k).str(v); }
  void str_if(std::string_view k, std::string_view v) {
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

} // namespace

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
  w.str_if("reason", to_string(x.reason));
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
  w.num_if("iter", x.iteration);
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
  w.str_if("reason", to_string(x.reason));
  if (x.node != "local")
    w.str("node", x.node);
  w.str_if("child", x.child_id);
  w.num_if("pid", x.pid);
  w.unum_if("pstart", x.pid_start);
  w.num_if("started", x.started_at);
  w.num_if("ended", x.ended_at);
  w.num_if("deadline", x.deadline);
  w.str_if("prompt", x.prompt);
}

void write_event(record_writer& w, const event_record& x) {
  w.field("seq").uinteger(x.seq);
  w.num("time", x.time);
  w.str("type", to_string(x.type));
  w.str("ex", x.execution_id);
  w.str("root", x.root_id);
  w.str_if("parent", x.parent_id);
  w.str_if("step", x.step);
  w.str_if("status", to_string(x.status));
  w.str_if("reason", to_string(x.reason));
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
  if (x.handled)
    w.str("result", to_string(x.result));
  w.num("requested", x.requested_at);
  w.num_if("handled_at", x.handled_at);
  w.str_if("who", x.who);
  return w.finish();
}

std::string encode(const signal_record& x) {
  record_writer w;
  w.str("id", x.id);
  w.str("root", x.root_id);
  w.str_if("target", x.target);
  w.str("name", x.name);
  w.value_if("value", x.value);
  if (x.failure)
    w.field("failure").boolean(true);
  w.str_if("message", x.message);
  w.str_if("step", x.step);
  w.str_if("who", x.who);
  w.str_if("key", x.key);
  w.str_if("fp", x.fingerprint);
  w.num("received", x.received_at);
  w.num_if("state", static_cast<int64_t>(x.state));
  w.str_if("wex", x.wait_execution);
  w.str_if("wstep", x.wait_step);
  w.num_if("consumed", x.consumed_at);
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
  w.str_if("reason", to_string(x.child_reason));
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

} // namespace canopy::core
