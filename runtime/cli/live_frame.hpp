#pragma once

// The frame of the live tree that `run` and `resume` draw on a terminal, laid
// out to fit the window. Plain data and pure functions: no store,
// no terminal; `tree_view` (render.hpp) builds the model, the CLI draws the
// lines.

#include <cstddef>
#include <string>
#include <vector>

namespace canopy::core {

// -- the model --------------------------------------------------------------------------

/// One step of a frame, with the steps of the child execution hanging under it.
struct frame_step {
  std::string name;
  /// As shown: a `running` step of a stopping execution shows `stopping`.
  std::string status;
  std::string last_line;                ///< its last output line, shown while it runs
  /// The escalation of a stop or timeout as it happens, shown while it runs:
  /// `SIGINT sent · SIGTERM in 10s`; while it waits, its signal name and
  /// what is left: `approval · 23h59m left`; empty: none.
  std::string signal;
  std::vector<std::string> stderr_tail; ///< its last stderr lines, shown when it failed
  std::string child_graph;              ///< empty: no child execution
  std::string child_status;
  std::vector<frame_step> children; ///< the child execution's steps
};

/// What a frame shows: a header line of the root execution, notices under it
/// (e.g. `stopping… (Ctrl-C again to force)`), then the tree of steps.
struct frame_model {
  std::string graph;
  std::string id;
  std::string status;
  std::string reason;
  std::vector<std::string> notices;
  std::vector<frame_step> steps;
};

/// A window's size in character cells; 0 means unbounded.
struct screen_size {
  size_t rows = 0;
  size_t cols = 0;
};

// -- layout -----------------------------------------------------------------------------

/// Lays out `m` as lines to draw, one physical line each, coloured with ANSI
/// codes when `colour`. The rules of the live view:
/// - the header and the notices come first, always (in a window too small
///   even for them, as many of them as fit);
/// - with `size.rows` set, at most `size.rows - 1` lines (the cursor stays on
///   the screen below the frame, so nothing scrolls): when the whole tree
///   does not fit, completed steps (with everything under them) fold into one
///   line `✓ N completed` under the notices; when it still does not fit, the
///   last lines shown are replaced by `… +N more` (N lines not shown);
/// - with `size.cols` set, every line is cut to `size.cols - 1` columns
///   (ending in `…`), so that no line wraps, whatever the terminal's rule for
///   the last column;
/// - with neither set: the whole tree, every line as long as it is (the
///   final frame).
/// A running (or stopping) step's line shows its `signal`, then its last
/// output line; a failed step's `stderr_tail` lines are shown under it as
/// `stderr: LINE`.
std::vector<std::string> layout_frame(const frame_model& m, screen_size size, bool colour);

// -- text on a terminal ------------------------------------------------------------------

/// The columns `text` takes on a terminal: an ANSI CSI sequence (`ESC [ ... final`)
/// none, a UTF-8 code point one, two for East Asian wide characters and
/// emoji, none for combining marks; a byte of invalid UTF-8 one.
size_t display_width(const std::string& text);

/// `text` cut to at most `cols` columns, its last column `…` when cut. Escape
/// sequences are kept; a cut line that held one ends with a reset (`ESC[0m`).
std::string fit_width(const std::string& text, size_t cols);

/// `text` (a step's output, a name from a graph) with every control character
/// (ESC, tab, CR, DEL...) replaced by a space: what a step prints cannot move
/// the cursor or colour the frame, and its width is what `display_width` says.
std::string printable(const std::string& text);

} // namespace canopy::core
