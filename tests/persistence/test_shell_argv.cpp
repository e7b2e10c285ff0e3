// Tests of the shell rule (persistence/shell_argv.hpp): every
// spelling of a shell run with `-c` whose script holds a reference is found,
// safe forms are not, and the error shows the safe argv.

#include "persistence/shell_argv.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace canopy::core;

namespace {

// -- helpers -------------------------------------------------------------------

/// The argv as JSON, from a brace list of strings.
json argv_of(std::vector<std::string> items) {
  return json(std::move(items));
}

} // namespace

// -- found ---------------------------------------------------------------------------

TEST_CASE("a shell run with -c and a reference in its script is found in every spelling",
          "[persistence][shell]") {
  const std::vector<std::vector<std::string>> refused{
    {"sh", "-c", "echo ${with.text} | tr a-z A-Z"},
    {"bash", "-c", "echo ${with.text}"},
    {"dash", "-c", "echo ${with.text}"},
    {"zsh", "-c", "echo ${with.text}"},
    {"ksh", "-c", "echo ${with.text}"},
    {"ash", "-c", "echo ${with.text}"},
    {"mksh", "-c", "echo ${with.text}"},
    {"busybox", "sh", "-c", "echo ${with.text}"},
    {"/bin/sh", "-c", "echo ${with.text}"},
    {"/usr/bin/bash", "-c", "echo ${with.text}"},
    {"./sh", "-c", "echo ${with.text}"},
    {"sh", "-ec", "echo ${with.text}"},
    {"sh", "-xc", "echo ${with.text}"},
    {"bash", "-ce", "echo ${with.text}"},
    {"sh", "-e", "-c", "echo ${with.text}"},
    {"sh", "+e", "-c", "echo ${with.text}"},
    {"sh", "-c", "--", "echo ${with.text}"},
    {"bash", "-o", "pipefail", "-c", "echo ${with.text}"},
    {"bash", "-eo", "pipefail", "-c", "echo ${with.text}"},
    {"bash", "-O", "extglob", "-c", "echo ${with.text}"},
    {"bash", "--norc", "--rcfile", "/dev/null", "-c", "echo ${with.text}"},
    {"sh", "-c", "echo \"${inputs.topic}\""},
    {"sh", "-c", "printf '%s' '${steps.a.stdout}'"},
    {"sh", "-c", "echo pre-${inputs.a}-post", "name", "arg"},
    {"env", "sh", "-c", "echo ${with.text}"},
    {"/usr/bin/env", "bash", "-c", "echo ${with.text}"},
    {"env", "-i", "PATH=/bin:/usr/bin", "sh", "-c", "echo ${with.text}"},
    {"env", "-", "sh", "-c", "echo ${with.text}"},
    {"env", "-u", "HOME", "sh", "-c", "echo ${with.text}"},
    {"env", "-iuHOME", "sh", "-c", "echo ${with.text}"},
    {"env", "-C", "/tmp", "sh", "-c", "echo ${with.text}"},
    {"env", "--unset=HOME", "--chdir", "/tmp", "sh", "-c", "echo ${with.text}"},
    {"env", "--ignore-environment", "--", "X=1", "sh", "-c", "echo ${with.text}"},
    {"env", "env", "sh", "-c", "echo ${with.text}"},
    {"env", "-S", "sh -c 'echo ${with.text}'"},
    {"env", "-Ssh -c \"echo ${with.text}\""},
    {"env", "-S", "-i sh -ec 'echo ${with.text}'"},
    {"env", "--split-string=bash -c 'echo ${with.text}'"},
    {"/usr/bin/env", "-S", "bash -c", "echo ${with.text}"},
  };
  for (auto& argv : refused) {
    auto j = argv_of(argv);
    INFO("argv: " << j.dump());
    auto use = find_shell_script_use(j);
    REQUIRE(use);
    CHECK_FALSE(use->references.empty());
    CHECK(check_shell_argv(j, "/x", "t"));
  }
}

TEST_CASE("the finding names the script's index, the shell and each reference once",
          "[persistence][shell]") {
  auto use = find_shell_script_use(
    argv_of({"env", "-i", "/bin/bash", "-eo", "pipefail", "-c",
             "echo ${with.a} ${inputs.b} ${with.a} $${HOME}"}));
  REQUIRE(use);
  CHECK(use->script == 6);
  CHECK(use->shell == "/bin/bash");
  CHECK(use->references == std::vector<std::string>{"${with.a}", "${inputs.b}"});
  auto split = find_shell_script_use(argv_of({"env", "-S", "sh -c 'echo ${with.a}'"}));
  REQUIRE(split);
  CHECK(split->script == shell_script_use::npos);
  CHECK(split->shell == "sh");
}

// -- not found ------------------------------------------------------------------------

