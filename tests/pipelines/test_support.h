// Helpers of the pipelines/ library tests (config loading and launch lines).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "pipeline_config.h"
#include "prism_test.h"

namespace prism::test {

// gst_init plus plugin discovery, once per process.
void init_gst_once();

// Loads YAML text written to `dir`/name; errors land in `errors`.
PipelineConfig load_text(const TempDir& dir, const std::string& name, const std::string& yaml,
                         std::vector<ConfigError>& errors, const std::vector<Override>& overrides = {});

// All error lines joined by '\n', for assertion messages.
std::string joined(const std::vector<ConfigError>& errors);

}  // namespace prism::test
