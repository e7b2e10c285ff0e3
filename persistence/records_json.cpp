// The schema-1 record text (compact JSON), as canopy wrote it before the
// binary encoding: kept as the reference the migration tests and the codec
// benchmark compare against. The store no longer writes it; its decoders
// (`decode_*`) still read it. See records.hpp.

#include "persistence/records.hpp"

namespace canopy::core {

namespace {

/// Appends `s` as a JSON string. Ids, names and reasons are canopy's own;
/// anything else goes through `dump_json`, which sanitises UTF-8.
void append_string(std::string& out, std::string_view s) {
  bool plain = true;
  for (unsigned char c : s)
    if (c < 0x20 || c == '"' || c == '\\' || c >= 0x80) {
      plain = false;
      break;
    }
  if (!plain) {
    out += dump_json(json(std::string{s}));
    return;
  }
  out += '"';
  out += s;
  out += '"';
}

/// Writes `{"k":v,...}` without building a json object.
struct object_writer {
  std::string out;
  bool first = true;
  object_writer() {
    out.reserve(192);
    out += '{';
  }
  void key(const char* k) {
    if (!first)
      out += ',';
    first = false;
    out += '"';
    out += k;
    out += "\":";
  }
  void str(const char* k, std::string_view v) {
    key(k);
    append_string(out, v);
  }
  void str_if(const char* k, std::string_view v) {
    if (!v.empty())
      str(k, v);
  }
  void num(const char* k, int64_t v) {
    key(k);
    out += std::to_string(v);
  }
  void num_if(const char* k, int64_t v) {
    if (v != 0)
      num(k, v);
  }
  void value_if(const char* k, const json& v) {
    if (v.is_null())
      return;
    key(k);
    if (v.is_object() && v.empty())
      out += "{}";
    else
      out += dump_json(v);
  }
  std::string finish() {
    out += '}';
    return std::move(out);
  }
};

} // namespace

std::string encode_json(const execution_record& x) {
  // The same fields as to_json(execution_record), written directly.
  object_writer w;
  w.str("id", x.id);
  w.str("graph", x.graph);
  w.str("status", to_string(x.status));
  w.str("root", x.root_id);
  w.num("depth", x.depth);
  w.key("inputs");
  w.out += x.inputs.is_object() && x.inputs.empty() ? std::string{"{}"} : dump_json(x.inputs);
  w.num("created", x.created_at);
  w.str_if("reason", to_string(x.reason));
  w.str_if("error", x.error);
  w.str_if("parent", x.parent_id);
  w.str_if("pstep", x.parent_step);
  w.value_if("outputs", x.outputs);
  w.num_if("started", x.started_at);
  w.num_if("ended", x.ended_at);
  w.num_if("pid", x.owner_pid);
  w.num_if("pstart", static_cast<int64_t>(x.owner_start));
  w.str_if("owner", x.owner);
  w.num_if("gver", x.graph_version);
  w.str_if("agent", x.agent);
  w.str_if("node", x.node);
  w.num_if("iter", x.iteration);
  return w.finish();
}

std::string encode_json(const stored_graph& x) {
  return dump_json(to_json(x));
}

std::string encode_json(const step_record& x) {
  object_writer w;
  w.str("ex", x.execution_id);
  w.str("step", x.step);
  w.str("status", to_string(x.status));
  w.num("attempt", x.attempt);
  w.value_if("result", x.result);
  w.value_if("error", x.error);
  w.str_if("reason", to_string(x.reason));
  if (x.node != "local")
    w.str("node", x.node);
  w.str_if("child", x.child_id);
  w.num_if("pid", x.pid);
  w.num_if("pstart", static_cast<int64_t>(x.pid_start));
  w.num_if("started", x.started_at);
  w.num_if("ended", x.ended_at);
  return w.finish();
}

std::string encode_json(const event_record& x) {
  object_writer w;
  w.key("seq");
  w.out += std::to_string(x.seq);
  w.num("time", x.time);
  w.str("type", to_string(x.type));
  w.str("ex", x.execution_id);
  w.str("root", x.root_id);
  w.str_if("parent", x.parent_id);
  w.str_if("step", x.step);
  w.str_if("status", to_string(x.status));
  w.str_if("reason", to_string(x.reason));
  w.value_if("data", x.data);
  return w.finish();
}


std::string encode_json(const stop_record& x) {
  object_writer w;
  w.str("id", x.id);
  w.str("target", x.target);
  w.key("force");
  w.out += x.force ? "true" : "false";
  w.key("handled");
  w.out += x.handled ? "true" : "false";
  if (x.handled)
    w.str("result", to_string(x.result));
  w.num("requested", x.requested_at);
  w.num_if("handled_at", x.handled_at);
  w.str_if("who", x.who);
  return w.finish();
}

std::string encode_json(const tree_counters& x) {
  return dump_json(
    json{{"steps", x.steps}, {"spent", x.spent}, {"run_ms", x.run_ms}, {"budget", x.budget}});
}

std::string encode_json(const registered_graph& x) {
  return dump_json(to_json(x));
}

std::string encode_json(const agent_record& x) {
  object_writer w;
  w.str("owner", x.owner);
  w.str("name", x.name);
  w.key("graph");
  w.out += encode_json(x.graph);
  w.str("on_busy", to_string(x.on_busy));
  w.str_if("node", x.node);
  w.num("created", x.created_at);
  w.num("updated", x.updated_at);
  return w.finish();
}

std::string encode_json(const history_entry& x) {
  object_writer w;
  w.str("owner", x.owner);
  w.str("agent", x.agent);
  w.key("seq");
  w.out += std::to_string(x.seq);
  w.str("role", x.role);
  // Always written: a null message is still a message.
  w.key("content");
  w.out += dump_json(x.content);
  w.str_if("ex", x.execution_id);
  w.num("time", x.time);
  return w.finish();
}

} // namespace canopy::core
