// `run` and `resume` in the foreground: the live tree redrawn in place on a
// terminal (it fits the window: live_frame.hpp), event lines elsewhere,
// Ctrl-C as stops with feedback at once, and the result at the end.

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include "runtime/cli_common.hpp"
#include "runtime/document.hpp"
#include "runtime/render.hpp"

namespace canopy::cli {

namespace {

// -- tunables ---------------------------------------------------------------------------

/// The live tree is redrawn at most this often; a change is on the screen
/// within it (a Ctrl-C's notice at once).
constexpr std::chrono::milliseconds frame_interval{100};

/// The window assumed when the terminal does not tell its size.
constexpr screen_size default_window{24, 80};

// -- the terminal -----------------------------------------------------------------------

/// The size of the terminal on stdout (TIOCGWINSZ), else `default_window`.
screen_size window_size() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0)
    return default_window;
  return {ws.ws_row, ws.ws_col};
}

/// Draws frames in place on the terminal on stdout: each replaces the one
/// before (cursor up by its line count, `CSI n F`, then erase below,
/// `CSI J`). Correct only when every frame line is one physical line (no
/// wrapping) and the frame fits the window: `layout_frame` sees to both.
class live_screen {
public:
  /// Replaces the frame on the screen with `lines`.
  void draw(const std::vector<std::string>& lines) {
    std::string out;
    if (drawn_ > 0)
      out += "\033[" + std::to_string(drawn_) + "F";
    out += "\033[J";
    for (auto& l : lines)
      out += l + "\n";
    drawn_ = lines.size();
    std::cout << out << std::flush;
  }

private:
  size_t drawn_ = 0; ///< lines of the frame on the screen
};

} // namespace

// -- following an execution ---------------------------------------------------------------

int follow(const global_options& g, runtime& rt, const execution_handle& h,
           interrupt_guard& guard, bool as_json, uint64_t after) {
  bool tty = !as_json && ::isatty(STDOUT_FILENO);
  std::mutex mtx; // guards everything below, shared with the threads that follow
  std::condition_variable wake;
  tree_view view{*rt.db(), h.id(), use_colour(g, tty)};
  live_screen screen;
  bool dirty = false; // events applied since the last frame
  bool over = false;  // the execution ended: no more live frames
  screen_size size;
  auto redraw = [&] {
    size = window_size();
    screen.draw(view.render(size));
    dirty = false;
  };
  // Ctrl-C: the feedback first (in the frame on a terminal, else a line on
  // stderr), then the stop: graceful on the first, forced after.
  guard.watch([&, h](int n) {
    {
      std::lock_guard<std::mutex> lock{mtx};
      if (tty && !over) {
        view.notice(n == 0 ? "stopping… (Ctrl-C again to force)" : "forcing stop…");
        redraw();
      } else if (!tty) {
        std::cerr << (n == 0 ? "\nstopping " + h.id() + " (Ctrl-C again to force)\n"
                             : "forcing the stop of " + h.id() + "\n")
                  << std::flush;
      }
    }
    auto mode = n > 0 ? stop_mode::force : stop_mode::graceful;
    std::thread([h, mode] { (void) h.stop(mode); }).join();
  });
  // On a terminal, a frame whenever something changed (or the window did),
  // at most one per `frame_interval`.
  std::thread drawer;
  if (tty)
    drawer = std::thread([&] {
      std::unique_lock<std::mutex> lock{mtx};
      while (!over) {
        wake.wait_for(lock, frame_interval);
        auto now = window_size();
        if (!over && (dirty || now.rows != size.rows || now.cols != size.cols))
          redraw();
      }
    });
  subscription sub;
  if (!as_json)
    sub = h.subscribe([&](const event_record& e) {
      std::lock_guard<std::mutex> lock{mtx};
      view.apply(e); // history too: it builds the tree
      if (e.seq <= after)
        return;
      if (tty)
        dirty = true;
      else
        std::cout << event_line(e, view.label(e.execution_id)) << "\n" << std::flush;
    });
  auto rec = h.wait();
  sub.cancel();
  {
    std::lock_guard<std::mutex> lock{mtx};
    over = true;
  }
  wake.notify_all();
  if (drawer.joinable())
    drawer.join();
  // No Ctrl-C is handled past this point (the stop it would ask is moot).
  guard.finish();
  // No callback runs any more (cancel awaited the forwarder's down); taking
  // the lock once also orders its last one before `view` is used and
  // destroyed here for ThreadSanitizer, which cannot see CAF's hand-over.
  { std::lock_guard<std::mutex> lock{mtx}; }
  if (!rec) {
    // The execution could not record its end (e.g. the store stayed busy):
    // once this process is gone, the next command that opens the store makes
    // it `stopped`/`interrupted`, resumable from its last recorded state.
    int rc = fail(rec.error());
    std::cerr << "resume with: canopy --home " << rt.db()->home() << " resume " << h.id()
              << "\n";
    return rc;
  }
  auto doc = load_document(*rt.db(), h.id());
  if (!doc)
    return fail(doc.error());
  if (as_json) {
    std::cout << doc->dump() << "\n";
  } else {
    // The final frame replaces the live one: the whole tree, unfolded (it is
    // ordinary output from here on, and may scroll).
    view.notice({});
    if (tty)
      screen.draw(view.render());
    std::cout << (*doc)["status"].get<std::string>();
    if (!rec->reason.empty())
      std::cout << " (" << rec->reason << ")";
    std::cout << ": " << h.id() << "\n";
    if (!rec->error.empty())
      std::cout << "error: " << rec->error << "\n";
    // Without the tree, a failed step's last stderr lines follow the error.
    if (!tty)
      for (auto& f : view.failures()) {
        std::cout << f.where << " stderr:\n";
        for (auto& l : f.stderr_tail)
          std::cout << "  " << l << "\n";
      }
    if (rec->status == execution_status::completed)
      std::cout << rec->outputs.dump(2) << "\n";
  }
  if (rec->status == execution_status::stopped || rec->status == execution_status::failed)
    std::cerr << "resume with: canopy --home " << rt.db()->home() << " resume " << h.id()
              << "\n";
  return exit_code_of(rec->status);
}

} // namespace canopy::cli
