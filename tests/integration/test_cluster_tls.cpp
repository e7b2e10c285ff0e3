// TLS on the cluster port: a real `canopy serve
// --cluster` supervisor and real `canopy worker` processes with certificates
// made at test time by the `openssl` command (a CA per test, certificates it
// signs). What crosses the port is read by a relay in the middle (as a
// capture of the port would show it). Every wait is an event wait with a
// deadline (an output line, a process exit, a listing polled until it shows
// the change), never a fixed sleep.

#include <arpa/inet.h>
#include <signal.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "persistence/error.hpp"
#include "runtime/node/config.hpp"
#include "runtime/node/error.hpp"
#include "runtime/node/runtime.hpp"
#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"
#include "tests/integration/tcp_relay.hpp"
#include "tests/integration/test_certs.hpp"

using namespace canopy::core;
using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

/// Long and unusual, so that finding it in a capture means it was sent.
const std::string tls_secret = "tls-test-secret-5d8c1f7e";

// -- nodes ------------------------------------------------------------------------

/// A supervisor on 127.0.0.1:0 with fast timing, no tools of its own, TLS
/// with `tls` (plain TCP when null).
server_process::options supervisor(const json& tls) {
  // A TSan build scales the timeout: there the handshakes of refused workers,
  // retried every heartbeat, made a joined worker's heartbeats late enough
  // to drop it.
  json cluster = {{"secret", tls_secret},
                  {"heartbeat", "500ms"},
                  {"timeout", std::to_string(2 * slow_build) + "s"}};
  if (!tls.is_null())
    cluster["tls"] = tls;
  server_process::options o;
  o.config = {{"cluster", cluster}};
  o.args = {"--cluster", "127.0.0.1:0"};
  return o;
}

/// A worker's tools file: the secret, TLS with `tls` (none when null) and
/// one tool `echo_NAME` that prints `marker`.
std::string worker_tools(const temp_dir& dir, const std::string& name, const json& tls,
                         const std::string& marker = "hello") {
  json cluster = {{"secret", tls_secret}};
  if (!tls.is_null())
    cluster["tls"] = tls;
  json doc = {{"tools", {{"echo_" + name, {{"argv", {"echo", marker}}}}}}, {"cluster", cluster}};
  return dir.write(name + ".json", doc.dump(2));
}

/// `canopy worker` joining 127.0.0.1:PORT as `name`, with fast timing.
worker_process::options worker(int port, const std::string& name, const std::string& tools) {
  worker_process::options o;
  o.args = {"--join", "127.0.0.1:" + std::to_string(port), "--name", name, "--heartbeat",
            "300ms", "--timeout", std::to_string(2 * slow_build) + "s", "--tools", tools};
  return o;
}

std::set<std::string> node_names(const server_process& s) {
  auto c = s.client(alice_token);
  auto a = get_json(c, "/v1/nodes");
  std::set<std::string> out;
  if (a.status == 200 && a.body.contains("items"))
    for (auto& n : a.body["items"])
      out.insert(n.value("name", ""));
  return out;
}

/// Registers and starts a graph with one step `s` running tool `tool`.
/// @returns the finished execution document.
json run_tool(const server_process& sup, const std::string& tool) {
  auto c = sup.client(alice_token);
  auto g = post_json(c, "/v1/graphs",
                     {{"name", "g_" + tool},
                      {"steps", {{"s", {{"tool", tool}}}}},
                      {"outputs", {{"said", "${steps.s.stdout}"}}}});
  INFO("POST /v1/graphs: " << g.status << " " << g.text);
  REQUIRE(g.status == 201);
  auto e = post_json(c, "/v1/graphs/g_" + tool + "/executions", {{"inputs", json::object()}});
  INFO("POST executions: " << e.status << " " << e.text);
  REQUIRE(e.status == 201);
  return wait_status(c, e.body.value("id", ""), "completed", 60s);
}

