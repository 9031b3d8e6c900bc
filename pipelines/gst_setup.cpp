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
  // ran the build tree's elements, not its own) while the build folder was there (issue 40.8).
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
