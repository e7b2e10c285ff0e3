// `canopy show` and `canopy ls` for people: steps in graph order
// with when they started and how long they took, the stderr of a failed
// step; the list's age and duration columns and its filters, on a local home
// and through a server. Real processes and a real store in a temp folder;
// executions from the past are written into that store as records (the
// store is the real one; only their times are chosen), so that ages and
// durations have exact expected values.

#include <ctime>
#include <regex>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "persistence/store.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using canopy::core::event_type;
using canopy::core::step_reason;
using canopy::core::stop_result;

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

using strings = std::vector<std::string>;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

/// The line of `text` that starts with `prefix` ("" when none).
std::string line_starting(const std::string& text, const std::string& prefix) {
  for (auto& l : lines_of(text))
    if (l.rfind(prefix, 0) == 0)
      return l;
  return {};
}

/// The terminal column where `word` starts in `line` (code points before it:
/// the tree's box characters are several bytes but one column); npos when
/// it is not there.
size_t column_of(const std::string& line, const std::string& word) {
  auto pos = line.find(word);
  if (pos == std::string::npos)
    return pos;
  size_t n = 0;
  for (size_t i = 0; i < pos; ++i)
    n += (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;
  return n;
}

/// The ids of a `--json` listing, in order.
strings ids_of(const proc_result& r) {
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  strings out;
  for (auto& item : r.out_json())
    out.push_back(item["id"].get<std::string>());
  return out;
}

/// The formats of `show` and `ls` (render_show.cpp): `340ms`, `1.2s`, `12s`,
/// `3m04s`, `2h05m`, `3d04h`.
std::string expected_duration(int64_t ms) {
  char buf[32];
  if (ms < 1000)
    std::snprintf(buf, sizeof(buf), "%lldms", static_cast<long long>(ms));
  else if (ms < 10'000)
    std::snprintf(buf, sizeof(buf), "%lld.%llds", static_cast<long long>(ms / 1000),
                  static_cast<long long>(ms % 1000 / 100));
  else if (ms < 60'000)
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(ms / 1000));
  else
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(ms / 60'000),
                  static_cast<long long>(ms % 60'000 / 1000));
  return buf;
}

/// What STARTED shows for `ms` in UTC (`canopy` runs with TZ=UTC here):
/// the time of day on the day of `now`, else the date. Either when `before`
/// and `after` (the reading's bounds) fall on two days.
std::set<std::string> expected_starts(int64_t ms, int64_t before, int64_t after) {
  auto utc = [](int64_t t) {
    auto secs = static_cast<time_t>(t / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    return tm;
  };
  std::set<std::string> out;
  auto at = utc(ms);
  for (auto now : {before, after}) {
    auto today = utc(now);
    char buf[32];
    std::strftime(buf, sizeof(buf),
                  at.tm_year == today.tm_year && at.tm_yday == today.tm_yday ? "%H:%M:%S"
                                                                            : "%Y-%m-%d",
                  &at);
    out.insert(buf);
  }
  return out;
}

/// `canopy --home HOME ARGS...` with TZ=UTC.
proc_result run_utc(const std::string& home, const strings& args) {
  return run_canopy_env(home, args, {{"TZ", "UTC"}});
}

/// An id as `make_execution_id` makes one at `ms`, with `n` for randomness.
std::string id_at(int64_t ms, int n) {
  static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz";
  std::string id(26, '0');
  auto t = static_cast<uint64_t>(ms);
  for (int i = 9; i >= 0; --i, t >>= 5)
    id[static_cast<size_t>(i)] = alphabet[t & 31];
  id[25] = alphabet[n % 32];
  return id;
}

/// A settled root execution of `graph` created `age_ms` ago that ran for
/// `ran_ms`, started a second after it was created.
canopy::core::execution_record past_run(const std::string& graph, canopy::core::execution_status status,
                                  int64_t age_ms, int64_t ran_ms, int n,
                                  const std::string& owner = {}) {
  canopy::core::execution_record r;
  r.created_at = canopy::core::now_ms() - age_ms;
  r.id = id_at(r.created_at, n);
  r.root_id = r.id;
  r.graph = graph;
  r.status = status;
  if (status == canopy::core::execution_status::failed) {
    r.reason = step_reason::step_failed;
    r.error = "step 's' failed: exit code 1";
  }
  r.started_at = r.created_at + 1000;
  r.ended_at = r.started_at + ran_ms;
  r.owner = owner;
  return r;
}

/// Writes `records` into the store of `home` (which another process may
/// hold: the store takes its writers' lock).
void write_records(const std::string& home, const std::vector<canopy::core::execution_record>& records) {
  canopy::core::store_options opts;
  opts.home = home;
  auto db = canopy::core::store::open(opts);
  REQUIRE(db);
  canopy::core::write_batch b;
  b.executions = records;
  auto err = (*db)->commit(b);
  INFO(canopy::core::message_of(err));
  REQUIRE(!err);
}

/// Runs a graph of one `noop` step named `graph` to its end; @returns its id.
std::string run_quick(const std::string& home, const temp_dir& files, const std::string& graph) {
  auto file = files.write(graph + ".json",
                          json{{"name", graph}, {"steps", {{"a", {{"fn", "noop"}}}}}}.dump());
  auto r = run_canopy(home, {"run", file, "--json"});
  REQUIRE(r.exit_code == 0);
  return r.out_json()["id"].get<std::string>();
}

} // namespace

// -- show ------------------------------------------------------------------------------------

TEST_CASE("canopy show lists steps in graph order with their start and duration, and the "
          "last stderr lines under a failed step",
          "[integration][cli]") {
  temp_dir home;
  temp_dir files;
  // By name the steps would be alpha, mid, zeta; by their needs zeta comes first.
  auto file = files.write("demo.json", R"({"name": "demo", "steps": {
    "zeta": {"run": ["sh", "-c", "echo z"]},
    "alpha": {"run": ["sh", "-c", "echo a-out; for i in 1 2 3 4 5 6 7; do echo e$i >&2; done; exit 7"],
              "needs": ["zeta"]},
    "mid": {"fn": "noop", "needs": ["alpha"]}}})");
  auto run = run_canopy(home.path, {"run", file, "--json"});
  REQUIRE(run.exit_code == 1);
  auto id = run.out_json()["id"].get<std::string>();

  auto before = canopy::core::now_ms();
  auto shown = run_utc(home.path, {"show", id});
  auto after = canopy::core::now_ms();
  REQUIRE(shown.exit_code == 0);
  INFO(shown.out);
  auto lines = lines_of(shown.out);
  REQUIRE(lines.size() == 11);
  CHECK(lines[0] == "demo " + id + "  failed (step_failed)");
  CHECK(lines[1] == "error: step 'alpha' failed: exit code 7");
  CHECK(std::regex_match(lines[2], std::regex{"STEP +STATUS +STARTED +DURATION"}));
  CHECK(lines[3].rfind("├─ zeta ", 0) == 0);
  CHECK(lines[4].rfind("├─ alpha ", 0) == 0);
  // The five last stderr lines, under the step, inside the tree.
  CHECK((strings{lines.begin() + 5, lines.begin() + 10}
         == strings{"│    | e3", "│    | e4", "│    | e5", "│    | e6", "│    | e7"}));
  CHECK(std::regex_match(lines[10], std::regex{"└─ mid +pending +- +-( +\\(.*\\))?"}));
  // Columns line up with the header.
  CHECK(column_of(lines[3], "completed") == column_of(lines[2], "STATUS"));
  CHECK(column_of(lines[4], "failed") == column_of(lines[2], "STATUS"));
  CHECK(column_of(lines[10], "pending") == column_of(lines[2], "STATUS"));

  // STARTED and DURATION are the document's times.
  auto doc = run_canopy(home.path, {"show", id, "--json"}).out_json();
  for (auto [row, step, status] :
       {std::tuple{lines[3], "zeta", "completed"}, std::tuple{lines[4], "alpha", "failed"}}) {
    INFO(row);
    std::smatch m;
    REQUIRE(std::regex_match(row, m, std::regex{"(?:├|└)─ [a-z]+ +([a-z]+) +(\\S+) +(\\S+) *(.*)"}));
    auto& s = doc["steps"][step];
    CHECK(m[1].str() == status);
    auto start = ms_of(s["started_at"]);
    CHECK(expected_starts(start, before, after).count(m[2].str()) == 1);
    CHECK(m[3].str() == expected_duration(ms_of(s["ended_at"]) - start));
    if (std::string{step} == "alpha")
      CHECK(m[4].str() == "error: exit code 7");
    else
      CHECK(m[4].str().empty());
  }

  // --json keeps its fields and gains each step's kind and needs.
  CHECK(doc["steps"]["alpha"]["needs"] == json::array({"zeta"}));
  CHECK(doc["steps"]["alpha"]["kind"] == "run");
  CHECK(doc["steps"]["mid"]["kind"] == "fn");
  CHECK(doc["steps"]["zeta"]["needs"] == json::array());
  CHECK(doc["steps"]["alpha"]["result"]["exit_code"] == 7);
  CHECK(doc["steps"]["mid"]["status"] == "pending");
  CHECK(doc["steps"]["mid"]["attempt"] == 0);
}

TEST_CASE("canopy show nests a child execution's steps under the step that runs it, in "
          "columns",
          "[integration][cli]") {
  temp_dir home;
  temp_dir files;
  auto file = files.write("nest.json", R"({"name": "nest", "steps": {
    "last": {"fn": "noop", "needs": ["kid"]},
    "kid": {"graph": {"name": "inner", "steps": {
              "y": {"fn": "noop", "needs": ["x"]}, "x": {"fn": "noop"}}},
            "needs": ["first"]},
    "first": {"run": ["sh", "-c", "echo hi >&2"]}}})");
  auto run = run_canopy(home.path, {"run", file, "--json"});
  REQUIRE(run.exit_code == 0);
  auto doc = run.out_json();
  auto id = doc["id"].get<std::string>();
  auto shown = run_utc(home.path, {"show", id});
  REQUIRE(shown.exit_code == 0);
  INFO(shown.out);
  auto lines = lines_of(shown.out);
  REQUIRE(lines.size() == 8);
  auto child = run_canopy(home.path, {"show", id, "--json"}).out_json()["children"][0];
  CHECK(lines[0] == "nest " + id + "  completed");
  CHECK(lines[1].rfind("STEP", 0) == 0);
  CHECK(lines[2].rfind("├─ first ", 0) == 0);
  CHECK(lines[3].rfind("├─ kid ", 0) == 0);
  CHECK_THAT(lines[3], Catch::EndsWith("→ inner " + child["id"].get<std::string>() + " completed"));
  CHECK(lines[4].rfind("│  ├─ x ", 0) == 0);
  CHECK(lines[5].rfind("│  └─ y ", 0) == 0);
  CHECK(lines[6].rfind("└─ last ", 0) == 0);
  CHECK(lines[7] == "outputs: {}");
  // A completed step's stderr is not shown; every status starts in one column.
  CHECK(shown.out.find("hi") == std::string::npos);
  for (size_t i = 2; i <= 6; ++i)
    CHECK(column_of(lines[i], "completed") == column_of(lines[1], "STATUS"));
}

