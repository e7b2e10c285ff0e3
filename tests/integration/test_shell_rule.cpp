// The shell rule through the real binary: `canopy serve` and
// `canopy worker` refuse a tool whose argv pastes a reference into a shell's
// `-c` script (exit 2, the key's path, the safe argv), `canopy validate`
// refuses such a `run` or `plan` step, and the server guide's example config is
// accepted as written.

#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "persistence/shell_argv.hpp"
#include "runtime/node/config.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

// -- helpers -------------------------------------------------------------------

/// The JSON documents of the shell blocks (`cat > FILE <<'JSON'`) of the
/// documentation page `page` (relative to the source folder).
std::vector<json> page_documents(const std::string& page) {
  auto readme = read_file(source_dir() + "/" + page);
  std::vector<json> docs;
  const std::string open = "<<'JSON'\n";
  for (auto at = readme.find(open); at != std::string::npos; at = readme.find(open, at)) {
    at += open.size();
    auto end = readme.find("\nJSON\n", at);
    REQUIRE(end != std::string::npos);
    INFO(page << " block: " << readme.substr(at, end - at));
    docs.push_back(json::parse(readme.substr(at, end - at)));
  }
  return docs;
}

/// Every array in `v` (recursively) that runs a shell with a reference in
/// its `-c` script, rendered.
void shell_uses(const json& v, std::vector<std::string>& out) {
  if (v.is_array() && canopy::core::find_shell_script_use(v))
    out.push_back(v.dump());
  if (v.is_array() || v.is_object())
    for (auto& item : v)
      shell_uses(item, out);
}

} // namespace

// -- serve and worker --------------------------------------------------------------------

TEST_CASE("serve refuses a tool that pastes a value into shell code, with the key's path",
          "[integration][cli][shell]") {
  temp_dir home;
  temp_dir files;
  auto config = files.write("node.json", R"({
    "users": {"alice": {"token": "t"}},
    "tools": {"shout": {"argv": ["sh", "-c", "echo ${with.text} | tr a-z A-Z"]},
              "quiet": {"argv": ["/usr/bin/env", "-i", "bash", "-ec", "true ${inputs.x}"]},
              "fine": {"argv": ["sh", "-c", "echo \"$1\"", "fine", "${with.text}"]}}})");
  auto r = run_canopy(home.path, {"serve", "--config", config}, 60s);
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  INFO("stderr: " << r.err);
  CHECK_THAT(r.err, Catch::Contains("error: /tools/shout/argv/2: ${with.text} inside the "
                                    "script of 'sh -c'"));
  CHECK_THAT(r.err,
             Catch::Contains(R"(["sh", "-c", "echo \"$1\" | tr a-z A-Z", "shout", "${with.text}"])"));
  CHECK_THAT(r.err, Catch::Contains("error: /tools/quiet/argv/4: ${inputs.x} inside the "
                                    "script of 'bash -c'"));
  CHECK_THAT(r.err, !Catch::Contains("/tools/fine"));
}

TEST_CASE("a worker refuses a tools file that pastes a value into shell code",
          "[integration][cli][shell]") {
  temp_dir home;
  temp_dir files;
  auto tools = files.write("tools.json", R"({
    "tools": {"t": {"argv": ["env", "X=1", "zsh", "-c", "print ${with.x}"]}},
    "cluster": {"secret": "s"}})");
  auto r = run_canopy(home.path, {"worker", "--join", "127.0.0.1:1", "--tools", tools}, 60s);
  CHECK(r.exit_code == 2);
  INFO("stderr: " << r.err);
  CHECK_THAT(r.err, Catch::Contains(tools + ": /tools/t/argv/4: ${with.x} inside the script "
                                            "of 'zsh -c'"));
}

TEST_CASE("no example in the docs or examples/ pastes a value into shell code",
          "[integration][cli][shell]") {
  std::vector<json> docs;
  for (auto page : {"README.md", "runtime/docs/tutorial.md", "runtime/docs/guide/server.md",
                    "runtime/docs/guide/cluster.md"})
    for (auto& doc : page_documents(page))
      docs.push_back(std::move(doc));
  CHECK(docs.size() >= 4);
  std::vector<std::string> uses;
  for (auto& doc : docs)
    shell_uses(doc, uses);
  for (auto& entry : std::filesystem::recursive_directory_iterator(source_dir() + "/examples"))
    if (entry.path().extension() == ".json")
      shell_uses(json::parse(read_file(entry.path().string())), uses);
  CHECK(uses == std::vector<std::string>{});
  // The server guide's config parses as written.
  auto first = canopy::core::parse_node_config(page_documents("runtime/docs/guide/server.md").front());
  for (auto& e : first.errors)
    FAIL_CHECK(e.path << ": " << e.message);
  CHECK(first);
}

// -- graphs ------------------------------------------------------------------------------

TEST_CASE("validate refuses run and plan steps that paste a value into shell code",
          "[integration][cli][shell]") {
  temp_dir home;
  temp_dir files;
  auto file = files.write("g.json", R"({"inputs": ["who"], "steps": {
    "greet": {"run": ["sh", "-c", "echo hello ${inputs.who}"]},
    "plan": {"plan": ["bash", "-c", "./planner ${steps.greet.stdout}"], "needs": ["greet"]},
    "safe": {"run": ["sh", "-c", "echo \"$1\"", "sh", "${inputs.who}"]}}})");
  auto r = run_canopy(home.path, {"validate", file}, 60s);
  CHECK(r.exit_code == 2);
  INFO("stderr: " << r.err);
  CHECK_THAT(r.err, Catch::Contains(file + ": /steps/greet/run/2: ${inputs.who} inside the "
                                           "script of 'sh -c'"));
  CHECK_THAT(r.err, Catch::Contains(R"(["sh", "-c", "echo hello \"$1\"", "sh", "${inputs.who}"])"));
  CHECK_THAT(r.err, Catch::Contains(file + ": /steps/plan/plan/2: ${steps.greet.stdout} inside "
                                           "the script of 'bash -c'"));
  CHECK_THAT(r.err, !Catch::Contains("/steps/safe"));
}

TEST_CASE("a server answers 400 at the script's path for a graph that pastes a value into "
          "shell code",
          "[integration][server][shell]") {
  server_process::options opts;
  opts.config = {{"allow_inline_commands", true}};
  server_process srv{opts};
  auto c = srv.client(alice_token);
  auto a = post_json(c, "/v1/graphs", json::parse(R"({"name": "g", "inputs": ["who"],
    "steps": {"s": {"run": ["/bin/sh", "-xc", "echo ${inputs.who}"]}}})"));
  INFO(a.text);
  CHECK(a.status == 400);
  CHECK(a.body["error"]["code"] == "invalid_graph");
  CHECK(a.body["error"]["path"] == "/steps/s/run/2");
  CHECK_THAT(a.body["error"]["message"].get<std::string>(),
             Catch::Contains(R"(["/bin/sh", "-xc", "echo \"$1\"", "sh", "${inputs.who}"])"));
  CHECK(get_json(c, "/v1/graphs/g").status == 404);
  auto safe = post_json(c, "/v1/graphs", json::parse(R"({"name": "g", "inputs": ["who"],
    "steps": {"s": {"run": ["/bin/sh", "-xc", "echo \"$1\"", "sh", "${inputs.who}"]}}})"));
  CHECK(safe.status == 201);
}
