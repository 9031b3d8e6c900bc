#include "pipeline_config.h"

#include <gst/gst.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "gst_setup.h"
#include "property_value.h"
#include "text_util.h"

namespace fs = std::filesystem;

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

bool parse_override(const std::string& text, Override& out) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  out.name = text.substr(0, eq);
  out.value = text.substr(eq + 1);
  return true;
}

namespace {

const std::vector<std::string> kTopLevelKeys = {"description", "variables", "elements", "links"};
const std::vector<std::string> kElementKeys = {"element", "properties"};
const std::vector<std::string> kBuiltinVariables = {"cwd", "config_dir"};
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

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_relative_path(const std::string& value) {
  return !value.empty() && value.find("://") == std::string::npos && fs::path(value).is_relative();
}

// Removes whitespace outside double quotes, so that caps survive the gst-launch syntax.
std::string normalise_caps(const std::string& caps) {
  std::string out;
  bool quoted = false;
  for (size_t i = 0; i < caps.size(); ++i) {
    const char c = caps[i];
    if (c == '"' && (i == 0 || caps[i - 1] != '\\')) quoted = !quoted;
    if (!quoted && std::isspace(static_cast<unsigned char>(c))) continue;
    out += c;
  }
  return out;
}

// Why `caps` cannot be a caps filter in a chain, or "" when it can. gst_caps_from_string accepts
// any word as a structure name, but the launch line takes a word without '/' for an element
// ({caps: identity} would insert an identity element), and ANY or EMPTY filter nothing.
std::string filter_caps_problem(const GstCaps* caps) {
  if (gst_caps_is_any(caps)) return "ANY caps are meaningless as a filter; name a media type such as video/x-raw";
  if (gst_caps_is_empty(caps)) return "EMPTY caps match nothing; name a media type such as video/x-raw";
  for (guint i = 0; i < gst_caps_get_size(caps); ++i) {
    const std::string name = gst_structure_get_name(gst_caps_get_structure(caps, i));
    const size_t slash = name.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == name.size())
      return "'" + name + "' is not a media type such as video/x-raw (an element goes in a chain by its name)";
  }
  return {};
}

