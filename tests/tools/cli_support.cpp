#include "cli_support.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "launch_line.h"
#include "process.h"

namespace prism::test {

bool memory_limits_work() {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return false;
#else
  return true;
#endif
#else
  return true;
#endif
}

CommandResult run_prism(const std::vector<std::string>& args, const std::string& cwd, const RunLimits& limits) {
  std::string command = "cd " + shell_quote(cwd) + " && ";
  if (limits.memory_kib > 0 && memory_limits_work())
    command += "ulimit -v " + std::to_string(limits.memory_kib) + " && ";
  if (limits.seconds > 0) command += "timeout -s KILL " + std::to_string(limits.seconds) + " ";
  command += shell_quote(PRISM_EXE);
  for (const auto& arg : args) command += " " + shell_quote(arg);
  CommandResult result;
  result.exit_code = run_command(command, result.output);
  return result;
}

BackgroundPrism start_prism(const std::vector<std::string>& args, const std::string& log) {
  BackgroundPrism run;
  run.log = log;
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(PRISM_EXE));
  for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  run.pid = fork();
  if (run.pid == 0) {
    if (!freopen(log.c_str(), "w", stderr)) _exit(127);
    dup2(STDERR_FILENO, STDOUT_FILENO);
    execv(PRISM_EXE, argv.data());
    _exit(127);
  }
  return run;
}

CommandResult wait_prism(const BackgroundPrism& run, double seconds) {
  CommandResult result;
  if (run.pid <= 0) return result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(run.pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == 0) {
    kill(run.pid, SIGKILL);
    waitpid(run.pid, &status, 0);
    result.exit_code = 137;
  } else if (done == run.pid && WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  }
  std::ifstream in(run.log);
  std::stringstream text;
  text << in.rdbuf();
  result.output = text.str();
  return result;
}

std::string check_cli_case(const CliCase& c, double seconds) {
  TempDir dir;
  make_case_files(dir, c.files);
  std::vector<std::string> args;
  std::string line = "prism";
  for (const std::string& a : c.args) {
    args.push_back(in_case_dir(a, dir));
    line += " " + shell_quote(args.back());
  }
  const CommandResult r = run_prism(args, dir.path().string(), {seconds});
  std::string wrong;
  if (r.exit_code != c.exit_code)
    wrong += "exit status " + std::to_string(r.exit_code) + ", expected " + std::to_string(c.exit_code) + "; ";
  if (r.output.find(c.output) == std::string::npos) wrong += "no '" + c.output + "' in the output; ";
  for (const char* glib : {"-CRITICAL **", "-WARNING **"})
    if (r.output.find(glib) != std::string::npos) wrong += std::string("GLib printed ") + glib + "; ";
  return wrong.empty() ? "" : c.name + ": " + line + "\n  " + wrong + "\n" + r.output.substr(0, 2000);
}

}  // namespace prism::test
