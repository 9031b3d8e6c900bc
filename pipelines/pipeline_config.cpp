// The public face of pipeline configs (pipeline_config.h): the description's small helpers and the
// two entry points. The work is in two halves: config_yaml.{h,cpp} reads the YAML into the
// description (variables, --set, paths, structure, links; errors with file, line and column) and
// config_registry.{h,cpp} checks what it names against GStreamer's registry (factories, properties
// and their values, caps filters, pads).
#include "pipeline_config.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config_yaml.h"

namespace prism {

std::string SourceLocation::to_string() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

std::string ConfigError::to_string() const { return where.to_string() + ": error: " + message; }

bool is_path_property(const std::string& name) {
  auto ends_with = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
  };
  return name == "location" || ends_with("-location") || ends_with("-file") || ends_with("-path") || ends_with("-dir");
}

const ElementSpec* PipelineConfig::find_element(const std::string& name) const {
  for (const auto& element : elements) {
    if (element.name == name) return &element;
  }
  return nullptr;
}

std::string uri_without_password(const std::string& uri) {
  const size_t scheme = uri.find("://");
  if (scheme == std::string::npos) return uri;
  const size_t host_start = scheme + 3;
  const size_t path = uri.find_first_of("/?#", host_start);
  const size_t at = uri.rfind('@', path == std::string::npos ? std::string::npos : path);
  if (at == std::string::npos || at < host_start) return uri;
  const size_t colon = uri.find(':', host_start);
  if (colon == std::string::npos || colon > at) return uri;
  return uri.substr(0, colon + 1) + "***" + uri.substr(at);
}

bool parse_override(const std::string& text, Override& out) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  out.name = text.substr(0, eq);
  out.value = text.substr(eq + 1);
  return true;
}

PipelineConfig parse_pipeline_config(const std::string& yaml_text, const std::string& path,
                                     const std::vector<Override>& overrides, std::vector<ConfigError>& errors,
                                     const std::string& cwd) {
  return config::parse_yaml(yaml_text, path, overrides, errors, cwd);
}

PipelineConfig stamp_camera(const PipelineConfig& config, const CameraRequest& request,
                            std::vector<ConfigError>& errors) {
  return config::parse_yaml(config.text, config.path, config.overrides, errors, config.cwd, &request);
}

namespace {

PipelineConfig unreadable(const std::string& path, const char* why, std::vector<ConfigError>& errors) {
  ConfigError e;
  e.where.file = path;
  e.message = why;
  errors.push_back(std::move(e));
  PipelineConfig config;
  config.path = path;
  return config;
}

}  // namespace

PipelineConfig load_pipeline_config(const std::string& path, const std::vector<Override>& overrides,
                                    std::vector<ConfigError>& errors, const std::string& cwd) {
  // A FIFO or a device (/dev/zero) would be read forever, or opening it would block.
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    return unreadable(path, "the config is not a regular file", errors);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return unreadable(path, "cannot read the config file", errors);
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_pipeline_config(text.str(), path, overrides, errors, cwd);
}

}  // namespace prism
