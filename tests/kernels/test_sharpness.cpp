// textureid's min-sharpness measure (texture/sharpness.h): the variance of the Laplacian summed in
// 64-bit integers equals OpenCV 4.6's cv::Laplacian + cv::meanStdDev (the definition it replaces)
// bit for bit, on random images of every small shape (one-pixel sides, odd widths, rows with
// padding) and on real photos; its integer sums equal an independent brute-force Laplacian with
// its own mirror; bad images are refused by name.
#include <gtest/gtest.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cstdint>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>

#include "prism_test.h"
#include "test_env.h"
#include "texture/sharpness.h"

namespace prism {
namespace {

// The definition sharpness() had before it was written in integers (and the one OpenCV users use),
// on the image's own pixels: a header of its rows, as textureid wraps a frame, so that cv::Laplacian
// does not read a parent's pixels across the border of a view (it would without BORDER_ISOLATED).
double opencv_sharpness(const cv::Mat& view) {
  const cv::Mat grey(view.rows, view.cols, view.type(), view.data, view.step[0]);
  cv::Mat lap;
  cv::Laplacian(grey, lap, CV_32F);
  cv::Scalar mean, stddev;
  cv::meanStdDev(lap, mean, stddev);
  return stddev[0] * stddev[0];
}

// An independent Laplacian: every neighbour read through its own mirror (... 2 1 | 0 1 2 ... n-1 |
// n-2 ...; a one-pixel side mirrors onto itself), summed in 64 bits.
texture::LaplacianSums brute_force_sums(const cv::Mat& g) {
  auto mirror = [](int p, int n) { return n == 1 ? 0 : p < 0 ? -p : p >= n ? 2 * n - 2 - p : p; };
  texture::LaplacianSums s;
  for (int y = 0; y < g.rows; ++y)
    for (int x = 0; x < g.cols; ++x) {
      const int64_t l = int64_t(g.at<uint8_t>(mirror(y - 1, g.rows), x)) + g.at<uint8_t>(mirror(y + 1, g.rows), x) +
                        g.at<uint8_t>(y, mirror(x - 1, g.cols)) + g.at<uint8_t>(y, mirror(x + 1, g.cols)) -
                        4 * int64_t(g.at<uint8_t>(y, x));
      s.sum += l;
      s.squares += uint64_t(l * l);
      ++s.count;
    }
  return s;
}

// A random h x w image: uniform noise, a smooth ramp with a little noise, or a flat one, inside a
// wider and taller buffer half of the time (step > width, rows not contiguous).
cv::Mat random_image(std::mt19937& rng, int w, int h, int kind) {
  const bool padded = rng() % 2;
  cv::Mat buffer(h + (padded ? 3 : 0), w + (padded ? int(rng() % 29) + 1 : 0), CV_8UC1);
  cv::theRNG().state = rng();
  cv::randu(buffer, 0, 256);
  cv::Mat g = buffer(cv::Rect(padded ? 1 : 0, padded ? 2 : 0, w, h));
  if (kind == 1) {
    cv::Mat noise = g.clone();
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) g.at<uint8_t>(y, x) = uint8_t((x * 7 + y * 3) % 200 + noise.at<uint8_t>(y, x) % 8);
  } else if (kind == 2) {
    g.setTo(int(rng() % 256));
  }
  return g;
}

TEST(Sharpness, EqualsOpenCvsLaplacianVarianceBitForBit) {
  const unsigned seed = std::random_device{}();
  std::cout << "random images from seed " << seed << "\n";
  std::mt19937 rng(seed);
  const cv::Size fixed[] = {{1, 1}, {1, 7}, {9, 1}, {2, 2}, {3, 3}, {2, 5}, {641, 481}};
  for (int trial = 0; trial < 80; ++trial) {
    const cv::Size size =
        trial < 7 ? fixed[trial] : cv::Size((1 + int(rng() % 300)) | (trial % 2), 1 + int(rng() % 200));  // odd widths
    const cv::Mat g = random_image(rng, size.width, size.height, trial % 3);
    SCOPED_TRACE(std::to_string(size.width) + "x" + std::to_string(size.height) + " step " + std::to_string(g.step[0]) +
                 " kind " + std::to_string(trial % 3));
    const texture::LaplacianSums s = texture::laplacian_sums(g.data, g.step[0], g.cols, g.rows);
    const texture::LaplacianSums b = brute_force_sums(g);
    EXPECT_EQ(s.sum, b.sum);
    EXPECT_EQ(s.squares, b.squares);
    EXPECT_EQ(s.count, b.count);
    const double ours = texture::sharpness(g), theirs = opencv_sharpness(g);
    EXPECT_EQ(ours, theirs);
    // and a variance: the brute force's in long double, two-pass
    long double mean = (long double)b.sum / b.count, var = (long double)b.squares / b.count - mean * mean;
    EXPECT_NEAR(ours, double(var), 1e-9 * (1 + double(var)));
    if (trial % 3 == 2) {
      EXPECT_EQ(ours, 0.0);  // a flat image has no edges
    }
  }
}

TEST(Sharpness, EqualsOpenCvOnRealPhotosAndFallsWithBlur) {
  for (const char* name : {"fruits.jpg", "baboon.jpg", "box_in_scene.png", "butterfly.jpg"}) {
    const std::string path = test::data_dir() + "/images/" + name;
    PRISM_NEED_FILE(path);
    const cv::Mat grey = cv::imread(path, cv::IMREAD_GRAYSCALE);
    ASSERT_FALSE(grey.empty()) << path;
    const double sharp = texture::sharpness(grey);
    EXPECT_EQ(sharp, opencv_sharpness(grey)) << name;
    const texture::LaplacianSums s = texture::laplacian_sums(grey.data, grey.step[0], grey.cols, grey.rows);
    const texture::LaplacianSums b = brute_force_sums(grey);
    EXPECT_EQ(s.sum, b.sum) << name;
    EXPECT_EQ(s.squares, b.squares) << name;
    // an odd-width crop, not contiguous
    const cv::Mat crop = grey(cv::Rect(3, 5, (grey.cols - 10) | 1, grey.rows - 9));
    EXPECT_EQ(texture::sharpness(crop), opencv_sharpness(crop)) << name;
    cv::Mat blurred;
    cv::GaussianBlur(grey, blurred, cv::Size(0, 0), 3);
    EXPECT_LT(texture::sharpness(blurred) * 4, sharp) << name;
  }
}

TEST(Sharpness, BadImagesAreRefusedByName) {
  auto refused = [](auto&& f, const std::string& words) {
    try {
      f();
      ADD_FAILURE() << "accepted: expected '" << words << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused([] { texture::sharpness(cv::Mat()); }, "0x0 image");
  refused([] { texture::sharpness(cv::Mat(4, 5, CV_8UC3, cv::Scalar::all(1))); }, "5x4 image of type CV_8UC3");
  refused([] { texture::sharpness(cv::Mat(4, 5, CV_32F, cv::Scalar::all(1))); }, "CV_32FC1");
  const uint8_t pixels[6] = {};
  refused([&] { texture::laplacian_sums(pixels, 2, 3, 2); }, "3x2 image with a pitch of 2 bytes");
  refused([&] { texture::laplacian_sums(nullptr, 3, 3, 2); }, "laplacian_sums");
  EXPECT_EQ(texture::laplacian_variance({}), 0.0);
}

}  // namespace
}  // namespace prism