/// Sends `bytes` to 127.0.0.1:PORT over plain TCP and reads the answer until
/// the server closes the connection (or 10 s pass).
std::string plain_exchange(int port, const std::string& bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  std::string answer;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0)
      continue;
    char buf[4096];
    auto n = ::read(fd, buf, sizeof(buf));
    if (n <= 0)
      break;
    answer.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return answer;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("a worker whose certificate the cluster CA signed joins a TLS supervisor and runs a "
          "step",
          "[integration][cluster][tls]") {
  temp_dir dir;
  auto ca = make_ca(dir, "cluster-ca");
  server_process sup{supervisor(tls_json(issue_cert(dir, ca, "supervisor")))};
  int port = sup.cluster_port();
  INFO("supervisor stdout: " << sup.out() << "\nlog: " << sup.log());
  REQUIRE(port > 0);
  // Log lines go to stderr, drained on the harness's own thread: they may
  // come a moment after the stdout line waited for.
  CHECK(eventually([&] { return has(sup.log(), "tls=on"); }, 10s));
  auto w1_tls = tls_json(issue_cert(dir, ca, "w1"));
  worker_process w1{worker(port, "w1", worker_tools(dir, "w1", w1_tls, "ran-on-w1"))};
  INFO("w1 stderr: " << w1.err());
  REQUIRE(w1.wait_joined(port, "w1"));
  CHECK(eventually([&] { return has(w1.err(), "tls=on"); }, 10s));
  REQUIRE(eventually([&] { return node_names(sup).count("w1") == 1; }, 10s));
  // The tool exists on w1 only: the step runs there, over the TLS connection.
  auto doc = run_tool(sup, "echo_w1");
  INFO("execution: " << doc.dump());
  REQUIRE(doc["status"] == "completed");
  CHECK(doc["steps"]["s"]["node"] == "w1");
  CHECK(doc["outputs"] == json{{"said", "ran-on-w1\n"}});
  CHECK(w1.stop(SIGTERM) == 0);
}

TEST_CASE("failed TLS handshakes on the cluster port do not drop a joined worker",
          "[integration][cluster][tls]") {
  // CAF's openssl module leaves OpenSSL's error queue full after a failed
  // handshake; the next read of a healthy connection on the same thread was
  // then taken for an error and the connection closed (actors/tls.cpp).
  temp_dir dir;
  auto ca = make_ca(dir, "cluster-ca");
  server_process sup{supervisor(tls_json(issue_cert(dir, ca, "supervisor")))};
  int port = sup.cluster_port();
  REQUIRE(port > 0);
  worker_process w1{worker(port, "w1", worker_tools(dir, "w1", tls_json(issue_cert(dir, ca, "w1")),
                                                  "still-here"))};
  INFO("w1 stderr: " << w1.err());
  REQUIRE(w1.wait_joined(port, "w1"));
  REQUIRE(eventually([&] { return node_names(sup).count("w1") == 1; }, 10s));
  // Plain-TCP clients that speak no TLS: each handshake fails on the
  // supervisor's multiplexer thread, which closes the connection.
  for (int i = 0; i < 5; ++i)
    plain_exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  // The joined worker's connection carries a step afterwards, and was never
  // lost (a lost worker would rejoin, so the log is what tells).
  auto doc = run_tool(sup, "echo_w1");
  INFO("execution: " << doc.dump() << "\nsupervisor log: " << sup.log());
  REQUIRE(doc["status"] == "completed");
  CHECK(doc["outputs"] == json{{"said", "still-here\n"}});
  CHECK_FALSE(has(sup.log(), "event=node.lost"));
  CHECK_FALSE(has(w1.err(), "event=lost"));
  CHECK(w1.stop(SIGTERM) == 0);
}

TEST_CASE("a TLS supervisor refuses a worker with a certificate from another CA and a plain "
          "worker though both present the secret",
          "[integration][cluster][tls]") {
  temp_dir dir;
  auto ca = make_ca(dir, "cluster-ca");
  auto other = make_ca(dir, "other-ca");
  server_process sup{supervisor(tls_json(issue_cert(dir, ca, "supervisor")))};
  int port = sup.cluster_port();
  INFO("supervisor log: " << sup.log());
  REQUIRE(port > 0);
  // The rogue trusts both CAs (so it accepts the supervisor and passes its
  // own start-up check), but its certificate is from the other one; the
  // plain worker speaks no TLS at all.
  auto both = dir.write("both-cas.pem", read_file(other.cert) + read_file(ca.cert));
  auto rogue_tls = tls_json(issue_cert(dir, other, "rogue", both));
  worker_process rogue{worker(port, "rogue", worker_tools(dir, "rogue", rogue_tls))};
  worker_process plain{worker(port, "plain", worker_tools(dir, "plain", nullptr))};
  INFO("rogue stderr: " << rogue.err() << "\nplain stderr: " << plain.err());
  auto retried = [](const std::string&, const std::string& err) {
    return has(err, "event=retry");
  };
  REQUIRE(rogue.wait_for(retried, 30s));
  REQUIRE(plain.wait_for(retried, 30s));
  // A worker with a certificate from the cluster CA still joins after them.
  auto good_tls = tls_json(issue_cert(dir, ca, "good"));
  worker_process good{worker(port, "good", worker_tools(dir, "good", good_tls))};
  INFO("good stderr: " << good.err());
  REQUIRE(good.wait_joined(port, "good"));
  REQUIRE(eventually([&] { return node_names(sup).count("good") == 1; }, 10s));
  auto names = node_names(sup);
  INFO("supervisor log now: " << sup.log() << "\ngood stderr now: " << good.err());
  CHECK(names == std::set<std::string>{"supervisor", "good"});
  CHECK_FALSE(has(rogue.out(), "joined"));
  CHECK_FALSE(has(plain.out(), "joined"));
  // Refused at the handshake, not by the secret: they keep trying, and the
  // supervisor never saw a join to refuse.
  CHECK(rogue.running());
  CHECK(plain.running());
  CHECK_FALSE(has(sup.log(), "rogue"));
  CHECK(sup.running());
}

