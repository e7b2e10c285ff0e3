#include "persistence/records.hpp"

#include "persistence/duration.hpp"
#include "persistence/error.hpp"

namespace canopy::core {

namespace {

const char* execution_names[] = {"queued", "running", "stopping", "stopped", "completed", "failed"};
const char* step_names[] = {"pending", "queued",  "running", "completed",
                            "failed",  "skipped", "waiting"};
const char* signal_state_names[] = {"buffered", "consumed"};
const char* busy_names[] = {"cancel_previous", "queue", "reject"};

template <class T, size_t N>
bool lookup(const char* (&names)[N], const std::string& s, T& x) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) {
      x = static_cast<T>(i);
      return true;
    }
  return false;
}

// Field helpers: short keys keep records small; the public documents are
// rendered elsewhere with the SPEC's names.
template <class T>
void get_to(const json& j, const char* key, T& out) {
  auto i = j.find(key);
  if (i != j.end() && !i->is_null())
    i->get_to(out);
}

void put_str(json& j, const char* key, const std::string& s) {
  if (!s.empty())
    j[key] = s;
}

void put_int(json& j, const char* key, int64_t v) {
  if (v != 0)
    j[key] = v;
}

void put_reason(json& j, step_reason r) {
  if (r != step_reason::none)
    j["reason"] = to_string(r);
}

/// Reads a spelled enum at `key` when present. @throws on an unknown one.
template <class Enum>
void get_enum(const json& j, const char* key, Enum& out) {
  auto i = j.find(key);
  if (i == j.end() || i->is_null())
    return;
  if (!from_string(i->get<std::string>(), out))
    throw std::runtime_error(std::string{"unknown "} + key);
}

/// Reads an event's status: a step's when the event names a step.
event_status event_status_of(const json& j, const char* key, bool of_step) {
  event_status x;
  auto i = j.find(key);
  if (i != j.end() && !i->is_null() && !from_string(i->get<std::string>(), of_step, x))
    throw std::runtime_error("unknown status");
  return x;
}

template <class F>
auto decode(const char* what, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    return make_error(persistence_errc::corrupt_record,
                      std::string{"corrupt "} + what + " record: " + e.what());
  }
}

} // namespace

std::string child_label(const execution_record& r) {
  return r.iteration > 0 ? r.parent_step + "#" + std::to_string(r.iteration) : r.parent_step;
}

const char* to_string(execution_status x) {
  return execution_names[static_cast<size_t>(x)];
}

const char* to_string(step_status x) {
  return step_names[static_cast<size_t>(x)];
}

const char* to_string(signal_state x) {
  return signal_state_names[static_cast<size_t>(x)];
}

bool from_string(const std::string& s, execution_status& x) {
  return lookup(execution_names, s, x);
}

bool from_string(const std::string& s, step_status& x) {
  return lookup(step_names, s, x);
}

const char* to_string(busy_policy x) {
  return busy_names[static_cast<size_t>(x)];
}

bool from_string(const std::string& s, busy_policy& x) {
  return lookup(busy_names, s, x);
}

bool is_terminal(execution_status x) {
  return x == execution_status::completed || x == execution_status::failed
         || x == execution_status::stopped;
}

const char* to_string(const event_status& x) {
  if (auto e = std::get_if<execution_status>(&x))
    return to_string(*e);
  if (auto st = std::get_if<step_status>(&x))
    return to_string(*st);
  return "";
}

bool from_string(const std::string& s, bool of_step, event_status& x) {
  if (s.empty()) {
    x = std::monostate{};
    return true;
  }
  if (of_step) {
    step_status st;
    if (!from_string(s, st))
      return false;
    x = st;
    return true;
  }
  execution_status e;
  if (!from_string(s, e))
    return false;
  x = e;
  return true;
}

bool reset_step_record(step_record& r, step_reason reason, int64_t now) {
  if (!is_active(r.status))
    return false;
  r.status = step_status::pending;
  r.reason = reason;
  r.ended_at = now;
  return true;
}

// -- execution ------------------------------------------------------------------