TEST_CASE("values passed after the script, in the environment or to a script file pass",
          "[persistence][shell]") {
  const std::vector<std::vector<std::string>> accepted{
    {"sh", "-c", "echo \"$1\" | tr a-z A-Z", "shout", "${with.text}"},
    {"bash", "-c", "printf '%s' \"$1\"", "bash", "${inputs.topic}"},
    {"env", "TEXT=${with.text}", "sh", "-c", "echo \"$TEXT\""},
    {"sh", "tools/write.sh", "${with.text}"},
    {"bash", "-e", "tools/write.sh", "${with.text}"},
    {"sh", "-c", "echo $${HOME} $$ $PATH"},
    {"sh", "-c", "echo $T"},
    {"sh", "-c"},
    {"echo", "-c", "${with.text}"},
    {"shellcheck", "-c", "${with.text}"},
    {"/usr/bin/sha256sum", "-c", "${with.text}"},
    {"env", "-u", "sh", "printf", "-c", "${with.text}"},
    {"env", "X=${with.a}", "python3", "-c", "print(1)"},
    {"${inputs.program}", "-c", "echo"},
    {"sh", "-c", "echo ${HOME}"}, // malformed: graph validation reports it
  };
  for (auto& argv : accepted) {
    auto j = argv_of(argv);
    INFO("argv: " << j.dump());
    CHECK_FALSE(find_shell_script_use(j));
    CHECK_FALSE(check_shell_argv(j, "/x", "t"));
  }
  CHECK_FALSE(find_shell_script_use(json::parse(R"(["sh", "-c", 1])")));
  CHECK_FALSE(find_shell_script_use(json::parse(R"("sh -c ${with.a}")")));
  CHECK_FALSE(find_shell_script_use(json::array()));
}

// -- the error ---------------------------------------------------------------------------

TEST_CASE("the shell error points at the script and shows the argv with positional values",
          "[persistence][shell]") {
  auto e = check_shell_argv(argv_of({"sh", "-c", "echo ${with.text} | tr a-z A-Z"}),
                            "/tools/shout/argv", "shout");
  REQUIRE(e);
  CHECK(e->path == "/tools/shout/argv/2");
  CHECK(e->code.empty());
  CHECK_THAT(e->message, Catch::Contains("${with.text} inside the script of 'sh -c'")
                           && Catch::Contains("shell code")
                           && Catch::Contains(
                             R"(["sh", "-c", "echo \"$1\" | tr a-z A-Z", "shout", "${with.text}"])")
                           && Catch::Contains(
                             R"(["env", "VALUE=${with.text}", "sh", "-c", "echo \"$VALUE\""])"));
}

TEST_CASE("the safe argv quotes each value for where it stands and follows existing arguments",
          "[persistence][shell]") {
  auto quoted = check_shell_argv(
    argv_of({"/bin/bash", "-ec", "echo \"x ${with.a}\" '${with.b}' ${with.a}"}), "/steps/s/run",
    "");
  REQUIRE(quoted);
  CHECK(quoted->path == "/steps/s/run/2");
  CHECK_THAT(quoted->message,
             Catch::Contains(R"(["/bin/bash", "-ec", "echo \"x $1\" ''\"$2\"'' \"$1\"", "bash", )"
                             R"("${with.a}", "${with.b}"])"));
  auto after = check_shell_argv(
    argv_of({"env", "-i", "sh", "-c", "cp \"$1\" ${inputs.to}", "cp", "${inputs.from}"}),
    "/steps/s/run", "");
  REQUIRE(after);
  CHECK(after->path == "/steps/s/run/4");
  CHECK_THAT(after->message,
             Catch::Contains(R"(["env", "-i", "sh", "-c", "cp \"$1\" \"$2\"", "cp", )"
                             R"("${inputs.from}", "${inputs.to}"])"));
  auto split = check_shell_argv(argv_of({"env", "-S", "sh -c 'echo ${with.a}'"}), "/x", "t");
  REQUIRE(split);
  CHECK(split->path == "/x");
  CHECK_THAT(split->message, Catch::Contains(R"(["sh", "-c", "echo \"$1\"", "t", "${with.a}"])"));
}

TEST_CASE("a tenth positional value is written so that it is no reference",
          "[persistence][shell]") {
  std::string script = "echo";
  for (int i = 0; i < 10; ++i)
    script += " ${with.v" + std::to_string(i) + "}";
  auto e = check_shell_argv(argv_of({"sh", "-c", script}), "/x", "t");
  REQUIRE(e);
  CHECK_THAT(e->message, Catch::Contains(R"(\"$9\" \"$${10}\")"));
}

// -- graph validation --------------------------------------------------------------------

TEST_CASE("graph validation refuses run and plan argv that paste references into shell code",
          "[persistence][shell]") {
  auto result = parse_graph(json::parse(R"({"inputs": ["who"], "steps": {
    "a": {"run": ["sh", "-c", "echo ${inputs.who}"]},
    "p": {"plan": ["/bin/dash", "-c", "plan ${steps.a.stdout}"], "needs": ["a"]},
    "kid": {"graph": {"inputs": ["w"], "steps": {
      "b": {"run": ["env", "ksh", "-c", "echo ${inputs.w}"]}}}, "with": {"w": "${inputs.who}"}},
    "ok": {"run": ["sh", "-c", "echo \"$1\"", "sh", "${inputs.who}"]}}})"),
                            ".");
  REQUIRE_FALSE(result);
  std::vector<std::string> paths;
  for (auto& e : result.errors)
    paths.push_back(e.path);
  std::sort(paths.begin(), paths.end());
  CHECK(paths == std::vector<std::string>{"/steps/a/run/2", "/steps/kid/graph/steps/b/run/3",
                                          "/steps/p/plan/2"});
}
