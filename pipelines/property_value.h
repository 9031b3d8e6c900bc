// Checking property values given as strings against a GObject property, the way gst-launch
// deserialises them.
#pragma once

#include <glib-object.h>

#include <string>

namespace prism {

// True when `text` deserialises into the property's type (enums and flags by nick or name) and
// lies in its range. Otherwise `problem` says what was expected, e.g.
// "expected an integer in the range -1..2147483647".
bool check_property_value(GParamSpec* pspec, const std::string& text, std::string& problem);

// What a property accepts, e.g. "an integer in the range -1..2147483647" or "one of: a, b, c".
std::string describe_property_type(GParamSpec* pspec);

}  // namespace prism
