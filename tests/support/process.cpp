#include "process.h"

#include <sys/wait.h>

#include <cstdio>

namespace prism::test {

int run_command(const std::string& cmd, std::string& output) {
  output.clear();
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, f)) output.append(buf, n);
  const int status = pclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace prism::test
