// For element tests that run a config through `prism run`: the prism binary and configs/ of the
// build, or, on the GPU machine, the bundle's prism on PATH and $PRISM_SOURCE_DIR/configs; and a
// way to run it.
#pragma once

#include <glib.h>

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

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

// Runs a shell command; its stdout and stderr go to `output`. Returns the exit status (-1: not run).
inline int run_command(const std::string& cmd, std::string& output) {
  output.clear();
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, f)) output.append(buf, n);
  const int status = pclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace prism::test
