#include "runtime/cli/live_frame.hpp"

#include <algorithm>
#include <cstdint>

namespace canopy::core {

namespace {

// -- UTF-8 and escape sequences ----------------------------------------------------------

constexpr char32_t invalid = 0xFFFFFFFF;

/// Decodes the code point at `s[i]`; @returns it and its length in bytes
/// (`invalid` and 1 for a byte that starts no valid sequence).
std::pair<char32_t, size_t> decode(const std::string& s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80)
    return {b, 1};
  size_t len = b >= 0xF0 ? (b <= 0xF4 ? 4 : 0) : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
  if (len == 0 || i + len > s.size())
    return {invalid, 1};
  char32_t cp = b & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; ++k) {
    auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80)
      return {invalid, 1};
    cp = (cp << 6) | (c & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))
      || (cp >= 0xD800 && cp <= 0xDFFF))
    return {invalid, 1};
  return {cp, len};
}

/// Columns of one code point (see `display_width`).
size_t columns(char32_t cp) {
  if (cp == invalid)
    return 1;
  struct range {
    char32_t lo, hi;
  };
  static const range zero[] = {{0x0300, 0x036F}, {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF},
                               {0x200B, 0x200F}, {0x20D0, 0x20FF}, {0xFE00, 0xFE0F},
                               {0xFE20, 0xFE2F}};
  static const range wide[] = {{0x1100, 0x115F},   {0x2E80, 0x303E},   {0x3041, 0x33FF},
                               {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},
                               {0xAC00, 0xD7A3},   {0xF900, 0xFAFF},   {0xFE30, 0xFE4F},
                               {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},   {0x1F300, 0x1F64F},
                               {0x1F900, 0x1F9FF}, {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD}};
  for (auto& r : zero)
    if (cp >= r.lo && cp <= r.hi)
      return 0;
  for (auto& r : wide)
    if (cp >= r.lo && cp <= r.hi)
      return 2;
  return 1;
}

/// The length of the escape sequence at `s[i]` (an ESC): a CSI sequence up
/// to its final byte, else the ESC alone.
size_t escape_length(const std::string& s, size_t i) {
  if (i + 1 >= s.size() || s[i + 1] != '[')
    return 1;
  size_t j = i + 2;
  while (j < s.size() && static_cast<unsigned char>(s[j]) >= 0x20
         && static_cast<unsigned char>(s[j]) <= 0x3F)
    ++j;
  return j < s.size() ? j + 1 - i : s.size() - i;
}

// -- painting ---------------------------------------------------------------------------

const char* reset = "\033[0m";
const char* dim = "\033[2m";
const char* green = "\033[32m";
const char* yellow = "\033[33m";

const char* status_colour(const std::string& status) {
  if (status == "completed")
    return green;
  if (status == "failed")
    return "\033[31m";
  if (status == "running")
    return "\033[36m";
  if (status == "waiting")
    return "\033[35m";
  if (status == "stopped" || status == "stopping")
    return yellow;
  return dim;
}

struct painter {
  bool on;
  std::string operator()(const char* code, const std::string& text) const {
    return on ? code + text + reset : text;
  }
};

/// The number of steps in `s` and under it.
size_t count_steps(const frame_step& s) {
  size_t n = 1;
  for (auto& c : s.children)
    n += count_steps(c);
  return n;
}

/// Appends the lines of `steps` under `indent`; with `fold`, completed steps
/// are left out and counted in `folded`.
void add_rows(const std::vector<frame_step>& steps, const std::string& indent, bool fold,
              const painter& paint, size_t& folded, std::vector<std::string>& out) {
  std::vector<const frame_step*> shown;
  for (auto& s : steps) {
    if (fold && s.status == "completed")
      folded += count_steps(s);
    else
      shown.push_back(&s);
  }
  for (size_t n = 0; n < shown.size(); ++n) {
    auto& s = *shown[n];
    bool last = n + 1 == shown.size();
    auto line = indent + (last ? "└─ " : "├─ ") + s.name + " " + paint(status_colour(s.status), s.status);
    bool runs = s.status == "running" || s.status == "stopping";
    if (runs && !s.signal.empty())
      line += "  " + paint(yellow, s.signal);
    if (s.status == "waiting" && !s.signal.empty())
      line += " · " + s.signal; // approve waiting · approval · 23h59m left
    if (runs && !s.last_line.empty())
      line += "  " + paint(dim, fit_width(s.last_line, 60));
    if (!s.child_graph.empty())
      line += "  → " + s.child_graph + " " + paint(status_colour(s.child_status), s.child_status);
    out.push_back(std::move(line));
    auto under = indent + (last ? "   " : "│  ");
    if (s.status == "failed")
      for (auto& l : s.stderr_tail)
        out.push_back(under + "  " + paint(dim, "stderr: " + l));
    add_rows(s.children, under, fold, paint, folded, out);
  }
}

} // namespace

// -- layout -----------------------------------------------------------------------------

std::vector<std::string> layout_frame(const frame_model& m, screen_size size, bool colour) {
  painter paint{colour};
  std::vector<std::string> out;
  out.push_back(m.graph + " " + m.id + " " + paint(status_colour(m.status), m.status)
                + (m.reason.empty() ? "" : " (" + m.reason + ")"));
  for (auto& n : m.notices)
    out.push_back(paint(yellow, n));
  auto head = out.size();
  size_t folded = 0;
  add_rows(m.steps, "", false, paint, folded, out);
  if (size.rows > 0) {
    // The cursor rests on the line below the frame: rows - 1 lines at most.
    size_t budget = std::max<size_t>(size.rows - 1, 1);
    if (out.size() > budget) {
      out.resize(head);
      add_rows(m.steps, "", true, paint, folded, out);
      if (folded > 0)
        out.insert(out.begin() + static_cast<std::ptrdiff_t>(head),
                   paint(green, "✓") + " " + std::to_string(folded) + " completed");
    }
    if (out.size() > budget) {
      if (budget <= head) {
        out.resize(budget); // the header and notices, as many as fit
      } else {
        auto hidden = out.size() - (budget - 1);
        out.resize(budget - 1);
        out.push_back(paint(dim, "… +" + std::to_string(hidden) + " more"));
      }
    }
  }
  if (size.cols > 0)
    for (auto& l : out)
      l = fit_width(l, size.cols - 1);
  return out;
}

// -- text on a terminal ------------------------------------------------------------------

size_t display_width(const std::string& text) {
  size_t width = 0;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '\033') {
      i += escape_length(text, i);
      continue;
    }
    auto [cp, len] = decode(text, i);
    width += columns(cp);
    i += len;
  }
  return width;
}

std::string fit_width(const std::string& text, size_t cols) {
  if (display_width(text) <= cols)
    return text;
  std::string out;
  if (cols == 0)
    return out;
  bool escaped = false;
  size_t width = 0;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '\033') {
      auto n = escape_length(text, i);
      out.append(text, i, n);
      escaped = true;
      i += n;
      continue;
    }
    auto [cp, len] = decode(text, i);
    auto w = columns(cp);
    if (width + w > cols - 1) // the last column is the `…`
      break;
    out.append(text, i, len);
    width += w;
    i += len;
  }
  out += "…";
  if (escaped)
    out += reset;
  return out;
}

std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    auto [cp, len] = decode(text, i);
    if (cp == invalid)
      out += '?'; // a stray byte: shown as one column, never as a C1 control
    else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F))
      out += ' ';
    else
      out.append(text, i, len);
    i += len;
  }
  return out;
}

} // namespace canopy::core
