// Writes the seed corpus of fuzz_records: one record of every kind in the
// binary encoding and in the schema-1 JSON text, with the fields a real
// store fills. Run once by hand (`make_records_corpus DIR`); the output is
// committed under tests/fuzz/corpus/records/.

#include <cstdio>
#include <fstream>
#include <string>

#include "persistence/records.hpp"

using namespace canopy::core;

namespace {

void put(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream{dir + "/" + name, std::ios::binary} << bytes;
}

template <class T>
void both(const std::string& dir, const std::string& name, const T& x) {
  put(dir, name + ".bin", encode(x));
  put(dir, name + ".json", encode_json(x));
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_records_corpus DIR\n");
    return 2;
  }
  std::string dir = argv[1];
  execution_record e;
  e.id = "01m84jvdxbed9x4te5986rcj6z";
  e.graph = "research";
  e.status = execution_status::stopped;
  e.reason = step_reason::interrupted;
  e.root_id = e.id;
  e.inputs = {{"topic", "actors"}, {"n", 3}, {"deep", {{"a", {1, 2.5, nullptr, true}}}}};
  e.outputs = nullptr;
  e.created_at = 1763900000000;
  e.started_at = 1763900000100;
  e.owner_pid = 4242;
  e.owner_start = 987654;
  e.owner = "alice";
  e.graph_version = 2;
  both(dir, "execution", e);
  e.parent_id = e.id;
  e.id = "01m84jvdzc04wmxq8szetvf9nz";
  e.depth = 1;
  e.parent_step = "review";
  e.status = execution_status::completed;
  e.outputs = {{"report", "ok \xc3\xa9"}};
  e.agent = "critic";
  e.node = "gpu1";
  both(dir, "execution_child", e);

  step_record s;
  s.execution_id = e.id;
  s.step = "search";
  s.status = step_status::completed;
  s.attempt = 2;
  s.result = {{"exit_code", 0}, {"stdout", "searching\n"}, {"stderr", ""}, {"json", nullptr}};
  s.pid = 31337;
  s.pid_start = 12345;
  s.started_at = 1763900000200;
  s.ended_at = 1763900000300;
  both(dir, "step", s);
  s.status = step_status::failed;
  s.error = "exit code 1";
  s.reason = step_reason::step_failed;
  s.child_id = "01m84jve1ed5ywgr50zh3arrzb";
  both(dir, "step_failed", s);

  event_record ev;
  ev.seq = 17;
  ev.time = 1763900000400;
  ev.type = event_type::step_output;
  ev.execution_id = e.id;
  ev.root_id = e.root_id;
  ev.parent_id = e.parent_id;
  ev.step = "search";
  ev.status = "running";
  ev.data = {{"stream", "stdout"}, {"line", "searching"}};
  both(dir, "event", ev);

  stop_record st;
  st.id = "stop1";
  st.target = e.id;
  st.force = true;
  st.handled = true;
  st.result = stop_result::stopped;
  st.requested_at = 1;
  st.handled_at = 2;
  st.who = "user:alice";
  both(dir, "stop", st);

  tree_counters c;
  c.steps = 12;
  c.spent = 3.5;
  c.run_ms = 1234;
  c.budget = 50;
  both(dir, "counters", c);

  json doc = {{"name", "g"}, {"steps", {{"a", {{"fn", "noop"}}}}}};
  stored_graph g;
  g.document = doc;
  g.base_dir = "/srv/graphs";
  g.files = {{"/srv/graphs/sub.json", doc}};
  both(dir, "graph", g);

  registered_graph rg;
  rg.owner = "alice";
  rg.name = "g";
  rg.version = 3;
  rg.document = doc;
  rg.created_at = 5;
  both(dir, "registered_graph", rg);

  agent_record a;
  a.owner = "bob";
  a.name = "critic";
  a.graph = g;
  a.on_busy = busy_policy::queue;
  a.node = "gpu1";
  a.created_at = 6;
  a.updated_at = 7;
  both(dir, "agent", a);

  history_entry h;
  h.owner = "bob";
  h.agent = "critic";
  h.seq = 4;
  h.role = "agent";
  h.content = "fine";
  h.execution_id = e.id;
  h.time = 8;
  both(dir, "history", h);

  subtree_stop ss;
  ss.target = e.id;
  ss.root_id = e.root_id;
  ss.child_reason = "parent_stopped";
  ss.time = 9;
  ss.events = 4;
  ss.first_seq = 100;
  put(dir, "subtree_stop.bin", encode(ss));
  return 0;
}
