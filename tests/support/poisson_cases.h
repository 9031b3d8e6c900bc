// The seamless-clone cases (clone_cases.h) with the tests' assertion: within max difference 1 of
// cv::seamlessClone on at most 0.1% of the values. The gtest part of the test-support library.
#pragma once

#include <gtest/gtest.h>

#include "clone_cases.h"

namespace prism::test {

// The bar: max difference 1 and no more than 0.1% of values differing. The fraction is
// taken over the values inside the box (outside it both must equal dst exactly, so counting them
// would dilute the figure).
inline ::testing::AssertionResult matches_opencv(const CloneCase& c, const cv::Mat& ours, const cv::Mat& ref) {
  const CloneDiff whole = compare(ours, ref);
  const poisson::Box box =
      poisson::mask_box({c.mask.data, c.mask.cols, c.mask.rows, static_cast<int64_t>(c.mask.step), 1});
  const cv::Rect roi(c.p.x - box.width / 2, c.p.y - box.height / 2, box.width, box.height);
  CloneDiff inside = compare(ours(roi), ref(roi));
  if (whole.differing != inside.differing)
    return ::testing::AssertionFailure() << c.name << ": pixels outside the box changed (" << whole.str() << ")";
  if (inside.max_abs > 1 || inside.fraction() > 0.001)
    return ::testing::AssertionFailure() << c.name << ": " << inside.str();
  return ::testing::AssertionSuccess() << c.name << ": " << inside.str();
}

}  // namespace prism::test
