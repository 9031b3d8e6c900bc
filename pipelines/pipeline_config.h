// Pipeline configs: YAML files that describe a GStreamer pipeline (elements, properties, links)
// with variables. load_pipeline_config() parses and fully validates a config against the
// GStreamer registry, so gst_init() (see gst_setup.h) must have been called first.
#pragma once

#include <string>
#include <vector>

namespace prism {

// A place in a config file (1-based line and column), or an origin outside any file such as
// "--set frames=10" (line == 0).
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;

  std::string to_string() const;  // "FILE:LINE:COLUMN", or just FILE when line == 0
};

struct ConfigError {
  SourceLocation where;
  std::string message;

  std::string to_string() const;  // "FILE:LINE:COLUMN: error: MESSAGE"
};

struct PropertySetting {
  std::string name;   // canonical GObject property name
  std::string value;  // after variable substitution and path resolution; deserialisable
  SourceLocation where;
};

struct ElementSpec {
  std::string name;                         // unique element name (the key under `elements:`)
  std::string factory;                      // GStreamer element factory, e.g. "videotestsrc"
  std::vector<PropertySetting> properties;  // in config order; --set additions at the end
  SourceLocation where;                     // the element's key
};

// One item of a link chain: an element (optionally a specific pad) or a caps filter.
struct LinkItem {
  enum class Kind { Element, Caps };
  Kind kind = Kind::Element;
  std::string element;  // Kind::Element
  std::string pad;      // Kind::Element, empty = any compatible pad
  std::string caps;     // Kind::Caps, whitespace-normalised caps string
  SourceLocation where;
};

using LinkChain = std::vector<LinkItem>;

// One camera of a config with `cameras:` (README, "Many cameras"): its source and the elements
// stamped out for it from `per-camera:`, named ID-NAME. The source is a `uridecodebin` named
// ID-source; pipelines/camera_supervisor.h makes it anew when the camera drops.
struct CameraSpec {
  std::string id;                     // stable, unique: the `camera` of its results
  std::string uri;                    // what the source reads (a password included)
  std::string shown_uri;              // the URI without its password: results, messages, progress
  bool reconnect = true;              // a source that ends or fails is retried (false: the camera ends)
  std::string source;                 // the source element's name (ID-source)
  std::vector<std::string> elements;  // every element of the camera, the source first
  SourceLocation where;               // the camera's entry under `cameras:`
};

// A `--set NAME=VALUE` from the command line. NAME is a declared variable or ELEMENT.PROPERTY.
struct Override {
  std::string name;
  std::string value;
};

struct PipelineConfig {
  std::string path;                 // the config file as given
  std::string text;                 // the YAML it was loaded from (cameras added later are stamped from it)
  std::vector<Override> overrides;  // the --set it was loaded with, and its folder for relative paths
  std::string cwd;
  std::string description;            // optional `description:`
  std::vector<ElementSpec> elements;  // in config order
  std::vector<LinkChain> chains;
  std::vector<CameraSpec> cameras;  // empty without `cameras:`; their elements are in `elements`

  const ElementSpec* find_element(const std::string& name) const;
};

// Whether relative values of a string property with this name are file-system paths:
// "location" and names ending in "-location", "-file", "-path" or "-dir".
bool is_path_property(const std::string& property_name);

// `uri` with the password of its user information replaced by "***" ("rtsp://admin:***@host/s"),
// the form results and messages show; unchanged without one.
std::string uri_without_password(const std::string& uri);

// Parses "NAME=VALUE"; returns false when there is no '=' or the name is empty.
bool parse_override(const std::string& text, Override& out);

// A camera to add while the pipeline runs (`prism run --control`, README "Many cameras").
struct CameraRequest {
  std::string id;      // letters, digits, '_' and '-', starting with a letter
  std::string uri;     // a URI (rtsp://, file://, ...) or an absolute file path; taken as it is (no ${})
  int reconnect = -1;  // -1: the default (true, false for files)
};

// The camera `request` stamped out from the `per-camera:` of the text `config` was loaded from (its
// variables and --set included, ${camera.id} and ${camera.uri} its own): a config holding only that
// camera (its CameraSpec, its elements named ID-NAME and its links). A problem of the request's own
// fields is a ConfigError whose `where.file` is the field ("id", "uri", "reconnect") and line 0;
// other problems (a config without `cameras:` and `per-camera:`, a property that no longer
// validates) name the config's file and line. Nothing is checked against the running pipeline
// (ids and element names in use are the caller's).
PipelineConfig stamp_camera(const PipelineConfig& config, const CameraRequest& request,
                            std::vector<ConfigError>& errors);

// Loads, substitutes and validates a config. Every problem found is appended to `errors` (all of
// them, not only the first); the returned config is only meaningful when `errors` is empty.
// Relative paths in the file resolve against the file's folder, those from overrides against
// `cwd` (the current directory when empty).
PipelineConfig load_pipeline_config(const std::string& path, const std::vector<Override>& overrides,
                                    std::vector<ConfigError>& errors, const std::string& cwd = {});

// Same, for YAML text that is not (or not yet) in a file; `path` names it in messages and its
// folder is the base for relative paths.
PipelineConfig parse_pipeline_config(const std::string& yaml_text, const std::string& path,
                                     const std::vector<Override>& overrides, std::vector<ConfigError>& errors,
                                     const std::string& cwd = {});

}  // namespace prism
