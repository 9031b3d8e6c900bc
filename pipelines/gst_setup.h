// GStreamer start-up for Prism tools: gst_init plus discovery of the Prism plugin, so that users
// do not have to set GST_PLUGIN_PATH.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace prism {

// Calls gst_init(argc, argv) and scans, when they exist: the compile-time plugin build folder
// (PRISM_PLUGIN_BUILD_DIR) for an executable inside the build tree only, <exe dir>/../lib/gstreamer-1.0, <exe
// dir>/../PRISM_INSTALL_PLUGINDIR (lib/<multiarch>/gstreamer-1.0, where `cmake --install` puts the plugin), <exe
// dir>/../plugins and $PRISM_PLUGIN_DIR. The executable's folder comes from /proc/self/exe. Only the first call acts.
void init_gstreamer(int* argc = nullptr, char*** argv = nullptr);

// The folders init_gstreamer() looked in (whether or not they exist), for error messages.
const std::vector<std::string>& scanned_plugin_dirs();

// True when the registry holds the "prism" plugin.
bool prism_plugin_available();

// Names of the element factories of one plugin, sorted.
std::vector<std::string> plugin_element_names(const std::string& plugin);

// The element factories of the Prism plugin, sorted: what a config may name before the plugin is
// found (pipelines/ knows elements by name only; a test compares this list with the plugin's own).
const std::vector<std::string>& prism_element_names();

// Why an element factory the registry lacks is missing, when that is known: for Prism's elements, the
// plugin not found and where it was looked for; for the GStreamer elements Prism's pipelines use, the
// plugin and the Debian package that provide it (nvcodec's only where the NVIDIA driver and a GPU are).
// Empty when not known.
std::string missing_element_hint(const std::string& factory);

// While it lives, the GStreamer-CRITICALs and WARNINGs logged on the constructing thread are
// collected instead of printed. GStreamer's string parsers (gst_caps_from_string,
// gst_value_deserialize) log a CRITICAL for some malformed text before they return failure, e.g. a
// structure name that starts with a digit, also inside a nested (structure) value, which no lexical
// pre-check can follow; the caller reports the failure with the config line instead. Messages from
// other threads go to GLib's default handler meanwhile.
class GstLogCapture {
 public:
  GstLogCapture();
  ~GstLogCapture();
  GstLogCapture(const GstLogCapture&) = delete;
  GstLogCapture& operator=(const GstLogCapture&) = delete;
  const std::vector<std::string>& messages() const { return messages_; }
  void add(std::string message) { messages_.push_back(std::move(message)); }

 private:
  std::vector<std::string> messages_;
  GstLogCapture* outer_;
  unsigned handler_;
};

}  // namespace prism