json to_json(const execution_record& x) {
  json j = {{"id", x.id}, {"graph", x.graph}, {"status", to_string(x.status)},
            {"root", x.root_id}, {"depth", x.depth}, {"inputs", x.inputs},
            {"created", x.created_at}};
  put_reason(j, x.reason);
  put_str(j, "error", x.error);
  put_str(j, "parent", x.parent_id);
  put_str(j, "pstep", x.parent_step);
  if (!x.outputs.is_null())
    j["outputs"] = x.outputs;
  put_int(j, "started", x.started_at);
  put_int(j, "ended", x.ended_at);
  put_int(j, "pid", x.owner_pid);
  if (x.owner_start != 0)
    j["pstart"] = x.owner_start;
  put_str(j, "owner", x.owner);
  put_int(j, "gver", x.graph_version);
  put_str(j, "agent", x.agent);
  put_str(j, "node", x.node);
  put_int(j, "iter", x.iteration);
  return j;
}

caf::expected<execution_record> execution_from_json(const json& j) {
  return decode("execution", [&]() -> caf::expected<execution_record> {
    execution_record x;
    x.id = j.at("id").get<std::string>();
    x.graph = j.at("graph").get<std::string>();
    if (!from_string(j.at("status").get<std::string>(), x.status))
      throw std::runtime_error("unknown status");
    get_enum(j, "reason", x.reason);
    get_to(j, "error", x.error);
    get_to(j, "parent", x.parent_id);
    get_to(j, "root", x.root_id);
    get_to(j, "depth", x.depth);
    get_to(j, "pstep", x.parent_step);
    get_to(j, "inputs", x.inputs);
    if (auto i = j.find("outputs"); i != j.end())
      x.outputs = *i;
    get_to(j, "created", x.created_at);
    get_to(j, "started", x.started_at);
    get_to(j, "ended", x.ended_at);
    get_to(j, "pid", x.owner_pid);
    get_to(j, "pstart", x.owner_start);
    get_to(j, "owner", x.owner);
    get_to(j, "gver", x.graph_version);
    get_to(j, "agent", x.agent);
    get_to(j, "node", x.node);
    get_to(j, "iter", x.iteration);
    return x;
  });
}

// -- step -----------------------------------------------------------------------

json to_json(const step_record& x) {
  json j = {{"ex", x.execution_id}, {"step", x.step}, {"status", to_string(x.status)},
            {"attempt", x.attempt}};
  if (!x.result.is_null())
    j["result"] = x.result;
  if (!x.error.is_null())
    j["error"] = x.error;
  put_reason(j, x.reason);
  if (x.node != "local")
    j["node"] = x.node;
  put_str(j, "child", x.child_id);
  put_int(j, "pid", x.pid);
  put_int(j, "started", x.started_at);
  put_int(j, "ended", x.ended_at);
  put_int(j, "deadline", x.deadline);
  put_str(j, "prompt", x.prompt);
  return j;
}

caf::expected<step_record> step_from_json(const json& j) {
  return decode("step", [&]() -> caf::expected<step_record> {
    step_record x;
    x.execution_id = j.at("ex").get<std::string>();
    x.step = j.at("step").get<std::string>();
    if (!from_string(j.at("status").get<std::string>(), x.status))
      throw std::runtime_error("unknown status");
    get_to(j, "attempt", x.attempt);
    if (auto i = j.find("result"); i != j.end())
      x.result = *i;
    if (auto i = j.find("error"); i != j.end())
      x.error = *i;
    get_enum(j, "reason", x.reason);
    get_to(j, "node", x.node);
    get_to(j, "child", x.child_id);
    get_to(j, "pid", x.pid);
    get_to(j, "pstart", x.pid_start);
    get_to(j, "started", x.started_at);
    get_to(j, "ended", x.ended_at);
    get_to(j, "deadline", x.deadline);
    get_to(j, "prompt", x.prompt);
    return x;
  });
}

// -- event ----------------------------------------------------------------------

json to_json(const event_record& x) {
  json j = {{"seq", x.seq}, {"time", x.time}, {"type", to_string(x.type)},
            {"ex", x.execution_id}, {"root", x.root_id}};
  put_str(j, "parent", x.parent_id);
  put_str(j, "step", x.step);
  put_str(j, "status", to_string(x.status));
  put_reason(j, x.reason);
  if (!x.data.is_null())
    j["data"] = x.data;
  return j;
}

