#pragma once

// The shell rule: no text canopy substitutes becomes shell code.
//
// An argv that runs a shell with `-c` and puts a `${...}` reference inside
// the script argument hands the substituted value to the shell as code: a
// value such as `x; id` runs `id`. Values belong after the script, as
// positional arguments (`"$1"`), or in the environment. One rule, used by the
// config loader (tool argv templates) and graph validation (`run` and argv
// `plan` steps). Plain functions, nothing runs here.
//
// What counts as a shell: the program's base name (any directory) is one of
// `sh bash dash zsh ksh ash mksh ksh93 pdksh yash posh rbash csh tcsh fish`,
// also after `env` (with its options, `-S`/`--split-string` strings and
// `NAME=VALUE` assignments before the command) and `busybox`, e.g.
// `["/usr/bin/env", "-i", "PATH=/bin", "bash", "-ec", "..."]`. The script is
// the first operand after the shell's options when one of them holds `c`
// (`-c`, `-ec`, `-xc`; `-o NAME`/`-O NAME` take their argument). `$${` is a
// literal `${` and is no reference.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "persistence/graph.hpp"

namespace canopy::core {

/// Where an argv pastes references into the script of a shell's `-c`.
struct shell_script_use {
  /// Index of the script in the argv; `npos` when the script is inside an
  /// `env -S` string (then no rewrite is suggested).
  size_t script = npos;
  /// The shell as written in the argv (e.g. `/bin/sh`).
  std::string shell;
  /// The references inside the script, as written, in order, without repeats.
  std::vector<std::string> references;

  static constexpr size_t npos = static_cast<size_t>(-1);
};

/// Finds a shell run with `-c` whose script holds `${...}` references.
/// @returns nothing when `argv` is no array of strings, runs no shell with
///          `-c`, or its script holds no (well-formed) reference.
/// Thread-safe.
std::optional<shell_script_use> find_shell_script_use(const json& argv);

/// Checks `argv` (at JSON path `path`) against the shell rule.
/// @param name the `$0` put in the suggested argv when it has none (a tool's
///        name; empty: the shell's name).
/// @returns the error, at the path of the script item (`PATH/INDEX`), whose
///          message names the references and shows the safe argv, or nothing.
/// Thread-safe.
std::optional<graph_error> check_shell_argv(const json& argv, const std::string& path,
                                            const std::string& name);

} // namespace canopy::core
