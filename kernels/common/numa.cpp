#include "common/numa.h"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::numa {

namespace {

// A whole decimal number of `s` (no sign, no spaces), or -1.
long decimal(const std::string& s) {
  if (s.empty() || s.size() > 9) return -1;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  return std::stol(s);
}

// The first line of `path` without its newline; false when it cannot be read.
bool read_line(const std::filesystem::path& path, std::string& line) {
  std::ifstream in(path);
  if (!in) return false;
  std::getline(in, line);
  return !in.bad();
}

}  // namespace

std::vector<int> parse_cpulist(const std::string& text, const std::string& what) {
  std::string s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::vector<int> cpus;
  if (s.empty()) return cpus;
  std::stringstream parts(s);
  for (std::string part; std::getline(parts, part, ',');) {
    const size_t dash = part.find('-');
    const long first = decimal(part.substr(0, dash));
    const long last = dash == std::string::npos ? first : decimal(part.substr(dash + 1));
    if (first < 0 || last < first || last >= CPU_SETSIZE)
      throw std::invalid_argument(what + ": not a CPU list: '" + part + "' in '" + s + "'");
    for (long c = first; c <= last; ++c) cpus.push_back(int(c));
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpulist(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string sysfs_pci_address(const std::string& cuda_bus_id) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  char tail = 0;
  const bool plain = std::all_of(cuda_bus_id.begin(), cuda_bus_id.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.';
  });
  if (!plain || cuda_bus_id.size() > 32 ||
      std::sscanf(cuda_bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &tail) != 4 || bus > 0xff ||
      device > 0x1f || function > 7)
    throw std::invalid_argument("not a PCI address: '" + cuda_bus_id + "'");
  char out[32];
  std::snprintf(out, sizeof out, "%04x:%02x:%02x.%x", domain, bus, device, function);
  return out;
}

Placement placement_of_pci(const std::string& pci, const std::vector<int>& allowed, const std::filesystem::path& sys) {
  Placement p;
  p.pci = pci;
  const std::filesystem::path node_file = sys / "bus/pci/devices" / pci / "numa_node";
  std::string line;
  if (!read_line(node_file, line)) {
    p.note = node_file.string() + " is missing: no NUMA preference";
    return p;
  }
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  if (line == "-1") {
    p.note = "the platform gives GPU " + pci + " no NUMA node (" + node_file.string() + " is -1)";
    return p;
  }
  const long node = decimal(line);
  if (node < 0) throw std::invalid_argument(node_file.string() + ": not a NUMA node: '" + line + "'");
  p.node = int(node);
  const std::filesystem::path list_file = sys / "devices/system/node" / ("node" + line) / "cpulist";
  std::string list;
  if (!read_line(list_file, list)) {
    p.note = list_file.string() + " is missing: threads left unbound";
    return p;
  }
  for (int c : parse_cpulist(list, list_file.string()))
    if (std::binary_search(allowed.begin(), allowed.end(), c)) p.cpus.push_back(c);
  if (p.cpus.empty())
    p.note = "none of node " + line + "'s CPUs (" + format_cpulist(parse_cpulist(list, list_file.string())) +
             ") is allowed to this process (" + format_cpulist(allowed) + "): threads left unbound";
  return p;
}

Placement placement_of_gpu(int device, const std::filesystem::path& sys) {
#if defined(PRISM_HAVE_CUDA)
  char bus[64] = {};
  const cudaError_t err = cudaDeviceGetPCIBusId(bus, int(sizeof bus), device);
  if (err != cudaSuccess) {
    cudaGetLastError();
    Placement p;
    p.note = "no PCI address for CUDA device " + std::to_string(device) + " (" + cudaGetErrorString(err) +
             "): no NUMA preference";
    return p;
  }
  return placement_of_pci(sysfs_pci_address(bus), allowed_cpus(), sys);
#else
  (void)sys;
  Placement p;
  p.note = "CUDA device " + std::to_string(device) + ": this build has no CUDA: no NUMA preference";
  return p;
#endif
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

void bind_process(const std::vector<int>& cpus) {
  if (cpus.empty()) throw std::invalid_argument("binding to no CPU at all");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) throw std::invalid_argument("CPU " + std::to_string(c) + " is out of range");
    CPU_SET(c, &set);
  }
  // Every thread that exists now (a library may have started some before us); threads started
  // later inherit the affinity of the thread that starts them.
  std::vector<pid_t> tids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d))
      if (decimal(e->d_name) > 0) tids.push_back(pid_t(decimal(e->d_name)));
    closedir(d);
  }
  if (tids.empty()) tids.push_back(pid_t(syscall(SYS_gettid)));
  for (pid_t tid : tids)
    if (sched_setaffinity(tid, sizeof set, &set) != 0 && errno != ESRCH)  // ESRCH: that thread has ended
      throw std::runtime_error("sched_setaffinity(CPUs " + format_cpulist(cpus) + ") of thread " + std::to_string(tid) +
                               ": " + std::strerror(errno));
}

std::string apply(const Placement& p) {
  if (p.cpus.empty()) return p.note;
  bind_process(p.cpus);
  return "GPU " + p.pci + " is on NUMA node " + std::to_string(p.node) + ": threads bound to CPUs " +
         format_cpulist(p.cpus) + " (pinned host memory is first touched there)";
}

}  // namespace prism::numa
