// prism inspect: lists the elements of the Prism plugin, as found by the registry.
#include <gst/gst.h>

#include <cstdio>
#include <string>

#include "gst_setup.h"
#include "text_util.h"

namespace prism::cli {

int inspect_command(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::puts(
          "usage: prism inspect\n\nLists the elements of the Prism GStreamer plugin "
          "(use gst-inspect-1.0 ELEMENT for details).");
      return 0;
    }
    std::fprintf(stderr, "prism inspect: error: unexpected argument '%s'\n", arg.c_str());
    return 2;
  }
  init_gstreamer();
  GstPlugin* plugin = gst_registry_find_plugin(gst_registry_get(), "prism");
  if (!plugin) {
    const auto& dirs = scanned_plugin_dirs();
    std::fprintf(stderr,
                 "prism inspect: error: the Prism plugin (libgstprism.so) was not found "
                 "(looked in %s; set PRISM_PLUGIN_DIR or GST_PLUGIN_PATH to its folder)\n",
                 dirs.empty() ? "no folder" : join_list(dirs).c_str());
    return 1;
  }
  std::printf("plugin prism %s: %s\n  file: %s\n\n", gst_plugin_get_version(plugin), gst_plugin_get_description(plugin),
              gst_plugin_get_filename(plugin) ? gst_plugin_get_filename(plugin) : "?");
  gst_object_unref(plugin);
  for (const auto& name : plugin_element_names("prism")) {
    GstElementFactory* factory = gst_element_factory_find(name.c_str());
    const char* longname = factory ? gst_element_factory_get_metadata(factory, GST_ELEMENT_METADATA_LONGNAME) : "";
    std::printf("  %-24s %s\n", name.c_str(), longname ? longname : "");
    if (factory) gst_object_unref(factory);
  }
  return 0;
}

}  // namespace prism::cli