TEST_CASE("a TLS worker does not join a supervisor whose certificate another CA signed, "
          "though that supervisor knows the secret",
          "[integration][cluster][tls]") {
  temp_dir dir;
  auto ca = make_ca(dir, "cluster-ca");
  auto other = make_ca(dir, "other-ca");
  // The impostor trusts both CAs (it would admit the worker, whose secret it
  // shares), but its own certificate is from the other CA.
  auto both = dir.write("both-cas.pem", read_file(other.cert) + read_file(ca.cert));
  server_process impostor{supervisor(tls_json(issue_cert(dir, other, "impostor", both)))};
  int port = impostor.cluster_port();
  INFO("impostor log: " << impostor.log());
  REQUIRE(port > 0);
  worker_process w{
    worker(port, "w1", worker_tools(dir, "w1", tls_json(issue_cert(dir, ca, "w1"))))};
  INFO("worker stderr: " << w.err());
  REQUIRE(w.wait_for([](const std::string&, const std::string& err) {
    return has(err, "event=retry");
  }, 30s));
  // The worker refused the handshake, so no join (and no secret) reached
  // the impostor: it would have admitted and listed it.
  CHECK_FALSE(has(w.out(), "joined"));
  CHECK(node_names(impostor) == std::set<std::string>{"supervisor"});
  // (Its log names a node it heard of as `node=NAME`; a bare "w1" may be
  // part of the temp home's random name.)
  CHECK_FALSE(has(impostor.log(), "node=w1"));
  CHECK(w.running());
}

TEST_CASE("the secret and a step's arguments cross a TLS cluster port only encrypted, while a "
          "plain port shows them",
          "[integration][cluster][tls]") {
  temp_dir dir;
  const std::string marker = "step-marker-93be0a";
  // Control: on a plain (loopback) port the relay sees the secret and the
  // step, so the checks below can fail.
  {
    server_process sup{supervisor(nullptr)};
    int port = sup.cluster_port();
    REQUIRE(port > 0);
    tcp_relay relay{port};
    worker_process w{worker(relay.port(), "wplain", worker_tools(dir, "wplain", nullptr, marker))};
    INFO("plain worker stderr: " << w.err());
    REQUIRE(w.wait_joined(relay.port(), "wplain"));
    REQUIRE(eventually([&] { return has(relay.captured(), tls_secret); }, 10s));
    CHECK(has(relay.captured(), "canopy_node_info"));
  }
  auto ca = make_ca(dir, "cluster-ca");
  server_process sup{supervisor(tls_json(issue_cert(dir, ca, "supervisor")))};
  int port = sup.cluster_port();
  INFO("supervisor log: " << sup.log());
  REQUIRE(port > 0);
  tcp_relay relay{port};
  auto wtls = tls_json(issue_cert(dir, ca, "wtls"));
  worker_process w{worker(relay.port(), "wtls", worker_tools(dir, "wtls", wtls, marker))};
  INFO("tls worker stderr: " << w.err());
  REQUIRE(w.wait_joined(relay.port(), "wtls"));
  REQUIRE(eventually([&] { return node_names(sup).count("wtls") == 1; }, 10s));
  auto doc = run_tool(sup, "echo_wtls");
  // What the nodes saw, as of now (an INFO above holds only its own moment).
  INFO("execution: " << doc.dump() << "\nsupervisor log now: " << sup.log()
                     << "\ntls worker stderr now: " << w.err());
  REQUIRE(doc["outputs"] == json{{"said", marker + "\n"}});
  auto seen = relay.captured();
  INFO("captured " << seen.size() << " bytes");
  CHECK(seen.size() > 1000);
  CHECK_FALSE(has(seen, tls_secret));
  CHECK_FALSE(has(seen, marker));
  CHECK_FALSE(has(seen, "canopy_node_info"));
  CHECK_FALSE(has(seen, "echo_wtls"));
  // TLS records throughout: the first byte is a handshake record (0x16).
  CHECK(seen.at(0) == '\x16');

  // A plain-TCP client that speaks first gets nothing in clear back (at
  // most a TLS alert record), and the port keeps serving.
  auto answer = plain_exchange(port, "CANOPY plain client " + tls_secret + "\r\n\r\n");
  INFO("answer: " << answer.size() << " bytes");
  CHECK((answer.empty() || answer.at(0) == '\x15'));
  CHECK_FALSE(has(answer, "canopy"));
  CHECK(sup.running());
  CHECK(node_names(sup).count("wtls") == 1);
}

