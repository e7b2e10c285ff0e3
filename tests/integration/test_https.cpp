// HTTPS on the HTTP API: `tls_cert`/`tls_key` in the config, a
// self-signed certificate made by the test, real clients (httplib's, the
// CLI's), and the start-up refusals.

#include <chrono>
#include <string>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"
#include "tests/integration/test_certs.hpp"

using namespace canopy::core::test;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// A server speaking HTTPS with `cert`.
server_process::options https_server(const canopy::core::tls_files& cert) {
  server_process::options o;
  o.config = {{"tls_cert", cert.certificate}, {"tls_key", cert.key}};
  return o;
}

} // namespace

TEST_CASE("serve speaks HTTPS with tls_cert and tls_key: a client trusting the certificate "
          "registers, starts, follows and stops an execution on one kept-alive connection",
          "[integration][https]") {
  temp_dir certs;
  auto cert = make_self_signed(certs, "localhost");
  server_process srv{https_server(cert)};
  REQUIRE(srv.url().rfind("https://", 0) == 0);
  // The log line goes to stderr, which the harness drains on its own thread:
  // it may come a moment after the listening line on stdout.
  CHECK(eventually([&] { return has(srv.log(), "tls=on"); }, 10s));
  auto c = srv.client(alice_token);
  c.set_keep_alive(true);

  auto health = get_json(c, "/healthz");
  CHECK(health.status == 200);
  json graph = {{"name", "secure"},
                {"steps",
                 {{"hello", {{"fn", "echo"}, {"with", {{"v", 1}}}}},
                  {"nap", {{"fn", "sleep"}, {"with", {{"ms", 60000}}}, {"needs", {"hello"}}}}}}};
  auto reg = post_json(c, "/v1/graphs", graph);
  INFO("register: " << reg.status << " " << reg.text);
  REQUIRE(reg.status == 201);
  auto started = post_json(c, "/v1/graphs/secure/executions", {{"inputs", json::object()}});
  REQUIRE(started.status == 201);
  auto id = started.body["id"].get<std::string>();
  auto running = wait_until(c, id, [](const json& d) {
    return d["steps"]["nap"]["status"] == "running";
  });
  REQUIRE(running["steps"]["nap"]["status"] == "running");
  auto stop = post_json(c, "/v1/executions/" + id + "/stop", {{"wait", 20}});
  INFO("stop: " << stop.text);
  REQUIRE(stop.status == 200);
  CHECK(stop.body["status"] == "stopped");
  CHECK(stop_result_of(stop.body) == "stopped");

  // Server-Sent Events over TLS: the whole log, then the closing event.
  auto stream = read_sse(c, "/v1/executions/" + id + "/events");
  CHECK(stream.status == 200);
  CHECK(stream.ended);
  REQUIRE(stream.end.has_value());
  CHECK((*stream.end)["status"] == "stopped");
  CHECK(!stream.events.empty());

  // The CLI: `--server https://... --cacert FILE`.
  temp_dir home;
  auto shown = run_canopy(home.path, {"show", id, "--server", srv.url(), "--token", alice_token,
                                      "--cacert", cert.certificate, "--json"});
  INFO("show: " << shown.err);
  CHECK(shown.exit_code == 0);
  CHECK(shown.out_json()["status"] == "stopped");
  auto events = run_canopy(home.path, {"events", id, "--server", srv.url(), "--token",
                                       alice_token, "--cacert", cert.certificate});
  CHECK(events.exit_code == 0);
  CHECK(has(events.out, "execution.stopped"));
}

