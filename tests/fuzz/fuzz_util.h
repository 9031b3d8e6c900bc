// Shared by the fuzz targets of this folder (one LLVMFuzzerTestOneInput per file): the check that
// turns a broken property into a crash libFuzzer records, and the input as a file for the parsers
// that read files. The same sources build two ways (tests/fuzz/CMakeLists.txt): as libFuzzer targets
// in the clang build of tools/fuzz, and with replay_main.cpp as plain executables that ctest runs
// over the seed corpus in every build.
#pragma once
#include <glib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace prism::fuzz {

// A property every input must keep, beyond "no crash": abort (a finding) when it does not.
#define FUZZ_CHECK(cond, what)                                                                        \
  do {                                                                                                \
    if (!(cond)) {                                                                                    \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s (%s)\n", __FILE__, __LINE__, #cond, (what)); \
      std::abort();                                                                                   \
    }                                                                                                 \
  } while (0)

// A private folder for this process's input files, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  // Never destroyed: a static path would be destroyed before an atexit handler registered while
  // constructing it runs, and the handler would remove "" and leave the folder behind.
  static const std::filesystem::path* const dir = [] {
    // mkdtemp, not the pid: a process killed before exit leaves its folder behind, and a later
    // process given the same pid (containers reuse them) would find stale files there.
    std::string name = (std::filesystem::temp_directory_path() / "prism-fuzz-XXXXXX").string();
    FUZZ_CHECK(::mkdtemp(name.data()) != nullptr, "mkdtemp failed in the temp directory");
    return new std::filesystem::path(name);
  }();
  static const bool cleanup = [] {
    return std::atexit([] {
             std::error_code ec;
             std::filesystem::remove_all(*dir, ec);
           }) == 0;
  }();
  (void)cleanup;
  return *dir;
}

// Writes `size` bytes to `path`, replacing it.
inline void write_bytes(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  out.close();
  FUZZ_CHECK(out.good(), path.c_str());
}

// Writes the input to `name` in the scratch folder (replacing it) and returns its path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = (scratch_dir() / name).string();
  write_bytes(path, data, size);
  return path;
}

// GStreamer for targets that need elements: plugins are scanned in this process (the scanner helper
// is not instrumented and cannot load an instrumented plugin) into a registry file of this build,
// unless the environment says otherwise; prism::init_gstreamer (pipelines/gst_setup.h) then adds
// the build's Prism plugin.
inline void set_gstreamer_environment() {
  g_setenv("GST_REGISTRY_FORK", "no", FALSE);
#ifdef PRISM_FUZZ_REGISTRY
  g_setenv("GST_REGISTRY_1_0", PRISM_FUZZ_REGISTRY, FALSE);
#endif
}

// A GStreamer-CRITICAL or WARNING (of GStreamer, its libraries or GLib/GObject) aborts: a finding.
inline void abort_on_gstreamer_warnings() {
  const auto handler = [](const gchar* domain, GLogLevelFlags level, const gchar* message, gpointer) {
    std::fprintf(stderr, "%s-%s: %s\n", domain ? domain : "", (level & G_LOG_LEVEL_CRITICAL) ? "CRITICAL" : "WARNING",
                 message);
    std::abort();
  };
  for (const char* domain : {"GStreamer", "GStreamer-Video", "GStreamer-Base", "GStreamer-App", "GLib", "GLib-GObject"})
    g_log_set_handler(domain, GLogLevelFlags(G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING), handler, nullptr);
}

}  // namespace prism::fuzz
