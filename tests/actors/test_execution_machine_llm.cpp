// The execution machine's `llm` steps: the messages resolved and handed to
// the shell's call (`start_llm`), the step running until its `done`, its text
// as output events, a stop or a timeout cancelling the call (`set_fn_stop`),
// an unknown provider failing the attempt with the configured ones named,
// a provider's own slot pool, prices reserved and settled.

#include "machine_harness.hpp"

using namespace canopy::core;
using namespace canopy::core::test;

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
  CHECK(events[0].type == event_type::step_output);
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
  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
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

// -- tool-calling loops ----------------------------------------------------------------

namespace {

json agent_graph(int max_turns) {
  return {{"steps",
           {{"ask",
             {{"timeout", "30s"},
              {"llm",
               {{"model", "m"},
                {"messages", {{{"role", "user"}, {"content", "find x"}}}},
                {"tools", {"t"}},
                {"max_turns", max_turns}}}}}}}};
}

/// The outputs of a turn whose model answered `content`, asking for `calls`.
json turn_outputs(const json& sent, const std::string& content, json calls) {
  return {{"sent", sent},
          {"reply",
           {{"content", content}, {"tool_calls", std::move(calls)}, {"model", "m"},
            {"usage", {{"prompt_tokens", 10}, {"completion_tokens", 2}}}}}};
}

} // namespace

TEST_CASE("an llm step with tools runs each turn as a child: the tools the model asked for, "
          "then the model again, until it answers without tools",
          "[actors][machine][llm]") {
  machine_fixture f{agent_graph(4)};
  f.m->start(++f.now);
  auto first_turn = f.settle(f.fx());
  auto turn1 = first<fx::spawn_child>(first_turn);
  REQUIRE(turn1);
  CHECK(turn1->record.iteration == 1);
  // Turn 1 is the model call alone, with the step's messages and tools.
  REQUIRE(turn1->graph->steps.size() == 1);
  auto& model1 = turn1->graph->steps[0];
  CHECK(model1.id == "model");
  CHECK(model1.llm->max_turns == 1);
  CHECK(model1.llm->tools == std::vector<std::string>{"t"});
  CHECK(model1.timeout == millis{30000});
  CHECK(f.step("ask").phase == step_phase::running_child);

  json sent1 = {{{"role", "user"}, {"content", "find x"}}};
  auto calls = json::array({{{"id", "c1"}, {"name", "t"}, {"arguments", {{"q", "x ${HOME}"}}}}});
  f.m->child_settled(f.idx("ask"), execution_status::completed,
                     turn_outputs(sent1, "", calls), {}, {}, ++f.now, 0, json::object());
  auto second_turn = f.settle(f.fx());
  auto turn2 = first<fx::spawn_child>(second_turn);
  REQUIRE(turn2);
  CHECK(turn2->record.iteration == 2);
  CHECK(f.m->iteration(f.idx("ask")) == 2);
  // The conversation carried: the user's message, then the assistant's call.
  REQUIRE(f.resolver.carried.size() == 1);
  auto& history = f.resolver.carried[0]["messages"];
  REQUIRE(history.size() == 2);
  CHECK(history[1]["role"] == "assistant");
  CHECK(history[1]["content"].is_null());
  CHECK(history[1]["tool_calls"][0]["function"]["arguments"] == R"({"q":"x ${HOME}"})");
  // Turn 2 runs the call as a tool step, then the model, which needs it.
  auto* call = turn2->graph->find("t_1");
  REQUIRE(call);
  CHECK(call->kind == step_kind::tool);
  CHECK(call->with["q"] == "x $${HOME}"); // the model's text is never a reference
  auto* model2 = turn2->graph->find("model");
  REQUIRE(model2);
  CHECK(model2->needs == std::vector<std::string>{"t_1"});
  auto& tool_msg = model2->llm->messages.back();
  CHECK(tool_msg["role"] == "tool");
  CHECK(tool_msg["tool_call_id"] == "c1");
  CHECK(tool_msg["content"] == "${steps.t_1.stdout}");

  auto sent2 = history;
  sent2.push_back({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "x is 42"}});
  f.m->child_settled(f.idx("ask"), execution_status::completed,
                     turn_outputs(sent2, "x is 42.", json::array()), {}, {}, ++f.now, 0,
                     json::object());
  f.settle(f.fx());
  CHECK(f.step("ask").phase == step_phase::completed);
  auto& result = f.step("ask").result;
  CHECK(result["content"] == "x is 42.");
  CHECK(result["turns"] == 2);
  REQUIRE(result["messages"].size() == 4);
  CHECK(result["messages"][3] == json{{"role", "assistant"}, {"content", "x is 42."}});
  CHECK(f.m->phase() == exec_phase::done);
}

