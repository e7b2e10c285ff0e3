// The execution machine's `llm` steps: the messages resolved and handed to
// the shell's call (`start_llm`), the step running until its `done`, its text
// as output events, a stop or a timeout cancelling the call (`set_fn_stop`),
// an unknown provider failing the attempt with the configured ones named.

#include "machine_harness.hpp"

using namespace canopy;
using namespace canopy::test;

namespace {

json brief() {
  return json::parse(R"({
    "inputs": ["topic"],
    "steps": {
      "intro": {"fn": "echo", "with": {"topic": "${inputs.topic}", "n": 3}},
      "draft": {"needs": ["intro"], "timeout": "1m", "llm": {
        "model": "m", "messages": [{"role": "user", "content": "Topic: ${steps.intro.topic}"},
                                   {"role": "user", "content": "${steps.intro}"}]}}
    }
  })");
}

std::shared_ptr<std::map<std::string, chat_provider>> providers() {
  auto out = std::make_shared<std::map<std::string, chat_provider>>();
  chat_provider p;
  p.name = "default";
  p.base_url = "http://127.0.0.1:1/v1";
  out->emplace("default", p);
  return out;
}

/// A fixture whose execution has input topic=Q3 and the provider `default`.
struct llm_fixture : machine_fixture {
  llm_fixture() : machine_fixture(brief(), false, {}, 1000, {{"topic", "Q3"}}) {
    env->providers = providers();
  }
};

} // namespace

TEST_CASE("an llm step hands its resolved messages to the shell's call and completes with its "
          "result",
          "[actors][machine][llm]") {
  llm_fixture f;
  f.m->start(++f.now);
  auto seen = f.settle(f.fx());
  auto call = first<fx::start_llm>(seen);
  REQUIRE(call);
  CHECK(call->idx == f.idx("draft"));
  CHECK(call->messages[0]["content"] == "Topic: Q3");
  // A content that was one reference to an object goes as its JSON text.
  CHECK(call->messages[1]["content"] == R"({"n":3,"topic":"Q3"})");
  CHECK(f.step("draft").phase == step_phase::running_fn);
  auto timer = first<fx::timer>(seen);
  REQUIRE(timer);
  CHECK(timer->kind == timer_kind::timeout);

  f.m->output(call->idx, call->attempt, json::array({{{"stream", "model"}, {"text", "Hel"}}}),
              ++f.now);
  auto out = f.fx();
  auto events = written_events(out);
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == "step.output");
  CHECK(events[0].data == json{{"stream", "model"}, {"text", "Hel"}});

  json result = {{"content", "Hello"}, {"json", nullptr}};
  f.m->step_done(call->idx, call->attempt, result, {}, ++f.now);
  f.settle(f.fx());
  CHECK(f.step("draft").phase == step_phase::completed);
  CHECK(f.step("draft").result == result);
  CHECK(f.m->record().status == execution_status::completed);
}

TEST_CASE("a stop cancels a running model call and the step goes back to pending",
          "[actors][machine][llm]") {
  llm_fixture f;
  f.m->start(++f.now);
  auto call = first<fx::start_llm>(f.settle(f.fx()));
  REQUIRE(call);
  auto idx = call->idx;
  auto attempt = call->attempt;
  f.m->stop(step_reason::requested, stop_mode::graceful, {}, false, ++f.now);
  auto halt = f.fx();
  auto cancel = first<fx::set_fn_stop>(halt);
  REQUIRE(cancel);
  CHECK(cancel->idx == idx);
  // The cancelled call answers; the halt completes with the step pending.
  f.m->step_done(idx, attempt, nullptr, "the model call was cancelled", ++f.now);
  f.settle(f.fx());
  CHECK(f.m->record().status == execution_status::stopped);
  CHECK(status_of(f.step("draft").phase) == step_status::pending);
}

TEST_CASE("a model call past its timeout is cancelled and the attempt fails",
          "[actors][machine][llm]") {
  llm_fixture f;
  f.m->start(++f.now);
  auto call = first<fx::start_llm>(f.settle(f.fx()));
  REQUIRE(call);
  f.m->timeout(call->idx, call->attempt, ++f.now);
  auto xs = f.fx();
  CHECK(first<fx::set_fn_stop>(xs));
  CHECK(f.step("draft").phase == step_phase::failed);
  CHECK(f.step("draft").error == "timeout");
}

TEST_CASE("an llm step whose provider is not configured fails naming the configured ones",
          "[actors][machine][llm]") {
  machine_fixture none{brief(), false, {}, 1000, {{"topic", "Q3"}}};
  none.m->start(++none.now);
  none.settle(none.fx());
  CHECK(none.step("draft").phase == step_phase::failed);
  CHECK(none.step("draft").error
        == "provider 'default' is not configured on this node (it has no providers: see the "
           "node config's 'providers')");

  machine_fixture other{brief(), false, {}, 1000, {{"topic", "Q3"}}};
  auto p = std::make_shared<std::map<std::string, chat_provider>>();
  p->emplace("local", chat_provider{});
  other.env->providers = p;
  other.m->start(++other.now);
  other.settle(other.fx());
  CHECK(other.step("draft").error
        == "provider 'default' is not configured on this node (configured: local)");
}
