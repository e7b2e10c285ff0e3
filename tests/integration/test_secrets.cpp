// Bearer tokens out of the config file and 401s that say nothing about users
// (runtime/node/secrets.hpp, runtime/server/auth.hpp): `token_file` and
// `token_env` in real files and the real environment, their refusals at the
// key's path (also through `canopy serve`), the constant-time token table,
// and a real server whose 401 answers are byte-identical.

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "runtime/server/auth.hpp"
#include "runtime/node/config.hpp"
#include "runtime/node/secrets.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"
#include "tests/persistence/render_errors.hpp"

using namespace canopy::core;
using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

// -- helpers -------------------------------------------------------------------

/// Writes `content` to `name` in `dir` with `mode`. @returns the path.
std::string secret_file(const temp_dir& dir, const std::string& name, const std::string& content,
                        mode_t mode = 0600) {
  auto path = dir.write(name, content);
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path;
}

/// Sets an environment variable for one scope.
struct scoped_env {
  scoped_env(std::string name, const char* value) : name_(std::move(name)) {
    if (auto old = std::getenv(name_.c_str()))
      old_ = old;
    if (value)
      ::setenv(name_.c_str(), value, 1);
    else
      ::unsetenv(name_.c_str());
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  std::string name_;
  std::optional<std::string> old_;
};

config_result parse_users(const json& users, const std::string& base_dir = {}) {
  return parse_node_config(json{{"users", users}}, base_dir);
}

/// True when some error has `path` and a message containing `part`.
bool has_error(const std::vector<graph_error>& errors, const std::string& path,
               const std::string& part) {
  for (auto& e : errors)
    if (e.path == path && e.message.find(part) != std::string::npos)
      return true;
  return false;
}

} // namespace

// -- token_file and token_env ---------------------------------------------------------

TEST_CASE("a user's token comes from a private file or an environment variable",
          "[integration][config][secrets]") {
  temp_dir dir;
  auto a = secret_file(dir, "alice.token", "from-file\n");
  secret_file(dir, "carol.token", "crlf-file\r\n", 0640);
  secret_file(dir, "dave.token", "read-only", 0400);
  scoped_env bob{"CANOPY_TEST_BOB_TOKEN", "from-env"};
  auto result = parse_users({{"alice", {{"token_file", a}}},
                             {"bob", {{"token_env", "CANOPY_TEST_BOB_TOKEN"}}},
                             {"carol", {{"token_file", "carol.token"}}},
                             {"dave", {{"token_file", "./dave.token"}}},
                             {"erin", {{"token", "plain"}}}},
                            dir.path);
  INFO(render(result.errors));
  REQUIRE(result);
  CHECK(result.value->users == std::map<std::string, std::string>{{"alice", "from-file"},
                                                                  {"bob", "from-env"},
                                                                  {"carol", "crlf-file"},
                                                                  {"dave", "read-only"},
                                                                  {"erin", "plain"}});
}

TEST_CASE("load_node_config reads token files relative to the config file's folder",
          "[integration][config][secrets]") {
  temp_dir dir;
  secret_file(dir, "t", "tok\n");
  auto path = dir.write("node.json", R"({"users": {"alice": {"token_file": "t"}}})");
  auto result = load_node_config(path);
  INFO(render(result.errors));
  REQUIRE(result);
  CHECK(result.value->users.at("alice") == "tok");
}