TEST_CASE("a tool-calling loop whose model still asks for tools at max_turns fails with "
          "max_iterations and is not retried",
          "[actors][machine][llm]") {
  auto doc = agent_graph(2);
  doc["steps"]["ask"]["retries"] = 3;
  machine_fixture f{doc};
  f.m->start(++f.now);
  f.settle(f.fx());
  auto calls = json::array({{{"id", "c1"}, {"name", "t"}, {"arguments", json::object()}}});
  json sent = {{{"role", "user"}, {"content", "find x"}}};
  for (int turn = 1; turn <= 2; ++turn) {
    f.m->child_settled(f.idx("ask"), execution_status::completed,
                       turn_outputs(sent, "", calls), {}, {}, ++f.now, 0, json::object());
    f.settle(f.fx());
  }
  CHECK(f.step("ask").phase == step_phase::failed);
  CHECK(f.step("ask").reason == step_reason::max_iterations);
  CHECK(f.step("ask").attempt == 1);
  CHECK(f.step("ask").error.dump().find("after 2 turns") != std::string::npos);
}

TEST_CASE("a resumed tool-calling loop adopts its completed turn and starts the next one "
          "without calling the model again",
          "[actors][machine][llm]") {
  // Stored: the step ran turn 1 (child-9), which completed before the stop.
  step_record ask;
  ask.execution_id = "e1";
  ask.step = "ask";
  ask.status = step_status::pending;
  ask.reason = step_reason::interrupted;
  ask.attempt = 1;
  ask.child_id = "child-9";
  machine_fixture f{agent_graph(4), false, {ask}};
  execution_record turn1;
  turn1.id = "child-9";
  turn1.status = execution_status::completed;
  turn1.iteration = 1;
  turn1.outputs = turn_outputs({{{"role", "user"}, {"content", "find x"}}}, "",
                               json::array({{{"id", "c1"}, {"name", "t"}, {"arguments", "{}"}}}));
  f.resolver.stored_children["child-9"] = turn1;
  f.m->start(++f.now);
  auto seen = f.settle(f.fx());
  auto next = first<fx::spawn_child>(seen);
  REQUIRE(next);
  CHECK(next->record.iteration == 2);
  CHECK(next->record.id != "child-9");
  CHECK(next->graph->find("t_1") != nullptr);
  CHECK(!first<fx::start_llm>(seen));
}

// -- prices ---------------------------------------------------------------------------

namespace {

/// One priced call (100 per million tokens, at most 50 out) under `budget`.
machine_fixture priced(double budget) {
  return machine_fixture{json{{"limits", {{"budget", budget}}},
                              {"steps",
                               {{"ask",
                                 {{"llm",
                                   {{"model", "m"},
                                    {"max_tokens", 50},
                                    {"messages", {{{"role", "user"}, {"content", "hi"}}}}}}}}}}}};
}

double spent(const machine_fixture& f) {
  return f.m->scope()->snapshot().front().second.spent;
}

} // namespace

