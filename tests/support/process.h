// Running a shell command from a test (the prism CLI, a config through `prism run`) and reading
// everything it prints.
#pragma once

#include <string>

namespace prism::test {

// Runs `cmd` with /bin/sh; its stdout and stderr land in `output`. Returns the exit status (-1: it
// did not run or did not exit).
int run_command(const std::string& cmd, std::string& output);

// Runs `cmd` with /bin/sh, its standard output a pipe whose read end is closed before it starts (as
// after `cmd | head -1` has read its line: every write there fails, with EPIPE or by SIGPIPE) and
// SIGPIPE at its default disposition; its stderr lands in `errors`. Killed after `seconds`.
// Returns the exit status, 128 + N when signal N ended it (141: SIGPIPE; 124 or 137: killed after
// `seconds`), -1 when it did not run.
int run_command_to_closed_pipe(const std::string& cmd, std::string& errors, int seconds = 60);

}  // namespace prism::test
