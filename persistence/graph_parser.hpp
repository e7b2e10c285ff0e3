#pragma once

// Internal to persistence/: the graph parser's class, which graph.cpp runs and
// graph_parser.cpp, graph_parse_steps.cpp, graph_parse_wait.cpp,
// graph_parse_llm.cpp, graph_parse_repeat.cpp and graph_check.cpp define by
// topic.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

#include "persistence/graph.hpp"
#include "persistence/graph_order.hpp"
#include "persistence/json_text.hpp"

namespace canopy::core::detail {

// -- files ---------------------------------------------------------------------

/// Reads and parses the graph file `abs_path`: the parser's loader unless
/// `parse_options::load_file` names another (graph.cpp).
caf::expected<json> load_graph_file(const std::string& abs_path);

/// Returns `normalize_path` of `p` (graph.cpp).
std::string normalize(const std::filesystem::path& p);

// -- small helpers (graph_parser.cpp) ------------------------------------------

bool contains(const std::vector<std::string>& xs, const std::string& x);

template <class Container>
std::string join(const Container& xs, const std::string& sep = ", ") {
  std::string result;
  for (auto& x : xs) {
    if (!result.empty())
      result += sep;
    result += x;
  }
  return result;
}

/// Reads a `grace` object (`interrupt`, `terminate`: durations), of a step
/// or of a tool (graph_parse_steps.cpp); every error goes to `errors` with
/// its path under `path`. @returns the periods (defaults for keys not
/// given), or nullopt when there was an error.
std::optional<grace_periods> parse_grace_periods(const json& v, const std::string& path,
                                                 std::vector<graph_error>& errors);

/// Reads a non-negative integer; nullopt when `v` is not one.
std::optional<uint64_t> non_negative_integer(const json& v);

/// Reads a finite non-negative number; nullopt when `v` is not one.
std::optional<double> non_negative_number(const json& v);

// -- the parser ----------------------------------------------------------------

/// A step while it is being validated.
struct step_work {
  explicit step_work(step_def& d) : def(d) {
    // nop
  }
  std::string path; ///< `/steps/ID`
  /// The step being built, in the parser's `defs_` (its place in the
  /// document's order until the steps are sorted).
  step_def& def;
  /// String `needs` entries with their index, as written.
  std::vector<std::pair<size_t, const std::string*>> raw_needs; ///< into the document
  /// Strings that may hold references: (JSON path after `path`, text in the
  /// document or in `def`).
  std::vector<std::pair<std::string, const std::string*>> texts;
  /// Set when `with` is present but not an object.
  bool bad_with = false;
};

using loader_fn = std::function<caf::expected<json>(const std::string&)>;

/// Validates one graph document; a new parser per (child) graph.
class graph_parser {
public:
  graph_parser(const parse_options& opts, std::vector<std::string> chain);

  /// Validates `document`, which becomes the graph's `document`.
  parse_result run(json document, const std::string& base_dir,
                   const std::string& default_name);

private:
  // -- errors (graph_parser.cpp) ------------------------------------------------

  void fail(std::string path, std::string message, std::string code = {});

  /// Refuses an inline command (`run`, argv `plan`) when the node does not
  /// allow them (runtime/docs/reference/http.md#stop).
  void refuse_inline(const std::string& path, const char* what);

  parse_result finish();

  // -- top level (graph_parser.cpp) ---------------------------------------------

  void parse_inputs(const json& v);

  void parse_limits(const json& v);


  std::optional<millis> duration(const json& v, const std::string& path);

  // -- steps (graph_parse_steps.cpp) --------------------------------------------

  void parse_step(const std::string& id, const json& v);

  /// Reads the step fields of `v`; for a `wait` step (`deps_only`) only
  /// `needs`, `when` and `after`: `refuse_wait_fields` reports the others.
  void parse_step_fields(step_work& w, const json& v, bool is_agent, bool deps_only);

  /// Reads what a step waits for: `needs`, `when` and `after`.
  void parse_step_deps(step_work& w, const json& v);

  /// Reads what a step gets: `with`, `message` (agent steps only), `env`,
  /// `stdin` and `cwd`; their strings that may hold references join `w.texts`.
  void parse_step_inputs(step_work& w, const json& v, bool is_agent);

  /// Reads how a step is bounded: `timeout`, `retries`, `retry_delay`,
  /// `cost` and `grace`.
  void parse_step_limits(step_work& w, const json& v);


  void collect_texts(step_work& w, const json& v, const std::string& path);

  // -- kinds (graph_parse_steps.cpp) --------------------------------------------

  void parse_kind(step_work& w, const std::string& key, const json& v);

  std::optional<std::string> non_empty_string(const json& v, const std::string& path,
                                              const char* what);

  bool parse_argv(step_work& w, const json& v, const std::string& path);

  void check_tool(const std::string& name, const std::string& path);

  // -- wait steps (graph_parse_wait.cpp) ----------------------------------------

  /// Reads a `wait` object at `path` into `w.def.wait`; its prompt joins
  /// `w.texts`.
  void parse_wait(step_work& w, const json& v, const std::string& path);

