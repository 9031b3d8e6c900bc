// Small shared helpers of kernels/common on the CPU: the reflect-101 border every CPU and CUDA
// filter uses (border.h) against OpenCV's own borderInterpolate, the stopwatch (stopwatch.h) and
// the host memory figures (host_memory.h) read from files of the test's own, and the lease pool
// (lease_pool.h) that request threads share CUDA extractors through.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <chrono>
#include <atomic>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/border.h"
#include "common/host_memory.h"
#include "common/lease_pool.h"
#include "common/stopwatch.h"
#include "test_env.h"

namespace prism {
namespace {

// At most `capacity` objects are ever made, however many threads borrow at once; an object given
// back is lent again rather than a new one made; a make() that throws leaves room for the next.
TEST(LeasePool, MakesAtMostItsCapacityAndLendsWhatComesBack) {
  LeasePool<int> pool(2);
  std::atomic<int> made{0}, out{0}, most_out{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto lease = pool.borrow([&] { return new int(++made); });
        const int now = ++out;
        for (int m = most_out; now > m && !most_out.compare_exchange_weak(m, now);) {
        }
        EXPECT_GE(*lease, 1);
        --out;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_LE(made.load(), 2);
  EXPECT_LE(most_out.load(), 2);
  EXPECT_NO_THROW(pool.borrow([]() -> int* { throw std::runtime_error("made again"); }))
      << "with both idle, an idle one is lent and make is not called";
  LeasePool<int> fresh(1);
  EXPECT_THROW(fresh.borrow([]() -> int* { throw std::runtime_error("failed"); }), std::runtime_error);
  auto lease = fresh.borrow([] { return new int(7); });  // the failed make left its room
  EXPECT_EQ(*lease, 7);
  EXPECT_THROW(LeasePool<int>(0), std::invalid_argument);
}

// One pool per key for the process: the same key gives the same pool, another key another.
TEST(LeasePool, KeyedPoolsAreOnePerKey) {
  LeasePool<double>& a = keyed_lease_pool<double>(std::make_pair(0, 512), 3);
  EXPECT_EQ(&keyed_lease_pool<double>(std::make_pair(0, 512), 3), &a);
  EXPECT_NE(&keyed_lease_pool<double>(std::make_pair(1, 512), 3), &a);
  EXPECT_EQ(a.capacity(), 3);
}

// cv::borderInterpolate(BORDER_REFLECT_101) is what cv::sepFilter2D and the other CPU paths read
// beyond the edge; reflect101 serves the CUDA kernels (bow's filter bank, SIFT's blur, CLAHE), so
// both must name the same pixel, also for offsets folded more than once on tiny images.
TEST(Border, Reflect101IsOpenCvsBorderInterpolate) {
  for (int len = 1; len <= 9; ++len)
    for (int p = -4 * len - 3; p < 5 * len + 3; ++p)
      EXPECT_EQ(reflect101(p, len), cv::borderInterpolate(p, len, cv::BORDER_REFLECT_101)) << p << " of " << len;
}

TEST(Stopwatch, MeasuresFromTheGivenTimeAndLapsMoveIt) {
  using std::chrono::milliseconds;
  const auto start = std::chrono::steady_clock::now() - milliseconds(1500);
  EXPECT_GE(ms_since(start), 1500.0);
  EXPECT_LT(ms_since(start), 1500.0 + 3.6e6);  // milliseconds, not microseconds or seconds
  auto t = start;
  const double lap = lap_ms(t);
  EXPECT_GE(lap, 1500.0);
  EXPECT_GT(t, start);  // moved to the lap's end
  // Measured in this order: the time since the lap's end is at most the rest of the time since start.
  const double since_lap = ms_since(t);
  const double since_start = ms_since(start);
  EXPECT_LE(since_lap, since_start - lap + 1e-6);
}

// MemAvailable, or the cgroup v2 limit less its use where that is nearer; "max" is no limit; a
// full cgroup is 1 byte (known), a missing field 0 (unknown).
TEST(HostMemory, AvailableIsMemAvailableOrANearerCgroupLimit) {
  test::TempDir dir;
  host_memory::Sources from;
  from.meminfo = dir.write("meminfo", "MemTotal:       16000000 kB\nMemFree:  100 kB\nMemAvailable:    8000000 kB\n");
  from.cgroup_max = dir.file("max");
  from.cgroup_current = dir.file("current");
  EXPECT_EQ(host_memory::meminfo_bytes("MemTotal:", from), int64_t(16000000) * 1024);
  EXPECT_EQ(host_memory::meminfo_bytes("SwapTotal:", from), 0);
  EXPECT_EQ(host_memory::available(from), int64_t(8000000) * 1024);  // no cgroup files
  dir.write("max", "max\n");
  dir.write("current", "5000\n");
  EXPECT_EQ(host_memory::available(from), int64_t(8000000) * 1024);
  dir.write("max", "1073741824\n");
  dir.write("current", "73741824\n");
  EXPECT_EQ(host_memory::available(from), int64_t(1000000000) + 1);
  dir.write("current", "2073741824\n");  // over its limit
  EXPECT_EQ(host_memory::available(from), 1);
  from.meminfo = dir.write("meminfo", "MemTotal: 16000000 kB\n");
  EXPECT_EQ(host_memory::available(from), 0);
  // This machine's own figures are read.
  EXPECT_GT(host_memory::meminfo_bytes("MemTotal:"), 0);
}

TEST(HostMemory, SizesAreWrittenAsPeopleReadThem) {
  EXPECT_EQ(host_memory::size_text(196608), "196608 bytes");
  EXPECT_EQ(host_memory::size_text(int64_t(96) << 20), "96.0 MiB");
  EXPECT_EQ(host_memory::size_text(int64_t(81255) << 20), "79.4 GiB");
}

}  // namespace
}  // namespace prism
