// Tests of the node configuration (runtime/node/config.hpp, runtime/docs/reference/config.md#node-config): parsing of
// valid documents, a corpus of bad ones each rejected at its exact JSON path,
// real files in a temporary folder, and HOST:PORT splitting.

#include "runtime/node/config.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tests/integration/helpers.hpp"
#include "tests/persistence/render_errors.hpp"

using namespace canopy::core;
using canopy::core::test::render;

namespace {

// -- helpers -------------------------------------------------------------------

bool has_error(const std::vector<graph_error>& errors, const std::string& path,
               const std::string& part = "") {
  for (auto& e : errors)
    if (e.path == path && e.message.find(part) != std::string::npos)
      return true;
  return false;
}

const char* spec_example = R"({
  "home": "/var/lib/canopy",
  "listen": "127.0.0.1:8080",
  "users": {"alice": {"token": "s3cr3t-a"}, "bob": {"token": "s3cr3t-b"}},
  "allow_inline_commands": false,
  "max_parallel": 4,
  "max_request_bytes": 8388608,
  "tools": {
    "writer": {"argv": ["python3", "tools/writer.py", "${with.prompt}"],
               "max_parallel": 2, "timeout": "5m",
               "grace": {"interrupt": "10s", "terminate": "5s"}}
  },
  "cluster": {"listen": "127.0.0.1:4242", "secret": "cluster-secret",
              "heartbeat": "1s", "timeout": "5s"}
})";

} // namespace

// -- parse_node_config -----------------------------------------------------------------

