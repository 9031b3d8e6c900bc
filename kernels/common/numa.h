// Placing a process's host memory on its GPU's NUMA node.
//
// Pinned host memory that a GPU streams from (the texture index's host tier, staging buffers) is
// read over PCIe from the socket the GPU hangs off; on the other socket every copy also crosses the
// inter-socket link, which cost the reference's GPU class 3.2x of its host-to-device rate
// (../shared/FACTS.md). cudaMallocHost touches (pins) its pages on the calling thread, and Linux
// places a page on the node of the CPU that first touches it, so binding the threads to the GPU's
// node's CPUs before the pinned allocations lands the memory there as well. We bind CPU affinity
// rather than calling mbind/set_mempolicy: it needs no libnuma, it also keeps the CPU work next to
// the memory it reads (copies, geometric verification), and the memory policy stays the kernel's
// default, so a full node spills to the other rather than failing an allocation.
//
// The node comes from sysfs: the GPU's PCI address (cudaDeviceGetPCIBusId) names
// SYS/bus/pci/devices/ADDR/numa_node (-1 or absent: the platform states no preference, as on a
// machine of one socket), and SYS/devices/system/node/nodeK/cpulist lists the node's CPUs.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace prism::numa {

// A Linux CPU list ("0-15,32-47", "3", "" for none; a trailing newline is fine) as sorted CPU
// numbers. Throws std::invalid_argument naming `what` (the file) and the bad part.
std::vector<int> parse_cpulist(const std::string& text, const std::string& what);
// The CPU list text of `cpus` ("0-3,8").
std::string format_cpulist(const std::vector<int>& cpus);

// The sysfs name of a PCI address as CUDA gives it ("00000000:1B:00.0" -> "0000:1b:00.0"). Throws
// std::invalid_argument for anything that is not DOMAIN:BUS:DEVICE.FUNCTION in hexadecimal.
std::string sysfs_pci_address(const std::string& cuda_bus_id);

struct Placement {
  std::string pci;        // the GPU's sysfs PCI address; empty when unknown
  int node = -1;          // its NUMA node; -1: no preference
  std::vector<int> cpus;  // the node's CPUs that this process may run on; empty: leave as is
  std::string note;       // why there is no placement (empty when there is one)
};

// The placement of the PCI device `pci` (sysfs form) under the sysfs root `sys` ("/sys"), limited
// to `allowed` (the CPUs this process may use, from allowed_cpus()). A missing or unreadable file
// means no preference, said in `note`; a malformed one throws std::invalid_argument naming it.
Placement placement_of_pci(const std::string& pci, const std::vector<int>& allowed,
                           const std::filesystem::path& sys = "/sys");

// The placement of CUDA device `device` (of those this process sees); no preference, with the
// reason in `note`, in a build without CUDA or when the driver does not answer.
Placement placement_of_gpu(int device, const std::filesystem::path& sys = "/sys");

// The CPUs this thread may run on (sched_getaffinity).
std::vector<int> allowed_cpus();

// Binds every thread of this process (those that exist now; later ones inherit the creator's
// affinity) to `cpus`. Throws std::runtime_error naming the errno when the kernel refuses.
void bind_process(const std::vector<int>& cpus);

// Binds this process to the node of `placement` when it has one; returns the line to log
// ("GPU 0000:1b:00.0 is on NUMA node 0: threads bound to CPUs 0-15,32-47", or why not).
std::string apply(const Placement& placement);

}  // namespace prism::numa
