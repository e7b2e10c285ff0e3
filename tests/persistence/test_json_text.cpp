// Strict JSON text (persistence/json_text.hpp): duplicate keys, bytes after
// the value, NUL bytes, and files that are not regular files.

#include "persistence/json_text.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "persistence/error.hpp"
#include "persistence/graph.hpp"

using namespace canopy::core;
using json = nlohmann::json;

namespace fs = std::filesystem;

namespace {

/// The error message of parsing `text`, or "" when it parsed.
std::string error_of(std::string_view text) {
  auto doc = parse_json_text(text);
  return doc ? std::string{} : message_of(doc.error());
}

/// A temporary folder, removed at the end of the test.
struct temp_dir {
  fs::path path;
  temp_dir() {
    char tmpl[] = "/tmp/canopy-json-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

} // namespace

TEST_CASE("strict JSON parses a well-formed document", "[persistence][json]") {
  auto doc = parse_json_text(R"({"a": [1, {"b": true}], "c": "x"})");
  REQUIRE(doc);
  CHECK((*doc)["a"][1]["b"] == true);
}

TEST_CASE("a duplicate key at the top level is an error with its path", "[persistence][json]") {
  CHECK(error_of(R"({"fn": "noop", "fn": "fail"})")
        == "malformed JSON at /fn: duplicate key 'fn' (an object holds each key once)");
}

TEST_CASE("a duplicate key deep inside objects and arrays names the path of its object",
          "[persistence][json]") {
  auto text = R"({"steps": {"a": {"fn": "noop"}, "b": {"needs": ["a"], "with": )"
              R"([{"x": 1}, {"y": 2, "y~/": 3, "y~/": 4}]}}})";
  CHECK(error_of(text)
        == "malformed JSON at /steps/b/with/1/y~0~1: duplicate key 'y~/' (an object holds "
           "each key once)");
}

TEST_CASE("the same key in sibling objects is no duplicate", "[persistence][json]") {
  CHECK(error_of(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 1}, {"k": 2}]})").empty());
}

TEST_CASE("a duplicate step id in a graph is an error, not the last one winning",
          "[persistence][json]") {
  auto text = R"({"steps": {"a": {"fn": "noop"}, "a": {"fn": "fail"}}})";
  CHECK_THAT(error_of(text), Catch::Contains("/steps/a: duplicate key 'a'"));
}

TEST_CASE("bytes after the value are an error with their byte offset", "[persistence][json]") {
  CHECK_THAT(error_of(R"({"a": 1} x)"), Catch::StartsWith("malformed JSON at byte 9 "));
  CHECK_THAT(error_of(R"({"a": 1}{"b": 2})"), Catch::StartsWith("malformed JSON at byte 8 "));
  CHECK(error_of("{\"a\": 1}\n  \n").empty());
}

TEST_CASE("a NUL byte after the value is an error, not the end of the text",
          "[persistence][json]") {
  std::string text = R"({"steps": {"a": {"fn": "noop"}}})";
  auto offset = text.size();
  text += std::string{"\0{\"garbage\": 1}", 15};
  CHECK(error_of(text) == "malformed JSON at byte " + std::to_string(offset)
                            + " (line 1, column " + std::to_string(offset + 1)
                            + "): a NUL byte (JSON text may hold none, not even after the "
                              "value)");
  // A NUL byte alone at the end is refused too.
  CHECK_THAT(error_of(std::string{"{}\0", 3}), Catch::StartsWith("malformed JSON at byte 2 "));
  // And inside the text.
  CHECK_THAT(error_of(std::string{"{\"a\": \0 1}", 10}),
             Catch::StartsWith("malformed JSON at byte 6 "));
}

TEST_CASE("nesting deeper than the limit is an error", "[persistence][json]") {
  std::string text(max_json_nesting + 1, '[');
  text += std::string(max_json_nesting + 1, ']');
  CHECK_THAT(error_of(text), Catch::Contains("nesting deeper than"));
  std::string ok(max_json_nesting, '[');
  ok += std::string(max_json_nesting, ']');
  CHECK(error_of(ok).empty());
}

TEST_CASE("a FIFO as graph file is refused at once, without waiting for a writer",
          "[persistence][json]") {
  temp_dir dir;
  auto fifo = dir.path / "graph.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto t0 = std::chrono::steady_clock::now();
  auto result = parse_graph_file(fifo.string());
  REQUIRE_FALSE(result);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds{30}); // a hang bound
  REQUIRE(result.errors.size() == 1);
  CHECK(result.errors[0].message
        == "cannot read graph file '" + fifo.string() + "': not a regular file (a FIFO)");
}

TEST_CASE("a folder or a device as file is refused with what it is", "[persistence][json]") {
  temp_dir dir;
  auto folder = read_regular_file(dir.path.string(), 1024, "config file");
  REQUIRE_FALSE(folder);
  CHECK(message_of(folder.error())
        == "cannot read config file '" + dir.path.string() + "': not a regular file (a folder)");
  auto device = read_regular_file("/dev/null", 1024, "tools file");
  REQUIRE_FALSE(device);
  CHECK_THAT(message_of(device.error()), Catch::EndsWith("not a regular file (a character device)"));
}

TEST_CASE("a regular file is read whole, up to its limit", "[persistence][json]") {
  temp_dir dir;
  auto file = dir.path / "x.json";
  std::ofstream{file} << std::string(2000, ' ') << "{}";
  auto text = read_regular_file(file.string(), 4096, "graph file");
  REQUIRE(text);
  CHECK(text->size() == 2002);
  auto big = read_regular_file(file.string(), 1000, "graph file");
  REQUIRE_FALSE(big);
  CHECK(is(big.error(), persistence_errc::invalid_graph));
}
