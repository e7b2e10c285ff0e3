#include "runtime/cli/foreground_view.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <iostream>

#include "persistence/duration.hpp"
#include "persistence/error.hpp"
#include "runtime/cli/cli_common.hpp"

namespace canopy::core::cli {

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

/// Replaces the `drawn` lines of the frame on the terminal on stdout with
/// `lines` (cursor up by its line count, `CSI n F`, then erase below,
/// `CSI J`), and sets `drawn` to their count. Correct only when every frame
/// line is one physical line (no wrapping) and the frame fits the window:
/// `layout_frame` sees to both.
void draw(const std::vector<std::string>& lines, size_t& drawn) {
  std::string out;
  if (drawn > 0)
    out += "\033[" + std::to_string(drawn) + "F";
  out += "\033[J";
  for (auto& l : lines)
    out += l + "\n";
  drawn = lines.size();
  std::cout << out << std::flush;
}

} // namespace

// -- constructors and destructors -----------------------------------------------------

foreground_view::foreground_view(const global_options& g, tree_source source, std::string id,
                                 bool as_json, uint64_t after, std::string resume_command)
  : id_(std::move(id)),
    as_json_(as_json),
    tty_(!as_json && ::isatty(STDOUT_FILENO)),
    after_(after),
    resume_command_(std::move(resume_command)),
    view_(std::move(source), id_, use_colour(g, tty_)) {
  // On a terminal, a frame whenever something changed (events, the window,
  // or the seconds of a countdown to a step's next signal), at most one per
  // `frame_interval`.
  if (tty_)
    drawer_ = std::thread([this] {
      std::unique_lock<std::mutex> lock{mtx_};
      while (!over_) {
        wake_.wait_for(lock, frame_interval);
        auto now = window_size();
        bool tick = next_change_ && now_ms() >= *next_change_;
        if (!over_ && (dirty_ || tick || now.rows != size_.rows || now.cols != size_.cols))
          redraw();
      }
    });
}

foreground_view::~foreground_view() {
  end();
}

// -- following --------------------------------------------------------------------------

void foreground_view::watch(interrupt_guard& guard, stop_function stop) {
  guard_ = &guard;
  guard.watch([this, stop = std::move(stop)](int n) {
    bool force = n > 0;
    {
      std::lock_guard<std::mutex> lock{mtx_};
      if (force)
        say("forcing stop…", "forcing the stop of " + id_);
      else
        say("stopping… (Ctrl-C again to force)", "\nstopping " + id_ + " (Ctrl-C again to force)");
    }
    if (auto err = stop(force)) {
      std::lock_guard<std::mutex> lock{mtx_};
      auto what = "cannot stop " + id_ + ": " + message_of(err);
      say(what, "error: " + what);
    }
  });
}

void foreground_view::apply(const event_record& e) {
  if (as_json_)
    return; // only the final document is shown
  // An execution met for the first time is looked up (with --server, over
  // HTTP) before the lock: a slow answer holds neither the frames nor a
  // Ctrl-C's `stopping…` and its stop request. Only this thread changes the
  // view; the drawing thread reads it under the lock.
  auto found = view_.look_up(e.execution_id);
  std::lock_guard<std::mutex> lock{mtx_};
  view_.learn(std::move(found));
  view_.apply(e); // history too: it builds the tree
  if (e.seq <= after_)
    return;
  if (tty_)
    dirty_ = true;
  else
    std::cout << event_line(e, view_.label(e.execution_id)) << "\n" << std::flush;
}

void foreground_view::end() {
  {
    std::lock_guard<std::mutex> lock{mtx_};
    over_ = true;
  }
  wake_.notify_all();
  if (drawer_.joinable())
    drawer_.join();
  // No Ctrl-C is handled past this point (the stop it would ask is moot).
  if (guard_) {
    guard_->finish();
    guard_ = nullptr;
  }
  // The caller's event source delivers no more (a subscription's cancel
  // awaited its forwarder's down); taking the lock once also orders its
  // last `apply` before the view is used here for ThreadSanitizer, which
  // cannot see CAF's hand-over.
  std::lock_guard<std::mutex> lock{mtx_};
}

// -- the end ------------------------------------------------------------------------------

int foreground_view::finish(const execution_record& rec, const nlohmann::json& doc) {
  end();
  if (as_json_) {
    std::cout << doc.dump() << "\n";
  } else {
    // The final frame replaces the live one: the whole tree, unfolded (it is
    // ordinary output from here on, and may scroll).
    view_.notice({});
    if (tty_)
      draw(view_.render({}, now_ms()), drawn_);
    std::cout << status_text(rec) << ": " << id_ << "\n";
    if (!rec.error.empty())
      std::cout << "error: " << rec.error << "\n";
    // Without the tree, a failed step's last stderr lines follow the error.
    if (!tty_)
      for (auto& f : view_.failures()) {
        std::cout << f.where << " stderr:\n";
        for (auto& l : f.stderr_tail)
          std::cout << "  " << l << "\n";
      }
    if (rec.status == execution_status::completed)
      std::cout << rec.outputs.dump(2) << "\n";
  }
  std::cout << std::flush;
  if (rec.status == execution_status::stopped || rec.status == execution_status::failed)
    resume_hint();
  return exit_code_of(rec.status);
}

void foreground_view::resume_hint() const {
  std::cerr << "resume with: " << resume_command_ << "\n";
}

// -- private ------------------------------------------------------------------------------

void foreground_view::say(const std::string& frame_text, const std::string& line) {
  if (tty_) {
    if (over_)
      return; // the final frame is about to be drawn
    view_.notice(frame_text);
    redraw();
  } else {
    std::cerr << line << "\n" << std::flush;
  }
}

void foreground_view::redraw() {
  size_ = window_size();
  auto now = now_ms();
  draw(view_.render(size_, now), drawn_);
  next_change_ = view_.next_change(now);
  dirty_ = false;
}

} // namespace canopy::core::cli
