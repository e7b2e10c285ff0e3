#pragma once

// Human output of the CLI: event lines, the live tree, `show` and `ls`.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "persistence/records.hpp"
#include "persistence/store.hpp"
#include "runtime/cli/step_logs.hpp"
#include "runtime/cli/live_frame.hpp"

namespace canopy::core {

/// The text of a `step.output` event's data: its `line`, or a model's
/// `text` piece (stream `model`) with its line breaks made spaces.
std::string output_text(const nlohmann::json& data);

/// One line per event, for output that is not a terminal:
/// `09:22:21.042 step.completed  research/search completed`; a signal sent
/// to a step's processes: `... step.signalled  research/search SIGTERM
/// (SIGKILL in 5s)`.
std::string event_line(const event_record& e, const std::string& label);

/// An execution's status and reason as the CLI prints them: `stopped (requested)`.
std::string status_text(const execution_record& rec);

/// Where a `tree_view` looks up what events do not carry, once per execution
/// it meets: the execution's record (graph name, lineage, status) and its
/// graph document (the steps, in order, before they start). Either may
/// answer nullopt (unknown): the view then learns from events alone. Called
/// on the thread that feeds the view.
struct tree_source {
  std::function<std::optional<execution_record>(const std::string& id)> execution;
  std::function<std::optional<nlohmann::json>(const std::string& id)> graph_document;
};

/// A source reading the local store `db` (which must outlive its use).
tree_source store_source(const store& db);

/// A live tree of executions and steps built from events; redrawn in place on
/// a terminal (its layout: live_frame.hpp). Not thread-safe: feed it from one
/// thread.
class tree_view {
public:
  /// How many of a step's last stderr lines it keeps (of its latest attempt).
  static constexpr size_t stderr_lines = failed_step_stderr_lines;

  /// A failed step and the last lines it wrote to stderr.
  struct failure {
    std::string where; ///< `LABEL/STEP`, e.g. `team/researcher/search`
    std::vector<std::string> stderr_tail;
  };

  /// `colour`: statuses in ANSI colours (see `--color` and `NO_COLOR`).
  tree_view(tree_source source, std::string root_id, bool colour = true);

  /// A view of a tree in the local store `db`.
  tree_view(const store& db, std::string root_id, bool colour = true);

  /// What the source says of an execution the view has not met yet.
  struct lookup {
    std::string id;
    std::optional<execution_record> record;
    std::optional<nlohmann::json> graph_document;
  };

  /// Asks the source what `apply` of an event of `execution_id` would ask:
  /// of that execution, then of each ancestor its record names, up to one the
  /// view knows. Changes nothing: `learn` adds the answers. The lookups may be
  /// slow (a server's, with `--server`), so a caller that guards the view with
  /// a lock runs this outside it. Threading: the feeding thread (the only one
  /// that changes the view).
  std::vector<lookup> look_up(const std::string& execution_id) const;

  /// Adds what `look_up` found (ancestors first); executions met meanwhile
  /// are kept as they are.
  void learn(std::vector<lookup> found);

  /// Applies an event (looking up, inline, an execution it has not met).
  void apply(const event_record& e);

  /// Sets the line shown under the root's header (empty: none), e.g.
  /// `stopping… (Ctrl-C again to force)`.
  void notice(std::string text);

  /// What a frame of the tree shows at `now` (ms since the epoch):
  /// statuses, running steps' last output lines and the last signal sent to
  /// their processes with the time left until the next one
  /// (`SIGINT sent · SIGTERM in 10s`, whole seconds rounded up, never below
  /// 0), failed steps' last stderr lines, the notice; text from steps and
  /// graphs made `printable`.
  frame_model frame(int64_t now) const;

  /// Lays out the frame at `now` for a window of `size` (`layout_frame`);
  /// unbounded: the whole tree, one line per execution and step.
  std::vector<std::string> render(screen_size size, int64_t now) const;

  /// The first time after `now` at which a frame would show another number
  /// in a countdown to a step's next signal; nothing when no countdown runs
  /// (events aside, the frame stays the same).
  std::optional<int64_t> next_change(int64_t now) const;