  /// Reads a wait's `options` `v` at `opath` into `def`: labels and their
  /// values, checked against `def.schema` when `schema_ok`.
  void parse_wait_options(wait_def& def, const json& v, const std::string& opath,
                          bool schema_ok);

  /// Reads a wait's `timeout` `v` at `tpath` into `def`: positive, and no
  /// longer than the graph's deadline.
  void parse_wait_timeout(wait_def& def, const json& v, const std::string& tpath);

  /// Reads what the wait `v` at `path` does when its timeout passes
  /// (`on_timeout`, and `default` with it) into `def`; the default is
  /// checked against `def.schema` when `schema_ok`.
  void parse_wait_fallback(wait_def& def, const json& v, const std::string& path,
                           bool schema_ok);

  /// Reads a wait's `approvers` `v` at `apath` into `def`: distinct user names.
  void parse_approvers(wait_def& def, const json& v, const std::string& apath);

  /// Reports each step field of the `wait` step `v` that it cannot have
  /// (`timeout`, `retries`, `with`...): only `needs`, `when` and `after`.
  void refuse_wait_fields(const step_work& w, const json& v);

  /// Reports each error of `validate_value(schema, value)` at `path` plus
  /// the error's pointer.
  void check_value(const json& schema, const json& value, const std::string& path);

  // -- model calls (graph_parse_llm.cpp) -----------------------------------------

  /// Reads an `llm` object at `path` into `w.def.llm`; the message
  /// contents join `w.texts`.
  void parse_llm(step_work& w, const json& v, const std::string& path);

  /// Reports each step field the `llm` step `v` cannot have (`with`, `env`,
  /// `stdin`, `cwd`, `message`, `grace`, `cost`).
  void refuse_llm_fields(const step_work& w, const json& v);

  /// Checks message `m` at `mpath` (`rel`: its path inside the step); its
  /// strings that may hold references join `w.texts`.
  void parse_message(step_work& w, json& m, const std::string& mpath, const std::string& rel);

  // -- loops (graph_parse_repeat.cpp) -------------------------------------------

  /// Reads a `graph` step's `repeat` object at `path` into `w.def.repeat`
  /// (after its child graph: an inline child's steps and inputs are checked).
  void parse_repeat(step_work& w, const json& v, const std::string& path);

  // -- child graphs (graph_parse_steps.cpp) -------------------------------------

  void parse_child(step_work& w, const json& v, const std::string& path);

  /// A `graph` step's `with` is the child's `inputs` (runtime/docs/reference/graph-format.md#graph).
  void check_child_inputs(const step_work& w, const graph& child);

  // -- dependencies (graph_check.cpp) -------------------------------------------

  /// Resolves `needs` to positions (`needs_`), without duplicates.
  void check_needs();

  /// Returns the steps in topological order (ties by id); reports one cycle
  /// per group of steps that need each other.
  std::vector<size_t> sort_steps();

  // -- references (graph_check.cpp) ---------------------------------------------

  /// Checks every step's references; whether a named step is upstream is
  /// decided for all of them at once (`detail::upstream`), and the error of
  /// each that is not goes where it was found among the others.
  void check_references(const std::vector<size_t>& order);

  /// Checks the references in `text` at JSON path `base + rel`; `step` is
  /// the referencing step, or nullptr for `outputs` (where any step may be
  /// named).
  void check_text(const std::string& base, const std::string& rel, const std::string& text,
                  const size_t* step);

  // -- state --------------------------------------------------------------------

  const parse_options& opts_;
  std::vector<std::string> chain_; ///< absolute paths of the files being parsed
  /// A parsed file and its document.
  struct cached_file {
    parse_result result;
    json doc;
  };
  /// Files parsed so far in this parse (shared with child parsers).
  std::shared_ptr<std::map<std::string, cached_file>> cache_
    = std::make_shared<std::map<std::string, cached_file>>();
  loader_fn loader_;
  int max_depth_;
  std::string base_abs_;
  std::shared_ptr<graph> g_;
  std::set<std::string> input_set_;
  std::vector<step_work> work_;
  /// Step id → position in the work list; becomes the graph's index.
  std::unordered_map<std::string, size_t> work_index_;

  /// The ids of the graph's steps, for suggestions.
  std::vector<std::string> step_ids() const {
    std::vector<std::string> out;
    for (auto& w : work_)
      out.push_back(w.def.id);
    return out;
  }
  /// The steps, in the document's order (then sorted into the graph).
  std::vector<step_def> defs_;
  /// `needs` of each step as positions in the work list.
  detail::needs_lists needs_;
  /// Where an upstream check was asked: its error goes before `errors_[at]`.
  struct pending_ref {
    size_t at;
    const std::string* base; ///< the step's path
    const std::string* rel;  ///< in the step's `texts`
    std::string text;        ///< the reference as written
  };
  /// Pending upstream checks, and where each was asked.
  std::vector<detail::upstream_query> queries_;
  std::vector<pending_ref> pending_;
  std::map<std::string, json> files_;
  std::vector<graph_error> errors_;
};

} // namespace canopy::core::detail
