#pragma once

// Internal to the `canopy` binary: `canopy --help` grouped by purpose and
// `canopy completion bash|zsh`, both read off the CLI11 tree that
// `cli_main` builds, so a new command or option needs no second list.

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace canopy::core::cli {

/// Puts every top-level command of `app` under its heading in `--help`
/// (Run, Inspect, Agents, Nodes, Maintenance, About).
/// @returns the name of a command that has no heading yet, if any (a test
///   calls this so that a new command cannot be added without one).
std::optional<std::string> group_commands(CLI::App& app);

/// The shells that `canopy completion` writes a script for.
enum class completion_shell { bash, zsh };

/// A completion script for `shell` covering every command, sub-command and
/// option of `app`: commands after `canopy`, options after `-`, the listed
/// choices of an option (`--color`), and file names for file arguments.
/// zsh loads the bash function through `bashcompinit` (shipped with zsh).
std::string completion_script(const CLI::App& app, completion_shell shell);

/// `canopy completion bash|zsh`: registers the command; `shell` receives the
/// argument. Call `print_completion` when it was parsed.
CLI::App* add_completion_command(CLI::App& app, std::string& shell);

/// Prints the script for `shell` ("bash" or "zsh") to stdout.
/// @returns 0, or 2 (usage) for another shell name.
int print_completion(const CLI::App& app, const std::string& shell);

} // namespace canopy::core::cli
