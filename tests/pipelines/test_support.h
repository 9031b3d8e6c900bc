// Helpers shared by the pipelines tests.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "pipelines/pipeline_config.h"

namespace prism::test {

// A fresh folder under the system temp folder, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // Writes `text` to path()/name and returns the full path.
  std::string write(const std::string& name, const std::string& text) const;

 private:
  std::filesystem::path path_;
};

// gst_init plus plugin discovery, once per process.
void init_gst_once();

// Loads YAML text written to `dir`/name; errors land in `errors`.
PipelineConfig load_text(const TempDir& dir, const std::string& name, const std::string& yaml,
                         std::vector<ConfigError>& errors,
                         const std::vector<Override>& overrides = {});

// All error lines joined by '\n', for assertion messages.
std::string joined(const std::vector<ConfigError>& errors);

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs the prism binary with `args` (each shell-quoted) in folder `cwd`.
CommandResult run_prism(const std::vector<std::string>& args, const std::string& cwd = ".");

}  // namespace prism::test
