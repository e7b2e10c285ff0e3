// The published API document: `GET /v1/openapi.json` serves
// runtime/server/openapi.json without a token, and every operation it describes is
// a route of the server. (That every answer of the HTTP tests matches it is
// checked on each answer: tests/integration/openapi_check.hpp.)

#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "tests/integration/helpers.hpp"
#include "tests/integration/server_process.hpp"

using namespace canopy::core::test;

TEST_CASE("GET /v1/openapi.json serves the OpenAPI 3.1 document without a token, and every "
          "operation in it is a route of the server",
          "[integration][server][openapi]") {
  server_process srv;
  auto anon = srv.client();
  auto a = get_json(anon, "/v1/openapi.json");
  REQUIRE(a.status == 200);
  CHECK(a.content_type == "application/json");
  std::ifstream in{std::string{CANOPY_SOURCE_DIR} + "/runtime/server/openapi.json"};
  std::stringstream file;
  file << in.rdbuf();
  CHECK(a.body == json::parse(file.str()));
  CHECK(a.body["openapi"] == "3.1.0");

  // Each path with `x` for its parameters: the route exists (no `no route`
  // 404, no 405) for each method the document gives it.
  auto c = srv.client(alice_token);
  size_t operations = 0;
  for (auto& [path, item] : a.body["paths"].items()) {
    std::string concrete;
    for (size_t i = 0; i < path.size(); ++i) {
      if (path[i] == '{') {
        concrete += "x";
        i = path.find('}', i);
      } else {
        concrete += path[i];
      }
    }
    for (auto& [method, op] : item.items()) {
      if (method != "get" && method != "post" && method != "delete" && method != "put"
          && method != "patch")
        continue;
      ++operations;
      std::string m = method;
      for (auto& ch : m)
        ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      INFO(m << " " << concrete);
      httplib::Headers h;
      if (concrete == "/v1/executions/x/events")
        h.emplace("Accept", "application/json");
      auto r = request(c, m, concrete, m == "GET" || m == "DELETE" ? "" : "{}",
                       "application/json", h);
      CHECK(r.status != 405);
      CHECK(r.status != 0);
      if (r.status == 404)
        CHECK(r.text.find("no route") == std::string::npos);
    }
  }
  CHECK(operations >= 21);
}

TEST_CASE("a 405 names the methods the resource has in its Allow header",
          "[integration][server]") {
  server_process srv;
  auto c = srv.client(alice_token);
  auto a = request(c, "PUT", "/v1/graphs", "{}");
  CHECK(a.status == 405);
  CHECK(a.allow == "GET, HEAD, POST");
  auto b = request(c, "POST", "/healthz", "{}");
  CHECK(b.status == 405);
  CHECK(b.allow == "GET, HEAD");
  auto d = request(c, "GET", "/v1/executions/abc/stop");
  CHECK(d.status == 405);
  CHECK(d.allow == "POST");
}

TEST_CASE("answers are gzip-compressed for a client that also accepts brotli (brotli at "
          "httplib's quality costs hundreds of ms)",
          "[integration][server]") {
  server_process srv;
  auto c = srv.client();
  c.set_decompress(false);
  auto res = c.Get("/v1/openapi.json", {{"Accept-Encoding", "gzip, deflate, br"}});
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->get_header_value("Content-Encoding") == "gzip");
  auto only_br = c.Get("/v1/openapi.json", {{"Accept-Encoding", "br"}});
  REQUIRE(only_br);
  CHECK(only_br->get_header_value("Content-Encoding").empty());
  CHECK(json::parse(only_br->body)["openapi"] == "3.1.0");
}
