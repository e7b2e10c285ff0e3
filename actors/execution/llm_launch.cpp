// The execution shell's part of `llm` steps: the model call runs on a thread
// of its own (a call may take minutes and must not hold a function pool
// thread), its text goes to the actor at most ten times a second as output
// lines `{stream: "model", text}`, and its result or error as `done`.
// `set_fn_stop` (a stop, a timeout) cancels it, which closes the connection.

#include <chrono>
#include <thread>

#include "actors/execution/shell.hpp"
#include "actors/messages.hpp"
#include "persistence/conversation.hpp"

namespace canopy::core {

namespace {

/// Streamed text waits here until 100 ms passed since the last send.
class text_batch {
public:
  text_batch(caf::actor me, uint64_t idx, int attempt)
    : me_(std::move(me)), idx_(idx), attempt_(attempt) {
  }

  /// On the call's thread.
  void add(std::string_view text) {
    pending_.append(text.data(), text.size());
    auto now = std::chrono::steady_clock::now();
    if (now - last_ >= std::chrono::milliseconds{100})
      flush();
  }

  /// Sends what is pending. On the call's thread.
  void flush() {
    if (pending_.empty())
      return;
    last_ = std::chrono::steady_clock::now();
    json lines = json::array({{{"stream", "model"}, {"text", std::move(pending_)}}});
    pending_.clear();
    caf::anon_send(me_, output_atom::value, idx_, attempt_, std::move(lines));
  }

private:
  caf::actor me_;
  uint64_t idx_;
  int attempt_;
  std::string pending_;
  std::chrono::steady_clock::time_point last_{};
};

} // namespace

void start_llm_call(execution_shell* self, fx::start_llm& e) {
  auto& st = self->state;
  auto& def = st.m->graph_def().steps[e.idx];
  auto& llm = *def.llm;
  auto me = caf::actor_cast<caf::actor>(self);
  auto idx = static_cast<uint64_t>(e.idx);
  int attempt = e.attempt;
  // The machine checked that the provider is configured.
  auto& provider = st.svc->providers->at(llm.provider);
  chat_request req;
  req.model = llm.model;
  req.messages = std::move(e.messages);
  req.temperature = llm.temperature;
  req.max_tokens = llm.max_tokens;
  req.response_format = llm.response_format;
  if (!llm.tools.empty())
    req.tools = tool_specs(llm, st.svc->tools ? *st.svc->tools : tool_table{});
  bool want_json = !llm.response_format.is_null();
  auto text = std::make_shared<text_batch>(me, idx, attempt);
  auto call = std::make_shared<chat_call>(
    provider, std::move(req), [text](std::string_view t) { text->add(t); },
    def.timeout ? def.timeout->count() : -1);
  st.calls.set(e.idx, running_call{nullptr, call});
  std::thread{[me, call, text, idx, attempt, want_json] {
    auto r = call->run();
    text->flush();
    step_outcome out;
    if (r.outcome == chat_outcome::completed)
      out.result = llm_result(r.reply, want_json);
    else if (r.outcome == chat_outcome::cancelled)
      out.error = "the model call was cancelled";
    else
      out.error = r.error;
    caf::anon_send(me, done_atom::value, idx, attempt, std::move(out));
  }}.detach();
}

} // namespace canopy::core
