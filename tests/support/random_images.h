// Random test images shared by the CPU and GPU kernel tests.
#pragma once
#include <opencv2/core.hpp>

#include <cstdint>

namespace prism::test {

// w x h grey levels, uniform over 0..255, reproducible from the seed.
inline cv::Mat random_grey(int w, int h, uint32_t seed) {
  cv::Mat m(h, w, CV_8UC1);
  cv::RNG rng(seed);
  rng.fill(m, cv::RNG::UNIFORM, 0, 256);
  return m;
}

}  // namespace prism::test
