#include "runtime/cli.hpp"

int main(int argc, char** argv) {
  return canopy::cli_main(argc, argv);
}
