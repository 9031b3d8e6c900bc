#include "gst_setup.h"

#include <gst/gst.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace fs = std::filesystem;

namespace prism {
namespace {

std::vector<std::string>& dirs() {
  static std::vector<std::string> scanned;
  return scanned;
}

void scan_if_present(const fs::path& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  const std::string canonical = fs::weakly_canonical(dir, ec).string();
  if (std::find(dirs().begin(), dirs().end(), canonical) != dirs().end()) return;
  dirs().push_back(canonical);
  if (fs::is_directory(canonical, ec)) gst_registry_scan_path(gst_registry_get(), canonical.c_str());
}

}  // namespace

void init_gstreamer(int* argc, char*** argv) {
  static bool done = false;
  if (done) return;
  done = true;
  gst_init(argc, argv);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
#if defined(PRISM_PLUGIN_BUILD_DIR) && defined(PRISM_BUILD_TREE)
  // The build's plugin, for the build's own executables only: an installed prism loaded it (and
  // ran the build tree's elements, not its own) while the build folder was there.
  const std::string tree = fs::weakly_canonical(PRISM_BUILD_TREE, ec).string() + "/";
  if (!ec && fs::weakly_canonical(exe, ec).string().rfind(tree, 0) == 0) scan_if_present(PRISM_PLUGIN_BUILD_DIR);
  ec.clear();
#endif
  if (!exe.empty()) {
    scan_if_present(exe.parent_path() / ".." / "lib" / "gstreamer-1.0");
#ifdef PRISM_INSTALL_PLUGINDIR
    scan_if_present(exe.parent_path() / ".." / PRISM_INSTALL_PLUGINDIR);  // where `cmake --install` puts it
#endif
    scan_if_present(exe.parent_path() / ".." / "plugins");
  }
  if (const char* env = std::getenv("PRISM_PLUGIN_DIR"); env && *env) scan_if_present(env);
}

const std::vector<std::string>& scanned_plugin_dirs() { return dirs(); }

bool prism_plugin_available() {
  GstPlugin* plugin = gst_registry_find_plugin(gst_registry_get(), "prism");
  if (plugin) gst_object_unref(plugin);
  return plugin != nullptr;
}

std::vector<std::string> plugin_element_names(const std::string& plugin) {
  std::vector<std::string> names;
  GList* features = gst_registry_get_feature_list_by_plugin(gst_registry_get(), plugin.c_str());
  for (GList* l = features; l; l = l->next) {
    if (GST_IS_ELEMENT_FACTORY(l->data)) names.push_back(GST_OBJECT_NAME(l->data));
  }
  gst_plugin_feature_list_free(features);
  std::sort(names.begin(), names.end());
  return names;
}

const std::vector<std::string>& prism_element_names() {
  static const std::vector<std::string> names = {"bowclassify",  "emdtracker",   "envisrc",     "poissonblend",
                                                 "prismconvert", "prismresults", "spectralize", "textureid"};
  return names;
}

std::string missing_element_hint(const std::string& factory) {
  const auto& ours = prism_element_names();
  if (std::binary_search(ours.begin(), ours.end(), factory) || factory.rfind("prism", 0) == 0) {
    if (prism_plugin_available()) return {};
    const auto& looked = scanned_plugin_dirs();
    std::string in;
    for (const std::string& d : looked) in += (in.empty() ? "" : ", ") + d;
    return "the Prism plugin (libgstprism.so) was not found (looked in " + (looked.empty() ? "no folder" : in) +
           "; build it, or set PRISM_PLUGIN_DIR or GST_PLUGIN_PATH to its folder)";
  }
  // The elements of the README's and configs/' pipelines, by the plugin that registers them.
  struct From {
    const char* plugin;
    const char* package;
    std::vector<const char*> factories;
  };
  static const std::vector<From> known = {
      {"nvcodec",
       "gstreamer1.0-plugins-bad",
       {"nvh264dec", "nvh265dec", "nvvp9dec", "nvav1dec", "nvjpegdec", "nvh264enc", "nvh265enc", "cudaupload",
        "cudadownload", "cudaconvert", "cudascale", "cudaconvertscale"}},
      {"videoparsersbad", "gstreamer1.0-plugins-bad", {"h264parse", "h265parse", "vp9parse", "av1parse", "jpegparse"}},
      {"openh264", "gstreamer1.0-plugins-bad", {"openh264dec", "openh264enc"}},
      {"isomp4", "gstreamer1.0-plugins-good", {"qtdemux", "mp4mux", "qtmux"}},
      {"matroska", "gstreamer1.0-plugins-good", {"matroskademux", "matroskamux"}},
      {"rtsp", "gstreamer1.0-plugins-good", {"rtspsrc"}},
      {"rtp", "gstreamer1.0-plugins-good", {"rtph264depay", "rtph265depay"}},
      {"png", "gstreamer1.0-plugins-good", {"pngdec", "pngenc"}},
      {"jpeg", "gstreamer1.0-plugins-good", {"jpegdec", "jpegenc"}},
      {"multifile", "gstreamer1.0-plugins-good", {"multifilesrc", "multifilesink"}},
      {"libav", "gstreamer1.0-libav", {"avdec_h264", "avdec_h265"}},
      {"x264", "gstreamer1.0-plugins-ugly", {"x264enc"}},
      {"videoconvertscale", "gstreamer1.0-plugins-base", {"videoconvert", "videoscale", "videoconvertscale"}},
      {"videotestsrc", "gstreamer1.0-plugins-base", {"videotestsrc"}},
      {"app", "gstreamer1.0-plugins-base", {"appsrc", "appsink"}},
      {"compositor", "gstreamer1.0-plugins-base", {"compositor"}},
  };
  for (const From& f : known)
    for (const char* name : f.factories)
      if (factory == name) {
        std::string hint =
            std::string("its plugin '") + f.plugin + "' is not installed or not loadable (Debian: " + f.package + ")";
        if (std::string(f.plugin) == "nvcodec")
          hint +=
              "; nvcodec registers its elements only where the NVIDIA driver and a GPU are found "
              "(`gst-inspect-1.0 nvcodec` says what it found)";
        return hint;
      }
  return {};
}

namespace {

thread_local GstLogCapture* current_capture = nullptr;

void capture_log(const gchar* domain, GLogLevelFlags level, const gchar* message, gpointer) {
  if (current_capture) {
    current_capture->add(message ? message : "");
    return;
  }
  g_log_default_handler(domain, level, message, nullptr);
}

}  // namespace

GstLogCapture::GstLogCapture() : outer_(current_capture) {
  current_capture = this;
  // The newest handler of a domain wins, so this one sees the messages while it is installed.
  handler_ =
      g_log_set_handler("GStreamer", GLogLevelFlags(G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING), capture_log, nullptr);
}

GstLogCapture::~GstLogCapture() {
  g_log_remove_handler("GStreamer", handler_);
  current_capture = outer_;
}

}  // namespace prism
