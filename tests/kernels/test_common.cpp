// Small shared helpers of kernels/common on the CPU: the reflect-101 border every CPU and CUDA
// filter uses (border.h) against OpenCV's own borderInterpolate, and the stopwatch (stopwatch.h).
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <chrono>

#include "common/border.h"
#include "common/stopwatch.h"

namespace prism {
namespace {

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

}  // namespace
}  // namespace prism
