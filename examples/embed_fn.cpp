// embed_fn: embeds canopy in a C++ program. It registers a `fn` step, runs a
// graph given as inline JSON, prints its events, and prints its outputs.
//
//   inputs.text --> count (fn word_count) --> report (fn echo) --> outputs
//
// Usage: embed_fn [HOME]   (the store folder, default ./.canopy-embed)

#include <chrono>
#include <cstdio>
#include <future>
#include <sstream>
#include <thread>

#include "persistence/error.hpp"
#include "runtime/runtime.hpp"

using canopy::json;

static int fail(const char* what, const caf::error& err, int code) {
  std::fprintf(stderr, "%s: %s\n", what, canopy::message_of(err).c_str());
  return code;
}

int main(int argc, char** argv) {
  canopy::runtime_options opts;
  opts.home = argc > 1 ? argv[1] : "./.canopy-embed";
  auto rt = canopy::runtime::open(opts);
  if (!rt)
    return fail("open", rt.error(), 5);

  // A long-running function. It checks its stop token once per word.
  (*rt)->register_fn("word_count", [](canopy::fn_context& ctx) -> caf::expected<json> {
    std::istringstream in{ctx.with().value("text", "")};
    size_t words = 0;
    for (std::string word; in >> word; ++words) {
      if (auto err = ctx.checkpoint()) // after a stop or timeout, the step ends here
        return err;
      std::this_thread::sleep_for(std::chrono::milliseconds(50)); // "work"
    }
    return json{{"words", words}};
  });

  // The graph is plain data. Parse it with this runtime's functions known.
  auto parsed = canopy::parse_graph(json::parse(R"({
    "name": "embedded", "inputs": ["text"],
    "steps": {
      "count":  {"fn": "word_count", "with": {"text": "${inputs.text}"}},
      "report": {"fn": "echo", "with": {"line": "${steps.count.words} words"}, "needs": ["count"]}
    },
    "outputs": {"words": "${steps.count.words}", "report": "${steps.report.line}"}
  })"), ".", (*rt)->graph_options());
  if (!parsed) {
    std::fprintf(stderr, "invalid graph: %s\n", canopy::to_string(parsed.errors[0]).c_str());
    return 2;
  }

  auto h = (*rt)->start(parsed.value, {{"text", "actors supervise actors all the way down"}});
  if (!h)
    return fail("start", h.error(), 2);
  // Events arrive on an actor thread, and they can arrive after wait()
  // returns. So the program also waits for the root's final event.
  std::promise<void> last_event;
  auto sub = h->subscribe([&, id = h->id()](const canopy::event_record& e) {
    std::printf("event %-20s %-7s %s\n", e.type.c_str(), e.step.c_str(), e.status.c_str());
    if (e.execution_id == id && (e.type == "execution.completed" || e.type == "execution.failed"
                                 || e.type == "execution.stopped"))
      last_event.set_value();
  });
  auto rec = h->wait();
  last_event.get_future().wait_for(std::chrono::seconds(10));
  if (!rec)
    return fail("wait", rec.error(), 5);
  std::printf("%s: %s\n", canopy::to_string(rec->status), rec->outputs.dump(2).c_str());
  return rec->status == canopy::execution_status::completed ? 0 : 1;
}
