// Waits for signals through the real binary: a graph waits for a person's
// approval (`canopy approve`, `canopy signal`, `POST .../signals/NAME`), a
// stop sets the wait pending at once, a signal sent while stopped completes
// it on resume with its deadline unchanged, answers are checked (schema,
// approvers, an ended wait, idempotency), and a crashed server's restart
// rebuilds the deadline from the store.

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>

#include "persistence/duration.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"
#include "tests/integration/server_test_helpers.hpp"

using namespace canopy::core::test;
using namespace canopy::core::test::server_test;
using namespace std::chrono_literals;

namespace {

/// The example graph of examples/approval.
std::string example() {
  return source_dir() + "/examples/approval/approval.json";
}

/// `canopy show ID --json`.
json show_doc(const std::string& home, const std::string& id) {
  auto r = run_canopy(home, {"show", id, "--json"});
  REQUIRE(r.exit_code == 0);
  return r.out_json();
}

/// Waits until step `step` of `id` has `status`; @returns the document.
json await_step(const std::string& home, const std::string& id, const std::string& step,
                const std::string& status) {
  json doc;
  bool ok = eventually(
    [&] {
      doc = show_doc(home, id);
      return doc["steps"][step]["status"] == status;
    },
    30s, 20ms);
  INFO(doc.dump(2));
  REQUIRE(ok);
  return doc;
}

/// Starts the example detached on `home`; @returns its id once it waits.
std::string start_waiting(const std::string& home) {
  auto r = run_canopy(home, {"run", example(), "--input", "topic=Q3", "--detach", "--json"});
  REQUIRE(r.exit_code == 0);
  auto id = r.out_json()["id"].get<std::string>();
  await_step(home, id, "approve", "waiting");
  return id;
}

/// An approval graph for the server tests: one wait, `approvers` if given.
json approval_graph(const std::string& name, const json& approvers = nullptr) {
  json wait = {{"signal", "approval"},
               {"prompt", "Ship it?"},
               {"schema",
                {{"type", "object"},
                 {"required", {"approved"}},
                 {"properties", {{"approved", {{"type", "boolean"}}}}}}},
               {"timeout", "1h"}};
  if (!approvers.is_null())
    wait["approvers"] = approvers;
  return {{"name", name},
          {"steps",
           {{"approve", {{"wait", wait}}},
            {"after", {{"fn", "echo"}, {"needs", {"approve"}},
                       {"with", {{"ok", "${steps.approve.value.approved}"}}}}}}},
          {"outputs", {{"ok", "${steps.after.ok}"}}}};
}

json wait_step_status(httplib::Client& c, const std::string& id, const std::string& step,
                      const std::string& status) {
  return wait_until(c, id, [&](const json& doc) { return step_is(doc, step, status); });
}

} // namespace

TEST_CASE("a graph waits for an approval: canopy waits lists it with its prompt, canopy "
          "approve answers it and the approved branch runs",
          "[integration][cli][waits]") {
  temp_dir home;
  auto id = start_waiting(home.path);
  auto doc = show_doc(home.path, id);
  CHECK(doc["status"] == "running");
  CHECK(doc["steps"]["approve"]["prompt"] == "Publish \"Q3: a first draft\"?");
  CHECK(doc["steps"]["approve"]["deadline"].is_string());

  auto waits = run_canopy(home.path, {"waits", "--json"});
  REQUIRE(waits.exit_code == 0);
  auto list = waits.out_json();
  REQUIRE(list.size() == 1);
  CHECK(list[0]["execution_id"] == id);
  CHECK(list[0]["path"] == "approve");
  CHECK(list[0]["signal"] == "approval");
  CHECK(list[0]["options"]["Approve"] == json{{"approved", true}});
  auto listed = run_canopy(home.path, {"ls", "--status", "waiting", "--json"});
  REQUIRE(listed.exit_code == 0);
  REQUIRE(listed.out_json().size() == 1);
  CHECK(listed.out_json()[0]["id"] == id);
  auto shown = run_canopy(home.path, {"show", id, "--color", "never"});
  CHECK_THAT(shown.out, Catch::Contains("· approval · 23h59m left"));
  CHECK_THAT(shown.out, Catch::Contains("Publish \"Q3: a first draft\"?  (canopy signal " + id
                                        + " approval --value JSON)"));
  auto human = run_canopy(home.path, {"waits"});
  CHECK_THAT(human.out, Catch::Contains("approve  waiting · approval · 23h59m left"));
  CHECK_THAT(human.out, Catch::Contains("canopy signal " + id + " approval"));

  auto a = run_canopy(home.path, {"approve", id, "--message", "ship it", "--json"});
  INFO(a.out << a.err);
  REQUIRE(a.exit_code == 0);
  CHECK(a.out_json()["status"] == "consumed");
  CHECK(a.out_json()["consumed_by"]["step"] == "approve");

  auto done = await_step(home.path, id, "notify", "completed");
  REQUIRE(eventually([&] { return show_doc(home.path, id)["status"] == "completed"; }, 30s, 20ms));
  done = show_doc(home.path, id);
  CHECK(done["steps"]["approve"]["result"]["value"] == json{{"approved", true}, {"note", "ship it"}});
  CHECK(done["steps"]["approve"]["result"]["timed_out"] == false);
  CHECK(done["steps"]["publish"]["status"] == "completed");
  CHECK(done["steps"]["revise"]["status"] == "skipped");
  CHECK(done["outputs"]["result"]["published"] == "Q3: a first draft");
  auto events = run_canopy(home.path, {"events", id, "--json"}); // checked by the helper
  REQUIRE(events.exit_code == 0);
  CHECK_THAT(events.out, Catch::Contains("\"type\":\"step.waiting\""));
  CHECK_THAT(events.out, Catch::Contains("\"type\":\"signal.received\""));
  CHECK_THAT(events.out, Catch::Contains("\"type\":\"signal.consumed\""));
}

