// Running a shell command from a test (the prism CLI, a config through `prism run`) and reading
// everything it prints.
#pragma once

#include <string>

namespace prism::test {

// Runs `cmd` with /bin/sh; its stdout and stderr land in `output`. Returns the exit status (-1: it
// did not run or did not exit).
int run_command(const std::string& cmd, std::string& output);

}  // namespace prism::test