TEST_CASE("bad token sources are refused at the key's path without quoting the token",
          "[integration][config][secrets]") {
  temp_dir dir;
  auto open_file = secret_file(dir, "open", "s3cr3t-open\n", 0644);
  auto group_w = secret_file(dir, "gw", "s3cr3t-gw", 0660);
  auto world_w = secret_file(dir, "ww", "s3cr3t-ww", 0602);
  auto empty = secret_file(dir, "empty", "\n");
  auto two_lines = secret_file(dir, "two", "s3cr3t-a\ns3cr3t-b\n");
  auto blank = secret_file(dir, "blank", " s3cr3t\n");
  auto big = secret_file(dir, "big", std::string(5000, 'x'));
  auto fifo = dir.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto same = secret_file(dir, "same", "ta\n");
  scoped_env unset{"CANOPY_TEST_UNSET", nullptr};
  scoped_env empty_env{"CANOPY_TEST_EMPTY", ""};
  scoped_env nl_env{"CANOPY_TEST_NL", "s3cr3t\n"};
  struct bad_case {
    json user;
    std::string path;
    std::string part;
  };
  const std::vector<bad_case> corpus{
    {{{"token_file", dir.path + "/none"}}, "/users/u/token_file", "No such file or directory"},
    {{{"token_file", open_file}}, "/users/u/token_file", "has mode 0644"},
    {{{"token_file", group_w}}, "/users/u/token_file", "has mode 0660"},
    {{{"token_file", world_w}}, "/users/u/token_file", "chmod 600"},
    {{{"token_file", dir.path}}, "/users/u/token_file", "not a regular file"},
    {{{"token_file", fifo}}, "/users/u/token_file", "not a regular file"},
    {{{"token_file", empty}}, "/users/u/token_file", "the token is empty"},
    {{{"token_file", two_lines}}, "/users/u/token_file", "line break"},
    {{{"token_file", blank}}, "/users/u/token_file", "starts or ends with a blank"},
    {{{"token_file", big}}, "/users/u/token_file", "larger than 4096 bytes"},
    {{{"token_file", ""}}, "/users/u/token_file", "got an empty string"},
    {{{"token_file", 1}}, "/users/u/token_file", "got 1"},
    {{{"token_env", "CANOPY_TEST_UNSET"}}, "/users/u/token_env", "CANOPY_TEST_UNSET is not set"},
    {{{"token_env", "CANOPY_TEST_EMPTY"}}, "/users/u/token_env", "CANOPY_TEST_EMPTY is empty"},
    {{{"token_env", "CANOPY_TEST_NL"}}, "/users/u/token_env", "line break"},
    {{{"token_env", "1X"}}, "/users/u/token_env", "no environment variable name"},
    {{{"token_env", "A-B"}}, "/users/u/token_env", "no environment variable name"},
    {{{"token", "a\tb"}}, "/users/u/token", "control character"},
    {{{"token", "x"}, {"token_file", same}}, "/users/u", "exactly one of token, token_file, "
                                                         "token_env"},
    {{{"token_env", "HOME"}, {"token", "x"}}, "/users/u", "exactly one of"},
    {json::object(), "/users/u", "missing 'token'"},
    {{{"token_path", "x"}}, "/users/u/token_path", "unknown key 'token_path' (expected one of: "
                                                   "token, token_file, token_env)"},
  };
  for (auto& c : corpus) {
    auto result = parse_users({{"u", c.user}});
    INFO("user: " << c.user.dump() << "\nerrors:\n" << render(result.errors));
    CHECK_FALSE(result);
    CHECK(has_error(result.errors, c.path, c.part));
    for (auto& e : result.errors)
      CHECK_THAT(e.message, !Catch::Contains("s3cr3t"));
  }
  // A file's token is as unique as a plain one.
  auto dup = parse_users({{"a", {{"token", "ta"}}}, {"b", {{"token_file", same}}}});
  INFO(render(dup.errors));
  CHECK(has_error(dup.errors, "/users/b/token_file", "already used by user 'a'"));
}

TEST_CASE("serve refuses a token file others can read with exit 2 and the key's path",
          "[integration][cli][secrets]") {
  temp_dir home;
  temp_dir files;
  auto token = secret_file(files, "alice.token", "s3cr3t\n", 0644);
  auto config = files.write("node.json", json{{"users", {{"alice", {{"token_file", token}}},
                                                        {"bob", {{"token_env", "NO_SUCH_VAR_X"}}}}}}
                                           .dump());
  auto r = run_canopy_env(home.path, {"serve", "--config", config}, {{"NO_SUCH_VAR_X", ""}}, 60s);
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::Contains("error: /users/alice/token_file: token file '" + token
                                    + "' has mode 0644"));
  CHECK_THAT(r.err, Catch::Contains("error: /users/bob/token_env: the environment variable "
                                    "NO_SUCH_VAR_X is empty"));
  CHECK_THAT(r.err, !Catch::Contains("s3cr3t"));
}

