#pragma once

// The graph model: plain data parsed and validated from a JSON document
// (runtime/docs/reference/graph-format.md). Nothing here runs anything.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "persistence/condition.hpp"
#include "persistence/duration.hpp"
#include "persistence/json_text.hpp"

namespace canopy::core {

using json = nlohmann::json;

// -- limits and defaults ------------------------------------------------------

/// The largest graph document accepted, in bytes (runtime/docs/reference/graph-format.md#document).
constexpr size_t max_graph_bytes = 8u * 1024u * 1024u;

/// Default `limits.max_depth` (root depth 0).
constexpr int default_max_depth = 16;

/// Default `limits.max_steps`.
constexpr uint64_t default_max_steps = 100000;

// -- model ---------------------------------------------------------------------

/// The kind of a step: exactly one kind key per step.
enum class step_kind : uint8_t { run, tool, graph, plan, agent, fn, wait, llm };

/// Returns the kind key, e.g. `"run"`.
const char* to_string(step_kind x);

/// Signal escalation delays of a subprocess step (runtime/docs/reference/statuses.md#stop).
struct grace_periods {
  millis interrupt{10'000}; ///< SIGINT → SIGTERM
  millis terminate{5'000};  ///< SIGTERM → SIGKILL
};

/// The `limits` object of a graph; unset fields inherit (runtime/docs/reference/graph-format.md#limits).
struct graph_limits {
  std::optional<int> max_depth;
  std::optional<uint64_t> max_steps;
  std::optional<double> budget;
  std::optional<millis> deadline;
};

/// What a `wait` step does when its `timeout` passes without a signal.
enum class wait_timeout : uint8_t {
  fail,        ///< the step fails
  use_default, ///< the step completes with `wait_def::default_value`
};

/// Returns the graph spelling: `"fail"` or `"default"`.
const char* to_string(wait_timeout x);

/// Parses a graph spelling (`"fail"`, `"default"`). @returns false for anything else.
bool from_string(const std::string& s, wait_timeout& x);

/// A `wait` step's definition: what it waits for and until when.
struct wait_def {
  std::string signal; ///< the signal name it consumes
  /// Shown to who answers; may hold ${...} references (empty: none).
  std::string prompt;
  /// What a value must satisfy (persistence/value_schema.hpp); null: any JSON value.
  json schema;
  json options = json::object(); ///< button label → value (each satisfies `schema`)
  std::optional<millis> timeout; ///< none: waits until the graph's deadline, if any
  wait_timeout on_timeout = wait_timeout::fail; ///< what happens when `timeout` passes
  /// The value when the timeout passes and on_timeout is use_default; else null.
  json default_value;
  /// Server users who may answer; empty: the execution's owner.
  std::vector<std::string> approvers;
};

/// What a repeating `graph` step does when its last allowed iteration ends
/// without `until` holding.
enum class on_max_rule : uint8_t {
  fail,     ///< the step fails, reason `max_iterations`
  complete, ///< the step completes with the last iteration's outputs
};

/// Returns the graph spelling: `"fail"` or `"complete"`.
const char* to_string(on_max_rule x);

/// Parses a graph spelling. @returns false for anything else.
bool from_string(const std::string& s, on_max_rule& x);

/// The most iterations a `repeat` may allow.
constexpr int max_repeat_iterations = 1000;

/// A `graph` step's `repeat`: a bounded loop. Each iteration is a child
/// execution of its own; the next one starts with the step's `with`, where
/// `carry` overrides inputs with values taken from the iteration that just
/// completed. `until` and `carry` reference that iteration's steps only
/// (`${steps.ID...}` of the child graph).
struct repeat_def {
  /// A condition (persistence/condition.hpp) over the last iteration's
  /// steps; null: none, the step runs `max` iterations.
  json until;
  int max = 1; ///< iterations at most, 1..max_repeat_iterations
  /// Child input → value (references into the last iteration's steps).
  json carry = json::object();
  on_max_rule on_max = on_max_rule::fail;
};

/// An `llm` step's model call: one chat completion from a provider the
/// node's config names (`providers`).
struct llm_def {
  std::string provider = "default";
  std::string model;
  /// `[{"role", "content"}, ...]`; `content` strings may hold ${...}
  /// references, resolved when the step starts.
  json messages = json::array();
  std::optional<double> temperature;  ///< 0 to 2
  std::optional<int64_t> max_tokens;  ///< at least 1
  /// Passed to the provider as it is (e.g. `{"type": "json_schema", ...}`);
  /// null: none. With one, the step's result has `json` when the content parses.
  json response_format;
  /// Registered tools offered to the model (their `description` and
  /// `parameters` are sent); empty: none.
  std::vector<std::string> tools;
  /// Model calls at most (with `tools`; 0 without). 1: one call, the tool
  /// calls the model asks for are returned in the result, not run. 2 or
  /// more: a tool-calling loop (persistence/conversation.hpp).
  int max_turns = 0;
};

/// The most turns an `llm` step's tool-calling loop may allow.
constexpr int max_llm_turns = 100;
/// The turns of a tool-calling loop when `tools` are given without `max_turns`.
constexpr int default_llm_turns = 8;

struct graph;

/// One step of a graph. String fields that may hold references keep them
/// unresolved; the execution resolves them when the step starts.
struct step_def {
  std::string id;
  step_kind kind = step_kind::fn;
  /// `run`: the argv array; `plan`: the argv array or a tool name string.
  json argv;
  /// `tool`, `plan` (when a string), `agent` and `fn`: the name.
  std::string target;
  /// `graph`: the child graph, parsed (inline object, or file relative to the
  /// parent graph's file). Null for a registered graph name (`target` holds it).
  std::shared_ptr<const graph> child;
  std::vector<std::string> needs;
  /// The condition under which it runs (persistence/condition.hpp); null:
  /// always, once its needs allow.
  json when;
  /// How it treats skipped needs.
  after_rule after = after_rule::all_completed;
  json with = json::object();
  json message; ///< `agent` only; null otherwise
  std::map<std::string, std::string> env;
  std::optional<std::string> stdin_data;
  std::optional<std::string> cwd;
  std::optional<millis> timeout;
  int retries = 0;
  millis retry_delay{1000};
  double cost = 0;
  grace_periods grace;
  /// True when the step had a `grace` key: a tool's default grace periods
  /// apply only to steps without one.
  bool grace_set = false;
  std::shared_ptr<const wait_def> wait; ///< `wait` steps only; null otherwise
  /// A `graph` step that repeats its child; null otherwise.
  std::shared_ptr<const repeat_def> repeat;
  std::shared_ptr<const llm_def> llm; ///< `llm` steps only; null otherwise
};

/// @returns true when `def` runs iterations, each a child execution: a
/// `graph` step with `repeat`, or an `llm` step's tool-calling loop (one
/// child per turn).
bool is_loop(const step_def& def);

/// A validated graph. Immutable once parsed; share it as `shared_ptr<const graph>`.
struct graph {
  std::string name;
  std::vector<std::string> inputs;
  graph_limits limits;
  /// Steps in a topological order (every step after all of its `needs`).
  std::vector<step_def> steps;
  /// Step id → position in `steps` (hashed: a 100,000-step graph is looked
  /// up twice per `needs` entry when its execution starts).
  std::unordered_map<std::string, size_t> index;
  /// The `outputs` object, references unresolved.
  json outputs = json::object();
  /// Folder that relative paths (`graph` files, `cwd`) are relative to.
  std::string base_dir;
  /// The document as given (child files not inlined).
  json document;
  /// Every file a `graph` step loaded, transitively: absolute path → document.
  /// Stored with an execution so that resume never reads the files again.
  std::map<std::string, json> files;

  /// Returns the step `id` or nullptr.
  const step_def* find(const std::string& id) const;

  /// Returns true when `ancestor` is a transitive `needs` of `step`.
  bool is_upstream(const std::string& ancestor, const std::string& step) const;
};

// -- parsing and validation ------------------------------------------------------

/// One validation error: the JSON path (RFC 6901 pointer, `""` for the whole
/// document) and a message. Inside an included graph file the path continues
/// through the step, e.g. `/steps/review/graph/steps/a/run`.
struct graph_error {
  std::string path;
  std::string message;
  /// A machine-readable code for the HTTP API: empty means `invalid_graph`;
  /// `inline_commands_disabled` for a `run` step (or argv `plan`) on a node
  /// that does not allow inline commands.
  std::string code;
};

/// Renders `e` as `"PATH: MESSAGE"` (or just the message when the path is empty).
std::string to_string(const graph_error& e);

/// Options of `parse_graph`.
struct parse_options {
  /// Names of registered `fn` functions; a `fn` step naming another is an error.
  /// Empty set: the built-ins (`noop`, `sleep`, `echo`, `fail`) only.
  std::set<std::string> fns;
  /// Registered tool names; `tool`/`plan` steps naming another are an error.
  std::set<std::string> tools;
  /// Accept any `fn` name (a graph checked before it meets a runtime: the
  /// library's `graph::parse`; the runtime checks the names at start).
  bool any_fn = false;
  /// Accept any tool name (resuming on a cluster node: the workers that have
  /// a stored graph's tools may not have joined yet; its steps wait for them).
  bool any_tool = false;
  /// Appended to the error of a tool name that is not in `tools`: where this
  /// caller's tools come from (the CLI: its `--config FILE`).
  std::string unknown_tool_hint;
  /// False on a server whose config does not allow inline commands: `run`
  /// steps and `plan` steps with an argv are errors (code
  /// `inline_commands_disabled`), in child graphs too.
  bool allow_inline = true;
  /// Depth of the graph being parsed (root: 0); a `graph` step at depth
  /// `max_depth` is a `max_depth` error.
  int depth = 0;
  /// Effective max_depth inherited from the parent (default 16).
  int max_depth = default_max_depth;
  /// Reads a graph file: absolute path → document. Defaults to the file system
  /// (size over `max_graph_bytes` and malformed JSON are errors); resume uses
  /// the stored `graph::files`.
  std::function<caf::expected<json>(const std::string& abs_path)> load_file;
  /// When set, checks a `graph` step naming a registered graph (not a file)
  /// as the run will resolve it (`canopy validate`): returns what is wrong,
  /// reported at the step's `graph` path, or "" when the name resolves.
  /// Unset: names are resolved when the step runs.
  std::function<std::string(const std::string& name)> check_graph_name;
};

/// The outcome of parsing: a graph, or every error found.
struct parse_result {
  std::shared_ptr<const graph> value;
  std::vector<graph_error> errors;
  explicit operator bool() const { return value != nullptr; }
};

/// Parses and validates `doc` (runtime/docs/reference/graph-format.md rejections: unknown keys, zero or two
/// kinds, unknown `needs`, cycles, unknown inputs or steps in references,
/// references to steps that are not upstream, bad durations, recursion past
/// `max_depth`, a file including itself).
/// @param base_dir the folder relative paths are resolved against.
/// @returns the graph, or all errors with their JSON paths.
/// Thread-safe.
parse_result parse_graph(const json& doc, const std::string& base_dir,
                         const parse_options& opts = {});

/// As above; `doc` is moved into the graph's `document` instead of copied.
parse_result parse_graph(json&& doc, const std::string& base_dir,
                         const parse_options& opts = {});

/// Reads `path` (at most `max_graph_bytes`), parses JSON (depth limited to
/// `max_json_nesting`) and calls `parse_graph` with the file's folder.
/// A missing file, an oversized file or malformed JSON is one error with path `""`.
parse_result parse_graph_file(const std::string& path, const parse_options& opts = {});

/// Parses a stored graph: its document, folder and the files it included
/// (absolute path → document), reading no file from disk. Used on resume.
parse_result parse_graph_bundle(const json& document, const std::string& base_dir,
                                const json& files, parse_options opts = {});

/// Loads a stored graph (its document, folder and included files) that
/// `parse_graph` validated before the store kept it, without validating it
/// again: no reference scan, no cycle report, no tool, function, input or
/// depth check. For a document `parse_graph` accepts it builds the same
/// model as `parse_graph_bundle` (steps in the same order, index, needs,
/// fields, limits, outputs, child graphs, files). Used on resume.
///
/// The checks it skips that depend on the node move to the step's start: a
/// `tool` or `plan` step whose tool is not registered and a `fn` step whose
/// function is not, fail when they start. One node policy stays here, since
/// nothing checks it at launch: with `opts.allow_inline` false, `run` steps
/// and argv `plan` steps (in child graphs too) are errors with code
/// `inline_commands_disabled`, as `parse_graph` reports them. No other field
/// of `opts` is used.
///
/// @param document moved into the model (`graph::document`), not copied.
/// @returns the graph, or errors: the inline refusals, or one error with path
///          `""` when the stored form is not one `parse_graph` produced
///          (a step needing an unknown step, a cycle, a missing file, a
///          value of the wrong type).
/// Thread-safe.
parse_result load_stored_graph(json document, const std::string& base_dir, const json& files,
                               const parse_options& opts = {});

/// Checks that `g` can be an agent's graph (runtime/docs/reference/graph-format.md#agent-graphs): it declares input
/// `message`, no input but `message` and `history`, and an output `reply`.
/// @returns every error with its JSON path in the graph (empty: fine).
std::vector<graph_error> check_agent_graph(const graph& g);

/// Checks an agent name: 1 to 128 characters of `A-Z a-z 0-9 _ . -`.
/// @returns what is wrong, or an empty string.
std::string check_agent_name(const std::string& name);

/// Checks a registered graph's id (its name on a server, part of its URL):
/// 1 to 128 characters of `A-Z a-z 0-9 _ . -`.
/// @returns what is wrong, or an empty string.
std::string check_graph_id(const std::string& name);

/// Checks a cluster node name (a worker's `--name`, an agent's node): 1 to
/// 255 characters of `A-Z a-z 0-9 _ . -`, as host names are.
/// @returns what is wrong, or an empty string.
std::string check_node_name(const std::string& name);

} // namespace canopy::core
