// kernels/common/numa.h on the CPU: CPU lists as sysfs writes them, PCI addresses as CUDA gives
// them, a GPU's node found in a fake sysfs tree (present, -1, missing, malformed), and binding
// every thread of a process (in a child, so that this test process keeps its CPUs).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "common/numa.h"
#include "test_env.h"

namespace prism::numa {
namespace {

namespace fs = std::filesystem;

TEST(Numa, ParsesCpuListsAsSysfsWritesThem) {
  EXPECT_EQ(parse_cpulist("0-3,8\n", "f"), (std::vector<int>{0, 1, 2, 3, 8}));
  EXPECT_EQ(parse_cpulist("5", "f"), std::vector<int>{5});
  EXPECT_EQ(parse_cpulist("\n", "f"), std::vector<int>{});  // a node without CPUs (memory only)
  EXPECT_EQ(parse_cpulist("", "f"), std::vector<int>{});
  EXPECT_EQ(parse_cpulist("32-33,0-1,1", "f"), (std::vector<int>{0, 1, 32, 33}));
  EXPECT_EQ(format_cpulist({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpulist({}), "");
  for (const char* bad : {"0-", "-3", "3-1", "a", "0,,1", "1 2", "0-99999", "0-3:2", "+1"}) {
    try {
      parse_cpulist(bad, "/sys/devices/system/node/node1/cpulist");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("/sys/devices/system/node/node1/cpulist"), std::string::npos) << e.what();
    }
  }
}

TEST(Numa, PciAddressesBecomeSysfsNames) {
  EXPECT_EQ(sysfs_pci_address("00000000:1B:00.0"), "0000:1b:00.0");  // nvidia-smi's 8-digit domain
  EXPECT_EQ(sysfs_pci_address("0000:C1:00.1"), "0000:c1:00.1");
  EXPECT_EQ(sysfs_pci_address("10000:01:00.0"), "10000:01:00.0");  // a VMD domain keeps its digits
  for (const char* bad :
       {"", "1B:00.0", "0000:1B:00", "0000:1B:00.0x", "0000:100:00.0", "../0000:1b:00.0", "-1:1b:00.0"})
    EXPECT_THROW(sysfs_pci_address(bad), std::invalid_argument) << bad;
}

// A sysfs tree with one GPU at `pci` whose numa_node holds `node` ("" for no file), and node1's
// CPUs "8-11,24-27".
fs::path fake_sysfs(const test::TempDir& tmp, const std::string& pci, const std::string& node) {
  const fs::path sys = tmp.path() / "sys";
  fs::create_directories(sys / "bus/pci/devices" / pci);
  if (!node.empty()) tmp.write("sys/bus/pci/devices/" + pci + "/numa_node", node);
  fs::create_directories(sys / "devices/system/node/node1");
  tmp.write("sys/devices/system/node/node1/cpulist", "8-11,24-27\n");
  return sys;
}

TEST(Numa, FindsTheGpusNodeAndItsAllowedCpus) {
  test::TempDir tmp;
  const fs::path sys = fake_sysfs(tmp, "0000:1b:00.0", "1\n");
  std::vector<int> all(64);
  for (int i = 0; i < 64; ++i) all[size_t(i)] = i;
  Placement p = placement_of_pci("0000:1b:00.0", all, sys);
  EXPECT_EQ(p.node, 1);
  EXPECT_EQ(p.cpus, (std::vector<int>{8, 9, 10, 11, 24, 25, 26, 27}));
  EXPECT_EQ(p.note, "");
  // A cpuset (a container, taskset) allows only some: those are taken.
  p = placement_of_pci("0000:1b:00.0", {0, 1, 9, 10, 40}, sys);
  EXPECT_EQ(p.cpus, (std::vector<int>{9, 10}));
  // None of them allowed: the node is known, nothing is bound, and the note says why.
  p = placement_of_pci("0000:1b:00.0", {0, 1, 2}, sys);
  EXPECT_EQ(p.node, 1);
  EXPECT_TRUE(p.cpus.empty());
  EXPECT_NE(p.note.find("none of node 1's CPUs (8-11,24-27)"), std::string::npos) << p.note;
  EXPECT_EQ(apply(p), p.note);  // nothing to bind: the note is what is logged
}

TEST(Numa, NoNodeMissingFilesAndNonsenseAreToldApart) {
  std::vector<int> all{0, 1, 2, 3};
  {
    test::TempDir tmp;  // one socket: the platform says -1
    const Placement p = placement_of_pci("0000:1b:00.0", all, fake_sysfs(tmp, "0000:1b:00.0", "-1\n"));
    EXPECT_EQ(p.node, -1);
    EXPECT_TRUE(p.cpus.empty());
    EXPECT_NE(p.note.find("no NUMA node"), std::string::npos) << p.note;
  }
  {
    test::TempDir tmp;  // no numa_node file (an old kernel, a device not in sysfs)
    const Placement p = placement_of_pci("0000:1b:00.0", all, fake_sysfs(tmp, "0000:1b:00.0", ""));
    EXPECT_EQ(p.node, -1);
    EXPECT_NE(p.note.find("numa_node is missing"), std::string::npos) << p.note;
    // Another device than the one in the tree: missing too, never a crash.
    EXPECT_EQ(placement_of_pci("0000:c1:00.0", all, tmp.path() / "sys").node, -1);
  }
  {
    test::TempDir tmp;  // the node named has no cpulist
    const Placement p = placement_of_pci("0000:1b:00.0", all, fake_sysfs(tmp, "0000:1b:00.0", "3\n"));
    EXPECT_EQ(p.node, 3);
    EXPECT_TRUE(p.cpus.empty());
    EXPECT_NE(p.note.find("node3/cpulist is missing"), std::string::npos) << p.note;
  }
  {
    test::TempDir tmp;  // garbage in numa_node: an error naming the file
    const fs::path sys = fake_sysfs(tmp, "0000:1b:00.0", "one\n");
    try {
      placement_of_pci("0000:1b:00.0", all, sys);
      ADD_FAILURE() << "accepted a numa_node of 'one'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("0000:1b:00.0/numa_node: not a NUMA node: 'one'"), std::string::npos)
          << e.what();
    }
  }
  {
    test::TempDir tmp;  // garbage in the node's cpulist: an error naming that file
    const fs::path sys = fake_sysfs(tmp, "0000:1b:00.0", "1\n");
    tmp.write("sys/devices/system/node/node1/cpulist", "8-x\n");
    try {
      placement_of_pci("0000:1b:00.0", all, sys);
      ADD_FAILURE() << "accepted a cpulist of '8-x'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("node1/cpulist: not a CPU list"), std::string::npos) << e.what();
    }
  }
}

TEST(Numa, ThisBuildsGpuPlacementNeverThrowsWithoutAGpu) {
  // No GPU here (or one without sysfs data): a placement or a reason, not an exception.
  const Placement p = placement_of_gpu(63);
  EXPECT_TRUE(p.cpus.empty());
  EXPECT_NE(p.note, "");
}

// Binding in a child process: every thread, the ones started before the bind included, ends up on
// the one CPU chosen, and so does a thread started after it.
TEST(Numa, BindingCoversEveryThreadOfTheProcess) {
  const std::vector<int> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  const int cpu = allowed.back();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    std::atomic<bool> bound{false};
    std::vector<int> early_cpus;
    std::thread early([&] {
      while (!bound) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      early_cpus = allowed_cpus();
    });
    try {
      Placement p;
      p.pci = "0000:1b:00.0";
      p.node = 0;
      p.cpus = {cpu};
      if (apply(p).find("threads bound to CPUs " + std::to_string(cpu)) == std::string::npos) code = 1;
    } catch (...) {
      code = 2;
    }
    bound = true;
    early.join();
    std::vector<int> late_cpus;
    std::thread late([&] { late_cpus = allowed_cpus(); });
    late.join();
    if (allowed_cpus() != std::vector<int>{cpu}) code = 3;
    if (early_cpus != std::vector<int>{cpu}) code = 4;
    if (late_cpus != std::vector<int>{cpu}) code = 5;
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no log line, 2: threw, 3: main thread, 4: earlier thread, 5: later thread";
  EXPECT_THROW(bind_process({}), std::invalid_argument);
  EXPECT_THROW(bind_process({CPU_SETSIZE}), std::invalid_argument);
}

}  // namespace
}  // namespace prism::numa