TEST_CASE("a server takes its users' tokens from a file and from the environment",
          "[integration][server][secrets]") {
  temp_dir files;
  auto token = secret_file(files, "alice.token", "alice-from-file\n");
  server_process::options opts;
  opts.config = {{"users",
                  {{"alice", {{"token", nullptr}, {"token_file", token}}},
                   {"bob", {{"token", nullptr}, {"token_env", "CANOPY_TEST_BOB"}}}}}};
  opts.env = {{"CANOPY_TEST_BOB", "bob-from-env"}};
  server_process srv{opts};
  for (auto& [tok, status] : std::vector<std::pair<std::string, int>>{
         {"alice-from-file", 200}, {"bob-from-env", 200}, {alice_token, 401}, {bob_token, 401},
         {"alice-from-fil", 401}}) {
    INFO("token: " << tok);
    auto c = srv.client();
    CHECK(request(c, "GET", "/v1/executions", "", "application/json",
                  {{"Authorization", "Bearer " + tok}})
            .status
          == status);
  }
}

// -- 401 ----------------------------------------------------------------------------------

TEST_CASE("the token table finds a user by the exact token only",
          "[integration][server][secrets]") {
  token_table table{{{"alice", "ta"}, {"bob", "tb"}, {"carol", "a-much-longer-token"}}};
  CHECK(table.size() == 3);
  CHECK(table.find("ta") == std::optional<std::string>{"alice"});
  CHECK(table.find("tb") == std::optional<std::string>{"bob"});
  CHECK(table.find("a-much-longer-token") == std::optional<std::string>{"carol"});
  for (auto bad : {"", "t", "taa", "TA", "ta ", " ta", "a-much-longer-toke", "tc"})
    CHECK_FALSE(table.find(bad));
  CHECK_FALSE(token_table{}.find("ta"));
}

TEST_CASE("401 answers are byte-identical whether a user exists or not, and name the Bearer "
          "scheme",
          "[integration][server][secrets]") {
  server_process srv;
  auto alice = srv.client(alice_token);
  REQUIRE(request(alice, "GET", "/v1/executions").status == 200);
  // Tokens of nobody, near misses of alice's ("ta") and bob's ("tb"),
  // other schemes and no header at all.
  std::vector<std::optional<std::string>> headers{
    std::nullopt,    "Bearer nobody", "Bearer t",  "Bearer taa", "Bearer TA",
    "Bearer tbb",    "Bearer  ta",    "Bearer ",   "bearer TA",  "Basic YWxpY2U6dGE=",
    "ta",            "Bearer tc",     "Bearer x" + std::string(5000, 'y')};
  std::set<std::string> answers;
  for (auto path : {"/v1/executions", "/v1/executions/01nosuchexecution000000000",
                    "/v1/graphs/nosuch", "/v1/agents"}) {
    for (auto& h : headers) {
      INFO(path << " with " << (h ? "Authorization: " + h->substr(0, 40) : "no header"));
      auto c = srv.client();
      httplib::Headers hs;
      if (h)
        hs.emplace("Authorization", *h);
      auto a = request(c, "GET", path, "", "application/json", hs);
      CHECK(a.status == 401);
      CHECK(a.www_authenticate == "Bearer realm=\"canopy\"");
      answers.insert(a.content_type + "\n" + a.www_authenticate + "\n" + a.text);
    }
  }
  INFO("distinct 401 answers:\n" << [&] {
    std::string all;
    for (auto& a : answers)
      all += a + "\n--\n";
    return all;
  }());
  CHECK(answers.size() == 1);
}
