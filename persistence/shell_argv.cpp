#include "persistence/shell_argv.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include "persistence/reference.hpp"

namespace canopy::core {

namespace {

// -- constants -----------------------------------------------------------------

constexpr std::array<const char*, 15> shells{"sh",   "bash",  "dash", "zsh",   "ksh",
                                             "ash",  "mksh",  "ksh93", "pdksh", "yash",
                                             "posh", "rbash", "csh",  "tcsh",  "fish"};

/// Bound on nested wrappers (`env env busybox sh ...`).
constexpr int max_wrappers = 32;

// -- helpers -------------------------------------------------------------------

std::string base_name(const std::string& s) {
  auto slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

bool is_shell(const std::string& program) {
  auto name = base_name(program);
  return std::find(shells.begin(), shells.end(), name) != shells.end();
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

/// Splits an `env -S` string as env does: on blanks, with single and double
/// quotes and backslash escapes.
std::vector<std::string> split_string(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  bool have = false;
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote == '\'') {
      if (c == '\'')
        quote = 0;
      else
        cur += c;
    } else if (c == '\\' && i + 1 < s.size() && quote != '\'') {
      cur += s[++i];
      have = true;
    } else if (quote == '"') {
      if (c == '"')
        quote = 0;
      else
        cur += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      have = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (have)
        out.push_back(std::move(cur));
      cur.clear();
      have = false;
    } else {
      cur += c;
      have = true;
    }
  }
  if (have)
    out.push_back(std::move(cur));
  return out;
}

/// Whether a long env option (without `--` and `=VALUE`) takes an argument;
/// getopt accepts any unambiguous prefix.
bool env_long_takes_argument(const std::string& name) {
  if (name.empty())
    return false;
  for (auto full : {"unset", "chdir", "split-string", "argv0"})
    if (std::string{full}.rfind(name, 0) == 0)
      return true;
  return false;
}

/// Skips the `env` at `t[i]` with its options and assignments: on return
/// `i` is the index of its command (or `t.size()`). An `-S STRING` is split
/// and spliced in place (`spliced` becomes true).
void skip_env(std::vector<std::string>& t, size_t& i, bool& spliced) {
  auto splice = [&](size_t at, size_t count, const std::string& text) {
    auto parts = split_string(text);
    t.erase(t.begin() + static_cast<std::ptrdiff_t>(at),
            t.begin() + static_cast<std::ptrdiff_t>(std::min(at + count, t.size())));
    t.insert(t.begin() + static_cast<std::ptrdiff_t>(at), parts.begin(), parts.end());
    spliced = true;
  };
  ++i;
  bool options = true;
  while (i < t.size()) {
    const auto& a = t[i];
    if (options && a == "--") {
      options = false;
      ++i;
    } else if (options && a == "-") {
      ++i; // -i
    } else if (options && starts_with(a, "--")) {
      auto eq = a.find('=');
      auto name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      bool split = std::string{"split-string"}.rfind(name, 0) == 0 && !name.empty();
      if (eq != std::string::npos) {
        if (split)
          splice(i, 1, a.substr(eq + 1));
        else
          ++i;
      } else if (env_long_takes_argument(name)) {
        if (split && i + 1 < t.size())
          splice(i, 2, t[i + 1]);
        else
          i += 2;
      } else {
        ++i;
      }
    } else if (options && a.size() > 1 && a[0] == '-') {
      // A cluster of short options: u, C, S, a take the rest or the next item.
      bool done = false;
      for (size_t k = 1; k < a.size() && !done; ++k) {
        char c = a[k];
        if (c != 'u' && c != 'C' && c != 'S' && c != 'a')
          continue;
        done = true;
        bool rest = k + 1 < a.size();
        if (c == 'S') {
          if (rest)
            splice(i, 1, a.substr(k + 1));
          else if (i + 1 < t.size())
            splice(i, 2, t[i + 1]);
          else
            i = t.size();
        } else {
          i += rest ? 1 : 2;
        }
      }
      if (!done)
        ++i;
    } else if (a.find('=') != std::string::npos) {
      ++i; // NAME=VALUE
    } else {
      return; // the command
    }
  }
}

/// The index of a shell's script when the shell at `t[i]` runs with `-c`,
/// else `npos`.
size_t script_index(const std::vector<std::string>& t, size_t i) {
  bool dash_c = false;
  for (++i; i < t.size(); ++i) {
    const auto& a = t[i];
    if (a == "--" || a == "-") {
      ++i;
      break;
    }
    if (starts_with(a, "--")) {
      if (a == "--rcfile" || a == "--init-file")
        ++i;
      continue;
    }
    if (a.size() > 1 && (a[0] == '-' || a[0] == '+')) {
      for (size_t k = 1; k < a.size(); ++k) {
        if (a[k] == 'c' && a[0] == '-')
          dash_c = true;
        else if (a[k] == 'o' || a[k] == 'O')
          ++i; // the option's name
      }
      continue;
    }
    break; // the first operand
  }
  return dash_c && i < t.size() ? i : shell_script_use::npos;
}

/// Renders a JSON array of strings with a space after each comma.
std::string render_argv(const std::vector<std::string>& argv) {
  std::string out = "[";
  for (size_t i = 0; i < argv.size(); ++i) {
    if (i > 0)
      out += ", ";
    out += json(argv[i]).dump();
  }
  return out + "]";
}

/// Rewrites `script` so that each reference becomes the positional
/// parameter `first + k`, quoted for where it stands (outside quotes
/// `"$1"`, inside double quotes `$1`, inside single quotes `'"$1"'`).
/// `refs` receives the references in order of their numbers.
std::string positional_script(const std::string& script, size_t first,
                              std::vector<std::string>& refs) {
  std::string out;
  char quote = 0;
  for (size_t p = 0; p < script.size();) {
    if (script.compare(p, 3, "$${") == 0) {
      out += "$${";
      p += 3;
      continue;
    }
    if (script.compare(p, 2, "${") == 0) {
      auto end = script.find('}', p);
      if (end == std::string::npos)
        end = script.size() - 1;
      auto ref = script.substr(p, end - p + 1);
      auto at = std::find(refs.begin(), refs.end(), ref);
      auto n = first + static_cast<size_t>(at - refs.begin());
      if (at == refs.end())
        refs.push_back(ref);
      // `${10}` would read as a reference: `$${10}` is its literal.
      auto param = n < 10 ? "$" + std::to_string(n) : "$${" + std::to_string(n) + "}";
      out += quote == '"' ? param : quote == '\'' ? "'\"" + param + "\"'" : "\"" + param + "\"";
      p = end + 1;
      continue;
    }
    char c = script[p];
    if (quote != '\'' && c == '\\' && p + 1 < script.size() && script[p + 1] != '$') {
      out += script.substr(p, 2);
      p += 2;
      continue;
    }
    if (quote == 0 && (c == '\'' || c == '"'))
      quote = c;
    else if (quote == c)
      quote = 0;
    out += c;
    ++p;
  }
  return out;
}

} // namespace

// -- the rule --------------------------------------------------------------------

std::optional<shell_script_use> find_shell_script_use(const json& argv) {
  if (!argv.is_array())
    return std::nullopt;
  std::vector<std::string> t;
  for (auto& item : argv) {
    if (!item.is_string())
      return std::nullopt;
    t.push_back(item.get<std::string>());
  }
  bool spliced = false;
  size_t i = 0;
  for (int wrappers = 0; i < t.size() && wrappers <= max_wrappers; ++wrappers) {
    auto program = base_name(t[i]);
    if (program == "env") {
      skip_env(t, i, spliced);
      continue;
    }
    if (program == "busybox") {
      ++i;
      continue;
    }
    if (!is_shell(t[i]))
      return std::nullopt;
    auto s = script_index(t, i);
    if (s == shell_script_use::npos)
      return std::nullopt;
    auto refs = find_references(t[s]);
    if (!refs || refs->empty())
      return std::nullopt;
    shell_script_use use;
    use.script = spliced ? shell_script_use::npos : s;
    use.shell = t[i];
    for (auto& r : *refs)
      if (std::find(use.references.begin(), use.references.end(), r.text)
          == use.references.end())
        use.references.push_back(r.text);
    return use;
  }
  return std::nullopt;
}

std::optional<graph_error> check_shell_argv(const json& argv, const std::string& path,
                                            const std::string& name) {
  auto use = find_shell_script_use(argv);
  if (!use)
    return std::nullopt;
  std::string refs;
  for (auto& r : use->references)
    refs += (refs.empty() ? "" : ", ") + r;
  auto shell = base_name(use->shell);
  auto zero = name.empty() ? shell : name;
  auto message = refs + " inside the script of '" + shell + " -c' would run its value as shell "
                 "code (a value such as \"x; id\" runs id): pass values as arguments after the "
                 "script and quote them there";
  std::string where = path;
  if (use->script != shell_script_use::npos) {
    where += "/" + std::to_string(use->script);
    auto items = argv.get<std::vector<std::string>>();
    auto s = use->script;
    std::vector<std::string> safe(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(s));
    // Items after the script are `$0 $1 ...`: new values follow them.
    size_t after = items.size() - s - 1;
    std::vector<std::string> order;
    safe.push_back(positional_script(items[s], after == 0 ? 1 : after, order));
    safe.insert(safe.end(), items.begin() + static_cast<std::ptrdiff_t>(s) + 1, items.end());
    if (after == 0)
      safe.push_back(zero);
    safe.insert(safe.end(), order.begin(), order.end());
    message += ": " + render_argv(safe);
  } else {
    message += ", e.g. " + render_argv({shell, "-c", "echo \"$1\"", zero,
                                        use->references.front()});
  }
  message += " (or through the environment: " + render_argv({"env", "VALUE="
                                                 + use->references.front(), shell, "-c",
                                                 "echo \"$VALUE\""})
             + ")";
  return graph_error{std::move(where), std::move(message), {}};
}

} // namespace canopy::core
