// Synthetic scenes for the bag-of-words tests: three classes a small model tells apart almost
// perfectly. Shared by the kernel tests and the bowclassify element tests.
#pragma once
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/durable_file.h"

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

// Rewrites every SVM weight of the model file at `path` (an SVM model: the weights are its last
// block, rows, cols, CV_64F, then the data) to `value`, with a fresh CRC-32: a crafted model that
// only the value checks can refuse.
inline void set_bow_svm_weights(const std::string& path, double value) {
  std::vector<uint8_t> bytes = read_file(path);
  const size_t end = bytes.size() - 4;
  for (size_t h = end - 12;; --h) {  // find the block header that makes the data end at the CRC
    int32_t head[3];
    std::memcpy(head, bytes.data() + h, sizeof head);
    if (head[2] == CV_64F && head[0] > 0 && head[1] > 0 && h + 12 + size_t(head[0]) * head[1] * 8 == end) {
      for (size_t at = h + 12; at < end; at += 8) std::memcpy(bytes.data() + at, &value, 8);
      const uint32_t crc = crc32(bytes.data(), end);
      std::memcpy(bytes.data() + end, &crc, 4);
      write_atomically(path + ".tmp", path, bytes);
      return;
    }
    if (h == 0) throw std::runtime_error(path + ": no SVM weights found");
  }
}

}  // namespace prism::test
