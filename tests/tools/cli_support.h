// Running the prism binary of this build (PRISM_EXE) from the CLI tests.
#pragma once

#include <string>
#include <vector>

#include "prism_test.h"

namespace prism::test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs the prism binary with `args` (each shell-quoted) in folder `cwd`.
CommandResult run_prism(const std::vector<std::string>& args, const std::string& cwd = ".");

}  // namespace prism::test