TEST_CASE("an incomplete or unusable cluster TLS setup and a cleartext cluster off loopback are "
          "refused at start with the key's path",
          "[integration][cluster][tls]") {
  temp_dir dir;
  auto ca = make_ca(dir, "cluster-ca");
  auto other = make_ca(dir, "other-ca");
  auto good = issue_cert(dir, ca, "node");
  auto foreign = issue_cert(dir, other, "foreign", ca.cert);
  std::map<std::string, std::string> env{{"CANOPY_CLUSTER_SECRET", ""}};

  auto serve = [&](const json& cluster, const std::string& listen = "127.0.0.1:0") {
    auto config = default_server_config();
    config["cluster"] = cluster;
    config["cluster"]["secret"] = tls_secret;
    auto file = dir.write("serve.json", config.dump());
    return run_canopy_env(dir.path + "/home", {"serve", "--config", file, "--cluster", listen},
                          env, 60s);
  };
  struct bad_case {
    json tls;
    std::string path;
    std::string part;
  };
  const std::vector<bad_case> corpus{
    {{{"certificate", good.certificate}}, "/cluster/tls/key", "missing 'key'"},
    {{{"certificate", good.certificate}, {"key", good.key}}, "/cluster/tls/ca", "missing 'ca'"},
    {{{"certificate", good.certificate}, {"key", good.key}, {"ca", ""}}, "/cluster/tls/ca",
     "empty string"},
    {true, "/cluster/tls", "or false"},
    {{{"certificate", dir.path + "/nope.pem"}, {"key", good.key}, {"ca", ca.cert}},
     "/cluster/tls/certificate", "cannot read"},
    {{{"certificate", good.certificate}, {"key", foreign.key}, {"ca", ca.cert}},
     "/cluster/tls/key", "does not match the certificate"},
    {{{"certificate", good.certificate}, {"key", good.key}, {"ca", good.key}},
     "/cluster/tls/ca", "not a PEM CA certificate"},
    {{{"certificate", foreign.certificate}, {"key", foreign.key}, {"ca", ca.cert}},
     "/cluster/tls/certificate", "not signed by the CA"},
    {{{"certificate", good.certificate}, {"key", good.key}, {"ca", ca.cert}, {"cafile", "x"}},
     "/cluster/tls/cafile", "unknown key 'cafile'"},
  };
  for (auto& c : corpus) {
    auto r = serve({{"tls", c.tls}});
    INFO("tls: " << c.tls.dump() << "\nserve stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(has(r.err, c.path));
    CHECK(has(r.err, c.part));
  }
  // Off loopback, plain TCP only when the config says so.
  auto open = serve(json::object(), "0.0.0.0:0");
  INFO("serve 0.0.0.0 stderr: " << open.err);
  CHECK(open.exit_code == 2);
  CHECK(has(open.err, "/cluster/tls"));
  CHECK(has(open.err, "\"tls\": false"));
  {
    auto o = supervisor(nullptr);
    o.config["cluster"]["tls"] = false;
    o.args = {"--cluster", "0.0.0.0:0"};
    server_process sup{o};
    CHECK(sup.cluster_port() > 0);
    CHECK(eventually([&] { return has(sup.log(), "tls=off"); }, 10s));
  }

  // The worker's side: the same rules for its tools file and --join.
  auto join = [&](const std::string& tools, const std::string& address) {
    return run_canopy_env(dir.path + "/h2", {"worker", "--join", address, "--tools", tools}, env,
                          60s);
  };
  auto partial = dir.write("partial.json",
                           json{{"cluster", {{"secret", tls_secret},
                                             {"tls", {{"certificate", good.certificate},
                                                      {"key", good.key}}}}}}
                             .dump());
  auto r1 = join(partial, "127.0.0.1:1");
  INFO("partial worker stderr: " << r1.err);
  CHECK(r1.exit_code == 2);
  CHECK(has(r1.err, "/cluster/tls/ca"));
  auto r2 = join(worker_tools(dir, "foreign", tls_json(foreign)), "127.0.0.1:1");
  INFO("foreign worker stderr: " << r2.err);
  CHECK(r2.exit_code == 2);
  CHECK(has(r2.err, "/cluster/tls/certificate"));
  auto r3 = join(worker_tools(dir, "cleartext", nullptr), "192.0.2.1:4242");
  INFO("cleartext worker stderr: " << r3.err);
  CHECK(r3.exit_code == 2);
  CHECK(has(r3.err, "/cluster/tls"));
  CHECK(has(r3.err, "--join 192.0.2.1:4242"));
  // `"tls": false`: it starts and keeps trying to reach the address.
  json opt_out = {{"tools", json::object()},
                  {"cluster", {{"secret", tls_secret}, {"tls", false}}}};
  worker_process::options o;
  o.args = {"--join", "192.0.2.1:4242", "--name", "optout", "--tools",
            dir.write("optout.json", opt_out.dump())};
  worker_process w{o};
  INFO("opt-out worker stderr: " << w.err());
  CHECK(w.wait_for([](const std::string&, const std::string& err) {
    return has(err, "event=worker.start") && has(err, "tls=off");
  }));
  CHECK(w.running());
  CHECK(!std::filesystem::exists(dir.path + "/h2"));
}

TEST_CASE("cluster.tls parses into the three files and false opts out", "[integration][config]") {
  auto on = parse_node_config(json::parse(
    R"({"cluster": {"tls": {"certificate": "c.pem", "key": "k.pem", "ca": "ca.pem"}}})"));
  REQUIRE(on);
  REQUIRE(on.value->cluster->tls);
  CHECK(on.value->cluster->tls->certificate == "c.pem");
  CHECK(on.value->cluster->tls->key == "k.pem");
  CHECK(on.value->cluster->tls->ca == "ca.pem");
  CHECK_FALSE(on.value->cluster->tls_disabled);
  // Relative paths start from the config file's folder.
  auto rel = parse_node_config(json::parse(R"({"cluster": {"tls": {
      "certificate": "c.pem", "key": "/k.pem", "ca": "x/ca.pem"}}})"),
                               "/etc/canopy");
  REQUIRE(rel);
  CHECK(rel.value->cluster->tls->certificate == "/etc/canopy/c.pem");
  CHECK(rel.value->cluster->tls->key == "/k.pem");
  CHECK(rel.value->cluster->tls->ca == "/etc/canopy/x/ca.pem");
  auto off = parse_node_config(json::parse(R"({"cluster": {"tls": false}})"));
  REQUIRE(off);
  CHECK_FALSE(off.value->cluster->tls);
  CHECK(off.value->cluster->tls_disabled);
  auto none = parse_node_config(json::parse(R"({"cluster": {}})"));
  REQUIRE(none);
  CHECK_FALSE(none.value->cluster->tls);
  CHECK_FALSE(none.value->cluster->tls_disabled);
}

TEST_CASE("runtime::open refuses cluster TLS files that do not load instead of publishing",
          "[integration][cluster][tls]") {
  temp_dir dir;
  auto ca = make_ca(dir, "cluster-ca");
  auto node = issue_cert(dir, ca, "node");
  runtime_options opts;
  opts.home = dir.path + "/home";
  cluster_listen cl;
  cl.secret = tls_secret;
  cl.tls = node;
  cl.tls->key = dir.path + "/missing.key";
  opts.cluster = cl;
  auto rt = runtime::open(opts);
  REQUIRE_FALSE(rt);
  CHECK(is(rt.error(), runtime_errc::cluster_port));
  CHECK(has(message_of(rt.error()), "cluster.tls.key"));
  // With usable files it opens and publishes the port.
  opts.cluster->tls = node;
  auto ok = runtime::open(opts);
  REQUIRE(ok);
  CHECK((*ok)->cluster_port() > 0);
}