TEST_CASE("the SPEC example configuration parses into a node config",
          "[integration][config]") {
  auto result = parse_node_config(json::parse(spec_example));
  INFO(render(result.errors));
  REQUIRE(result);
  CHECK(result.errors.empty());
  auto& cfg = *result.value;
  CHECK(cfg.home == "/var/lib/canopy");
  CHECK(cfg.listen == "127.0.0.1:8080");
  CHECK(cfg.users == std::map<std::string, std::string>{{"alice", "s3cr3t-a"},
                                                        {"bob", "s3cr3t-b"}});
  CHECK_FALSE(cfg.allow_inline_commands);
  CHECK(cfg.max_parallel == 4);
  CHECK(cfg.max_request_bytes == 8388608);
  REQUIRE(cfg.tools.count("writer") == 1);
  CHECK(cfg.tools.at("writer").max_parallel == 2);
  CHECK(cfg.tools.at("writer").timeout == millis{300'000});
  REQUIRE(cfg.cluster);
  CHECK(cfg.cluster->listen == "127.0.0.1:4242");
  CHECK(cfg.cluster->secret == "cluster-secret");
  CHECK(cfg.cluster->heartbeat == millis{1000});
  CHECK(cfg.cluster->timeout == millis{5000});
}

TEST_CASE("an empty configuration takes the SPEC defaults", "[integration][config]") {
  auto result = parse_node_config(json::object());
  REQUIRE(result);
  auto& cfg = *result.value;
  CHECK(cfg.home.empty());
  CHECK(cfg.listen == "127.0.0.1:8080");
  CHECK(cfg.users.empty());
  CHECK_FALSE(cfg.allow_inline_commands);
  CHECK(cfg.max_parallel == 4);
  CHECK(cfg.max_request_bytes == 8u * 1024u * 1024u);
  CHECK(cfg.tools.empty());
  CHECK_FALSE(cfg.cluster);
}

TEST_CASE("port 0 and bracketed IPv6 addresses are valid listen addresses",
          "[integration][config]") {
  auto result = parse_node_config(json::parse(
    R"({"listen": "127.0.0.1:0", "allow_inline_commands": true,
        "cluster": {"listen": "[::1]:4242"}})"));
  INFO(render(result.errors));
  REQUIRE(result);
  CHECK(result.value->listen == "127.0.0.1:0");
  CHECK(result.value->allow_inline_commands);
  REQUIRE(result.value->cluster);
  CHECK(result.value->cluster->listen == "[::1]:4242");
  CHECK(result.value->cluster->secret.empty());
  CHECK(result.value->cluster->heartbeat == millis{1000});
  CHECK(result.value->cluster->timeout == millis{5000});
}

TEST_CASE("bad configurations are rejected at their exact path", "[integration][config]") {
  struct bad_case {
    const char* text;
    const char* path;
    const char* part;
  };
  const std::vector<bad_case> corpus{
    {R"([])", "", "must be a JSON object"},
    {R"({"port": 8080})", "/port", "unknown key 'port'"},
    {R"({"home": 1})", "/home", "got 1"},
    {R"({"home": ""})", "/home", "got an empty string"},
    {R"({"listen": 8080})", "/listen", "got 8080"},
    {R"({"listen": "8080"})", "/listen", "got '8080'"},
    {R"({"listen": ":8080"})", "/listen", "HOST:PORT"},
    {R"({"listen": "localhost:http"})", "/listen", "HOST:PORT"},
    {R"({"listen": "localhost:65536"})", "/listen", "HOST:PORT"},
    {R"({"listen": "localhost:-1"})", "/listen", "HOST:PORT"},
    {R"({"listen": "::1:80"})", "/listen", "HOST:PORT"},
    {R"({"users": []})", "/users", "expected an object of users"},
    {R"({"users": {"alice": "s3cr3t"}})", "/users/alice", "got string"},
    {R"({"users": {"alice": {}}})", "/users/alice", "missing 'token'"},
    {R"({"users": {"alice": {"token": ""}}})", "/users/alice/token", "got an empty string"},
    {R"({"users": {"alice": {"token": 7}}})", "/users/alice/token", "got 7"},
    {R"({"users": {"alice": {"token": "t", "role": "admin"}}})", "/users/alice/role",
     "unknown key 'role'"},
    {R"({"users": {"": {"token": "t"}}})", "/users/", "must not be empty"},
    {R"({"users": {"alice": {"token": "same"}, "bob": {"token": "same"}}})",
     "/users/bob/token", "already used by user 'alice'"},
    {R"({"allow_inline_commands": "yes"})", "/allow_inline_commands", "got string"},
    {R"({"allow_inline_commands": 1})", "/allow_inline_commands", "got 1"},
    {R"({"max_parallel": 0})", "/max_parallel", "expected an integer >= 1, got 0"},
    {R"({"max_parallel": -1})", "/max_parallel", "got -1"},
    {R"({"max_parallel": 2.5})", "/max_parallel", "got 2.5"},
    {R"({"max_parallel": "4"})", "/max_parallel", "got string"},
    {R"({"max_request_bytes": 0})", "/max_request_bytes", "got 0"},
    {R"({"max_request_bytes": true})", "/max_request_bytes", "got true"},
    {R"({"tools": []})", "/tools", "expected an object of tools"},
    {R"({"tools": {"writer": {"argv": ["x"], "timeout": "5 min"}}})", "/tools/writer/timeout",
     "bad duration '5 min'"},
    {R"({"tools": {"writer": {"argv": ["${steps.a}"]}}})", "/tools/writer/argv/0",
     "only use ${with.KEY}"},
    {R"({"cluster": "127.0.0.1:4242"})", "/cluster", "expected an object"},
    {R"({"cluster": {"listen": "nowhere"}})", "/cluster/listen", "HOST:PORT"},
    {R"({"cluster": {"secret": ""}})", "/cluster/secret", "got an empty string"},
    {R"({"cluster": {"secret": 42}})", "/cluster/secret", "got 42"},
    {R"({"cluster": {"heartbeat": "often"}})", "/cluster/heartbeat", "bad duration 'often'"},
    {R"({"cluster": {"heartbeat": "0ms"}})", "/cluster/heartbeat", "longer than 0ms"},
    {R"({"cluster": {"timeout": 5}})", "/cluster/timeout", "got 5"},
    {R"({"cluster": {"heartbeat": "5s", "timeout": "5s"}})", "/cluster/heartbeat",
     "must be shorter than the timeout"},
    {R"({"cluster": {"timeout": "500ms"}})", "/cluster/timeout",
     "must be shorter than the timeout"},
    {R"({"cluster": {"peers": []}})", "/cluster/peers", "unknown key 'peers'"},
    {R"({"retention": {"completed": "soon"}})", "/retention/completed", "soon"},
    {R"({"retention": {"running": "1d"}})", "/retention/running", "unknown key"},
    {R"({"retention": {"interval": "10ms"}})", "/retention/interval", "at least 1s"},
    {R"({"retention": "7d"})", "/retention", "expected an object"},
    {R"({"tls_cert": "c.pem"})", "/tls_key", "HTTPS needs both"},
    {R"({"insecure_http": 1})", "/insecure_http", "true or false"},
  };
  for (auto& c : corpus) {
    auto result = parse_node_config(json::parse(c.text));
    INFO("config: " << c.text << "\nerrors:\n" << render(result.errors));
    CHECK_FALSE(result);
    CHECK(has_error(result.errors, c.path, c.part));
  }
}

TEST_CASE("every configuration error is reported, not only the first",
          "[integration][config]") {
  auto result = parse_node_config(json::parse(R"({
    "listen": "nope", "max_parallel": 0, "extra": 1,
    "users": {"a": {"token": ""}},
    "tools": {"t": {"argv": [], "max_parallel": 0}},
    "cluster": {"secret": "", "heartbeat": "x"}
  })"));
  INFO(render(result.errors));
  REQUIRE_FALSE(result);
  CHECK(result.errors.size() == 8);
  for (auto path : {"/listen", "/max_parallel", "/extra", "/users/a/token", "/tools/t/argv",
                    "/tools/t/max_parallel", "/cluster/secret", "/cluster/heartbeat"})
    CHECK(has_error(result.errors, path));
}

// -- files ---------------------------------------------------------------------------

TEST_CASE("load_node_config reads a configuration file", "[integration][config]") {
  test::temp_dir dir;
  auto path = dir.write("canopy.json", spec_example);
  auto result = load_node_config(path);
  INFO(render(result.errors));
  REQUIRE(result);
  CHECK(result.value->users.size() == 2);
  CHECK(result.value->tools.count("writer") == 1);
}

TEST_CASE("a missing, unreadable or malformed config file is one error naming the file",
          "[integration][config]") {
  test::temp_dir dir;
  auto missing = dir.path + "/missing.json";
  auto none = load_node_config(missing);
  REQUIRE_FALSE(none);
  REQUIRE(none.errors.size() == 1);
  CHECK(none.errors[0].path.empty());
  CHECK_THAT(none.errors[0].message, Catch::Contains(missing)
                                       && Catch::Contains("No such file or directory"));

  auto folder = load_node_config(dir.path);
  REQUIRE_FALSE(folder);
  REQUIRE(folder.errors.size() == 1);
  CHECK(folder.errors[0].path.empty());
  CHECK_THAT(folder.errors[0].message, Catch::Contains(dir.path));

  auto broken = dir.write("broken.json", "{\"listen\": ");
  auto bad = load_node_config(broken);
  REQUIRE_FALSE(bad);
  REQUIRE(bad.errors.size() == 1);
  CHECK(bad.errors[0].path.empty());
  CHECK_THAT(bad.errors[0].message, Catch::Contains(broken) && Catch::Contains("malformed JSON"));

  auto deep = dir.write("deep.json", std::string(200, '[') + std::string(200, ']'));
  auto nested = load_node_config(deep);
  REQUIRE(nested.errors.size() == 1);
  CHECK_THAT(nested.errors[0].message, Catch::Contains("nesting deeper than"));
}

TEST_CASE("errors inside a config file carry their JSON path", "[integration][config]") {
  test::temp_dir dir;
  auto path = dir.write("canopy.json", R"({"tools": {"writer": {"argv": ["x"], "timeout": 5}}})");
  auto result = load_node_config(path);
  REQUIRE_FALSE(result);
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].path == "/tools/writer/timeout");
}

