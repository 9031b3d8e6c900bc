#include "config_registry.h"

#include <algorithm>
#include <cctype>
#include <memory>

#include "gst_setup.h"
#include "property_value.h"
#include "text_util.h"

namespace prism::config {

void Reporter::error(const SourceLocation& where, const std::string& message) { errors_.push_back({where, message}); }

std::string Reporter::suggest(const std::string& word, const std::vector<std::string>& candidates) {
  if (suggestions_left_ <= 0) return {};
  --suggestions_left_;
  return did_you_mean(word, candidates);
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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

// Whether `pad` is an instance of the pad template name `templ` ("src_%u" matches "src_3").
bool pad_matches_template(const std::string& pad, const std::string& templ) {
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
  return !middle.empty() &&
         std::all_of(middle.begin(), middle.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

std::vector<std::string> all_factory_names() {
  std::vector<std::string> names;
  GList* list = gst_registry_get_feature_list(gst_registry_get(), GST_TYPE_ELEMENT_FACTORY);
  for (GList* l = list; l; l = l->next) names.push_back(GST_OBJECT_NAME(l->data));
  gst_plugin_feature_list_free(list);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

GstElementFactory* Registry::find_factory(const std::string& factory, const SourceLocation& where) {
  if (GstElementFactory* f = gst_element_factory_find(factory.c_str())) return f;
  std::string message = "unknown element '" + factory + "'";
  if (const std::string hint = missing_element_hint(factory); !hint.empty()) {
    message += ": " + hint;
  } else {
    if (factory_names_.empty()) factory_names_ = all_factory_names();
    const std::string suggestion = report_.suggest(factory, factory_names_);
    message += suggestion.empty() ? " (no such factory in the GStreamer registry; check the name "
                                    "with gst-inspect-1.0 and that its plugin is installed)"
                                  : suggestion;
  }
  report_.error(where, message);
  return nullptr;
}

bool Registry::has_property(GstElementFactory* factory, const char* property) {
  GstPluginFeature* loaded = gst_plugin_feature_load(GST_PLUGIN_FEATURE(factory));
  if (!loaded) return false;  // check_properties says so
  const GType type = gst_element_factory_get_element_type(GST_ELEMENT_FACTORY(loaded));
  gst_object_unref(loaded);
  auto* klass = static_cast<GObjectClass*>(g_type_class_ref(type));
  const bool found = g_object_class_find_property(klass, property) != nullptr;
  g_type_class_unref(klass);
  return found;
}

bool Registry::check_properties(ElementSpec& spec, GstElementFactory* factory, const std::vector<RawProperty>& raw,
                                const ValueExpander& expand) {
  if (raw.empty()) return true;
  GstPluginFeature* loaded = gst_plugin_feature_load(GST_PLUGIN_FEATURE(factory));
  if (!loaded) {
    report_.error(spec.where, "could not load the plugin of element '" + spec.factory + "'");
    return false;
  }
  const GType type = gst_element_factory_get_element_type(GST_ELEMENT_FACTORY(loaded));
  gst_object_unref(loaded);
  auto* klass = static_cast<GObjectClass*>(g_type_class_ref(type));
  bool ok = true;
  for (const RawProperty& p : raw) ok = check_property(spec, klass, p, expand) && ok;
  g_type_class_unref(klass);
  return ok;
}

bool Registry::check_property(ElementSpec& spec, GObjectClass* klass, const RawProperty& p,
                              const ValueExpander& expand) {
  const std::string owner = "'" + spec.name + "' (" + spec.factory + ")";
  if (p.key == "name" || p.key == "parent") {
    report_.error(p.key_where, "property '" + p.key + "' cannot be set in 'properties'" +
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
    report_.error(p.key_where, "pad '" + pad_prefix.substr(0, pad_prefix.size() - 2) + "' of element " + owner +
                                   " has no property '" + property + "'" + report_.suggest(p.key, names));
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
    report_.error(p.key_where, "element " + owner + " has no property '" + p.key + "'" + report_.suggest(p.key, names));
    return false;
  }
  if (!(pspec->flags & G_PARAM_WRITABLE)) {
    report_.error(p.key_where, "property '" + std::string(pspec->name) + "' of " + owner + " is read-only");
    return false;
  }
  const bool is_path = p.path_tag || (G_PARAM_SPEC_VALUE_TYPE(pspec) == G_TYPE_STRING && is_path_property(pspec->name));
  const std::optional<std::string> value = expand(p, is_path);  // the YAML half's substitution
  if (!value) return false;
  const std::string& text = *value;
  std::string problem;
  if (!check_property_value(pspec, text, problem)) {
    report_.error(p.value_where,
                  "invalid value '" + text + "' for property '" + pspec->name + "' of " + owner + ": " + problem);
    return false;
  }
  spec.properties.push_back({pad_prefix + pspec->name, text, p.value_where});
  return true;
}

// The class of the pads named `pad` (an always pad's name, or a request template's name such as
// overlay_%u matched by overlay_0), referenced; nullptr with an error when there is none.
GObjectClass* Registry::pad_class(const ElementSpec& spec, GObjectClass* klass, const RawProperty& p,
                                  const std::string& pad) {
  const std::string owner = "'" + spec.name + "' (" + spec.factory + ")";
  if (!g_type_is_a(G_OBJECT_CLASS_TYPE(klass), GST_TYPE_CHILD_PROXY)) {
    report_.error(p.key_where, "element " + owner + " does not give access to its pads' properties ('" + p.key +
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
      match = std::all_of(tail.begin(), tail.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    }
    if (match && !found) found = templ;
  }
  if (!found) {
    report_.error(p.key_where, "element " + owner + " has no pad '" + pad + "' (for '" + p.key +
                                   "'; its pad templates: " + join_list(names) + ")");
    return nullptr;
  }
  GType type = GST_PAD_TEMPLATE_GTYPE(found);
  if (type == G_TYPE_NONE) type = GST_TYPE_PAD;
  return static_cast<GObjectClass*>(g_type_class_ref(type));
}

std::optional<std::string> Registry::filter_caps(const std::string& text, const SourceLocation& where) {
  const std::string caps = normalise_caps(text);
  const std::string feature_problem = caps_features_problem(caps);
  if (!feature_problem.empty()) {
    report_.error(where, "invalid caps '" + text + "': " + feature_problem);
    return std::nullopt;
  }
  GstCaps* parsed = nullptr;
  if (!caps.empty()) {
    GstLogCapture quiet;  // the failure is reported below, with the line
    parsed = gst_caps_from_string(caps.c_str());
  }
  const std::string problem = parsed ? filter_caps_problem(parsed) : std::string();
  if (parsed) gst_caps_unref(parsed);
  if (!parsed || !problem.empty()) {
    report_.error(where, "invalid caps '" + text + "'" + (problem.empty() ? "" : ": " + problem));
    return std::nullopt;
  }
  return caps;
}

bool Registry::check_pad(const ElementSpec& spec, const LinkItem& item, GstPadDirection direction) {
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
    report_.error(item.where, "pad '" + item.pad + "' of '" + spec.name + "' is not a " + role + " pad; the " +
                                  (direction == GST_PAD_SRC ? "first" : "last") + " item of a chain needs one (" +
                                  role + " pads: " + (names.empty() ? "none" : join_list(names)) + ")");
  } else {
    report_.error(item.where, "element '" + spec.name + "' (" + spec.factory + ") has no " + role + " pad '" +
                                  item.pad + "'" + report_.suggest(item.pad, names) + " (" + role +
                                  " pads: " + (names.empty() ? "none" : join_list(names)) + ")");
  }
  return false;
}

// An always sink pad left unlinked starves the element: a filter never gets its input, and an
// aggregator such as poissonblend waits forever for its background. Reported when none of the
// element's sink pads is linked, or when a request sink pad is linked but an always one is not.
// (An element may have optional always pads, e.g. subtitleoverlay's subtitle_sink, so an always
// pad beside other linked always pads is allowed.) A link without a pad name takes an unlinked
// always pad first, as gst_element_link does.
void Registry::report_unlinked_sink_pads(const PipelineConfig& config, const std::set<std::string>& linked) {
  for (const auto& element : config.elements) {
    if (!linked.count(element.name)) continue;  // reported as a whole
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
      report_.error(element.where, "element " + owner + " has no input: its sink pad '" + unlinked_always.front() +
                                       "' is not linked (link a chain to '" + element.name + "')");
    } else if (!linked_request.empty()) {
      report_.error(element.where, "sink pad '" + unlinked_always.front() + "' of element " + owner +
                                       " is not linked while its pad '" + linked_request + "' is; it would wait for '" +
                                       unlinked_always.front() + "' forever (link a chain to '" + element.name + "." +
                                       unlinked_always.front() + "')");
    }
  }
}

}  // namespace prism::config