  /// The failed steps of the tree that wrote to stderr, in the tree's order.
  std::vector<failure> failures() const;

  /// A short label for an execution: the root's graph name, and for a child
  /// its parent's label and step, e.g. `team/researcher`.
  std::string label(const std::string& execution_id);

private:
  /// The last signal an escalation sent to a running step's processes.
  struct signal_view {
    std::string signal;
    std::string next;    ///< empty: none follows
    int64_t next_at = 0; ///< when `next` is due (ms since the epoch); 0: none
    /// `SIGINT sent · SIGTERM in 10s` at `now`, or `SIGKILL sent`.
    std::string text(int64_t now) const;
  };
  struct exec_view {
    std::string graph;
    std::string status = "queued";
    std::string reason;
    std::string parent_id;
    std::string parent_step;
    std::string label; ///< where it hangs under its parent (`child_label`)
    std::vector<std::string> order; ///< steps in first-seen order
    std::map<std::string, std::string> steps; ///< step → status
    std::map<std::string, std::string> last_line; ///< step → last output line
    std::map<std::string, std::deque<std::string>> stderr_tail; ///< step → last stderr lines
    std::map<std::string, std::string> child_of_step; ///< step → child id
    std::map<std::string, signal_view> signals; ///< running step → its last signal
    /// Waiting step → its signal name and deadline (ms since the epoch; 0: none).
    std::map<std::string, std::pair<std::string, int64_t>> waits;
  };
  exec_view& get(const std::string& id);
  /// `label` of an execution already seen.
  std::string label_of(const std::string& id) const;
  /// The frame steps of execution `id` at `now`; `stopping`: an ancestor is
  /// stopping.
  void add_steps(const std::string& id, bool stopping, int64_t now,
                 std::vector<frame_step>& out) const;
  void add_failures(const std::string& id, std::vector<failure>& out) const;

  tree_source source_;
  std::string root_id_;
  bool colour_;
  std::string notice_;
  std::map<std::string, exec_view> execs_;
};

/// What is left until a wait's deadline `deadline` (ms since the epoch) at
/// `now`: "23h59m left", "4m10s left", "deadline passed", or "no
/// deadline" for 0.
std::string time_left(int64_t deadline, int64_t now);

/// Renders a document from `load_document` as an indented tree: a step per
/// line in graph order with its status, start and duration (running ones:
/// so far, at `now`), and the last stderr lines under a failed step
/// (render_show.cpp).
std::string render_document(const nlohmann::json& doc, int64_t now);

/// The names of `steps` (a graph's or an execution document's `steps`
/// object) in a topological order of their `needs`, ties by name; steps a
/// cycle leaves out follow by name. The order of `show` and the live tree.
std::vector<std::string> steps_in_order(const nlohmann::json& steps);

/// Renders `ls` rows: id, graph, status, reason, age and duration at `now`
/// (render_show.cpp).
std::string render_list(const std::vector<execution_record>& rows, int64_t now);

// -- agents (runtime/docs/reference/graph-format.md#agent-graphs) ----------------------------------------------------------------

/// The text of a message, reply or history content: a string as it is,
/// anything else as compact JSON.
std::string content_text(const nlohmann::json& v);

/// Renders agent documents (`agent ls`): a header, then one line per agent
/// with its name, busy policy and graph name.
std::string render_agents(const nlohmann::json& docs);

/// Renders history documents (`agent history`): one line per entry,
/// `user: TEXT` or `agent: TEXT` (trailing newlines of TEXT dropped).
std::string render_history(const nlohmann::json& docs);

// -- cluster (runtime/docs/reference/config.md#cluster) ------------------------------------------------------------------

/// Renders node documents (`ls --nodes`): a header `NAME SLOTS RUNNING TOOLS
/// SUPERVISOR`, then one line per node; tools comma-separated (`-` for none),
/// SUPERVISOR `yes` or `no`.
std::string render_nodes(const nlohmann::json& docs);

} // namespace canopy::core
