#pragma once

// A program on a pseudo-terminal, for tests of what canopy draws on a
// terminal: `pty_session` runs it (forkpty) with a window size and collects
// its output; `screen_model` is a minimal terminal that interprets exactly
// what canopy writes and counts the lines that scroll off its top.

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace canopy::core::test {

// -- the screen ----------------------------------------------------------------------------

/// A rows×cols terminal screen. It interprets printable UTF-8 text (one
/// column per code point), `\r`, `\n` (a line feed; at the bottom the screen
/// scrolls), `CSI n F` (cursor to the start of the line n up), `CSI J` /
/// `CSI 0 J` (erase from the cursor to the end of the screen), `CSI K` /
/// `CSI 0 K` (erase to the end of the line) and `CSI ... m` (ignored);
/// text autowraps at the width, deferred as in xterm (a character written in
/// the last column leaves the cursor there until the next one). Anything else
/// is recorded in `unknown()`, so a test can assert that the model saw only
/// what it understands. Feed it in pieces: a sequence cut between two feeds
/// is completed by the next.
class screen_model {
public:
  screen_model(size_t rows, size_t cols);

  /// Interprets `bytes`.
  void feed(const std::string& bytes);

  /// The screen's lines, trailing blanks removed.
  std::vector<std::string> lines() const;

  /// The lines scrolled off the top, oldest first, then the screen's.
  std::vector<std::string> transcript() const;

  /// How many lines scrolled off the top.
  size_t scrolled() const { return scrollback_.size(); }

  /// `scrolled()` when the last `CSI J` was interpreted (0 when none was).
  size_t scrolled_at_last_erase() const { return scrolled_at_erase_; }

  /// How many `CSI n F` (frame redraws) were interpreted.
  size_t cursor_ups() const { return cursor_ups_; }

  /// Sequences and control characters the model does not interpret.
  const std::vector<std::string>& unknown() const { return unknown_; }

private:
  void put(const std::string& glyph);
  void line_feed();
  void csi(const std::string& params, char final);

  size_t rows_;
  size_t cols_;
  std::vector<std::vector<std::string>> cells_; ///< one UTF-8 glyph or " " per cell
  size_t row_ = 0;
  size_t col_ = 0;
  bool wrap_pending_ = false;
  std::vector<std::string> scrollback_;
  size_t scrolled_at_erase_ = 0;
  size_t cursor_ups_ = 0;
  std::vector<std::string> unknown_;
  std::string partial_; ///< an escape sequence or UTF-8 character cut by the end of a feed
};

// -- the session ---------------------------------------------------------------------------

/// A program run on a new pseudo-terminal of `rows`×`cols` (forkpty): a
/// session and process group of its own whose controlling terminal is the
/// pty, so a `\x03` sent with ISIG on (the default) delivers SIGINT to it as
/// a terminal's Ctrl-C does. A thread reads everything it writes into the
/// output and a `screen_model` of the same size. The destructor kills the
/// process group (SIGKILL) if it still runs and reaps it.
class pty_session {
public:
  pty_session(const std::vector<std::string>& argv, unsigned short rows, unsigned short cols,
              const std::map<std::string, std::string>& env = {});
  ~pty_session();
  pty_session(const pty_session&) = delete;
  pty_session& operator=(const pty_session&) = delete;

  pid_t pid() const { return pid_; }

  /// Writes `bytes` to the terminal, as typed.
  void send(const std::string& bytes);

  /// Everything the program wrote so far.
  std::string output() const;

  /// Waits until `pred(output, screen)` holds (checked on each new output)
  /// or `timeout` passes. @returns whether it held.
  bool wait_for(const std::function<bool(const std::string&, const screen_model&)>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds{60});

  /// Waits until the output holds `text`.
  bool wait_for_text(const std::string& text,
                     std::chrono::milliseconds timeout = std::chrono::seconds{60});

  /// Runs `f` on the screen under the reader's lock.
  void with_screen(const std::function<void(const screen_model&)>& f) const;

  /// Waits for the program to exit and for its last output to be read.
  /// @returns whether it did within `timeout`.
  bool wait_exit(std::chrono::milliseconds timeout = std::chrono::seconds{60});

  /// The exit code (128 + N when killed by signal N); -1 before `wait_exit`.
  int exit_code() const { return exit_code_; }

private:
  void read_loop();

  pid_t pid_ = -1;
  int master_ = -1;
  int exit_code_ = -1;
  bool reaped_ = false;
  mutable std::mutex mtx_;
  std::condition_variable changed_;
  std::string output_;
  screen_model screen_;
  bool eof_ = false;
  bool stop_ = false;
  std::thread reader_;
};

} // namespace canopy::core::test
