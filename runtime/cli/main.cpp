#include "runtime/cli/cli.hpp"

int main(int argc, char** argv) {
  return canopy::core::cli_main(argc, argv);
}
