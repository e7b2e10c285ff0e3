#pragma once

// An `llm` step's tool-calling loop as plain data: each turn is a child
// execution whose graph is made here from the conversation so far.
//
// Turn k's graph runs the tool calls the model asked for in turn k-1 (one
// `tool` step each, in parallel), then the step `model`: one chat
// completion (the step's own settings, `max_turns` 1) over the messages so
// far and the tools' answers. Its `outputs` are the messages it sent
// (`sent`) and the model's reply (`reply`); `next_history` makes the next
// turn's conversation from them. A stored turn graph is what a resume runs:
// completed tool calls and model calls are never made again.
//
// Text from a model or a tool reaches a turn graph escaped (`$${`), so it is
// never read as a reference. Plain functions, no state.

#include <string>

#include <nlohmann/json.hpp>

#include "persistence/graph.hpp"
#include "persistence/reference.hpp"
#include "persistence/tools.hpp"

namespace canopy::core {

using json = nlohmann::json;

/// The id of the model call's step in a turn graph.
constexpr const char* turn_model_step = "model";

/// An `llm` step's `messages` with their references resolved in `scope`; a
/// content that was one reference to a non-string value becomes its JSON
/// text. @returns the messages, or the first reference that did not resolve.
caf::expected<json> resolve_messages(const json& messages, const reference_scope& scope);

/// @returns `v` with `${` written `$${` in every string value, so that
/// a template gives back `v` as it is.
json escape_references(const json& v);

/// The `tools` of a chat request offering `def.tools`:
/// `[{"type": "function", "function": {name, description, parameters}}]`.
/// A tool without `parameters` (or unknown to `tools`) takes an empty object.
json tool_specs(const llm_def& def, const tool_table& tools);

/// Checks a call of tool `name` with `arguments` (JSON text, as the model
/// sent it) against `def.tools` and the tool's `parameters`.
/// @returns the arguments as an object, or the error the model gets back
///          as the tool's answer (`error` set).
json check_tool_call(const llm_def& def, const tool_table& tools, const std::string& name,
                     const std::string& arguments, std::string& error);

/// The graph document of one turn of `llm` step `step`'s loop over `history`
/// (messages in the wire form, references resolved). When the last message
/// is an assistant's with `tool_calls`, each valid call becomes the `tool`
/// step `<tool>_<i>` (i from 1, in the order asked) and its stdout the
/// tool's answer; an invalid call runs nothing and answers its error.
/// Thread-safe.
/// The model call has the step's `timeout`.
json turn_graph(const step_def& step, const tool_table& tools, const json& history);

/// The conversation after a completed turn whose outputs are `outputs`:
/// the messages it sent and the model's reply as an assistant message
/// (tool calls in the wire form; a call without an id gets `call_<i>`).
json next_history(const json& outputs);

/// The result of a loop step whose last turn (`turns` in all) had
/// `outputs`: the model's last result with `turns` and the whole
/// conversation (`messages`).
json loop_result(const json& outputs, int turns);

} // namespace canopy::core
