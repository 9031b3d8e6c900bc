#include "cli_support.h"

#include "launch_line.h"
#include "process.h"

namespace prism::test {

CommandResult run_prism(const std::vector<std::string>& args, const std::string& cwd) {
  std::string command = "cd " + shell_quote(cwd) + " && " + shell_quote(PRISM_EXE);
  for (const auto& arg : args) command += " " + shell_quote(arg);
  CommandResult result;
  result.exit_code = run_command(command, result.output);
  return result;
}

}  // namespace prism::test
