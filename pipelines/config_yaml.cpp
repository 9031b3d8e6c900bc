#include "config_yaml.h"

#include <gst/gst.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "config_registry.h"
#include "text_util.h"

namespace fs = std::filesystem;

namespace prism::config {

namespace {

const std::vector<std::string> kTopLevelKeys = {"description", "variables", "elements",
                                                "links",       "cameras",   "per-camera"};
const std::vector<std::string> kElementKeys = {"element", "properties"};
const std::vector<std::string> kCameraKeys = {"id", "uri", "reconnect"};
const std::vector<std::string> kPerCameraKeys = {"elements", "links"};
// camera.id and camera.uri are the camera's own inside `per-camera:`.
const std::vector<std::string> kBuiltinVariables = {"cwd", "config_dir", "camera.id", "camera.uri"};
// The name of a camera's source in the links of `per-camera:`.
const char* const kCameraSource = "source";
const char* const kPathTag = "!path";
// Bounds on substitution, so that a hostile config fails with an error instead of exhausting the
// stack (a long chain v0: ${v1}, v1: ${v2}, ...) or the memory (dN: ${dN-1}${dN-1}).
constexpr size_t kMaxVariableDepth = 64;
constexpr size_t kMaxExpandedSize = 1 << 20;

bool is_identifier(const std::string& s, bool allow_dots) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || (allow_dots && c == '.');
  });
}

bool is_relative_path(const std::string& value) {
  return !value.empty() && value.find("://") == std::string::npos && fs::path(value).is_relative();
}

// A scalar after substitution. `from_command_line` tells whether its leading part came from a
// --set override, which decides the base folder of a relative path.
struct Expanded {
  std::string text;
  bool from_command_line = false;
};

struct Variable {
  std::string raw;
  SourceLocation where;
  bool from_command_line = false;
  bool is_path = false;
  enum class State { Pending, Resolving, Done, Failed } state = State::Pending;
  Expanded value;
};

struct ElementOverride {
  const Override* source;
  std::string element;
  std::string property;
  bool used = false;
};

class Loader {
 public:
  Loader(std::string path, const std::vector<Override>& overrides, std::vector<ConfigError>& errors,
         const std::string& cwd, const CameraRequest* extra = nullptr)
      : path_(std::move(path)),
        overrides_(overrides),
        errors_(errors),
        report_(errors),
        registry_(report_),
        extra_(extra) {
    std::error_code ec;
    cwd_ = cwd.empty() ? fs::current_path(ec) : fs::absolute(cwd, ec);
    config_dir_ = fs::absolute(fs::path(path_), ec).parent_path();
  }

