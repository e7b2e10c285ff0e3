#pragma once

// What `run` and `resume` show of an execution they follow in the foreground,
// on the local home (cli_follow.cpp) and on a server (cli_remote_run.cpp):
// the one place of its rules. The caller feeds the events in
// from wherever they come from and says how to stop the execution; the view
// draws, answers Ctrl-C and prints the end.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <caf/error.hpp>
#include <nlohmann/json.hpp>

#include "persistence/records.hpp"
#include "runtime/cli/live_frame.hpp"
#include "runtime/cli/render.hpp"

namespace canopy::core::cli {

struct global_options;
class interrupt_guard;

/// An execution followed in the foreground until it ends. Human output: on
/// a terminal, the live tree redrawn in place by a thread of its own,
/// fitted to the window (live_frame.hpp), at most ten frames a second; else
/// one line per event. At the end (`finish`) the final frame, the whole
/// tree, replaces the live one, then the outcome; without a terminal, a
/// failed step's last stderr lines follow the error. With `as_json` nothing
/// shows live and `finish` prints the final document.
///
/// Threading: `apply` from the thread that reads the events, Ctrl-C on the
/// interrupt guard's thread, the rest from the thread that made the view.
class foreground_view {
public:
  // -- member types --------------------------------------------------------------------

  /// Asks for the stop of the execution (`force`: no grace periods);
  /// @returns the error when the request could not be made. Called on the
  /// interrupt guard's thread (see `interrupt_guard::watch` for calls into
  /// CAF).
  using stop_function = std::function<caf::error(bool force)>;

  // -- constructors and destructors -------------------------------------------------

  /// Follows execution `id`; `source` is where its tree is looked up
  /// (`tree_source`). Events up to seq `after` build the tree without being
  /// shown (a resume's history). `resume_command` is what `resume with:`
  /// names, e.g. `canopy --home H resume ID`. Colour as `--color` says.
  foreground_view(const global_options& g, tree_source source, std::string id, bool as_json,
                  uint64_t after, std::string resume_command);

  /// Calls `end`.
  ~foreground_view();

  foreground_view(const foreground_view&) = delete;
  foreground_view& operator=(const foreground_view&) = delete;

  // -- following ------------------------------------------------------------------------

  /// Answers Ctrl-C through `guard` (once): the notice first, at once (under
  /// the header on a terminal: `stopping… (Ctrl-C again to force)`, then
  /// `forcing stop…`; else a line on stderr), then `stop`, graceful on the
  /// first, forced after. A stop that fails is said the same way. `end`
  /// finishes the guard, which must outlive the view.
  void watch(interrupt_guard& guard, stop_function stop);

  /// Applies event `e` of the tree (any order of threads, one at a time).
  void apply(const event_record& e);

  /// The execution ended (or cannot be followed further): no live frame and
  /// no Ctrl-C is handled after this returns, and no `apply` may come.
  /// Idempotent.
  void end();

  // -- the end ------------------------------------------------------------------------

  /// Prints the end of execution `rec` (after `end`, which it calls): the
  /// final document `doc` with `as_json`; else the final frame on a
  /// terminal, `STATUS[ (REASON)]: ID`, `error: ...`, a failed step's last
  /// stderr lines (no terminal), a completed run's outputs. A stopped or
  /// failed run also gets `resume_hint`. @returns its exit code (runtime/docs/reference/cli.md).
  int finish(const execution_record& rec, const nlohmann::json& doc);

  /// Prints `resume with: RESUME_COMMAND` on stderr.
  void resume_hint() const;

private:
  /// Says `text` at once: the notice of the frame on a terminal (while it
  /// is live), else a line on stderr. Under `mtx_`.
  void say(const std::string& frame_text, const std::string& line);

  /// Draws the frame for the window's size now. Under `mtx_`.
  void redraw();

  std::string id_;
  bool as_json_;
  bool tty_;
  uint64_t after_;
  std::string resume_command_;
  interrupt_guard* guard_ = nullptr;

  std::mutex mtx_; ///< guards everything below, shared with the threads
  std::condition_variable wake_;
  tree_view view_;
  size_t drawn_ = 0;   ///< lines of the frame on the screen
  screen_size size_;   ///< the window's size at the last frame
  bool dirty_ = false; ///< events applied since the last frame
  /// When a countdown of the frame on the screen shows another number
  /// (`tree_view::next_change`); nothing: no countdown runs.
  std::optional<int64_t> next_change_;
  bool over_ = false;  ///< `end` was called: no more live frames
  std::thread drawer_;
};

} // namespace canopy::core::cli
