#pragma once

/// @file
/// Graphs: parsed and validated from a JSON document or built in C++ with
/// `graph_builder`. Both go through the same validation and report the
/// same errors with the same JSON paths; a graph's `to_json()` parses back
/// to the same graph. The format is the graph reference's (steps, kinds,
/// `needs`, `${...}` references, limits, outputs).

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <canopy/error.hpp>
#include <canopy/export.hpp>
#include <canopy/records.hpp>

namespace canopy {

/// A validated graph. Immutable and cheap to copy.
///
/// A graph is checked for its structure when it is made: keys, one kind per
/// step, `needs` and cycles, references to inputs and upstream steps,
/// durations, limits, included graph files. Which `fn` functions and tools
/// exist is a runtime's business: `runtime::start` checks those against the
/// runtime it runs on.
class CANOPY_API graph {
public:
  /// Parses and validates `document`; relative paths in it (`graph` files,
  /// `cwd`) are relative to `base_dir`.
  /// @returns the graph, or `errc::invalid` with every problem in
  ///          `error::details()` (JSON paths into `document`).
  /// Threading: any thread.
  static result<graph> parse(const json& document, const std::string& base_dir = ".");

  /// Reads and validates the graph file `path` (at most 8 MiB of JSON).
  /// @returns the graph; `errc::invalid` for a missing or malformed file or
  ///          an invalid graph, as `parse`.
  static result<graph> load(const std::string& path);

  /// The graph's `name`.
  const std::string& name() const;
  /// The declared inputs, in document order.
  const std::vector<std::string>& inputs() const;
  /// The step ids, each after every step it needs.
  std::vector<std::string> steps() const;
  /// The folder relative paths are resolved against.
  const std::string& base_dir() const;

  /// The document: `graph::parse(g.to_json(), g.base_dir())` gives the same
  /// graph.
  json to_json() const;

  /// Internal: the parsed model behind it.
  struct state;
  explicit graph(std::shared_ptr<const state> s) : state_(std::move(s)) {}
  const std::shared_ptr<const state>& internal() const { return state_; }

private:
  std::shared_ptr<const state> state_;
};

/// Builds a graph document in C++, step by step, then validates it exactly
/// as `graph::parse` does:
///
///     auto g = canopy::graph_builder{"team"}
///                .input("topic")
///                .step("plan").run({"./plan.sh", "${inputs.topic}"})
///                .step("read").fn("read").with({{"plan", "${steps.plan.stdout}"}}).needs({"plan"})
///                .output("summary", "${steps.read.text}")
///                .build();
///
/// `step(id)` starts a step (or goes back to it); the calls after it shape
/// that step until the next `step`. Calls that shape a step before any
/// `step` are reported by `build` (path `/steps`). Threading: one thread
/// at a time per builder.
class CANOPY_API graph_builder {
public:
  explicit graph_builder(std::string name);

  // -- the graph ------------------------------------------------------------

  /// Declares an input (`${inputs.NAME}`).
  graph_builder& input(const std::string& name);
  /// Sets output `name` to `value` (a string with `${...}` references, or any JSON).
  graph_builder& output(const std::string& name, json value);
  /// Sets the `limits` object (`max_depth`, `max_steps`, `budget`, `deadline`).
  graph_builder& limits(json value);

  // -- the current step: its kind (exactly one) -------------------------------

  /// Starts step `id`, or goes back to it.
  graph_builder& step(const std::string& id);
  /// Runs a command line, argv form (`run`); no shell is involved.
  graph_builder& run(std::vector<std::string> argv);
  /// Calls a function registered with `runtime::register_fn` (`fn`).
  graph_builder& fn(const std::string& name);
  /// Runs a tool of the node's tools file (`tool`).
  graph_builder& tool(const std::string& name);
  /// Runs a child graph: a file path relative to the base folder, a
  /// registered graph's name, or an inline document (`graph`).
  graph_builder& subgraph(json file_name_or_document);
  /// Waits for a signal named `signal` (`wait`); `options` adds its other
  /// keys (`prompt`, `schema`, `timeout`, `on_timeout`, `default`, `options`).
  graph_builder& wait(const std::string& signal, json options = json::object());
  /// Calls a model (`llm`): the object of the graph format (`provider`,
  /// `model`, `messages`, `tools`, ...).
  graph_builder& llm(json spec);

  // -- the current step: its fields -----------------------------------------------

  /// The step's `with` object (references allowed in its values).
  graph_builder& with(json object);
  /// Adds steps this one runs after and may refer to.
  graph_builder& needs(std::initializer_list<std::string> ids);
  graph_builder& needs(const std::string& id);
  /// Runs the step only when `condition` holds (`when`).
  graph_builder& when(const std::string& condition);
  /// Bounds each attempt (`"30s"`, `"5m"`).
  graph_builder& timeout(const std::string& duration);
  /// Retries a failed attempt `n` times.
  graph_builder& retries(int n);
  /// Sets any other field of the step as the graph format spells it
  /// (`env`, `cwd`, `stdin`, `cost`, `grace`, `repeat`, `retry_delay`, ...).
  graph_builder& set(const std::string& key, json value);

  // -- result -------------------------------------------------------------------

  /// The document built so far.
  json document() const;
  /// Validates the document as `graph::parse` does, relative paths against
  /// `base_dir`. @returns the graph, or `errc::invalid` with every problem.
  result<graph> build(const std::string& base_dir = ".") const;

private:
  json& current(const char* what);
  json doc_;
  std::string current_;
  std::vector<problem> misuse_; ///< calls that shaped no step, for `build`
  json scratch_;                ///< where such calls write
};

} // namespace canopy
