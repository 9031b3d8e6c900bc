#include "property_value.h"

#include <gst/gst.h>

#include <sstream>
#include <vector>

#include "gst_setup.h"
#include "text_util.h"

namespace prism {
namespace {

template <typename T>
std::string range(T min, T max) {
  std::ostringstream out;
  out << min << ".." << max;
  return out.str();
}

std::vector<std::string> enum_nicks(GParamSpec* pspec) {
  std::vector<std::string> nicks;
  GEnumClass* klass = G_PARAM_SPEC_ENUM(pspec)->enum_class;
  for (guint i = 0; i < klass->n_values; ++i) nicks.push_back(klass->values[i].value_nick);
  return nicks;
}

std::vector<std::string> flag_nicks(GParamSpec* pspec) {
  std::vector<std::string> nicks;
  GFlagsClass* klass = G_PARAM_SPEC_FLAGS(pspec)->flags_class;
  for (guint i = 0; i < klass->n_values; ++i) nicks.push_back(klass->values[i].value_nick);
  return nicks;
}

}  // namespace

std::string describe_property_type(GParamSpec* pspec) {
  if (G_IS_PARAM_SPEC_BOOLEAN(pspec)) return "a boolean (true or false)";
  if (G_IS_PARAM_SPEC_INT(pspec)) {
    auto* p = G_PARAM_SPEC_INT(pspec);
    return "an integer in the range " + range(p->minimum, p->maximum);
  }
  if (G_IS_PARAM_SPEC_UINT(pspec)) {
    auto* p = G_PARAM_SPEC_UINT(pspec);
    return "an unsigned integer in the range " + range(p->minimum, p->maximum);
  }
  if (G_IS_PARAM_SPEC_INT64(pspec)) {
    auto* p = G_PARAM_SPEC_INT64(pspec);
    return "an integer in the range " + range<gint64>(p->minimum, p->maximum);
  }
  if (G_IS_PARAM_SPEC_UINT64(pspec)) {
    auto* p = G_PARAM_SPEC_UINT64(pspec);
    return "an unsigned integer in the range " + range<guint64>(p->minimum, p->maximum);
  }
  if (G_IS_PARAM_SPEC_LONG(pspec)) {
    auto* p = G_PARAM_SPEC_LONG(pspec);
    return "an integer in the range " + range(p->minimum, p->maximum);
  }
  if (G_IS_PARAM_SPEC_ULONG(pspec)) {
    auto* p = G_PARAM_SPEC_ULONG(pspec);
    return "an unsigned integer in the range " + range(p->minimum, p->maximum);
  }
  if (G_IS_PARAM_SPEC_FLOAT(pspec)) {
    auto* p = G_PARAM_SPEC_FLOAT(pspec);
    return "a number in the range " + range(p->minimum, p->maximum);
  }
  if (G_IS_PARAM_SPEC_DOUBLE(pspec)) {
    auto* p = G_PARAM_SPEC_DOUBLE(pspec);
    return "a number in the range " + range(p->minimum, p->maximum);
  }
  if (G_IS_PARAM_SPEC_ENUM(pspec)) return "one of: " + join_list(enum_nicks(pspec), 100);
  if (G_IS_PARAM_SPEC_FLAGS(pspec)) {
    return "flags joined with '+' from: " + join_list(flag_nicks(pspec), 100);
  }
  if (GST_IS_PARAM_SPEC_FRACTION(pspec)) {
    auto* p = GST_PARAM_SPEC_FRACTION(pspec);
    return "a fraction such as 30/1 in the range " + std::to_string(p->min_num) + "/" + std::to_string(p->min_den) +
           ".." + std::to_string(p->max_num) + "/" + std::to_string(p->max_den);
  }
  if (G_PARAM_SPEC_VALUE_TYPE(pspec) == GST_TYPE_CAPS) {
    return "caps such as \"video/x-raw,format=RGB\"";
  }
  if (G_PARAM_SPEC_VALUE_TYPE(pspec) == G_TYPE_STRING) return "a UTF-8 string";
  return std::string("a value of type ") + g_type_name(G_PARAM_SPEC_VALUE_TYPE(pspec));
}

bool check_property_value(GParamSpec* pspec, const std::string& text, std::string& problem) {
  const GType type = G_PARAM_SPEC_VALUE_TYPE(pspec);
  if (type == G_TYPE_POINTER || g_type_is_a(type, G_TYPE_OBJECT) || G_TYPE_FUNDAMENTAL(type) == G_TYPE_INTERFACE) {
    problem = std::string("properties of type ") + g_type_name(type) + " cannot be set from a config";
    return false;
  }
  // GStreamer wraps "-1" around for unsigned types; a negative value is a mistake there.
  const bool is_unsigned = G_IS_PARAM_SPEC_UINT(pspec) || G_IS_PARAM_SPEC_UINT64(pspec) || G_IS_PARAM_SPEC_ULONG(pspec);
  if (is_unsigned && text.find_first_not_of(" \t") != std::string::npos && text[text.find_first_not_of(" \t")] == '-') {
    problem = "expected " + describe_property_type(pspec);
    return false;
  }
  GValue value = G_VALUE_INIT;
  g_value_init(&value, type);
  bool ok;
  {
    GstLogCapture quiet;  // a failure is reported as `problem`
    ok = gst_value_deserialize_with_pspec(&value, text.c_str(), pspec);
  }
  if (ok) ok = !g_param_value_validate(pspec, &value);  // TRUE means it had to be changed
  g_value_unset(&value);
  if (ok) return true;
  problem = "expected " + describe_property_type(pspec);
  if (G_IS_PARAM_SPEC_ENUM(pspec)) problem += did_you_mean(text, enum_nicks(pspec));
  return false;
}

}  // namespace prism