TEST_CASE("a priced llm step reserves what it may cost when it starts and settles to its usage",
          "[actors][machine][llm][budget]") {
  auto f = priced(1);
  auto p = providers();
  p->at("default").price = token_price{100, 100};
  f.env->providers = p;
  f.m->start(++f.now);
  auto seen = f.settle(f.fx());
  auto call = first<fx::start_llm>(seen);
  REQUIRE(call);
  auto reserved = reservation({100, 100}, estimate_prompt_tokens(call->messages), 50);
  CHECK(spent(f) == Approx(reserved));
  json result = {{"content", "ok"}, {"usage", {{"prompt_tokens", 10}, {"completion_tokens", 5}}}};
  f.m->step_done(call->idx, call->attempt, result, {}, ++f.now);
  f.settle(f.fx());
  CHECK(f.step("ask").phase == step_phase::completed);
  CHECK(f.step("ask").result["spend"] == Approx(15 * 100 / 1e6));
  CHECK(spent(f) == Approx(15 * 100 / 1e6));
}

TEST_CASE("a priced llm step whose reservation would pass the budget is not started and stops "
          "its tree budget_exceeded",
          "[actors][machine][llm][budget]") {
  auto f = priced(0.001); // the reservation is over 0.005
  auto p = providers();
  p->at("default").price = token_price{100, 100};
  f.env->providers = p;
  f.m->start(++f.now);
  auto seen = f.settle(f.fx());
  CHECK_FALSE(first<fx::start_llm>(seen));
  CHECK(f.m->record().reason == step_reason::budget_exceeded);
  CHECK(f.step("ask").attempt == 0);
  CHECK(spent(f) == 0);
}

// -- the provider's max_parallel --------------------------------------------------------

TEST_CASE("an llm step of a provider with its own pool waits queued for that pool's slot and "
          "never takes one of the node's",
          "[actors][machine][llm]") {
  llm_fixture f;
  f.env->provider_pools = {"default"};
  f.m->start(++f.now);
  auto seen = f.settle(f.fx());
  CHECK_FALSE(first<fx::start_llm>(seen));
  auto ask = first<fx::acquire_slot>(seen);
  REQUIRE(ask);
  CHECK(ask->pool.kind == fx::pool_ref::of::provider);
  CHECK(ask->pool.name == "default");
  CHECK(status_of(f.step("draft").phase) == step_status::queued);

  f.m->slot_granted(ask->ticket, slot_from::own, ++f.now);
  auto started = f.settle(f.fx());
  auto call = first<fx::start_llm>(started);
  REQUIRE(call);
  CHECK(call->messages[0]["content"] == "Topic: Q3");
  CHECK_FALSE(first<fx::acquire_slot>(started)); // no subprocess slot
  CHECK(f.step("draft").phase == step_phase::running_fn);

  f.m->step_done(call->idx, call->attempt, json{{"content", "ok"}}, {}, ++f.now);
  auto done = f.settle(f.fx());
  auto back = first<fx::release_slot>(done);
  REQUIRE(back);
  CHECK(back->own.kind == fx::pool_ref::of::provider);
  CHECK_FALSE(back->node);
  CHECK(f.m->record().status == execution_status::completed);
}

TEST_CASE("a priced llm step stopped while it waits for its provider's slot gives its "
          "reservation back",
          "[actors][machine][llm][budget]") {
  auto f = priced(1);
  auto p = providers();
  p->at("default").price = token_price{100, 100};
  f.env->providers = p;
  f.env->provider_pools = {"default"};
  f.m->start(++f.now);
  auto seen = f.settle(f.fx());
  REQUIRE(first<fx::acquire_slot>(seen));
  CHECK(spent(f) > 0);
  f.m->stop(step_reason::requested, stop_mode::graceful, false, ++f.now);
  auto halt = f.settle(f.fx());
  CHECK(first<fx::release_slot>(halt));
  CHECK(f.m->record().status == execution_status::stopped);
  CHECK(status_of(f.step("ask").phase) == step_status::pending);
  CHECK(spent(f) == 0);
}