TEST_CASE("a stop sets a waiting step pending at once, a signal sent while stopped is buffered, "
          "and resume takes it with the deadline unchanged",
          "[integration][cli][waits]") {
  temp_dir home;
  auto id = start_waiting(home.path);
  auto deadline = show_doc(home.path, id)["steps"]["approve"]["deadline"];
  auto stop = run_canopy(home.path, {"stop", id});
  REQUIRE(stop.exit_code == 0);
  CHECK_THAT(stop.out, Catch::Contains("stopped"));
  auto stopped = show_doc(home.path, id);
  CHECK(stopped["status"] == "stopped");
  CHECK(stopped["steps"]["approve"]["status"] == "pending");
  CHECK(stopped["steps"]["approve"]["reason"] == "requested");
  CHECK(stopped["steps"]["approve"]["deadline"] == deadline);
  CHECK(stopped["steps"]["draft"]["status"] == "completed");

  auto sent = run_canopy(home.path, {"signal", id, "approval", "--value", R"({"approved": false})",
                                     "--wait", "0", "--json"});
  INFO(sent.out << sent.err);
  REQUIRE(sent.exit_code == 0);
  CHECK(sent.out_json()["status"] == "buffered");

  auto resumed = run_canopy(home.path, {"resume", id, "--json"});
  REQUIRE(resumed.exit_code == 0);
  auto doc = show_doc(home.path, id);
  CHECK(doc["status"] == "completed");
  CHECK(doc["steps"]["draft"]["attempt"] == 1); // never run again
  CHECK(doc["steps"]["approve"]["deadline"] == deadline);
  CHECK(doc["steps"]["approve"]["result"]["value"] == json{{"approved", false}});
  CHECK(doc["steps"]["revise"]["status"] == "completed");
  CHECK(doc["steps"]["publish"]["status"] == "skipped");
}