TEST_CASE("a tools file holds tools and the cluster secret and timing", "[integration][config]") {
  test::temp_dir dir;
  auto path = dir.write("tools.json", R"({
    "tools": {"writer": {"argv": ["cat"], "max_parallel": 1}},
    "cluster": {"secret": "s3cr3t", "heartbeat": "200ms", "timeout": "2s"}
  })");
  auto result = load_tools_file(path);
  INFO(render(result.errors));
  REQUIRE(result);
  CHECK(result.value->tools.count("writer") == 1);
  CHECK(result.value->tools.at("writer").max_parallel == 1);
  REQUIRE(result.value->cluster);
  CHECK(result.value->cluster->secret == "s3cr3t");
  CHECK(result.value->cluster->heartbeat == millis{200});
  CHECK(result.value->cluster->timeout == millis{2000});
  auto only_tools = load_tools_file(dir.write("t2.json", R"({"tools": {}})"));
  REQUIRE(only_tools);
  CHECK_FALSE(only_tools.value->cluster);
}

TEST_CASE("a tools file rejects every other key at its path", "[integration][config]") {
  test::temp_dir dir;
  struct bad_case {
    const char* text;
    const char* path;
    const char* part;
  };
  const std::vector<bad_case> corpus{
    {R"({"listen": "127.0.0.1:1"})", "/listen", "a tools file holds only"},
    {R"({"users": {}})", "/users", "a tools file holds only"},
    {R"({"cluster": {"listen": "127.0.0.1:4242"}})", "/cluster/listen",
     "cluster holds only: secret, heartbeat, timeout"},
    {R"({"cluster": {"heartbeat": "5s", "timeout": "2s"}})", "/cluster/heartbeat",
     "must be shorter than the timeout"},
    {R"({"cluster": {"heartbeat": "soon"}})", "/cluster/heartbeat", "duration"},
    {R"({"cluster": {"secret": ""}})", "/cluster/secret", "got an empty string"},
    {R"({"tools": {"w": {"argv": [1]}}})", "/tools/w/argv/0", "expected a string"},
    {R"("tools")", "", "must be a JSON object"},
  };
  for (auto& c : corpus) {
    auto result = load_tools_file(dir.write("tools.json", c.text));
    INFO("tools file: " << c.text << "\nerrors:\n" << render(result.errors));
    CHECK_FALSE(result);
    CHECK(has_error(result.errors, c.path, c.part));
  }
  auto missing = load_tools_file(dir.path + "/nope.json");
  REQUIRE(missing.errors.size() == 1);
  CHECK(missing.errors[0].path.empty());
  CHECK_THAT(missing.errors[0].message, Catch::Contains("nope.json"));
}

// -- split_host_port -------------------------------------------------------------------

TEST_CASE("split_host_port splits HOST:PORT and rejects everything else",
          "[integration][config]") {
  std::string host = "unchanged";
  int port = -7;
  CHECK(split_host_port("127.0.0.1:8080", host, port));
  CHECK(host == "127.0.0.1");
  CHECK(port == 8080);
  CHECK(split_host_port("localhost:0", host, port));
  CHECK(host == "localhost");
  CHECK(port == 0);
  CHECK(split_host_port("[::1]:80", host, port));
  CHECK(host == "::1");
  CHECK(port == 80);
  CHECK(split_host_port("example.org:65535", host, port));
  CHECK(port == 65535);
  host = "unchanged";
  port = -7;
  for (auto bad : {"", "8080", ":8080", "host:", "host:65536", "host:-1", "host:80a",
                   "host: 80", "host:123456", "::1:80", "[::1]80", "[::1]:", "[]:80",
                   "[::1:80", "a b:80"}) {
    INFO("text: '" << bad << "'");
    CHECK_FALSE(split_host_port(bad, host, port));
  }
  // A rejected text leaves the outputs alone.
  CHECK(host == "unchanged");
  CHECK(port == -7);
}