caf::expected<event_record> event_from_json(const json& j) {
  return decode("event", [&]() -> caf::expected<event_record> {
    event_record x;
    x.seq = j.at("seq").get<uint64_t>();
    x.time = j.at("time").get<int64_t>();
    if (!from_string(j.at("type").get<std::string>(), x.type))
      throw std::runtime_error("unknown type");
    x.execution_id = j.at("ex").get<std::string>();
    get_to(j, "root", x.root_id);
    get_to(j, "parent", x.parent_id);
    get_to(j, "step", x.step);
    x.status = event_status_of(j, "status", !x.step.empty());
    get_enum(j, "reason", x.reason);
    if (auto i = j.find("data"); i != j.end())
      x.data = *i;
    return x;
  });
}

event_record make_event(const execution_record& rec, event_type type, int64_t time,
                        json data) {
  event_record e;
  e.time = time;
  e.type = type;
  e.execution_id = rec.id;
  e.root_id = rec.root_id;
  e.parent_id = rec.parent_id;
  e.data = std::move(data);
  return e;
}

event_record make_execution_event(const execution_record& rec, event_type type, int64_t time,
                                  execution_status status, step_reason reason, json data) {
  auto e = make_event(rec, type, time, std::move(data));
  e.status = status;
  e.reason = reason;
  return e;
}

event_record make_step_event(const execution_record& rec, event_type type, int64_t time,
                             const std::string& step, json data) {
  auto e = make_event(rec, type, time, std::move(data));
  e.step = step;
  return e;
}

event_record make_step_event(const execution_record& rec, event_type type, int64_t time,
                             const std::string& step, step_status status, step_reason reason,
                             json data) {
  auto e = make_step_event(rec, type, time, step, std::move(data));
  e.status = status;
  e.reason = reason;
  return e;
}

json event_document(const event_record& x) {
  json j = {{"seq", x.seq}, {"time", to_rfc3339(x.time)}, {"type", to_string(x.type)},
            {"execution_id", x.execution_id}, {"root_id", x.root_id}};
  if (!x.parent_id.empty())
    j["parent_id"] = x.parent_id;
  if (!x.step.empty())
    j["step"] = x.step;
  if (!std::holds_alternative<std::monostate>(x.status))
    j["status"] = to_string(x.status);
  put_reason(j, x.reason);
  if (!x.data.is_null())
    j["data"] = x.data;
  return j;
}

// -- encoders -------------------------------------------------------------------

