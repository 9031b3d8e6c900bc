// The YAML half of loading a pipeline config (pipeline_config.h): the text of a config file read
// into the description (PipelineConfig), every error with the file, line and column it comes from.
// It owns the file's structure (the top-level keys, `elements:` entries, `links:` chains and their
// items), the `variables:` (nested maps flattened to dotted names, ${name} and ${name + K}
// substitution with bounds on depth and size, the built-ins cwd and config_dir, !path), the --set
// overrides of variables and of ELEMENT.PROPERTY, relative paths (against the file's folder, or
// the current folder for --set values), and the checks of the description as a graph (undefined
// or unlinked elements, chains, loops). What the names mean in GStreamer (factories, properties and
// their values, caps, pads) is asked of the registry half, config_registry.h, at the point each is
// read, so errors come in the file's order. Internal to prism_pipelines.
#pragma once

#include <string>
#include <vector>

#include "pipeline_config.h"

namespace prism::config {

// parse_pipeline_config() (pipeline_config.h): `yaml_text` named `path` in messages, its folder the
// base of relative paths; every problem appended to `errors`. With `extra`: stamp_camera()
// (pipeline_config.h), that camera alone.
PipelineConfig parse_yaml(const std::string& yaml_text, const std::string& path, const std::vector<Override>& overrides,
                          std::vector<ConfigError>& errors, const std::string& cwd,
                          const CameraRequest* extra = nullptr);

}  // namespace prism::config
