// How much host memory this process may still take, and byte counts as people read them: what the
// texture index checks before each block it pins (pinned memory cannot be swapped, so a budget larger
// than the machine holds would end in the kernel's OOM killer rather than in an error naming it).
#pragma once

#include <cstdint>
#include <string>

namespace prism::host_memory {

// Where the figures are read; tests point them at files of their own.
struct Sources {
  std::string meminfo = "/proc/meminfo";
  std::string cgroup_max = "/sys/fs/cgroup/memory.max";  // cgroup v2: the limit ("max": none)
  std::string cgroup_current = "/sys/fs/cgroup/memory.current";
};

// Bytes of a /proc/meminfo field ("MemAvailable:", "MemTotal:"); 0 when unknown.
int64_t meminfo_bytes(const std::string& field, const Sources& from = {});

// The memory this process may still take: MemAvailable, or less where a cgroup v2 limit
// (memory.max less memory.current; containers) is nearer. 0 when unknown; at least 1 when known,
// so that a full cgroup is not mistaken for "unknown".
int64_t available(const Sources& from = {});

// "75.7 GiB", "96.0 MiB", "196608 bytes".
std::string size_text(int64_t bytes);

}  // namespace prism::host_memory