// -- ls ---------------------------------------------------------------------------------------

TEST_CASE("canopy ls shows each execution's age and duration and filters by graph, limit "
          "and age",
          "[integration][cli]") {
  temp_dir home;
  temp_dir files;
  auto r1 = run_quick(home.path, files, "alpha");
  auto r2 = run_quick(home.path, files, "alpha");
  auto old = past_run("alpha", canopy::core::execution_status::completed, 2 * 3'600'000, 184'000, 1);
  auto older = past_run("beta", canopy::core::execution_status::failed, 3 * 86'400'000, 1234, 2);
  write_records(home.path, {old, older});

  auto table = run_canopy(home.path, {"ls"});
  REQUIRE(table.exit_code == 0);
  INFO(table.out);
  auto lines = lines_of(table.out);
  REQUIRE(lines.size() == 5);
  CHECK(std::regex_match(lines[0], std::regex{"ID +GRAPH +STATUS +REASON +AGE +DURATION"}));
  CHECK(std::regex_match(lines[1], std::regex{r2 + " +alpha +completed +- +[0-9]+s ago +[0-9.]+m?s"}));
  CHECK(std::regex_match(lines[3], std::regex{old.id + " +alpha +completed +- +2h ago +3m04s"}));
  CHECK(std::regex_match(lines[4],
                         std::regex{older.id + " +beta +failed +step_failed +3d ago +1\\.2s"}));
  CHECK(lines[3].find("2h ago") == lines[0].find("AGE"));

  CHECK(ids_of(run_canopy(home.path, {"ls", "--json"})) == strings{r2, r1, old.id, older.id});
  CHECK(ids_of(run_canopy(home.path, {"ls", "--json", "--graph", "alpha"}))
        == strings{r2, r1, old.id});
  CHECK(ids_of(run_canopy(home.path, {"ls", "--json", "--graph", "beta"})) == strings{older.id});
  CHECK(ids_of(run_canopy(home.path, {"ls", "--json", "--graph", "gamma"})).empty());
  CHECK(ids_of(run_canopy(home.path, {"ls", "--json", "--limit", "2"})) == strings{r2, r1});
  CHECK(ids_of(run_canopy(home.path, {"ls", "--json", "--since", "1h"})) == strings{r2, r1});
  CHECK(ids_of(run_canopy(home.path, {"ls", "--json", "--since", "90m"})) == strings{r2, r1});
  CHECK(ids_of(run_canopy(home.path, {"ls", "--json", "--since", "1d"}))
        == strings{r2, r1, old.id});
  CHECK(ids_of(run_canopy(home.path, {"ls", "--json", "--since", "4d"}))
        == strings{r2, r1, old.id, older.id});
  CHECK(ids_of(run_canopy(home.path, {"ls", "--json", "--since", "1d", "--graph", "alpha",
                                      "--limit", "1"}))
        == strings{r2});
  CHECK(ids_of(run_canopy(home.path, {"ls", "--json", "--status", "failed"}))
        == strings{older.id});
  // The table takes the same filters.
  auto filtered = run_canopy(home.path, {"ls", "--graph", "beta"});
  CHECK(lines_of(filtered.out).size() == 2);
  CHECK(line_starting(filtered.out, older.id) == lines[4]);

  // -o json is --json; -o table is the table.
  auto as_json = run_canopy(home.path, {"ls", "--json", "--all"});
  CHECK(run_canopy(home.path, {"ls", "-o", "json", "--all"}).out == as_json.out);
  CHECK(run_canopy(home.path, {"ls", "--output", "json", "--json", "--all"}).out == as_json.out);
  auto as_table = run_canopy(home.path, {"ls", "-o", "table"});
  CHECK(as_table.exit_code == 0);
  CHECK(std::regex_match(lines_of(as_table.out)[0], std::regex{"ID +GRAPH .*"}));
}

TEST_CASE("canopy ls rejects a bad limit, age or output format with exit 2 and says why",
          "[integration][cli]") {
  temp_dir home;
  temp_dir files;
  run_quick(home.path, files, "alpha");
  for (auto [args, says] :
       {std::pair{strings{"ls", "--limit", "-1"}, "--limit '-1'"},
        std::pair{strings{"ls", "--limit", "0"}, "--limit '0'"},
        std::pair{strings{"ls", "--limit", "2x"}, "--limit '2x'"},
        std::pair{strings{"ls", "--since", "5x"}, "bad age '5x'"},
        std::pair{strings{"ls", "--since", ""}, "bad age ''"},
        std::pair{strings{"ls", "-o", "yaml"}, "-o 'yaml': expected json or table"},
        std::pair{strings{"ls", "-o", "table", "--json"}, "disagree"},
        std::pair{strings{"ls", "--graph", ""}, "--graph"},
        std::pair{strings{"ls", "--status", "sleeping"}, "unknown status 'sleeping'"},
        std::pair{strings{"ls", "--nodes", "--limit", "3"}, "--nodes"}}) {
    auto r = run_canopy(home.path, args);
    INFO(args.back() << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK_THAT(r.err, Catch::Contains(says));
  }
}

TEST_CASE("canopy ls --server filters by graph, limit and age as local ls does",
          "[integration][cli][server]") {
  temp_dir home;
  server_process::options opts;
  opts.home = home.path;
  server_process srv{opts};
  auto c = srv.client(alice_token);
  auto start = [&](const std::string& graph) {
    auto run = post_json(c, "/v1/graphs/" + graph + "/executions", {{"inputs", json::object()}});
    REQUIRE(run.status == 201);
    auto id = run.body["id"].get<std::string>();
    REQUIRE(wait_status(c, id, "completed")["status"] == "completed");
    return id;
  };
  for (auto name : {"alpha", "beta"})
    REQUIRE(post_json(c, "/v1/graphs", {{"name", name}, {"steps", {{"a", {{"fn", "noop"}}}}}})
              .status
            == 201);
  auto a1 = start("alpha");
  auto a2 = start("alpha");
  auto b1 = start("beta");
  auto old = past_run("alpha", canopy::core::execution_status::completed, 2 * 3'600'000, 184'000, 1,
                      "alice");
  auto bobs = past_run("alpha", canopy::core::execution_status::completed, 2 * 3'600'000, 5, 2, "bob");
  write_records(home.path, {old, bobs});

  auto ls = [&](strings args) {
    args.insert(args.end(), {"--server", srv.url(), "--token", alice_token});
    return run_canopy(home.path, args);
  };
  CHECK(ids_of(ls({"ls", "--json"})) == strings{b1, a2, a1, old.id});
  CHECK(ids_of(ls({"ls", "--json", "--graph", "alpha"})) == strings{a2, a1, old.id});
  CHECK(ids_of(ls({"ls", "--json", "--limit", "2"})) == strings{b1, a2});
  CHECK(ids_of(ls({"ls", "--json", "--since", "1h"})) == strings{b1, a2, a1});
  CHECK(ids_of(ls({"ls", "--json", "--since", "1d", "--graph", "alpha", "--limit", "3"}))
        == strings{a2, a1, old.id});
  CHECK(ls({"ls", "-o", "json"}).out == ls({"ls", "--json"}).out);
  // The same rows as the local home lists, but only the token's user's.
  CHECK(ids_of(run_canopy(home.path, {"ls", "--json", "--graph", "alpha", "--since", "1d"}))
        == strings{a2, a1, bobs.id, old.id});
  auto table = ls({"ls", "--graph", "alpha"});
  INFO(table.out);
  CHECK(std::regex_match(line_starting(table.out, old.id),
                         std::regex{old.id + " +alpha +completed +- +2h ago +3m04s"}));
  // Bad values never reach the server.
  for (auto args : {strings{"ls", "--limit", "-1"}, strings{"ls", "--since", "5x"},
                    strings{"ls", "-o", "yaml"}}) {
    auto r = ls(args);
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
  }
  // The API's own `since`.
  auto page = get_json(c, "/v1/executions?since=1h&graph=alpha");
  REQUIRE(page.status == 200);
  CHECK(page.body["items"].size() == 2);
  auto bad = get_json(c, "/v1/executions?since=5x");
  CHECK(bad.status == 400);
  CHECK_THAT(bad.body["error"]["message"].get<std::string>(), Catch::Contains("5x"));
}