// Why the caps features of `caps` (the "(memory:CUDAMemory)" after a media type) would be refused
// by gst_caps_from_string, or "" when they would not: it logs a GStreamer-WARNING for an invalid
// feature name, so they are checked here first, by GStreamer's rule (gst_caps_feature_name_is_valid:
// letters, ':', a letter, letters and digits; or ANY).
std::string caps_features_problem(const std::string& caps) {
  bool quoted = false, at_name = true;
  for (size_t i = 0; i < caps.size(); ++i) {
    const char c = caps[i];
    if (c == '"' && (i == 0 || caps[i - 1] != '\\')) quoted = !quoted;
    if (quoted) continue;
    if (c == ';') at_name = true;
    if (c == ',' || c == '=') at_name = false;
    if (c != '(' || !at_name) continue;
    const size_t close = caps.find(')', i);
    if (close == std::string::npos) return "an unclosed '(' after a media type";
    std::string list = caps.substr(i + 1, close - i - 1);
    size_t start = 0;
    while (start <= list.size()) {
      size_t comma = list.find(',', start);
      if (comma == std::string::npos) comma = list.size();
      std::string f = list.substr(start, comma - start);
      f.erase(0, f.find_first_not_of(' '));
      f.erase(f.find_last_not_of(' ') + 1);
      size_t k = 0;
      while (k < f.size() && std::isalpha(static_cast<unsigned char>(f[k]))) ++k;
      bool ok = f == "ANY" ||
                (k > 0 && k + 1 < f.size() && f[k] == ':' && std::isalpha(static_cast<unsigned char>(f[k + 1])));
      for (size_t m = k + 2; ok && m < f.size(); ++m) ok = std::isalnum(static_cast<unsigned char>(f[m]));
      if (!ok) return "'" + f + "' is not a caps feature such as memory:CUDAMemory";
      start = comma + 1;
    }
    i = close;
    at_name = false;
  }
  return {};
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

// A property value before validation, from the file or from --set.
struct RawProperty {
  std::string key;
  SourceLocation key_where;
  std::string value;
  SourceLocation value_where;
  bool from_command_line = false;
  bool path_tag = false;
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
         const std::string& cwd)
      : path_(std::move(path)), overrides_(overrides), errors_(errors) {
    std::error_code ec;
    cwd_ = cwd.empty() ? fs::current_path(ec) : fs::absolute(cwd, ec);
    config_dir_ = fs::absolute(fs::path(path_), ec).parent_path();
  }

  PipelineConfig load(const std::string& text) {
    PipelineConfig config;
    config.path = path_;
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

  void error(const SourceLocation& where, const std::string& message) { errors_.push_back({where, message}); }

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
    std::optional<YAML::Node> variables, elements, links;
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
      } else {
        error(at(entry.first.Mark()), "unknown key '" + key + "'" + suggest(key, kTopLevelKeys) +
                                          " (valid keys: " + join_list(kTopLevelKeys) + ")");
      }
    }

    if (variables) load_variables(*variables);
    apply_overrides();
    if (!elements) {
      error(top, "missing 'elements:' (a map of NAME: {element: FACTORY, properties: {...}})");
    } else {
      load_elements(*elements, config);
    }
    report_unused_overrides(config);
    if (!links) {
      if (elements) error(top, "missing 'links:' (a list of chains such as [src, conv, sink])");
    } else {
      load_links(*links, config);
      if (links->IsSequence() && links->size() > 0) {
        report_unlinked(config);
        if (!chains_broken_) report_unlinked_sink_pads(config);
        if (!chains_broken_) report_cycles(config);
      }
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
      if (eo.element != name) continue;
      eo.used = true;
      RawProperty p{eo.property, at_override(*eo.source), eo.source->value, at_override(*eo.source), true, false};
      auto same = std::find_if(raw.begin(), raw.end(), [&](const RawProperty& r) { return r.key == eo.property; });
      if (same != raw.end())
        *same = p;
      else
        raw.push_back(p);
    }

    GstElementFactory* gst_factory = find_factory(factory->text, factory_where);
    if (!gst_factory) return std::nullopt;
    ElementSpec spec{name, factory->text, {}, where};
    ok = check_properties(spec, gst_factory, raw) && ok;
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

  std::string suggest(const std::string& word, const std::vector<std::string>& candidates) {
    if (suggestions_left_ <= 0) return {};
    --suggestions_left_;
    return did_you_mean(word, candidates);
  }

  GstElementFactory* find_factory(const std::string& factory, const SourceLocation& where) {
    if (GstElementFactory* f = gst_element_factory_find(factory.c_str())) return f;
    std::string message = "unknown element '" + factory + "'";
    if (const std::string hint = missing_element_hint(factory); !hint.empty()) {
      message += ": " + hint;
    } else {
      if (factory_names_.empty()) factory_names_ = all_factory_names();
      const std::string suggestion = suggest(factory, factory_names_);
      message += suggestion.empty() ? " (no such factory in the GStreamer registry; check the name "
                                      "with gst-inspect-1.0 and that its plugin is installed)"
                                    : suggestion;
    }
    error(where, message);
    return nullptr;
  }

  static std::vector<std::string> all_factory_names() {
    std::vector<std::string> names;
    GList* list = gst_registry_get_feature_list(gst_registry_get(), GST_TYPE_ELEMENT_FACTORY);
    for (GList* l = list; l; l = l->next) names.push_back(GST_OBJECT_NAME(l->data));
    gst_plugin_feature_list_free(list);
    std::sort(names.begin(), names.end());
    return names;
  }

  bool check_properties(ElementSpec& spec, GstElementFactory* factory, const std::vector<RawProperty>& raw) {
    if (raw.empty()) return true;
    GstPluginFeature* loaded = gst_plugin_feature_load(GST_PLUGIN_FEATURE(factory));
    if (!loaded) {
      error(spec.where, "could not load the plugin of element '" + spec.factory + "'");
      return false;
    }
    const GType type = gst_element_factory_get_element_type(GST_ELEMENT_FACTORY(loaded));
    gst_object_unref(loaded);
    auto* klass = static_cast<GObjectClass*>(g_type_class_ref(type));
    bool ok = true;
    for (const RawProperty& p : raw) ok = check_property(spec, klass, p) && ok;
    g_type_class_unref(klass);
    return ok;
  }

  bool check_property(ElementSpec& spec, GObjectClass* klass, const RawProperty& p) {
    const std::string owner = "'" + spec.name + "' (" + spec.factory + ")";
    if (p.key == "name" || p.key == "parent") {
      error(p.key_where, "property '" + p.key + "' cannot be set in 'properties'" +
                             (p.key == "name" ? " (the element's key is its name)" : ""));
      return false;
    }
    // PAD::PROPERTY sets a property of a (request) pad, as gst-launch does through GstChildProxy.
    std::string pad_prefix;
    GObjectClass* owner_class = klass;
    std::string property = p.key;
    const size_t colons = p.key.find("::");
    if (colons != std::string::npos) {
      pad_prefix = p.key.substr(0, colons) + "::";
      property = p.key.substr(colons + 2);
      owner_class = pad_class(spec, klass, p, p.key.substr(0, colons));
      if (!owner_class) return false;
    }
    std::unique_ptr<void, void (*)(void*)> owner_ref(owner_class != klass ? owner_class : nullptr, [](void* c) {
      if (c) g_type_class_unref(c);
    });
    GParamSpec* pspec = g_object_class_find_property(owner_class, property.c_str());
    if (!pspec && owner_class != klass) {
      std::vector<std::string> names;
      guint n = 0;
      GParamSpec** all = g_object_class_list_properties(owner_class, &n);
      for (guint i = 0; i < n; ++i) {
        if (all[i]->flags & G_PARAM_WRITABLE) names.push_back(pad_prefix + all[i]->name);
      }
      g_free(all);
      error(p.key_where, "pad '" + pad_prefix.substr(0, pad_prefix.size() - 2) + "' of element " + owner +
                             " has no property '" + property + "'" + suggest(p.key, names));
      return false;
    }
    if (!pspec) {
      std::vector<std::string> names;
      guint n = 0;
      GParamSpec** all = g_object_class_list_properties(klass, &n);
      for (guint i = 0; i < n; ++i) {
        if (all[i]->flags & G_PARAM_WRITABLE) names.push_back(all[i]->name);
      }
      g_free(all);
      error(p.key_where, "element " + owner + " has no property '" + p.key + "'" + suggest(p.key, names));
      return false;
    }
    if (!(pspec->flags & G_PARAM_WRITABLE)) {
      error(p.key_where, "property '" + std::string(pspec->name) + "' of " + owner + " is read-only");
      return false;
    }
    const std::optional<Expanded> value =
        expand(p.value, p.value_where, p.from_command_line, "property '" + p.key + "' of '" + spec.name + "'");
    if (!value) return false;
    std::string text = value->text;
    const bool is_path =
        p.path_tag || (G_PARAM_SPEC_VALUE_TYPE(pspec) == G_TYPE_STRING && is_path_property(pspec->name));
    if (is_path) text = resolve_path(*value);
    std::string problem;
    if (!check_property_value(pspec, text, problem)) {
      error(p.value_where,
            "invalid value '" + text + "' for property '" + pspec->name + "' of " + owner + ": " + problem);
      return false;
    }
    spec.properties.push_back({pad_prefix + pspec->name, text, p.value_where});
    return true;
  }

  // The class of the pads named `pad` (an always pad's name, or a request template's name such as
  // overlay_%u matched by overlay_0), referenced; nullptr with an error when there is none.
  GObjectClass* pad_class(const ElementSpec& spec, GObjectClass* klass, const RawProperty& p, const std::string& pad) {
    const std::string owner = "'" + spec.name + "' (" + spec.factory + ")";
    if (!g_type_is_a(G_OBJECT_CLASS_TYPE(klass), GST_TYPE_CHILD_PROXY)) {
      error(p.key_where, "element " + owner + " does not give access to its pads' properties ('" + p.key +
                             "'; it does not implement GstChildProxy)");
      return nullptr;
    }
    std::vector<std::string> names;
    GstPadTemplate* found = nullptr;
    for (GList* l = gst_element_class_get_pad_template_list(GST_ELEMENT_CLASS(klass)); l; l = l->next) {
      GstPadTemplate* templ = GST_PAD_TEMPLATE(l->data);
      const std::string name = GST_PAD_TEMPLATE_NAME_TEMPLATE(templ);
      names.push_back(name);
      const size_t percent = name.find('%');
      bool match = name == pad;
      if (!match && percent != std::string::npos && GST_PAD_TEMPLATE_PRESENCE(templ) == GST_PAD_REQUEST &&
          pad.size() > percent && pad.compare(0, percent, name, 0, percent) == 0) {
        const std::string tail = pad.substr(percent);
        match =
            std::all_of(tail.begin(), tail.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      }
      if (match && !found) found = templ;
    }
    if (!found) {
      error(p.key_where, "element " + owner + " has no pad '" + pad + "' (for '" + p.key +
                             "'; its pad templates: " + join_list(names) + ")");
      return nullptr;
    }
    GType type = GST_PAD_TEMPLATE_GTYPE(found);
    if (type == G_TYPE_NONE) type = GST_TYPE_PAD;
    return static_cast<GObjectClass*>(g_type_class_ref(type));
  }

  // ---- links ------------------------------------------------------------------------------

  void load_links(const YAML::Node& node, PipelineConfig& config) {
    if (node.IsNull() || (node.IsSequence() && node.size() == 0)) {
      error(links_where_, "'links' is empty; add chains such as [src, conv, sink]");
      return;
    }
    if (!node.IsSequence()) {
      error(at(node, links_where_),
            "'links' must be a list of chains such as [src, conv, sink], "
            "not a " +
                kind_name(node));
      return;
    }
    for (const auto& chain_node : node) {
      const SourceLocation chain_where = at(chain_node, links_where_);
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
      item.kind = LinkItem::Kind::Caps;
      item.caps = normalise_caps(text->text);
      item.where = caps_where;
      const std::string feature_problem = caps_features_problem(item.caps);
      if (!feature_problem.empty()) {
        error(caps_where, "invalid caps '" + text->text + "': " + feature_problem);
        return std::nullopt;
      }
      GstCaps* parsed = nullptr;
      if (!item.caps.empty()) {
        GstLogCapture quiet;  // the failure is reported below, with the line
        parsed = gst_caps_from_string(item.caps.c_str());
      }
      const std::string problem = parsed ? filter_caps_problem(parsed) : std::string();
      if (parsed) gst_caps_unref(parsed);
      if (!parsed || !problem.empty()) {
        error(caps_where, "invalid caps '" + text->text + "'" + (problem.empty() ? "" : ": " + problem));
        return std::nullopt;
      }
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
      if (spec) ok = check_pad(*spec, item, i == 0 ? GST_PAD_SRC : GST_PAD_SINK) && ok;
    }
    return ok;
  }

  // Data flows one way through a pipeline: links that come back to an element (a -> b -> a, over
  // one chain or several) would validate and then run for ever or deadlock, so the link that
  // closes the loop is refused, with the loop (issue 41.7).
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

  // Whether `pad` is an instance of the pad template name `templ` ("src_%u" matches "src_3").
  static bool pad_matches_template(const std::string& pad, const std::string& templ) {
    if (pad == templ) return true;
    const size_t pct = templ.find('%');
    if (pct == std::string::npos || pct + 1 >= templ.size()) return false;
    const std::string prefix = templ.substr(0, pct), suffix = templ.substr(pct + 2);
    if (pad.size() <= prefix.size() + suffix.size() || pad.compare(0, prefix.size(), prefix) != 0 ||
        !ends_with(pad, suffix)) {
      return false;
    }
    std::string middle = pad.substr(prefix.size(), pad.size() - prefix.size() - suffix.size());
    const char conversion = templ[pct + 1];
    if (conversion == 's') return true;
    if (conversion == 'd' && middle[0] == '-') middle.erase(0, 1);
    return !middle.empty() && std::all_of(middle.begin(), middle.end(),
                                          [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  }

  bool check_pad(const ElementSpec& spec, const LinkItem& item, GstPadDirection direction) {
    GstElementFactory* factory = gst_element_factory_find(spec.factory.c_str());
    if (!factory) return true;
    std::vector<std::string> names;
    bool found = false, wrong_direction = false;
    for (const GList* l = gst_element_factory_get_static_pad_templates(factory); l; l = l->next) {
      const auto* templ = static_cast<const GstStaticPadTemplate*>(l->data);
      if (templ->direction == direction) names.push_back(templ->name_template);
      if (pad_matches_template(item.pad, templ->name_template)) {
        if (templ->direction == direction)
          found = true;
        else
          wrong_direction = true;
      }
    }
    gst_object_unref(factory);
    const char* role = direction == GST_PAD_SRC ? "source" : "sink";
    if (found) return true;
    if (wrong_direction) {
      error(item.where, "pad '" + item.pad + "' of '" + spec.name + "' is not a " + role + " pad; the " +
                            (direction == GST_PAD_SRC ? "first" : "last") + " item of a chain needs one (" + role +
                            " pads: " + (names.empty() ? "none" : join_list(names)) + ")");
    } else {
      error(item.where, "element '" + spec.name + "' (" + spec.factory + ") has no " + role + " pad '" + item.pad +
                            "'" + suggest(item.pad, names) + " (" + role +
                            " pads: " + (names.empty() ? "none" : join_list(names)) + ")");
    }
    return false;
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

  // An always sink pad left unlinked starves the element: a filter never gets its input, and an
  // aggregator such as poissonblend waits forever for its background. Reported when none of the
  // element's sink pads is linked, or when a request sink pad is linked but an always one is not.
  // (An element may have optional always pads, e.g. subtitleoverlay's subtitle_sink, so an always
  // pad beside other linked always pads is allowed.) A link without a pad name takes an unlinked
  // always pad first, as gst_element_link does.
  void report_unlinked_sink_pads(const PipelineConfig& config) {
    for (const auto& element : config.elements) {
      if (!linked_.count(element.name)) continue;  // reported as a whole
      std::set<std::string> named;
      size_t unnamed = 0;
      for (const auto& chain : config.chains) {
        for (size_t i = 1; i < chain.size(); ++i) {
          if (chain[i].kind != LinkItem::Kind::Element || chain[i].element != element.name) continue;
          if (chain[i].pad.empty())
            ++unnamed;
          else
            named.insert(chain[i].pad);
        }
      }
      GstElementFactory* factory = gst_element_factory_find(element.factory.c_str());
      if (!factory) continue;
      std::vector<std::string> unlinked_always;
      std::string linked_request;
      for (const GList* l = gst_element_factory_get_static_pad_templates(factory); l; l = l->next) {
        const auto* templ = static_cast<const GstStaticPadTemplate*>(l->data);
        if (templ->direction != GST_PAD_SINK) continue;
        if (templ->presence == GST_PAD_ALWAYS && !named.count(templ->name_template)) {
          unlinked_always.push_back(templ->name_template);
        } else if (templ->presence == GST_PAD_REQUEST && linked_request.empty()) {
          for (const auto& pad : named) {
            if (pad_matches_template(pad, templ->name_template)) linked_request = pad;
          }
        }
      }
      gst_object_unref(factory);
      const size_t filled = std::min(unnamed, unlinked_always.size());
      if (linked_request.empty() && unnamed > filled) linked_request = "(a request pad)";
      unlinked_always.erase(unlinked_always.begin(), unlinked_always.begin() + filled);
      if (unlinked_always.empty()) continue;
      const std::string owner = "'" + element.name + "' (" + element.factory + ")";
      if (named.empty() && unnamed == 0) {
        error(element.where, "element " + owner + " has no input: its sink pad '" + unlinked_always.front() +
                                 "' is not linked (link a chain to '" + element.name + "')");
      } else if (!linked_request.empty()) {
        error(element.where, "sink pad '" + unlinked_always.front() + "' of element " + owner +
                                 " is not linked while its pad '" + linked_request + "' is; it would wait for '" +
                                 unlinked_always.front() + "' forever (link a chain to '" + element.name + "." +
                                 unlinked_always.front() + "')");
      }
    }
  }

  std::string path_;
  const std::vector<Override>& overrides_;
  std::vector<ConfigError>& errors_;
  // Suggestions cost an edit distance per candidate (1,500 factories): a config of thousands of
  // misspelt names gets them for the first ones only, so that loading it stays fast.
  int suggestions_left_ = 64;
  std::vector<std::string> factory_names_;  // all_factory_names(), read once
  fs::path cwd_, config_dir_;
  SourceLocation variables_where_, elements_where_, links_where_;
  std::map<std::string, Variable> variables_;
  std::vector<std::string> resolving_;  // the variables being expanded, outermost first
  std::vector<ElementOverride> element_overrides_;
  std::map<std::string, SourceLocation> element_where_;
  std::set<std::string> linked_;
  bool elements_broken_ = false;
  bool chains_broken_ = false;
};

}  // namespace

PipelineConfig parse_pipeline_config(const std::string& yaml_text, const std::string& path,
                                     const std::vector<Override>& overrides, std::vector<ConfigError>& errors,
                                     const std::string& cwd) {
  return Loader(path, overrides, errors, cwd).load(yaml_text);
}

PipelineConfig load_pipeline_config(const std::string& path, const std::vector<Override>& overrides,
                                    std::vector<ConfigError>& errors, const std::string& cwd) {
  // A FIFO or a device (/dev/zero) would be read forever, or opening it would block.
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    errors.push_back({{path}, "the config is not a regular file"});
    PipelineConfig config;
    config.path = path;
    return config;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    errors.push_back({{path}, "cannot read the config file"});
    PipelineConfig config;
    config.path = path;
    return config;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_pipeline_config(text.str(), path, overrides, errors, cwd);
}

}  // namespace prism