std::string dump_json(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// -- stops and counters ---------------------------------------------------------

caf::expected<stop_record> stop_from_json(const json& j) {
  return decode("stop", [&]() -> caf::expected<stop_record> {
    stop_record x;
    x.id = j.at("id").get<std::string>();
    x.target = j.at("target").get<std::string>();
    get_to(j, "force", x.force);
    get_to(j, "handled", x.handled);
    get_enum(j, "result", x.result);
    get_to(j, "requested", x.requested_at);
    get_to(j, "handled_at", x.handled_at);
    get_to(j, "who", x.who);
    return x;
  });
}

json stop_document(const stop_record& x) {
  return {{"id", x.id},
          {"execution_id", x.target},
          {"mode", x.force ? "force" : "graceful"},
          {"status", x.handled ? "handled" : "requested"},
          {"result", x.handled ? json(to_string(x.result)) : json(nullptr)},
          {"requested_at", to_rfc3339(x.requested_at)},
          {"handled_at", x.handled_at == 0 ? json(nullptr) : json(to_rfc3339(x.handled_at))},
          {"who", x.who}};
}

json signal_document(const signal_record& x) {
  json j = {{"id", x.id},
            {"execution_id", x.target},
            {"name", x.name},
            {"step", x.step.empty() ? json(nullptr) : json(x.step)},
            {"who", x.who},
            {"received_at", to_rfc3339(x.received_at)},
            {"status", to_string(x.state)},
            {"consumed_by", nullptr},
            {"consumed_at", nullptr}};
  if (x.failure)
    j["fail"] = {{"message", x.message}};
  else
    j["value"] = x.value;
  if (x.state == signal_state::consumed) {
    j["consumed_by"] = {{"execution_id", x.wait_execution}, {"step", x.wait_step}};
    j["consumed_at"] = to_rfc3339(x.consumed_at);
  }
  return j;
}

caf::expected<tree_counters> counters_from_json(const json& j) {
  return decode("counters", [&]() -> caf::expected<tree_counters> {
    tree_counters x;
    get_to(j, "steps", x.steps);
    get_to(j, "spent", x.spent);
    get_to(j, "run_ms", x.run_ms);
    get_to(j, "budget", x.budget);
    return x;
  });
}

// -- graph ----------------------------------------------------------------------

json to_json(const stored_graph& x) {
  return {{"document", x.document}, {"base_dir", x.base_dir}, {"files", x.files}};
}

caf::expected<stored_graph> stored_graph_from_json(const json& j) {
  return decode("graph", [&]() -> caf::expected<stored_graph> {
    stored_graph x;
    x.document = j.at("document");
    x.base_dir = j.at("base_dir").get<std::string>();
    get_to(j, "files", x.files);
    return x;
  });
}

// -- registered graph -------------------------------------------------------------

json to_json(const registered_graph& x) {
  return {{"owner", x.owner}, {"name", x.name}, {"version", x.version},
          {"document", x.document}, {"created", x.created_at}};
}

caf::expected<registered_graph> registered_graph_from_json(const json& j) {
  return decode("registered graph", [&]() -> caf::expected<registered_graph> {
    registered_graph x;
    x.owner = j.at("owner").get<std::string>();
    x.name = j.at("name").get<std::string>();
    x.version = j.at("version").get<int>();
    x.document = j.at("document");
    get_to(j, "created", x.created_at);
    return x;
  });
}

// -- agents and their history ----------------------------------------------------

caf::expected<agent_record> agent_from_json(const json& j) {
  return decode("agent", [&]() -> caf::expected<agent_record> {
    agent_record x;
    x.owner = j.at("owner").get<std::string>();
    x.name = j.at("name").get<std::string>();
    auto graph = stored_graph_from_json(j.at("graph"));
    if (!graph)
      return graph.error();
    x.graph = std::move(*graph);
    if (!from_string(j.at("on_busy").get<std::string>(), x.on_busy))
      throw std::runtime_error("unknown on_busy policy");
    get_to(j, "node", x.node);
    x.created_at = j.at("created").get<int64_t>();
    x.updated_at = j.at("updated").get<int64_t>();
    return x;
  });
}

caf::expected<history_entry> history_from_json(const json& j) {
  return decode("history", [&]() -> caf::expected<history_entry> {
    history_entry x;
    x.owner = j.at("owner").get<std::string>();
    x.agent = j.at("agent").get<std::string>();
    x.seq = j.at("seq").get<uint64_t>();
    x.role = j.at("role").get<std::string>();
    x.content = j.at("content");
    get_to(j, "ex", x.execution_id);
    x.time = j.at("time").get<int64_t>();
    return x;
  });
}

json history_document(const history_entry& x) {
  return {{"role", x.role},
          {"content", x.content},
          {"execution_id", x.execution_id.empty() ? json(nullptr) : json(x.execution_id)},
          {"time", to_rfc3339(x.time)}};
}

json agent_document(const agent_record& x) {
  // The graph's name, if its document has one (a document need not be an
  // object when it is stored: never throw while rendering).
  json graph;
  auto& doc = x.graph.document;
  if (doc.is_object())
    if (auto i = doc.find("name"); i != doc.end() && i->is_string())
      graph = *i;
  return {{"name", x.name},
          {"graph", std::move(graph)},
          {"on_busy", to_string(x.on_busy)},
          {"node", x.node.empty() ? json(nullptr) : json(x.node)},
          {"created_at", to_rfc3339(x.created_at)},
          {"updated_at", to_rfc3339(x.updated_at)}};
}

} // namespace canopy::core
