#include "runtime/cli/cli_help.hpp"

#include <algorithm>
#include <iostream>
#include <map>
#include <vector>

namespace canopy::core::cli {

namespace {

// -- headings of `canopy --help` -------------------------------------------------------

/// Each top-level command's heading, in the order `--help` shows them (CLI11
/// prints a heading where its first command was defined).
const std::map<std::string, std::string>& headings() {
  static const std::map<std::string, std::string> table = {
    {"run", "Run"},          {"resume", "Run"},       {"stop", "Run"},
    {"show", "Inspect"},     {"ls", "Inspect"},       {"events", "Inspect"},
    {"logs", "Inspect"},     {"agent", "Agents"},     {"serve", "Nodes"},
    {"worker", "Nodes"},     {"graph", "Graphs"},     {"validate", "Graphs"},
    {"prune", "Maintenance"}, {"completion", "About"}, {"version", "About"},
    {"waits", "Waits"},      {"signal", "Waits"},     {"approve", "Waits"},
    {"reject", "Waits"},
  };
  return table;
}

// -- completion ---------------------------------------------------------------------------

/// What completion needs to know of one command (`""` is `canopy` itself).
struct command_info {
  std::vector<std::string> commands; ///< its sub-commands
  std::vector<std::string> options;  ///< `--long` and `-s` names
  std::map<std::string, std::vector<std::string>> values; ///< option → choices ({} = a file)
};

/// The choices CLI11 lists in an option's type name, `TEXT:{auto,always}`.
std::vector<std::string> choices_of(const CLI::Option& opt) {
  std::vector<std::string> out;
  auto type = opt.get_type_name();
  auto open = type.find('{');
  auto close = type.find('}', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || close == std::string::npos)
    return out;
  std::string item;
  for (auto c : type.substr(open + 1, close - open - 1)) {
    if (c == ',') {
      out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  if (!item.empty())
    out.push_back(item);
  return out;
}

void collect(const CLI::App& app, const std::string& path,
             const std::vector<const CLI::Option*>& inherited,
             std::map<std::string, command_info>& out) {
  auto& info = out[path];
  auto own = app.get_options([](const CLI::Option*) { return true; });
  std::vector<const CLI::Option*> all = inherited;
  all.insert(all.end(), own.begin(), own.end());
  for (auto* opt : all) {
    if (opt->get_positional() || opt->get_group().empty())
      continue; // positional arguments, and hidden options (group "")
    std::vector<std::string> names;
    for (auto& l : opt->get_lnames())
      names.push_back("--" + l);
    for (auto& s : opt->get_snames())
      names.push_back("-" + s);
    for (auto& n : names) {
      if (std::find(info.options.begin(), info.options.end(), n) != info.options.end())
        continue; // `--help` of the command and of `canopy`
      info.options.push_back(n);
      if (opt->get_type_size_max() > 0)
        info.values[n] = choices_of(*opt);
    }
  }
  // `fallthrough`: this command's options also follow its sub-commands.
  auto passed = app.get_fallthrough() ? all : inherited;
  for (auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_group().empty())
      continue;
    info.commands.push_back(sub->get_name());
    collect(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), passed, out);
  }
}

std::string words(const std::vector<std::string>& v) {
  std::string out;
  for (auto& w : v)
    out += (out.empty() ? "" : " ") + w;
  return out;
}

/// The bash function `_canopy`; every word in it is a command or option name
/// of canopy's own (no user text reaches the script).
std::string bash_script(const CLI::App& app) {
  std::map<std::string, command_info> cmds;
  collect(app, "", {}, cmds);
  std::string commands, options, values, takes;
  for (auto& [path, info] : cmds) {
    commands += "    \"" + path + "\") echo \"" + words(info.commands) + "\" ;;\n";
    options += "    \"" + path + "\") echo \"" + words(info.options) + "\" ;;\n";
    for (auto& [opt, choices] : info.values) {
      takes += "    \"" + path + " " + opt + "\") return 0 ;;\n";
      if (!choices.empty())
        values += "    \"" + path + " " + opt + "\") echo \"" + words(choices) + "\" ;;\n";
    }
  }
  return "# bash completion for canopy (canopy completion bash)\n"
         "_canopy_commands() {\n  case \"$1\" in\n" + commands + "  esac\n}\n"
         "_canopy_options() {\n  case \"$1\" in\n" + options + "  esac\n}\n"
         "_canopy_takes_value() {\n  case \"$1 $2\" in\n" + takes + "  esac\n  return 1\n}\n"
         "_canopy_choices() {\n  case \"$1 $2\" in\n" + values + "  esac\n}\n"
         R"sh(_canopy() {
  local cur="${COMP_WORDS[COMP_CWORD]}" path="" i w subs
  COMPREPLY=()
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    if [[ "$w" == -* ]]; then
      _canopy_takes_value "$path" "$w" && ((i++))
      continue
    fi
    subs=" $(_canopy_commands "$path") "
    [[ "$subs" == *" $w "* ]] && path="${path:+$path }$w"
  done
  local prev="${COMP_WORDS[COMP_CWORD-1]}"
  if [[ $COMP_CWORD -gt 1 && "$prev" == -* ]] && _canopy_takes_value "$path" "$prev"; then
    local choices="$(_canopy_choices "$path" "$prev")"
    if [[ -n "$choices" ]]; then
      COMPREPLY=($(compgen -W "$choices" -- "$cur"))
    else
      COMPREPLY=($(compgen -f -- "$cur"))
    fi
    return 0
  fi
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(_canopy_options "$path")" -- "$cur"))
    return 0
  fi
  subs="$(_canopy_commands "$path")"
  if [[ -n "$subs" ]]; then
    COMPREPLY=($(compgen -W "$subs" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
  return 0
}
complete -o filenames -F _canopy canopy
)sh";
}

} // namespace

// -- public -------------------------------------------------------------------------------

std::optional<std::string> group_commands(CLI::App& app) {
  std::optional<std::string> missing;
  for (auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    auto i = headings().find(sub->get_name());
    if (i != headings().end())
      sub->group(i->second);
    else if (!missing)
      missing = sub->get_name();
  }
  return missing;
}

std::string completion_script(const CLI::App& app, completion_shell shell) {
  auto bash = bash_script(app);
  if (shell == completion_shell::bash)
    return bash;
  // zsh runs the bash function through bashcompinit, named `_canopy_bash`:
  // installed in $fpath as `_canopy` (the .deb's vendor-completions), this
  // file is autoloaded on the first Tab and runs as `_canopy`'s body, which
  // must not redefine itself; the body then completes that first Tab too.
  // Sourced (`source <(canopy completion zsh)`), the last line does nothing.
  auto replace = [&](const std::string& from, const std::string& to) {
    auto at = bash.find(from);
    if (at != std::string::npos)
      bash.replace(at, from.size(), to);
  };
  replace("\n_canopy() {", "\n_canopy_bash() {");
  replace("-F _canopy canopy", "-F _canopy_bash canopy");
  return "#compdef canopy\n# zsh completion for canopy (canopy completion zsh): the bash\n"
         "# function, loaded through zsh's bashcompinit.\n"
         "autoload -U +X bashcompinit && bashcompinit\n"
         + bash
         + "[[ ${funcstack[1]-} == _canopy ]] && _bash_complete -o filenames -F _canopy_bash\n";
}

CLI::App* add_completion_command(CLI::App& app, std::string& shell) {
  auto cmd = app.add_subcommand("completion", "print a shell completion script (bash, zsh)");
  cmd->add_option("shell", shell, "bash or zsh")->required()->check(CLI::IsMember({"bash", "zsh"}));
  cmd->footer("bash: source <(canopy completion bash)   zsh: source <(canopy completion zsh)");
  return cmd;
}

int print_completion(const CLI::App& app, const std::string& shell) {
  if (shell != "bash" && shell != "zsh") {
    std::cerr << "error: completion: unknown shell '" << shell << "' (bash, zsh)\n";
    return 2;
  }
  std::cout << completion_script(app, shell == "bash" ? completion_shell::bash
                                                      : completion_shell::zsh);
  return 0;
}

} // namespace canopy::core::cli