  PipelineConfig load(const std::string& text) {
    PipelineConfig config;
    config.path = path_;
    config.text = text;
    config.overrides = overrides_;
    config.cwd = cwd_.string();
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      error(at(e.mark), "invalid YAML: " + e.msg + tab_hint(text, e.mark));
      return config;
    } catch (const YAML::Exception& e) {
      error(at(e.mark), "invalid YAML: " + e.msg);
      return config;
    }
    if (!single_document(text)) return config;
    try {
      load_root(root, config);
    } catch (const YAML::Exception& e) {  // defensive: malformed input must never crash
      error(at(e.mark), "invalid config: " + e.msg);
    }
    return config;
  }

 private:
  // ---- reporting --------------------------------------------------------------------------

  SourceLocation at(const YAML::Mark& mark) const {
    if (mark.line < 0) return {path_, 1, 1};
    return {path_, mark.line + 1, mark.column + 1};
  }
  SourceLocation at(const YAML::Node& node, const SourceLocation& fallback) const {
    return node.Mark().line < 0 ? fallback : at(node.Mark());
  }
  static SourceLocation at_override(const Override& o) { return {"--set " + o.name + "=" + o.value}; }

  void error(const SourceLocation& where, const std::string& message) { report_.error(where, message); }
  std::string suggest(const std::string& word, const std::vector<std::string>& candidates) {
    return report_.suggest(word, candidates);
  }

  // YAML::Load reads the first document and drops the rest without a word; a config that goes on
  // after a '---' is refused rather than half used. Reports and returns false when it does.
  bool single_document(const std::string& text) {
    struct DocumentStarts : YAML::EventHandler {
      std::vector<YAML::Mark> marks;
      void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
      void OnDocumentEnd() override {}
      void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
      void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
      void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
      void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
      void OnSequenceEnd() override {}
      void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
      void OnMapEnd() override {}
    } starts;
    std::istringstream in(text);
    YAML::Parser parser(in);
    try {
      while (starts.marks.size() < 2 && parser.HandleNextDocument(starts)) {
      }
    } catch (const YAML::Exception& e) {
      if (starts.marks.size() < 2) {
        error(at(e.mark), "invalid YAML after the first document: " + e.msg);
        return false;
      }
    }
    if (starts.marks.size() < 2) return true;
    error(at(starts.marks[1]),
          "a second YAML document ('---' and more) follows the config; a config file holds one YAML document");
    return false;
  }

  // yaml-cpp's messages for tabs are cryptic; say what is wrong.
  static std::string tab_hint(const std::string& text, const YAML::Mark& mark) {
    if (mark.line < 0) return {};
    std::istringstream lines(text);
    std::string line;
    for (int i = 0; i <= mark.line && std::getline(lines, line); ++i) {
      if (i >= mark.line - 1 && line.find('\t') != std::string::npos) {
        return " (line " + std::to_string(i + 1) + " contains a tab; YAML indentation must use spaces)";
      }
    }
    return {};
  }

  // ---- structure --------------------------------------------------------------------------

  void load_root(const YAML::Node& root, PipelineConfig& config) {
    const SourceLocation top{path_, 1, 1};
    if (!root.IsDefined() || root.IsNull()) {
      error(top, "the config is empty; expected a map with 'elements:' and 'links:'");
      return;
    }
    if (!root.IsMap()) {
      error(at(root, top), "the config must be a map with 'elements:' and 'links:', not a " + kind_name(root));
      return;
    }
    std::optional<YAML::Node> variables, elements, links, cameras, per_camera;
    std::set<std::string> seen;
    for (const auto& entry : root) {
      const std::string key = key_text(entry.first);
      if (key.empty()) continue;
      if (!seen.insert(key).second) {
        error(at(entry.first.Mark()), "duplicate key '" + key + "'");
      } else if (key == "description") {
        if (entry.second.IsScalar())
          config.description = entry.second.Scalar();
        else if (!entry.second.IsNull())
          error(at(entry.second, at(entry.first.Mark())), "'description' must be a string");
      } else if (key == "variables") {
        variables = entry.second;
        variables_where_ = at(entry.first.Mark());
      } else if (key == "elements") {
        elements = entry.second;
        elements_where_ = at(entry.first.Mark());
      } else if (key == "links") {
        links = entry.second;
        links_where_ = at(entry.first.Mark());
      } else if (key == "cameras") {
        cameras = entry.second;
        cameras_where_ = at(entry.first.Mark());
      } else if (key == "per-camera") {
        per_camera = entry.second;
        per_camera_where_ = at(entry.first.Mark());
      } else {
        error(at(entry.first.Mark()), "unknown key '" + key + "'" + suggest(key, kTopLevelKeys) +
                                          " (valid keys: " + join_list(kTopLevelKeys) + ")");
      }
    }

    if (variables) load_variables(*variables);
    apply_overrides();
    if (extra_) {  // a camera added at runtime: its own elements and links only (stamp_camera)
      load_extra_camera(cameras, per_camera, config);
      return;
    }
    if (!elements) {
      if (!cameras) error(top, "missing 'elements:' (a map of NAME: {element: FACTORY, properties: {...}})");
    } else {
      load_elements(*elements, config);
    }
    bool cameras_linked = false;
    if (cameras) {
      cameras_linked = load_cameras(*cameras, per_camera, config);
    } else if (per_camera) {
      error(per_camera_where_, "'per-camera:' needs 'cameras:' (a list such as - {id: door, uri: rtsp://...})");
    }
    report_unused_overrides(config);
    bool linked = cameras_linked;
    if (!links) {
      if (elements) error(top, "missing 'links:' (a list of chains such as [src, conv, sink])");
    } else {
      load_links(*links, links_where_, config);
      linked = linked || (links->IsSequence() && links->size() > 0);
    }
    if (linked) {
      report_unlinked(config);
      if (!chains_broken_) registry_.report_unlinked_sink_pads(config, linked_);
      if (!chains_broken_) report_cycles(config);
    }
  }

  static std::string kind_name(const YAML::Node& node) {
    switch (node.Type()) {
      case YAML::NodeType::Sequence: return "list";
      case YAML::NodeType::Scalar: return "scalar";
      case YAML::NodeType::Map: return "map";
      case YAML::NodeType::Null: return "null";
      default: return "undefined value";
    }
  }

  // The text of a map key; reports and returns "" for keys that are not scalars.
  std::string key_text(const YAML::Node& key) {
    if (key.IsScalar() && !key.Scalar().empty()) return key.Scalar();
    error(at(key.Mark()), "keys must be non-empty names, not a " + kind_name(key));
    return {};
  }

  // ---- variables --------------------------------------------------------------------------

  void load_variables(const YAML::Node& node) {
    if (node.IsNull()) return;
    if (!node.IsMap()) {
      error(at(node, variables_where_), "'variables' must be a map of NAME: VALUE, not a " + kind_name(node));
      return;
    }
    std::set<size_t> maps_seen;
    flatten_variables(node, "", maps_seen);
  }

  // `maps_seen` holds the positions of the maps visited: yaml-cpp gives an alias (*name) the node,
  // and so the position, of its anchor. Walking aliased maps again would make `lN: &lN {a: *lN-1,
  // b: *lN-1}` exponential, so they are refused.
  void flatten_variables(const YAML::Node& map, const std::string& prefix, std::set<size_t>& maps_seen) {
    for (const auto& entry : map) {
      const std::string key = key_text(entry.first);
      if (key.empty()) continue;
      const std::string name = prefix + key;
      const SourceLocation key_where = at(entry.first.Mark());
      if (!is_identifier(key, false)) {
        error(key_where,
              "invalid variable name '" + key + "' (use letters, digits, '_' and '-', starting with a letter)");
        continue;
      }
      if (std::find(kBuiltinVariables.begin(), kBuiltinVariables.end(), name) != kBuiltinVariables.end()) {
        error(key_where, "'" + name + "' is a built-in variable and cannot be redefined");
        continue;
      }
      const YAML::Node& value = entry.second;
      if (value.IsMap()) {
        if (!maps_seen.insert(value.Mark().pos).second) {
          error(key_where, "variable '" + name +
                               "' is an alias of a map; aliases of maps are not allowed in 'variables:' "
                               "(write the variables out, or alias single values)");
          continue;
        }
        flatten_variables(value, name + ".", maps_seen);
      } else if (value.IsScalar()) {
        if (variables_.count(name)) {
          error(key_where, "duplicate variable '" + name + "'");
          continue;
        }
        Variable v;
        v.raw = value.Scalar();
        v.where = at(value, key_where);
        v.is_path = value.Tag() == kPathTag;
        variables_[name] = v;
      } else {
        error(at(value, key_where), "variable '" + name +
                                        "' must have a scalar value (or be a map "
                                        "of variables), not a " +
                                        kind_name(value));
      }
    }
  }

  std::vector<std::string> variable_names() const {
    std::vector<std::string> names = kBuiltinVariables;
    for (const auto& v : variables_) names.push_back(v.first);
    return names;
  }

  std::vector<std::string> element_names() const {
    std::vector<std::string> names;
    for (const auto& e : element_where_) names.push_back(e.first);
    return names;
  }

  // Overrides of declared variables apply now; ELEMENT.PROPERTY overrides wait for the elements.
  void apply_overrides() {
    for (const auto& o : overrides_) {
      auto it = variables_.find(o.name);
      if (it != variables_.end()) {
        it->second.raw = o.value;
        it->second.where = at_override(o);
        it->second.from_command_line = true;
        continue;
      }
      if (std::find(kBuiltinVariables.begin(), kBuiltinVariables.end(), o.name) != kBuiltinVariables.end()) {
        error(at_override(o), "'" + o.name + "' is a built-in variable and cannot be set");
        continue;
      }
      const size_t dot = o.name.find('.');
      if (dot == std::string::npos || dot == 0 || dot + 1 == o.name.size()) {
        error(at_override(o), "no variable named '" + o.name + "'" + suggest(o.name, variable_names()) +
                                  " (use NAME=VALUE for a variable or ELEMENT.PROPERTY=VALUE)");
        continue;
      }
      element_overrides_.push_back({&o, o.name.substr(0, dot), o.name.substr(dot + 1)});
    }
  }

  void report_unused_overrides(const PipelineConfig& config) {
    for (const auto& eo : element_overrides_) {
      if (eo.used || config.find_element(eo.element)) continue;
      if (element_where_.count(eo.element)) continue;  // element had errors of its own
      std::vector<std::string> candidates = variable_names();
      for (const auto& name : element_names()) candidates.push_back(name + "." + eo.property);
      error(at_override(*eo.source), "no variable '" + eo.source->name + "' and no element '" + eo.element + "'" +
                                         suggest(eo.source->name, candidates));
    }
  }

  // ---- substitution -----------------------------------------------------------------------

  // Expands ${name} references; "$${" stands for a literal "${". Reports at `where`; `owner` names
  // the value in messages ("variable 'x'", "property 'location' of 'src'").
  std::optional<Expanded> expand(const std::string& text, const SourceLocation& where, bool from_command_line,
                                 const std::string& owner) {
    Expanded out;
    out.from_command_line = from_command_line;
    bool ok = true;
    size_t i = 0;
    while (i < text.size()) {
      if (text.compare(i, 3, "$${") == 0) {
        out.text += "${";
        i += 3;
        continue;
      }
      if (too_long(out.text, where, owner)) return std::nullopt;
      if (text.compare(i, 2, "${") != 0) {
        out.text += text[i++];
        continue;
      }
      const size_t close = text.find('}', i + 2);
      if (close == std::string::npos) {
        error(where, "unterminated '${' in '" + text + "' (write '$${' for a literal '${')");
        return std::nullopt;
      }
      const std::string name = text.substr(i + 2, close - i - 2);
      const std::optional<Expanded> value = reference_value(name, where);
      if (!value) {
        ok = false;
      } else {
        if (i == 0) out.from_command_line = value->from_command_line;
        out.text += value->text;
      }
      i = close + 1;
    }
    if (!ok) return std::nullopt;
    if (too_long(out.text, where, owner)) return std::nullopt;
    return out;
  }

  // A reference's value: `${name}`, or `${name + K}` / `${name - K}` (spaces around the sign, K a
  // whole number) for a variable whose value is a whole number: identity's eos-after ends the
  // stream at its Nth buffer and passes N - 1, so a config that means "N frames" says
  // `eos-after: "${frames + 1}"`.
  std::optional<Expanded> reference_value(const std::string& reference, const SourceLocation& where) {
    const size_t sign = reference.find_first_of("+-", reference.find(' '));
    if (reference.find(' ') == std::string::npos || sign == std::string::npos || sign == 0 ||
        reference[sign - 1] != ' ' || sign + 1 >= reference.size() || reference[sign + 1] != ' ')
      return variable_value(reference, where);
    const std::string name = reference.substr(0, sign - 1), amount = reference.substr(sign + 2);
    auto whole = [](const std::string& t) {
      const size_t start = !t.empty() && t[0] == '-';
      return t.size() > start && t.size() <= start + 9 && t.find_first_not_of("0123456789", start) == std::string::npos;
    };
    if (name.find(' ') != std::string::npos || !whole(amount) || amount[0] == '-') {
      error(where, "'${" + reference + "}' is neither a variable nor NAME + K or NAME - K (K a whole number)");
      return std::nullopt;
    }
    std::optional<Expanded> value = variable_value(name, where);
    if (!value) return std::nullopt;
    if (!whole(value->text)) {
      error(where, "'${" + reference + "}': variable '" + name + "' is '" + value->text + "', not a whole number");
      return std::nullopt;
    }
    const long long n = std::stoll(value->text), k = std::stoll(amount);
    value->text = std::to_string(reference[sign] == '+' ? n + k : n - k);
    return value;
  }

  // Reports a value grown past kMaxExpandedSize.
  bool too_long(const std::string& text, const SourceLocation& where, const std::string& owner) {
    if (text.size() <= kMaxExpandedSize) return false;
    error(where,
          owner + " is longer than 1 MiB after substitution (" + std::to_string(kMaxExpandedSize) + " bytes at most)");
    return true;
  }

  std::optional<Expanded> variable_value(const std::string& name, const SourceLocation& where) {
    if (name == "cwd") return Expanded{cwd_.string(), false};
    if (name == "config_dir") return Expanded{config_dir_.string(), false};
    if (name == "camera.id" || name == "camera.uri") {
      if (!camera_) {
        error(where, "'${" + name + "}' is only defined inside 'per-camera:' (each camera's own)");
        return std::nullopt;
      }
      return Expanded{name == "camera.id" ? camera_->id : camera_->shown_uri, false};
    }
    auto it = variables_.find(name);
    if (it == variables_.end()) {
      error(where, "undefined variable '" + name + "'" + suggest(name, variable_names()));
      return std::nullopt;
    }
    Variable& v = it->second;
    switch (v.state) {
      case Variable::State::Done: return v.value;
      case Variable::State::Failed: return std::nullopt;
      case Variable::State::Resolving: error(where, "variable '" + name + "' refers to itself"); return std::nullopt;
      case Variable::State::Pending: break;
    }
    if (resolving_.size() >= kMaxVariableDepth) {
      error(where, "variable '" + name + "' is nested more than " + std::to_string(kMaxVariableDepth) +
                       " levels deep (" + resolving_.front() + " -> " + resolving_[1] + " -> ... -> " +
                       resolving_.back() + " -> " + name + ")");
      return std::nullopt;
    }
    v.state = Variable::State::Resolving;
    resolving_.push_back(name);
    std::optional<Expanded> value = expand(v.raw, v.where, v.from_command_line, "variable '" + name + "'");
    resolving_.pop_back();
    if (value && v.is_path) value->text = resolve_path(*value);
    v.state = value ? Variable::State::Done : Variable::State::Failed;
    if (value) v.value = *value;
    return value;
  }

  std::string resolve_path(const Expanded& value) const {
    if (!is_relative_path(value.text)) return value.text;
    const fs::path& base = value.from_command_line ? cwd_ : config_dir_;
    return (base / value.text).lexically_normal().string();
  }

  // ---- elements ---------------------------------------------------------------------------

  void load_elements(const YAML::Node& node, PipelineConfig& config) {
    if (!node.IsMap()) {
      elements_broken_ = true;
      error(at(node, elements_where_),
            "'elements' must be a map of NAME: {element: FACTORY, properties: {...}}, not a " + kind_name(node) +
                (node.IsSequence() ? " (write 'name: {element: ...}' entries)" : ""));
      return;
    }
    for (const auto& entry : node) {
      const std::string name = key_text(entry.first);
      if (name.empty()) continue;
      const SourceLocation where = at(entry.first.Mark());
      if (!is_identifier(name, false)) {
        error(where, "invalid element name '" + name + "' (use letters, digits, '_' and '-', starting with a letter)");
        continue;
      }
      if (element_where_.count(name)) {
        error(where,
              "duplicate element name '" + name + "' (first defined at " + element_where_[name].to_string() + ")");
        continue;
      }
      element_where_[name] = where;
      if (std::optional<ElementSpec> spec = load_element(name, where, entry.second)) {
        config.elements.push_back(std::move(*spec));
      }
    }
  }

  std::optional<ElementSpec> load_element(const std::string& name, const SourceLocation& where,
                                          const YAML::Node& node) {
    if (!node.IsMap()) {
      error(at(node, where), "element '" + name +
                                 "' must be a map such as {element: FACTORY, "
                                 "properties: {...}}, not a " +
                                 kind_name(node));
      return std::nullopt;
    }
    std::optional<YAML::Node> factory_node, properties_node;
    SourceLocation properties_where = where;
    std::set<std::string> seen;
    bool ok = true;
    for (const auto& entry : node) {
      const std::string key = key_text(entry.first);
      if (key.empty()) {
        ok = false;
        continue;
      }
      if (!seen.insert(key).second) {
        error(at(entry.first.Mark()), "duplicate key '" + key + "' in element '" + name + "'");
        ok = false;
      } else if (key == "element") {
        factory_node = entry.second;
      } else if (key == "properties") {
        properties_node = entry.second;
        properties_where = at(entry.first.Mark());
      } else {
        error(at(entry.first.Mark()), "unknown key '" + key + "' in element '" + name + "'" +
                                          suggest(key, kElementKeys) + " (valid keys: " + join_list(kElementKeys) +
                                          ")");
        ok = false;
      }
    }
    if (!factory_node) {
      error(where, "element '" + name + "' has no 'element:' (the GStreamer factory name)");
      return std::nullopt;
    }
    const SourceLocation factory_where = at(*factory_node, where);
    if (!factory_node->IsScalar()) {
      error(factory_where, "'element' of '" + name + "' must be a factory name, not a " + kind_name(*factory_node));
      return std::nullopt;
    }
    const std::optional<Expanded> factory =
        expand(factory_node->Scalar(), factory_where, false, "'element' of '" + name + "'");
    if (!factory) return std::nullopt;

    std::vector<RawProperty> raw;
    if (properties_node && !properties_node->IsNull()) {
      if (!properties_node->IsMap()) {
        error(at(*properties_node, properties_where),
              "'properties' of '" + name + "' must be a map of PROPERTY: VALUE, not a " + kind_name(*properties_node));
        ok = false;
      } else {
        ok = collect_properties(name, *properties_node, raw) && ok;
      }
    }
    for (auto& eo : element_overrides_) {
      // inside per-camera, TEMPLATE.PROPERTY sets it for every camera, ID-TEMPLATE.PROPERTY for one
      if (eo.element != name && !(camera_ && eo.element == template_name_)) continue;
      eo.used = true;
      RawProperty p{eo.property, at_override(*eo.source), eo.source->value, at_override(*eo.source), true, false};
      auto same = std::find_if(raw.begin(), raw.end(), [&](const RawProperty& r) { return r.key == eo.property; });
      if (same != raw.end())
        *same = p;
      else
        raw.push_back(p);
    }

    GstElementFactory* gst_factory = registry_.find_factory(factory->text, factory_where);
    if (!gst_factory) return std::nullopt;
    if (camera_) add_camera_properties(gst_factory, where, raw);
    ElementSpec spec{name, factory->text, {}, where};
    // The registry checks each property's name, then has its value substituted here.
    auto expand_value = [&](const RawProperty& p, bool is_path) -> std::optional<std::string> {
      const std::optional<Expanded> value =
          expand(p.value, p.value_where, p.from_command_line, "property '" + p.key + "' of '" + name + "'");
      if (!value) return std::nullopt;
      return is_path ? resolve_path(*value) : value->text;
    };
    ok = registry_.check_properties(spec, gst_factory, raw, expand_value) && ok;
    gst_object_unref(gst_factory);
    if (!ok) return std::nullopt;
    return spec;
  }

  bool collect_properties(const std::string& element, const YAML::Node& map, std::vector<RawProperty>& raw) {
    bool ok = true;
    for (const auto& entry : map) {
      const std::string key = key_text(entry.first);
      if (key.empty()) {
        ok = false;
        continue;
      }
      const SourceLocation key_where = at(entry.first.Mark());
      const YAML::Node& value = entry.second;
      if (std::any_of(raw.begin(), raw.end(), [&](const RawProperty& r) { return r.key == key; })) {
        error(key_where, "duplicate property '" + key + "' in element '" + element + "'");
        ok = false;
      } else if (!value.IsScalar()) {
        error(at(value, key_where), "property '" + key + "' of '" + element + "' needs a scalar value, not a " +
                                        kind_name(value) +
                                        (value.IsSequence() || value.IsMap() ? " (quote it as a string)" : ""));
        ok = false;
      } else {
        raw.push_back({key, key_where, value.Scalar(), at(value, key_where), false, value.Tag() == kPathTag});
      }
    }
    return ok;
  }

  // ---- cameras ------------------------------------------------------------------------------

  // `cameras:` and `per-camera:` (README, "Many cameras"): each camera gets the elements of
  // per-camera named ID-NAME and its links, `source` standing for the camera's uridecodebin. True
  // when the cameras were stamped out with their links (the graph checks may run).
  bool load_cameras(const YAML::Node& node, const std::optional<YAML::Node>& per_camera, PipelineConfig& config) {
    if (!node.IsSequence() || node.size() == 0) {
      error(at(node, cameras_where_),
            "'cameras' must be a non-empty list such as - {id: door, uri: \"rtsp://...\"}, not a" +
                std::string(node.IsSequence() ? "n empty list" : " " + kind_name(node)));
      return false;
    }
    std::optional<YAML::Node> elements, links;
    SourceLocation links_where = per_camera_where_;
    if (!per_camera) {
      error(cameras_where_,
            "'cameras:' needs 'per-camera:' (the elements and links made for each camera, its source named "
            "'source' in the links)");
    } else {
      read_per_camera(*per_camera, elements, links, links_where);
    }
    std::vector<CameraSpec> cameras;
    std::set<std::string> ids;
    for (size_t i = 0; i < node.size(); ++i) {
      std::optional<CameraSpec> camera = load_camera(node[i], i);
      if (!camera) continue;
      if (!ids.insert(camera->id).second) {
        error(camera->where, "duplicate camera id '" + camera->id + "'");
        continue;
      }
      cameras.push_back(std::move(*camera));
    }
    if (!per_camera || !per_camera->IsMap() || !links) return false;
    read_template_names(elements);
    bool ok = true;
    for (CameraSpec& camera : cameras) {
      const size_t errors_before = errors_.size();
      stamp_camera(camera, elements, *links, links_where, config);
      config.cameras.push_back(std::move(camera));
      // the same mistake of per-camera is reported for the first camera only
      if (errors_.size() != errors_before) {
        ok = false;
        break;
      }
    }
    return ok;
  }

  // `per-camera:`: its `elements:` (unset when missing or not a map) and `links:`.
  void read_per_camera(const YAML::Node& per_camera, std::optional<YAML::Node>& elements,
                       std::optional<YAML::Node>& links, SourceLocation& links_where) {
    SourceLocation elements_where = per_camera_where_;
    if (!per_camera.IsMap()) {
      error(at(per_camera, per_camera_where_),
            "'per-camera' must be a map with 'elements:' and 'links:', not a " + kind_name(per_camera));
    } else {
      for (const auto& entry : per_camera) {
        const std::string key = key_text(entry.first);
        if (key == "elements") {
          elements = entry.second;
          elements_where = at(entry.first.Mark());
        } else if (key == "links") {
          links = entry.second;
          links_where = at(entry.first.Mark());
        } else if (!key.empty()) {
          error(at(entry.first.Mark()), "unknown key '" + key + "' in 'per-camera'" + suggest(key, kPerCameraKeys) +
                                            " (valid keys: " + join_list(kPerCameraKeys) + ")");
        }
      }
      if (!links) error(per_camera_where_, "'per-camera' has no 'links:' (chains such as [source, conv, sink])");
      if (elements && !elements->IsNull() && !elements->IsMap()) {
        error(at(*elements, elements_where),
              "'elements' of 'per-camera' must be a map of NAME: {element: FACTORY, properties: {...}}, not a " +
                  kind_name(*elements));
        elements.reset();
      }
    }
  }

  // The names of per-camera's elements (template_names_), each checked once.
  void read_template_names(const std::optional<YAML::Node>& elements) {
    template_names_.clear();
    if (elements && elements->IsMap()) {
      for (const auto& entry : *elements) {
        const std::string name = key_text(entry.first);
        if (name.empty()) continue;
        const SourceLocation where = at(entry.first.Mark());
        if (name == kCameraSource)
          error(where, "'source' is the camera's own source in 'per-camera'; give this element another name");
        else if (!is_identifier(name, false))
          error(where,
                "invalid element name '" + name + "' (use letters, digits, '_' and '-', starting with a letter)");
        else if (std::find(template_names_.begin(), template_names_.end(), name) != template_names_.end())
          error(where, "duplicate element name '" + name + "' in 'per-camera'");
        else
          template_names_.push_back(name);
      }
    }
  }

  // The camera of extra_ (stamp_camera, pipeline_config.h): checked as an entry of `cameras:` is,
  // its fields' errors at the field's name; stamped out alone.
  void load_extra_camera(const std::optional<YAML::Node>& cameras, const std::optional<YAML::Node>& per_camera,
                         PipelineConfig& config) {
    if (!cameras || !per_camera) {
      error({path_},
            "cameras cannot be added: the config has no 'cameras:' and 'per-camera:' (the chain made for "
            "each camera; README, \"Many cameras\")");
      return;
    }
    std::optional<YAML::Node> elements, links;
    SourceLocation links_where = per_camera_where_;
    const size_t errors_before = errors_.size();
    read_per_camera(*per_camera, elements, links, links_where);
    if (errors_.size() != errors_before || !links) return;
    read_template_names(elements);
    CameraSpec camera;
    camera.id = extra_->id;
    camera.where = {"id"};
    if (!is_identifier(camera.id, false)) {
      error({"id"}, "invalid camera id '" + camera.id + "' (use letters, digits, '_' and '-', starting with a letter)");
      return;
    }
    std::string uri = extra_->uri;
    if (uri.empty()) {
      error({"uri"}, "camera '" + camera.id + "' needs a 'uri' (rtsp://..., file:///..., v4l2:///dev/video0)");
      return;
    }
    if (uri.find("://") == std::string::npos) {
      if (!fs::path(uri).is_absolute()) {
        error({"uri"}, "'" + uri + "' is neither a URI (rtsp://..., file:///...) nor an absolute file path");
        return;
      }
      gchar* text = gst_filename_to_uri(uri.c_str(), nullptr);
      if (text) uri = text;
      g_free(text);
    }
    if (!gst_uri_is_valid(uri.c_str())) {
      error({"uri"}, "'" + uri_without_password(uri) + "' is not a valid URI");
      return;
    }
    gchar* protocol = gst_uri_get_protocol(uri.c_str());
    const bool readable = protocol && gst_uri_protocol_is_supported(GST_URI_SRC, protocol);
    const std::string scheme = protocol ? protocol : "";
    g_free(protocol);
    if (!readable) {
      error({"uri"}, "no GStreamer source reads '" + scheme +
                         "://' URIs (is its plugin installed? file, rtsp, http and v4l2 are the usual ones)");
      return;
    }
    camera.uri = uri;
    camera.shown_uri = uri_without_password(uri);
    camera.reconnect = extra_->reconnect < 0 ? scheme != "file" : extra_->reconnect > 0;
    camera.source = camera.id + "-" + kCameraSource;
    stamp_camera(camera, elements, *links, links_where, config);
    config.cameras.push_back(std::move(camera));
  }

  // One entry of `cameras:`: a URI, or a map {id, uri, reconnect}.
  std::optional<CameraSpec> load_camera(const YAML::Node& node, size_t index) {
    CameraSpec camera;
    camera.where = at(node, cameras_where_);
    camera.id = "cam" + std::to_string(index);
    std::optional<YAML::Node> uri_node, reconnect_node;
    if (node.IsScalar()) {
      uri_node = node;
    } else if (node.IsMap()) {
      bool ok = true;
      for (const auto& entry : node) {
        const std::string key = key_text(entry.first);
        const SourceLocation key_where = at(entry.first.Mark());
        if (key.empty()) {
          ok = false;
        } else if (key == "uri") {
          uri_node = entry.second;
        } else if (key == "reconnect") {
          reconnect_node = entry.second;
        } else if (key == "id") {
          const std::string id = entry.second.IsScalar() ? entry.second.Scalar() : std::string();
          if (!is_identifier(id, false)) {
            error(at(entry.second, key_where),
                  "invalid camera id '" + id + "' (use letters, digits, '_' and '-', starting with a letter)");
            ok = false;
          }
          camera.id = id;
        } else {
          error(key_where, "unknown key '" + key + "' in a camera" + suggest(key, kCameraKeys) +
                               " (valid keys: " + join_list(kCameraKeys) + ")");
          ok = false;
        }
      }
      if (!ok) return std::nullopt;
    } else {
      error(camera.where,
            "a camera must be a URI or a map such as {id: door, uri: \"rtsp://...\"}, not a " + kind_name(node));
      return std::nullopt;
    }
    if (!uri_node || !uri_node->IsScalar() || uri_node->Scalar().empty()) {
      error(uri_node ? at(*uri_node, camera.where) : camera.where,
            "camera '" + camera.id + "' needs a 'uri' (file:///..., rtsp://..., v4l2:///dev/video0, or a file path)");
      return std::nullopt;
    }
    const SourceLocation uri_where = at(*uri_node, camera.where);
    std::optional<Expanded> uri = expand(uri_node->Scalar(), uri_where, false, "the URI of camera '" + camera.id + "'");
    if (!uri) return std::nullopt;
    if (uri->text.find("://") == std::string::npos) {  // a file path, against the config's folder
      const std::string file = resolve_path(*uri);
      gchar* text = gst_filename_to_uri(file.c_str(), nullptr);
      uri->text = text ? text : file;
      g_free(text);
    }
    gchar* protocol = gst_uri_get_protocol(uri->text.c_str());
    const bool readable = protocol && gst_uri_protocol_is_supported(GST_URI_SRC, protocol);
    const std::string scheme = protocol ? protocol : "";
    g_free(protocol);
    if (!readable) {
      error(uri_where, "camera '" + camera.id + "': no GStreamer source reads '" + scheme +
                           "://' URIs (is its plugin installed? file, rtsp, http and v4l2 are the usual ones)");
      return std::nullopt;
    }
    camera.uri = uri->text;
    camera.shown_uri = uri_without_password(camera.uri);
    camera.reconnect = scheme != "file";
    if (reconnect_node) {
      bool value = false;
      if (!reconnect_node->IsScalar() || !YAML::convert<bool>::decode(*reconnect_node, value)) {
        error(at(*reconnect_node, camera.where), "'reconnect' of camera '" + camera.id + "' must be true or false");
        return std::nullopt;
      }
      camera.reconnect = value;
    }
    camera.source = camera.id + "-" + kCameraSource;
    return camera;
  }

  // The elements and links of per-camera for `camera`, named ID-NAME, and its source.
  void stamp_camera(CameraSpec& camera, const std::optional<YAML::Node>& elements, const YAML::Node& links,
                    const SourceLocation& links_where, PipelineConfig& config) {
    camera_ = &camera;
    for (auto& [name, v] : variables_)  // a variable may use ${camera.id}: resolved for each camera
      if (v.state == Variable::State::Done) v.state = Variable::State::Pending;
    auto claim = [&](const std::string& name, const SourceLocation& where) {
      if (!element_where_.count(name)) {
        element_where_[name] = where;
        return true;
      }
      error(where, "camera '" + camera.id + "': its element '" + name + "' has the name of another element (first " +
                       "defined at " + element_where_[name].to_string() + "); rename the camera or the element");
      return false;
    };
    if (claim(camera.source, camera.where)) {
      config.elements.push_back({camera.source, "uridecodebin", {{"uri", camera.uri, camera.where}}, camera.where});
      camera.elements.push_back(camera.source);
    }
    if (elements && elements->IsMap()) {
      for (const auto& entry : *elements) {
        const std::string name = entry.first.IsScalar() ? entry.first.Scalar() : std::string();
        if (std::find(template_names_.begin(), template_names_.end(), name) == template_names_.end()) continue;
        const SourceLocation where = at(entry.first.Mark());
        const std::string full = camera.id + "-" + name;
        if (!claim(full, where)) continue;
        template_name_ = name;
        if (std::optional<ElementSpec> spec = load_element(full, where, entry.second)) {
          config.elements.push_back(std::move(*spec));
          camera.elements.push_back(full);
        }
      }
    }
    template_name_.clear();
    const size_t first_chain = config.chains.size();
    load_links(links, links_where, config);
    size_t starts = 0;
    for (size_t i = first_chain; i < config.chains.size(); ++i) {
      const LinkChain& chain = config.chains[i];
      for (size_t k = 0; k < chain.size(); ++k) {
        if (chain[k].element != camera.source) continue;
        if (k != 0) {
          error(chain[k].where, "'source' (the camera's source) has no sink pad: it can only start a chain");
          chains_broken_ = true;
        } else if (++starts > 1) {
          error(chain[k].where, "'source' starts more than one chain; link it once (and branch with a tee)");
          chains_broken_ = true;
        }
      }
      // the source is linked by its first element's always sink pad when it is made anew
      const size_t next = chain.size() > 1 && chain[1].kind == LinkItem::Kind::Caps ? 2 : 1;
      if (!chain.empty() && chain[0].element == camera.source && next < chain.size() && !chain[next].pad.empty()) {
        error(chain[next].where, "the element after 'source' is linked by its sink pad; name no pad there");
        chains_broken_ = true;
      }
    }
    if (starts == 0 && links.IsSequence() && links.size() > 0)
      error(links_where,
            "no chain of 'per-camera' starts with 'source' (the camera's source), e.g. [source, conv, sink]");
    camera_ = nullptr;
  }

  // A link item of per-camera: `source` is the camera's source, NAME its element ID-NAME.
  std::optional<LinkItem> camera_link_item(LinkItem item, const SourceLocation& where) {
    if (item.element == kCameraSource) {
      if (!item.pad.empty()) {
        error(where, "'source' is linked by the pads it makes; name no pad ('source." + item.pad + "')");
        return std::nullopt;
      }
      item.element = camera_->source;
    } else if (std::find(template_names_.begin(), template_names_.end(), item.element) != template_names_.end()) {
      item.element = camera_->id + "-" + item.element;
      if (!element_where_.count(item.element)) return std::nullopt;  // its own error was reported
    } else {
      std::vector<std::string> names = template_names_;
      names.push_back(kCameraSource);
      error(where, "link to undefined element '" + item.element + "' in 'per-camera'" + suggest(item.element, names) +
                       " (per-camera links name its own elements and 'source')");
      return std::nullopt;
    }
    linked_.insert(item.element);
    return item;
  }

  // An analysis element of a camera names it in its results (gstprismcudafilter.h): its `camera`
  // and `camera-uri` are set unless the config sets them.
  void add_camera_properties(GstElementFactory* factory, const SourceLocation& where, std::vector<RawProperty>& raw) {
    const std::pair<const char*, std::string> values[] = {{"camera", camera_->id}, {"camera-uri", camera_->shown_uri}};
    for (const auto& setting : values) {
      const char* property = setting.first;  // (not a structured binding: clang 14 cannot capture one)
      const std::string& value = setting.second;
      if (!registry_.has_property(factory, property)) continue;
      if (std::any_of(raw.begin(), raw.end(), [&](const RawProperty& r) { return r.key == property; })) continue;
      std::string literal;  // substitution runs on it: a '${' in the URI stays one
      for (size_t i = 0; i < value.size(); ++i) {
        if (value.compare(i, 2, "${") == 0) literal += '$';
        literal += value[i];
      }
      raw.push_back({property, where, literal, where, false, false});
    }
  }

  // ---- links ------------------------------------------------------------------------------

  void load_links(const YAML::Node& node, const SourceLocation& links_where, PipelineConfig& config) {
    if (node.IsNull() || (node.IsSequence() && node.size() == 0)) {
      error(links_where, "'links' is empty; add chains such as [src, conv, sink]");
      return;
    }
    if (!node.IsSequence()) {
      error(at(node, links_where),
            "'links' must be a list of chains such as [src, conv, sink], "
            "not a " +
                kind_name(node));
      return;
    }
    for (const auto& chain_node : node) {
      const SourceLocation chain_where = at(chain_node, links_where);
      if (!chain_node.IsSequence()) {
        error(chain_where,
              "each link must be a chain (a list) such as [src, conv, sink], not a " + kind_name(chain_node));
        continue;
      }
      LinkChain chain;
      bool ok = true;
      for (const auto& item_node : chain_node) {
        std::optional<LinkItem> item = load_link_item(item_node, chain_where);
        if (item)
          chain.push_back(std::move(*item));
        else
          ok = false;
      }
      if (ok && check_chain(chain, chain_where, config))
        config.chains.push_back(std::move(chain));
      else
        chains_broken_ = true;
    }
  }

  std::optional<LinkItem> load_link_item(const YAML::Node& node, const SourceLocation& fallback) {
    const SourceLocation where = at(node, fallback);
    LinkItem item;
    item.where = where;
    if (node.IsScalar()) {
      const std::string& text = node.Scalar();
      const size_t dot = text.find('.');
      item.element = text.substr(0, dot);
      if (dot != std::string::npos) {
        item.pad = text.substr(dot + 1);
        if (item.pad.empty()) {
          error(where, "missing pad name after '" + item.element + ".'");
          return std::nullopt;
        }
      }
      if (camera_) return camera_link_item(std::move(item), where);
      if (!element_where_.count(item.element)) {
        if (elements_broken_) return std::nullopt;  // already reported: 'elements' is unusable
        error(where, "link to undefined element '" + item.element + "'" + suggest(item.element, element_names()));
        return std::nullopt;
      }
      linked_.insert(item.element);
      return item;
    }
    if (node.IsMap() && node.size() == 1 && node.begin()->first.IsScalar() && node.begin()->first.Scalar() == "caps") {
      const YAML::Node caps = node.begin()->second;  // a copy: the iterator is a temporary
      const SourceLocation caps_where = at(caps, where);
      if (!caps.IsScalar()) {
        error(caps_where, "'caps' needs a caps string such as \"video/x-raw,format=RGB\"");
        return std::nullopt;
      }
      const std::optional<Expanded> text = expand(caps.Scalar(), caps_where, false, "the caps");
      if (!text) return std::nullopt;
      std::optional<std::string> filter = registry_.filter_caps(text->text, caps_where);
      if (!filter) return std::nullopt;
      item.kind = LinkItem::Kind::Caps;
      item.caps = std::move(*filter);
      item.where = caps_where;
      return item;
    }
    if (node.IsMap()) {
      std::string key =
          node.size() ? (node.begin()->first.IsScalar() ? node.begin()->first.Scalar() : std::string()) : std::string();
      const SourceLocation key_where = node.size() ? at(node.begin()->first, where) : where;
      error(key_where, "a link item map must be exactly {caps: \"...\"}" +
                           (key.empty() || key == "caps" ? std::string() : suggest(key, {"caps"})));
      return std::nullopt;
    }
    error(where, "a link item must be NAME, NAME.PAD or {caps: \"...\"}, not a " + kind_name(node));
    return std::nullopt;
  }

  bool check_chain(const LinkChain& chain, const SourceLocation& where, const PipelineConfig& config) {
    if (chain.size() < 2) {
      error(where, "a chain needs at least two elements, e.g. [src, sink]");
      return false;
    }
    bool ok = true;
    if (chain.front().kind == LinkItem::Kind::Caps || chain.back().kind == LinkItem::Kind::Caps) {
      const LinkItem& bad = chain.front().kind == LinkItem::Kind::Caps ? chain.front() : chain.back();
      error(bad.where, "a chain must start and end with an element, not caps");
      ok = false;
    }
    const LinkItem* previous = nullptr;  // the element before, across a caps filter
    for (size_t i = 0; i < chain.size(); ++i) {
      const LinkItem& item = chain[i];
      if (item.kind == LinkItem::Kind::Element) {
        if (previous && previous->element == item.element) {
          error(item.where, "'" + item.element + "' is linked to itself; a chain links one element to the next");
          ok = false;
        }
        previous = &item;
      }
      if (item.kind == LinkItem::Kind::Caps) {
        if (i > 0 && chain[i - 1].kind == LinkItem::Kind::Caps) {
          error(item.where, "two caps in a row; merge them into one caps string");
          ok = false;
        }
        continue;
      }
      if (item.pad.empty()) continue;
      if (i != 0 && i + 1 != chain.size()) {
        error(item.where,
              "a pad ('" + item.element + "." + item.pad + "') may only be named at the start or the end of a chain");
        ok = false;
        continue;
      }
      const ElementSpec* spec = config.find_element(item.element);
      if (spec) ok = registry_.check_pad(*spec, item, i == 0 ? GST_PAD_SRC : GST_PAD_SINK) && ok;
    }
    return ok;
  }

  // Data flows one way through a pipeline: links that come back to an element (a -> b -> a, over
  // one chain or several) would validate and then run for ever or deadlock, so the link that
  // closes the loop is refused, with the loop.
  void report_cycles(const PipelineConfig& config) {
    std::map<std::string, std::vector<std::pair<std::string, SourceLocation>>> next;
    for (const LinkChain& chain : config.chains) {
      const LinkItem* previous = nullptr;
      for (const LinkItem& item : chain) {
        if (item.kind != LinkItem::Kind::Element) continue;
        if (previous) next[previous->element].push_back({item.element, item.where});
        previous = &item;
      }
    }
    std::map<std::string, int> state;  // 1 on the current path, 2 done
    std::vector<std::string> path;
    bool found = false;
    std::function<void(const std::string&)> visit = [&](const std::string& e) {
      state[e] = 1;
      path.push_back(e);
      for (const auto& [to, where] : next[e]) {
        if (found) break;
        if (state[to] == 1) {
          std::string loop;
          for (auto it = std::find(path.begin(), path.end(), to); it != path.end(); ++it) loop += *it + " -> ";
          error(where, "the links form a loop, " + loop + to + ": data must flow one way through a pipeline");
          found = true;
        } else if (state[to] == 0) {
          visit(to);
        }
      }
      path.pop_back();
      state[e] = 2;
    };
    for (const ElementSpec& e : config.elements)
      if (!found && state[e.name] == 0) visit(e.name);
  }

  void report_unlinked(const PipelineConfig& config) {
    for (const auto& element : config.elements) {
      if (!linked_.count(element.name)) {
        error(element.where, "element '" + element.name +
                                 "' is not linked; add it to a chain "
                                 "under 'links:' or remove it");
      }
    }
  }

  std::string path_;
  const std::vector<Override>& overrides_;
  const std::vector<ConfigError>& errors_;  // what report_ appends to (counted per camera)
  Reporter report_;
  Registry registry_;  // the registry half, reporting through report_
  fs::path cwd_, config_dir_;
  SourceLocation variables_where_, elements_where_, links_where_, cameras_where_, per_camera_where_;
  const CameraSpec* camera_ = nullptr;  // the camera whose elements and links are being stamped out
  std::string template_name_;           // the per-camera element being loaded, without its prefix
  std::vector<std::string> template_names_;
  std::map<std::string, Variable> variables_;
  std::vector<std::string> resolving_;  // the variables being expanded, outermost first
  std::vector<ElementOverride> element_overrides_;
  std::map<std::string, SourceLocation> element_where_;
  std::set<std::string> linked_;
  bool elements_broken_ = false;
  bool chains_broken_ = false;
  const CameraRequest* extra_ = nullptr;  // stamp_camera(): the one camera to stamp out
};

}  // namespace

PipelineConfig parse_yaml(const std::string& yaml_text, const std::string& path, const std::vector<Override>& overrides,
                          std::vector<ConfigError>& errors, const std::string& cwd, const CameraRequest* extra) {
  return Loader(path, overrides, errors, cwd, extra).load(yaml_text);
}

}  // namespace prism::config
