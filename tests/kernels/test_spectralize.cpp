// spectralize: window histograms against a brute-force count over OpenCV's replicated border;
// the CUDA path (test_spectralize_gpu.cpp) against this CPU path.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <random>

#include "prism_test.h"
#include "random_images.h"
#include "spectral/spectralize.h"

namespace prism {
namespace {

using spectral::SpectralizeParams;

using test::random_grey;

std::vector<float> brute_force(const cv::Mat& grey, const SpectralizeParams& p) {
  const int r = p.window / 2;
  cv::Mat padded;
  cv::copyMakeBorder(grey, padded, r, r, r, r, cv::BORDER_REPLICATE);
  std::vector<float> out(static_cast<size_t>(grey.total()) * p.bins, 0.f);
  for (int y = 0; y < grey.rows; ++y)
    for (int x = 0; x < grey.cols; ++x)
      for (int dy = 0; dy < p.window; ++dy)
        for (int dx = 0; dx < p.window; ++dx) {
          const int v = padded.at<uint8_t>(y + dy, x + dx);
          out[(static_cast<size_t>(y) * grey.cols + x) * p.bins + v * p.bins / 256] += 1.f;
        }
  return out;
}

TEST(Spectralize, WindowHistogramsMatchABruteForceCount) {
  for (auto [w, h, bins, window] : std::vector<std::array<int, 4>>{
           {37, 23, 11, 11}, {64, 48, 4, 3}, {5, 7, 32, 11}, {1, 1, 8, 5}, {40, 31, 16, 31}, {19, 20, 2, 1}}) {
    const cv::Mat g = random_grey(w, h, static_cast<uint32_t>(w * h + bins));
    const SpectralizeParams p{bins, window};
    std::vector<float> ours(static_cast<size_t>(w) * h * bins);
    spectral::spectralize_cpu(g.data, w, h, static_cast<int64_t>(g.step), p, ours.data());
    EXPECT_EQ(ours, brute_force(g, p)) << w << "x" << h << " bins " << bins << " window " << window;
  }
}

TEST(Spectralize, RefusesBadParameters) {
  EXPECT_THROW(spectral::validate({1, 11}), std::invalid_argument);
  EXPECT_THROW(spectral::validate({33, 11}), std::invalid_argument);
  EXPECT_THROW(spectral::validate({11, 10}), std::invalid_argument);
  EXPECT_THROW(spectral::validate({11, 33}), std::invalid_argument);
  EXPECT_NO_THROW(spectral::validate({11, 11}));
}

}  // namespace
}  // namespace prism
