#pragma once

namespace canopy::core {

/// Runs the `canopy` command line (runtime/docs/reference/cli.md). @returns the process exit code.
/// Threading: call once, from `main`, before any thread starts (it blocks
/// SIGINT/SIGTERM to turn them into stops).
int cli_main(int argc, char** argv);

} // namespace canopy::core