TEST_CASE("an HTTPS server gives nothing to plain HTTP or to a client that does not trust its "
          "certificate, and the CLI says why",
          "[integration][https]") {
  temp_dir certs;
  auto cert = make_self_signed(certs, "localhost");
  auto other = make_self_signed(certs, "other");
  server_process srv{https_server(cert)};
  auto port = std::to_string(srv.port());

  httplib::Client plain{"http://127.0.0.1:" + port};
  plain.set_connection_timeout(5, 0);
  plain.set_read_timeout(10, 0);
  auto p = plain.Get("/healthz");
  CHECK(!p); // the handshake fails: no HTTP answer at all

  httplib::Client untrusting{"https://127.0.0.1:" + port};
  untrusting.enable_server_certificate_verification(true);
  untrusting.set_ca_cert_path(other.certificate);
  auto u = untrusting.Get("/healthz");
  REQUIRE(!u);
  CHECK(u.error() == httplib::Error::SSLServerVerification);

  // The server still serves a trusting client after those failures.
  auto c = srv.client();
  CHECK(get_json(c, "/healthz").status == 200);

  temp_dir home;
  auto no_ca = run_canopy(home.path, {"ls", "--server", srv.url(), "--token", alice_token});
  CHECK(no_ca.exit_code != 0);
  CHECK(has(no_ca.err, "certificate did not verify"));
  CHECK(has(no_ca.err, "--cacert"));
  auto wrong_ca = run_canopy(home.path, {"ls", "--server", srv.url(), "--token", alice_token,
                                         "--cacert", other.certificate});
  CHECK(wrong_ca.exit_code != 0);
  CHECK(has(wrong_ca.err, "certificate did not verify"));
  auto http_to_https = run_canopy(home.path, {"ls", "--server", "http://127.0.0.1:" + port,
                                              "--token", alice_token});
  CHECK(http_to_https.exit_code != 0);
  auto cacert_on_http = run_canopy(home.path, {"ls", "--server", "http://127.0.0.1:" + port,
                                               "--token", alice_token, "--cacert",
                                               cert.certificate});
  CHECK(cacert_on_http.exit_code == 2);
  CHECK(has(cacert_on_http.err, "--cacert needs --server https://"));
}

TEST_CASE("serve refuses unusable HTTPS files with their config path and exit 2, and plain "
          "HTTP off loopback unless insecure_http says so",
          "[integration][https]") {
  temp_dir dir;
  auto cert = make_self_signed(dir, "localhost");
  auto other = make_self_signed(dir, "other");
  auto serve = [&](const json& patch, const std::string& listen = "127.0.0.1:0") {
    auto config = default_server_config();
    config.merge_patch(patch);
    config["listen"] = listen;
    auto file = dir.write("serve.json", config.dump());
    return run_canopy(dir.path + "/home", {"serve", "--config", file}, 60s);
  };
  struct bad_case {
    json patch;
    std::string path;
    std::string part;
  };
  std::vector<bad_case> corpus{
    {{{"tls_cert", cert.certificate}}, "/tls_key", "HTTPS needs both"},
    {{{"tls_key", cert.key}}, "/tls_cert", "HTTPS needs both"},
    {{{"tls_cert", dir.path + "/nope.pem"}, {"tls_key", cert.key}}, "/tls_cert", "cannot read"},
    {{{"tls_cert", cert.key}, {"tls_key", cert.key}}, "/tls_cert", "not a PEM certificate"},
    {{{"tls_cert", cert.certificate}, {"tls_key", other.key}}, "/tls_key", "does not match"},
    {{{"tls_cert", cert.certificate}, {"tls_key", ""}}, "/tls_key", "empty string"},
    {{{"tls_cert", 7}, {"tls_key", cert.key}}, "/tls_cert", "a PEM file"},
    {{{"insecure_http", "yes"}}, "/insecure_http", "true or false"},
  };
  for (auto& c : corpus) {
    auto r = serve(c.patch);
    INFO("patch: " << c.patch.dump() << "\nserve stderr: " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(has(r.err, c.path));
    CHECK(has(r.err, c.part));
  }
  // Off loopback: HTTPS, or plain HTTP only when the config says so.
  auto open = serve(json::object(), "0.0.0.0:0");
  INFO("serve 0.0.0.0 stderr: " << open.err);
  CHECK(open.exit_code == 2);
  CHECK(has(open.err, "/listen"));
  CHECK(has(open.err, "\"insecure_http\": true"));
  {
    server_process::options o;
    o.config = {{"listen", "0.0.0.0:0"}, {"tls_cert", cert.certificate}, {"tls_key", cert.key}};
    server_process srv{o};
    auto c = srv.client();
    CHECK(get_json(c, "/healthz").status == 200);
  }
  {
    server_process::options o;
    o.config = {{"listen", "0.0.0.0:0"}, {"insecure_http", true}};
    server_process srv{o};
    CHECK(eventually([&] { return has(srv.log(), "tls=off"); }, 10s));
  }
}
