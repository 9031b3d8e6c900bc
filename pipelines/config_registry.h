// The registry half of loading a pipeline config (pipeline_config.h): what the names a config
// wrote mean in GStreamer's registry. Given what the YAML half (config_yaml.h) read, it finds each
// element's factory (an unknown one gets missing_element_hint() from gst_setup.h, else a "did you
// mean"), checks each property against the element's GObject class, or its pad's for PAD::PROPERTY,
// and the value against the property's type (property_value.h), checks a caps filter with
// GStreamer's caps parser (features first, under GstLogCapture), checks a named pad against the
// factory's pad templates and reports always sink pads left unlinked. It knows no YAML and no
// variables: every error names the place the YAML half recorded, and a property's value is expanded
// by the YAML half through ValueExpander once its name has been checked. gst_init() first.
// Internal to prism_pipelines.
#pragma once

#include <gst/gst.h>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "pipeline_config.h"

namespace prism::config {

// Where the errors of one load go, and the "did you mean" suggestions it has left. Suggestions
// cost an edit distance per candidate (1,500 factories): a config of thousands of misspelt names
// gets them for the first ones only, so that loading it stays fast. Shared by both halves.
class Reporter {
 public:
  explicit Reporter(std::vector<ConfigError>& errors) : errors_(errors) {}
  void error(const SourceLocation& where, const std::string& message);
  // did_you_mean(word, candidates) while suggestions are left, else "".
  std::string suggest(const std::string& word, const std::vector<std::string>& candidates);

 private:
  std::vector<ConfigError>& errors_;
  int suggestions_left_ = 64;
};

// A property value before validation, as written in the file or given by --set ELEMENT.PROPERTY.
struct RawProperty {
  std::string key;  // PROPERTY or PAD::PROPERTY
  SourceLocation key_where;
  std::string value;  // before substitution
  SourceLocation value_where;
  bool from_command_line = false;
  bool path_tag = false;  // written with the !path tag
};

// The YAML half's substitution of a property's value: ${...} expanded and, when `is_path` (decided
// here from the property's type and name, or the !path tag), a relative path resolved. nullopt once
// it has reported why not.
using ValueExpander = std::function<std::optional<std::string>(const RawProperty& p, bool is_path)>;

class Registry {
 public:
  explicit Registry(Reporter& report) : report_(report) {}

  // The factory named `factory` (a reference), or nullptr with an error at `where`.
  GstElementFactory* find_factory(const std::string& factory, const SourceLocation& where);
  // Whether the element class of `factory` has a property named `property` (loading its plugin).
  bool has_property(GstElementFactory* factory, const char* property);
  // Checks each property of `raw` against the element class of `factory` (loading its plugin when
  // there are any), expanding values with `expand`, and appends the valid ones to spec.properties
  // (canonical names, final values). False when any was refused (all are checked and reported).
  bool check_properties(ElementSpec& spec, GstElementFactory* factory, const std::vector<RawProperty>& raw,
                        const ValueExpander& expand);
  // A caps filter of a chain: `text` (substituted) with the whitespace outside quotes removed, or
  // nullopt with an error at `where` when GStreamer would refuse it or it is not a media type.
  std::optional<std::string> filter_caps(const std::string& text, const SourceLocation& where);
  // Whether `item` names a pad of the element's factory in `direction` (the first item of a chain:
  // a source pad, the last: a sink pad); reports when not.
  bool check_pad(const ElementSpec& spec, const LinkItem& item, GstPadDirection direction);
  // Reports the elements of `linked` whose always sink pads the chains leave unlinked: none of its
  // sink pads linked, or a request sink pad linked but an always one not.
  void report_unlinked_sink_pads(const PipelineConfig& config, const std::set<std::string>& linked);

 private:
  bool check_property(ElementSpec& spec, GObjectClass* klass, const RawProperty& p, const ValueExpander& expand);
  GObjectClass* pad_class(const ElementSpec& spec, GObjectClass* klass, const RawProperty& p, const std::string& pad);

  Reporter& report_;
  std::vector<std::string> factory_names_;  // every factory of the registry, read once
};

}  // namespace prism::config