TEST_CASE("canopy signal refuses a value its wait's schema does not admit, an unknown name and "
          "an answer to an ended wait, and an idempotency key sends once",
          "[integration][cli][waits][validation]") {
  temp_dir home;
  auto id = start_waiting(home.path);
  auto bad = run_canopy(home.path, {"signal", id, "approval", "--value", R"({"approved": "yes"})"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("/approved: expected a boolean, got a string"));
  auto unknown = run_canopy(home.path, {"signal", id, "aproval", "--value", "true"});
  CHECK(unknown.exit_code == 4);
  CHECK_THAT(unknown.err, Catch::Contains("did you mean 'approval'?"));
  auto not_json = run_canopy(home.path, {"signal", id, "approval", "--value", "yes"});
  CHECK(not_json.exit_code == 2);

  auto first = run_canopy(home.path, {"signal", id, "approval", "--value",
                                      R"({"approved": true})", "--key", "k1", "--json"});
  REQUIRE(first.exit_code == 0);
  auto again = run_canopy(home.path, {"signal", id, "approval", "--value",
                                      R"({"approved": true})", "--key", "k1", "--json"});
  REQUIRE(again.exit_code == 0);
  CHECK(again.out_json()["id"] == first.out_json()["id"]);
  auto other = run_canopy(home.path, {"signal", id, "approval", "--value",
                                      R"({"approved": false})", "--key", "k1"});
  CHECK(other.exit_code == 1);
  CHECK_THAT(other.err, Catch::Contains("Idempotency-Key 'k1' was used for another signal"));

  REQUIRE(eventually([&] { return show_doc(home.path, id)["status"] == "completed"; }, 30s, 20ms));
  auto late = run_canopy(home.path, {"signal", id, "approval", "--value", R"({"approved": true})"});
  CHECK(late.exit_code == 1);
  CHECK_THAT(late.err, Catch::Contains("completed"));
  auto events = run_canopy(home.path, {"events", id, "--json"}); // one consumption
  REQUIRE(events.exit_code == 0);
}

TEST_CASE("over HTTP a signal is checked against the schema and approvers, answered 200 with "
          "the wait that took it, and 409 once the wait ended",
          "[integration][server][waits]") {
  server_process srv;
  auto alice = srv.client(alice_token);
  auto bob = srv.client(bob_token);
  register_graph(alice, approval_graph("ship"));
  auto id = start(alice, "ship")["id"].get<std::string>();
  wait_step_status(alice, id, "approve", "waiting");
  auto path = "/v1/executions/" + id + "/signals/approval";

  auto waits = get_json(alice, "/v1/waits");
  REQUIRE(waits.status == 200);
  REQUIRE(waits.body["items"].size() == 1);
  CHECK(waits.body["items"][0]["prompt"] == "Ship it?");
  CHECK(get_json(bob, "/v1/waits").body["items"].empty());
  // A start may carry the answer: stored with the execution, taken at once.
  auto pre = post_json(alice, "/v1/graphs/ship/executions",
                       {{"signals", {{"approval", {{"approved", false}}}}}});
  REQUIRE(pre.status == 201);
  auto pre_done = wait_status(alice, pre.body["id"].get<std::string>(), "completed");
  CHECK(pre_done["outputs"]["ok"] == false);
  check_error(post_json(alice, "/v1/graphs/ship/executions",
                        {{"signals", {{"approval", {{"approved", "no"}}}}}}),
              400, "invalid_input", "/signals/approval/approved");
  auto waiting = get_json(alice, "/v1/executions?status=waiting");
  REQUIRE(waiting.status == 200);
  REQUIRE(waiting.body["items"].size() == 1);
  CHECK(waiting.body["items"][0]["id"] == id);
  auto metrics = request(alice, "GET", "/metrics");
  CHECK_THAT(metrics.text, Catch::Contains("canopy_waiting_steps 1\n"));

  check_error(post_json(alice, path, {{"value", {{"approved", 1}}}}), 400, "invalid_value",
              "/value/approved");
  check_error(post_json(alice, "/v1/executions/" + id + "/signals/nope",
                        {{"value", true}}),
              404, "unknown_signal");
  check_error(post_json(bob, path, {{"value", {{"approved", true}}}}), 404, "not_found");
  check_error(post_json(alice, path, {{"value", true}, {"fail", {{"message", "x"}}}}), 400);

  auto ok = post_json(alice, path, {{"value", {{"approved", true}}}});
  INFO(ok.text);
  REQUIRE(ok.status == 200);
  CHECK(ok.body["status"] == "consumed");
  CHECK(ok.body["consumed_by"]["execution_id"] == id);
  CHECK(ok.body["consumed_by"]["step"] == "approve");
  auto done = wait_status(alice, id, "completed");
  CHECK(done["outputs"]["ok"] == true);
  CHECK(get_json(alice, "/v1/executions?status=waiting").body["items"].empty());
  CHECK_THAT(request(alice, "GET", "/metrics").text,
             Catch::Contains("canopy_waiting_steps 0\n"));
  CHECK(done["steps"]["approve"]["result"]["by"] == "user:alice");

  auto late = post_json(alice, path, {{"value", {{"approved", true}}}});
  check_error(late, 409, "wait_ended");
  CHECK(late.body["error"]["status"] == "completed");
  auto audit = get_json(alice, "/v1/executions/" + id + "/signals");
  REQUIRE(audit.status == 200);
  REQUIRE(audit.body["items"].size() == 1);
  CHECK(audit.body["items"][0]["status"] == "consumed");
}

TEST_CASE("over HTTP approvers may answer a wait of another user's tree, its owner may not, "
          "and a failure signal fails the wait as rejected",
          "[integration][server][waits]") {
  server_process srv;
  auto alice = srv.client(alice_token);
  auto bob = srv.client(bob_token);
  register_graph(alice, approval_graph("ship", json::array({"bob"})));
  auto id = start(alice, "ship")["id"].get<std::string>();
  wait_step_status(alice, id, "approve", "waiting");
  auto path = "/v1/executions/" + id + "/signals/approval";
  check_error(post_json(alice, path, {{"value", {{"approved", true}}}}), 403, "forbidden");
  auto inbox = get_json(bob, "/v1/waits");
  REQUIRE(inbox.body["items"].size() == 1);
  CHECK(inbox.body["items"][0]["execution_id"] == id);
  auto no = post_json(bob, path, {{"fail", {{"message", "not this quarter"}}}});
  INFO(no.text);
  REQUIRE(no.status == 200);
  auto failed = wait_status(alice, id, "failed");
  CHECK(failed["steps"]["approve"]["status"] == "failed");
  CHECK(failed["steps"]["approve"]["reason"] == "rejected");
  CHECK(failed["steps"]["approve"]["error"] == "rejected: not this quarter");
}

TEST_CASE("a server killed while its only active step waits: a plain restart resumes the tree "
          "and the deadline set before the crash fires",
          "[integration][server][waits][reliability]") {
  temp_dir home;
  json doc = approval_graph("short");
  doc["steps"]["approve"]["wait"]["timeout"] = "5s";
  doc["steps"]["approve"]["wait"]["on_timeout"] = "default";
  doc["steps"]["approve"]["wait"]["default"] = {{"approved", false}};
  std::string id;
  json deadline;
  {
    server_process::options o;
    o.home = home.path;
    server_process srv{o};
    auto c = srv.client(alice_token);
    register_graph(c, doc);
    id = start(c, "short")["id"].get<std::string>();
    deadline = wait_step_status(c, id, "approve", "waiting")["steps"]["approve"]["deadline"];
    srv.kill();
  }
  server_process::options o;
  o.home = home.path; // no --resume-interrupted: a tree of waits only is resumed anyway
  server_process srv{o};
  auto up = canopy::core::now_ms();
  auto c = srv.client(alice_token);
  auto done = wait_status(c, id, "completed");
  CHECK(done["steps"]["approve"]["deadline"] == deadline);
  CHECK(done["steps"]["approve"]["result"]["timed_out"] == true);
  CHECK(done["outputs"]["ok"] == false);
  // It ended at its deadline (or at once, when the restart came after it),
  // not after a fresh timeout of 5 s.
  auto ended = ms_of(done["steps"]["approve"]["ended_at"]);
  CHECK(ended >= ms_of(deadline));
  CHECK(ended < std::max(ms_of(deadline), up) + 2500);
}

TEST_CASE("a tree of waits that another process recovered after its server died is re-armed "
          "by the next server start",
          "[integration][server][waits][reliability]") {
  temp_dir home;
  std::string id;
  {
    server_process::options o;
    o.home = home.path;
    server_process srv{o};
    auto c = srv.client(alice_token);
    register_graph(c, approval_graph("later"));
    id = start(c, "later")["id"].get<std::string>();
    wait_step_status(c, id, "approve", "waiting");
    srv.kill();
  }
  // Another program on the home finds the dead owner first and ends its tree.
  auto noop = home.path + "/noop.json";
  std::ofstream{noop} << R"({"steps": {"a": {"fn": "noop"}}})";
  REQUIRE(run_canopy(home.path, {"run", noop}).exit_code == 0);
  auto recovered = run_canopy(home.path, {"show", id, "--json"});
  REQUIRE(recovered.exit_code == 0);
  CHECK(recovered.out_json()["status"] == "stopped");
  CHECK(recovered.out_json()["reason"] == "interrupted");

  server_process::options o;
  o.home = home.path; // no --resume-interrupted
  server_process srv{o};
  auto c = srv.client(alice_token);
  auto armed = wait_step_status(c, id, "approve", "waiting");
  CHECK(armed["status"] == "running");
  auto r = c.Post(("/v1/executions/" + id + "/signals/approval").c_str(),
                  R"({"value": {"approved": true}})", "application/json");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(wait_status(c, id, "completed")["outputs"]["ok"] == true);
}

TEST_CASE("signals given at the start are stored with the execution and taken when the wait "
          "arms, and a start with a signal no wait declares stores nothing",
          "[integration][cli][waits]") {
  temp_dir home;
  auto r = run_canopy(home.path, {"run", example(), "--input", "topic=Q4", "--signal",
                                  R"(approval={"approved": false, "note": "later"})", "--json"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  auto doc = r.out_json();
  CHECK(doc["status"] == "completed");
  CHECK(doc["steps"]["revise"]["status"] == "completed");
  CHECK(doc["steps"]["approve"]["result"]["value"]["note"] == "later");
  auto bad = run_canopy(home.path, {"run", example(), "--input", "topic=Q4", "--signal",
                                    R"(aproval={"approved": true})"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Catch::Contains("/signals/aproval: no wait of the graph takes signal "
                                      "'aproval'; did you mean 'approval'?"));
  auto invalid = run_canopy(home.path, {"run", example(), "--input", "topic=Q4", "--signal",
                                        R"(approval={"approved": "yes"})"});
  CHECK(invalid.exit_code == 2);
  CHECK_THAT(invalid.err, Catch::Contains("/signals/approval/approved"));
  auto all = run_canopy(home.path, {"ls", "--json"});
  CHECK(all.out_json().size() == 1); // the refused starts stored nothing
}
