#include "test_support.h"

#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <random>

#include "gst_setup.h"
#include "launch_line.h"

namespace fs = std::filesystem;

namespace prism::test {

void init_gst_once() { init_gstreamer(); }

PipelineConfig load_text(const TempDir& dir, const std::string& name, const std::string& yaml,
                         std::vector<ConfigError>& errors, const std::vector<Override>& overrides) {
  init_gst_once();
  return load_pipeline_config(dir.write(name, yaml), overrides, errors, dir.path().string());
}

std::string joined(const std::vector<ConfigError>& errors) {
  std::string text;
  for (const auto& e : errors) text += e.to_string() + "\n";
  return text;
}

CommandResult run_prism(const std::vector<std::string>& args, const std::string& cwd) {
  std::string command = "cd " + shell_quote(cwd) + " && " + shell_quote(PRISM_EXE);
  for (const auto& arg : args) command += " " + shell_quote(arg);
  command += " 2>&1";
  CommandResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace prism::test
