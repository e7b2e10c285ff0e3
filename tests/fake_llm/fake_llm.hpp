#pragma once

// The model provider double (tests/fake_llm/fake_llm.py) as a test object:
// started in its own process group on a free 127.0.0.1 port with a script of
// replies, its request log readable at any time, killed and reaped when the
// object goes.

#include <csignal>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/integration/helpers.hpp"

extern char** environ;

namespace canopy::core::test {

class fake_llm {
public:
  /// Starts the double with `replies` (see fake_llm.py) and waits until it listens.
  explicit fake_llm(const nlohmann::json& replies) {
    auto script = dir_.write("script.json", nlohmann::json{{"replies", replies}}.dump());
    log_ = dir_.path + "/log.jsonl";
    auto port_file = dir_.path + "/port";
    std::string python = "/usr/bin/python3";
    std::string program = source_dir() + "/tests/fake_llm/fake_llm.py";
    std::vector<std::string> args{python, program, "--script", script, "--log", log_,
                                  "--port-file", port_file};
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, 0); // its own group: killed as a whole
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    int rc = posix_spawn(&pid_, python.c_str(), nullptr, &attr, argv.data(), environ);
    posix_spawnattr_destroy(&attr);
    REQUIRE(rc == 0);
    REQUIRE(eventually([&] { return std::ifstream{port_file}.good(); }));
    std::ifstream{port_file} >> port_;
    REQUIRE(port_ > 0);
  }

  ~fake_llm() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }

  fake_llm(const fake_llm&) = delete;
  fake_llm& operator=(const fake_llm&) = delete;

  /// `http://127.0.0.1:PORT/v1`
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }

  /// Every log entry so far (see fake_llm.py).
  std::vector<nlohmann::json> log() const {
    std::vector<nlohmann::json> out;
    std::ifstream in{log_};
    for (std::string line; std::getline(in, line);)
      if (!line.empty())
        out.push_back(nlohmann::json::parse(line));
    return out;
  }

  /// The log entries of kind `event`.
  std::vector<nlohmann::json> events(const std::string& event) const {
    std::vector<nlohmann::json> out;
    for (auto& e : log())
      if (e["event"] == event)
        out.push_back(e);
    return out;
  }

private:
  temp_dir dir_;
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

} // namespace canopy::core::test
