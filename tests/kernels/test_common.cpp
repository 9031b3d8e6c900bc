// Small shared helpers of kernels/common on the CPU: the reflect-101 border every CPU and CUDA
// filter uses (border.h) against OpenCV's own borderInterpolate.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include "common/border.h"

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

}  // namespace
}  // namespace prism
