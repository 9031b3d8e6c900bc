// Synthetic scenes for the bag-of-words tests: three classes a small model tells apart almost
// perfectly. Shared by the kernel tests and the bowclassify element tests.
#pragma once
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>
#include <random>

namespace prism::test {

// A grey scene of class `kind`: 0 horizontal stripes, 1 vertical stripes, 2 smooth blobs, with random
// frequency and phase; Gaussian noise of `noise_sigma` grey levels added when it is positive.
inline cv::Mat bow_scene(std::mt19937& rng, int kind, int width, int height, double noise_sigma) {
  std::uniform_real_distribution<double> u(0, 1);
  cv::Mat img(height, width, CV_8UC1);
  const double f = 0.25 + 0.25 * u(rng), ph = 6.28 * u(rng);
  if (kind == 2) {
    cv::randu(img, 0, 256);
    cv::GaussianBlur(img, img, cv::Size(0, 0), 3.0);
    cv::normalize(img, img, 0, 255, cv::NORM_MINMAX);
  } else {
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; ++x)
        img.at<uchar>(y, x) = cv::saturate_cast<uchar>(128 + 100 * std::sin(f * (kind == 0 ? y : x) + ph));
  }
  if (noise_sigma > 0) {
    cv::Mat noise(img.size(), CV_8SC1);
    cv::randn(noise, 0, noise_sigma);
    cv::add(img, noise, img, cv::noArray(), CV_8U);
  }
  return img;
}

}  // namespace prism::test
