#include "test_support.h"

#include "gst_setup.h"

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

}  // namespace prism::test
