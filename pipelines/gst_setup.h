// GStreamer start-up for Prism tools: gst_init plus discovery of the Prism plugin, so that users
// do not have to set GST_PLUGIN_PATH.
#pragma once

#include <string>
#include <vector>

namespace prism {

// Calls gst_init(argc, argv) and scans, when they exist: the compile-time plugin build folder
// (PRISM_PLUGIN_BUILD_DIR), <exe dir>/../lib/gstreamer-1.0, <exe dir>/../plugins and
// $PRISM_PLUGIN_DIR. The executable's folder comes from /proc/self/exe. Only the first call acts.
void init_gstreamer(int* argc = nullptr, char*** argv = nullptr);

// The folders init_gstreamer() looked in (whether or not they exist), for error messages.
const std::vector<std::string>& scanned_plugin_dirs();

// True when the registry holds the "prism" plugin.
bool prism_plugin_available();

// Names of the element factories of one plugin, sorted.
std::vector<std::string> plugin_element_names(const std::string& plugin);

}  // namespace prism
