#include "common/host_memory.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace prism::host_memory {

int64_t meminfo_bytes(const std::string& field, const Sources& from) {
  std::ifstream in(from.meminfo);
  std::string key, unit;
  int64_t kb = 0;
  while (in >> key >> kb >> unit)
    if (key == field) return kb * 1024;
  return 0;
}

int64_t available(const Sources& from) {
  int64_t bytes = meminfo_bytes("MemAvailable:", from);
  std::ifstream max_in(from.cgroup_max), cur_in(from.cgroup_current);
  int64_t max = 0, cur = 0;
  if (bytes > 0 && (max_in >> max) && (cur_in >> cur) && max > 0)  // "max" (no limit) fails to parse
    bytes = std::min(bytes, std::max<int64_t>(0, max - cur) + 1);
  return bytes;
}

std::string size_text(int64_t bytes) {
  char b[48];
  if (bytes >= (int64_t(1) << 30))
    std::snprintf(b, sizeof b, "%.1f GiB", double(bytes) / (1 << 30));
  else if (bytes >= (int64_t(1) << 20))
    std::snprintf(b, sizeof b, "%.1f MiB", double(bytes) / (1 << 20));
  else
    std::snprintf(b, sizeof b, "%lld bytes", (long long)bytes);
  return b;
}

}  // namespace prism::host_memory
