#include "test_support.h"

#include "gst_setup.h"
#include "launch_line.h"
#include "process.h"

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
  CommandResult result;
  result.exit_code = run_command(command, result.output);
  return result;
}

}  // namespace prism::test
