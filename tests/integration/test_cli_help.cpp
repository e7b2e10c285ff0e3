// `canopy --help` grouped by purpose and `canopy completion bash|zsh`,
// driven through the real binary and a real bash.

#include <catch2/catch.hpp>

#include <fstream>

#include "tests/integration/helpers.hpp"

using namespace canopy::core::test;

namespace {

/// What bash's completion function offers for the words of `line` (the last
/// word is the one being completed; "" completes an empty word).
std::vector<std::string> complete(const std::string& script, std::vector<std::string> line) {
  std::string words;
  for (auto& w : line)
    words += " '" + w + "'";
  auto cmd = "source '" + script + "'; COMP_WORDS=(" + words + "); COMP_CWORD="
             + std::to_string(line.size() - 1) + "; _canopy; printf '%s\\n' \"${COMPREPLY[@]}\"";
  auto r = run_command({"bash", "-c", cmd});
  REQUIRE(r.exit_code == 0);
  std::vector<std::string> out;
  std::string item;
  for (char c : r.out) {
    if (c == '\n') {
      if (!item.empty())
        out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

} // namespace

TEST_CASE("canopy --help lists every command under a heading of its purpose",
          "[integration][cli]") {
  temp_dir home;
  auto r = run_canopy(home.path, {"--help"});
  REQUIRE(r.exit_code == 0);
  // A command without a heading would land under CLI11's default one.
  CHECK_THAT(r.out, !Catch::Contains("Subcommands:"));
  auto at = [&](const std::string& s) { return r.out.find(s); };
  for (auto heading : {"Run:", "Inspect:", "Agents:", "Nodes:", "Graphs:", "Maintenance:",
                       "About:"})
    CHECK(at(std::string{"\n"} + heading + "\n") != std::string::npos);
  CHECK(at("\nRun:\n") < at("  resume "));
  CHECK(at("  resume ") < at("\nInspect:\n"));
  CHECK(at("\nInspect:\n") < at("  show "));
  CHECK(at("\nAbout:\n") < at("  completion "));
  CHECK(!has_store(home.path));
}

TEST_CASE("bash completion offers commands, sub-commands, options and an option's choices",
          "[integration][cli]") {
  temp_dir dir;
  auto r = run_canopy(dir.path + "/home", {"completion", "bash"});
  REQUIRE(r.exit_code == 0);
  auto script = dir.path + "/canopy.bash";
  std::ofstream{script} << r.out;

  auto top = complete(script, {"canopy", ""});
  for (auto c : {"run", "resume", "stop", "show", "ls", "logs", "events", "agent", "serve", "worker",
                 "graph", "prune", "validate", "completion", "version", "signal", "approve",
                 "reject", "waits"})
    CHECK(has(top, c));
  CHECK(complete(script, {"canopy", "re"}) == std::vector<std::string>{"resume", "reject"});
  CHECK(complete(script, {"canopy", "res"}) == std::vector<std::string>{"resume"});
  auto agent = complete(script, {"canopy", "agent", ""});
  CHECK(has(agent, "send"));
  CHECK(has(agent, "history"));
  CHECK(!has(agent, "run"));
  CHECK(complete(script, {"canopy", "graph", ""}) == std::vector<std::string>{"push", "ls"});
  auto run_opts = complete(script, {"canopy", "run", "--"});
  CHECK(has(run_opts, "--json"));
  CHECK(has(run_opts, "--input"));
  CHECK(has(run_opts, "--home")); // the root's options follow a command
  CHECK(!has(run_opts, "--detached-fd")); // hidden stays hidden
  CHECK(std::count(run_opts.begin(), run_opts.end(), "--help") == 1);
  auto colours = complete(script, {"canopy", "--color", ""});
  CHECK(colours == std::vector<std::string>{"auto", "always", "never"});
  // A value is skipped when finding the command: `--home X ag` completes `agent`.
  CHECK(complete(script, {"canopy", "--home", "x", "ag"}) == std::vector<std::string>{"agent"});
  // A file argument completes file names.
  std::ofstream{dir.path + "/graph-one.json"} << "{}";
  auto files = complete(script, {"canopy", "run", dir.path + "/graph-"});
  CHECK(files == std::vector<std::string>{dir.path + "/graph-one.json"});
}

TEST_CASE("zsh completion loads the same function through bashcompinit, and another shell "
          "is refused",
          "[integration][cli]") {
  temp_dir home;
  auto bash = run_canopy(home.path, {"completion", "bash"});
  auto zsh = run_canopy(home.path, {"completion", "zsh"});
  REQUIRE(zsh.exit_code == 0);
  CHECK_THAT(zsh.out, Catch::StartsWith("#compdef canopy\n")
                        && Catch::Contains("autoload -U +X bashcompinit && bashcompinit\n")
                        && Catch::Contains("\n_canopy_bash() {")
                        && Catch::Contains("complete -o filenames -F _canopy_bash canopy\n"));
  auto fish = run_canopy(home.path, {"completion", "fish"});
  CHECK(fish.exit_code == 2);
  CHECK_THAT(fish.err, Catch::Contains("fish"));
}

TEST_CASE("zsh completes the first Tab with the script autoloaded from its fpath",
          "[integration][cli]") {
  // An interactive zsh in a pseudo-terminal (zsh's zpty), as a user's: the
  // script installed as `_canopy` in a folder of $fpath, compinit, then
  // `canopy resu` and Tab; the driver waits for the completed word.
  temp_dir dir;
  auto zsh = run_canopy(dir.path, {"completion", "zsh"});
  REQUIRE(zsh.exit_code == 0);
  {
    std::ofstream f{dir.path + "/_canopy"};
    f << zsh.out;
  }
  auto bin_dir = std::string{CANOPY_BINARY}.substr(0, std::string{CANOPY_BINARY}.rfind('/'));
  auto r = run_command({"timeout", "30", "zsh", "-f",
                        std::string{CANOPY_SOURCE_DIR} + "/tests/integration/zsh_complete.zsh",
                        dir.path, bin_dir, "canopy resu", "canopy resume"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("completed: canopy resume"));
}
