// embed: canopy inside a C++ program. It registers a function, builds a
// two-step graph in C++, starts it, stops it while the first step works,
// resumes it to completion, and shows a step that fails on purpose.
//
//   inputs.text --> count (fn word_count) --> shout (fn shout) --> outputs
//
// Usage: embed [HOME]   (the store folder; default ./.canopy-embed)
// Build against an installed canopy: find_package(canopy) (CMakeLists.txt
// here) or `g++ main.cpp $(pkg-config --cflags --libs canopy)`.

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <future>
#include <sstream>
#include <thread>

#include <canopy/canopy.hpp>

using canopy::json;

static int fail(const char* what, const canopy::error& err) {
  std::fprintf(stderr, "%s: %s (%s)\n", what, err.to_string().c_str(),
               canopy::to_string(err.code()));
  return 1;
}

int main(int argc, char** argv) {
  canopy::options opts;
  opts.home = argc > 1 ? argv[1] : "./.canopy-embed";
  auto opened = canopy::runtime::open(opts);
  if (!opened)
    return fail("open", opened.error());
  auto& rt = **opened;

  // A slow function: one word per 20 ms, ending at its checkpoint once stopped.
  std::promise<void> counting;
  std::atomic<bool> started{false};
  rt.register_fn("word_count", [&](canopy::fn_context& ctx) -> canopy::result<json> {
    std::istringstream in{ctx.with().value("text", "")};
    size_t words = 0;
    for (std::string word; in >> word; ++words) {
      if (!started.exchange(true))
        counting.set_value(); // the first attempt is under way
      if (auto stop = ctx.checkpoint())
        return *stop;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (words == 0)
      return canopy::fn_fail("nothing to count: the text is empty");
    return json{{"words", words}};
  });
  rt.register_fn("shout", [](canopy::fn_context& ctx) -> canopy::result<json> {
    auto line = ctx.with().value("line", "");
    for (auto& c : line)
      c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return json{{"line", line}};
  });

  auto g = canopy::graph_builder{"embedded"}
             .input("text")
             .step("count").fn("word_count").with({{"text", "${inputs.text}"}})
             .step("shout").fn("shout").with({{"line", "${steps.count.words} words"}}).needs("count")
             .output("words", "${steps.count.words}")
             .output("report", "${steps.shout.line}")
             .build();
  if (!g)
    return fail("graph", g.error());

  // Start, and stop while `count` works.
  auto run = rt.start(*g, {{"text", "actors supervise actors all the way down, durably"}});
  if (!run)
    return fail("start", run.error());
  counting.get_future().wait();
  auto stopped = run->stop(canopy::stop_mode::graceful);
  if (!stopped)
    return fail("stop", stopped.error());
  auto after_stop = run->status();
  if (!after_stop)
    return fail("status", after_stop.error());
  std::printf("stop: %s, status %s\n", canopy::to_string(*stopped),
              canopy::to_string(after_stop->status));

  // Resume: `count` runs again from its start, `shout` after it.
  auto resumed = run->resume();
  if (!resumed)
    return fail("resume", resumed.error());
  std::atomic<bool> saw_end{false};
  auto events = resumed->events([&, id = resumed->id()](const canopy::event& e) {
    std::printf("  event %-20s %s\n", e.type.c_str(), e.step.c_str());
    if (e.type == "execution.completed" && e.execution_id == id)
      saw_end = true;
  });
  auto done = resumed->wait(); // returns after `events` was handed the final event
  if (!done)
    return fail("wait", done.error());
  std::printf("%s: %s (the subscriber saw the end first: %s)\n", canopy::to_string(done->status),
              done->outputs.dump().c_str(), saw_end ? "yes" : "no");

  // A step that fails on purpose fails its execution, with its message.
  auto empty = rt.start(*g, {{"text", ""}});
  if (!empty)
    return fail("start", empty.error());
  auto failed = empty->wait();
  if (!failed)
    return fail("wait", failed.error());
  std::printf("%s: %s\n", canopy::to_string(failed->status), failed->error.c_str());

  bool as_expected = *stopped == canopy::stop_outcome::stopped
                     && after_stop->status == canopy::execution_status::stopped
                     && done->status == canopy::execution_status::completed
                     && done->outputs.value("words", 0) == 8 && saw_end
                     && failed->status == canopy::execution_status::failed;
  return as_expected ? 0 : 1;
}
