// Running the prism binary of this build (PRISM_EXE) from the CLI tests.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "bad_input.h"
#include "prism_test.h"

namespace prism::test {

struct CommandResult {
  int exit_code = -1;  // 137 when killed for running past RunLimits::seconds
  std::string output;  // stdout and stderr together
};

// Bounds on one prism run, so that a test of a hang or of a memory cap cannot run away.
struct RunLimits {
  double seconds = 0;   // > 0: killed (SIGKILL) after this long
  long memory_kib = 0;  // > 0: virtual memory limit (ulimit -v); see memory_limits_work()
};

// Whether `ulimit -v` can bound a prism run here (not under AddressSanitizer, which reserves
// terabytes of address space at start).
bool memory_limits_work();

// Runs the prism binary with `args` (each shell-quoted) in folder `cwd`.
CommandResult run_prism(const std::vector<std::string>& args, const std::string& cwd = ".",
                        const RunLimits& limits = {});

// A prism run in the background, its stdout and stderr going to `log`, for tests that signal it.
struct BackgroundPrism {
  pid_t pid = -1;
  std::string log;
};
BackgroundPrism start_prism(const std::vector<std::string>& args, const std::string& log);

// Waits for it at most `seconds` (then kills it: exit_code 137); `output` is the log.
CommandResult wait_prism(const BackgroundPrism& run, double seconds);

// One row of a CLI bad-input table (tests/tools/cli_bad_input_test.cpp): `args` ("@DIR@" = the case's
// folder, where `files` are made and prism runs) must exit with `exit_code` and print `output`.
struct CliCase {
  std::string name;
  std::vector<std::string> args;
  std::vector<CaseFile> files;
  int exit_code = 2;
  std::string output;  // a substring of stdout and stderr together
};

// Runs `c` and returns "" when it did what it expects, else what went wrong: another exit status
// (a signal, or 137 when killed after `seconds`), no such output, or a GLib CRITICAL or WARNING
// printed.
std::string check_cli_case(const CliCase& c, double seconds = 30);

}  // namespace prism::test
