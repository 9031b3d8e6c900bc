// For element tests that run a config through `prism run`: the prism binary and configs/ of the
// build, or, on the GPU machine, the bundle's prism on PATH and $PRISM_SOURCE_DIR/configs; and a
// way to run it (run_command, from the test-support library).
#pragma once

#include <glib.h>

#include <filesystem>
#include <string>

#include "process.h"

namespace prism::test {

// PRISM_EXE when it exists, else "prism" found on PATH, else "".
inline std::string prism_executable() {
  std::string exe = PRISM_EXE;
  if (!std::filesystem::exists(exe)) {
    gchar* found = g_find_program_in_path("prism");
    exe = found ? found : "";
    g_free(found);
  }
  return exe;
}

// configs/NAME under $PRISM_SOURCE_DIR, else under the source tree this test was built from.
inline std::string source_config(const std::string& name) {
  const char* source_env = g_getenv("PRISM_SOURCE_DIR");
  return std::string(source_env ? source_env : PRISM_SOURCE_DIR_STR) + "/configs/" + name;
}

}  // namespace prism::test
