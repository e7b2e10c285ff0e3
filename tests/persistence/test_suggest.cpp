// "Did you mean ...?": the edit distance and the nearest name.

#include <catch2/catch.hpp>

#include "persistence/suggest.hpp"

using namespace canopy::core;

TEST_CASE("the edit distance counts insertions, deletions, substitutions and adjacent swaps",
          "[persistence][suggest]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("ls", "ls") == 0);
  CHECK(edit_distance("lst", "ls") == 1);
  CHECK(edit_distance("fecth", "fetch") == 1); // one swap, not two substitutions
  CHECK(edit_distance("stpo", "stop") == 1);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("", "abc") == 3);
}

TEST_CASE("a close name is suggested, a distant one is not, and an exact match is no typo",
          "[persistence][suggest]") {
  std::vector<std::string> commands{"run", "resume", "stop", "show", "ls", "events"};
  CHECK(nearest("lst", commands) == std::optional<std::string>{"ls"});
  CHECK(nearest("evnets", commands) == std::optional<std::string>{"events"});
  CHECK(nearest("frobnicate", commands) == std::nullopt);
  CHECK(nearest("ls", commands) == std::nullopt);
  CHECK(nearest("x", commands) == std::nullopt); // one letter is no word to correct
  CHECK(did_you_mean("fecth", {"fetch", "parse"}) == "; did you mean 'fetch'?");
  CHECK(did_you_mean("zzz", {"fetch"}).empty());
}
