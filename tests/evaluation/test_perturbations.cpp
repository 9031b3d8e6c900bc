// The eval's synthetic re-captures (evaluation/texture/perturbations.h): the darkphone and
// perspective families draw what docs/TEXTUREID.md says, and their images show it.
#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gst_setup.h"
#include "perturbations.h"

namespace prism {
namespace {

constexpr int kCaptures = 40;

// A 320x240 texture of mean grey about 128, or a flat grey.
cv::Mat scene(int flat = -1) {
  cv::Mat g(240, 320, CV_8U);
  if (flat >= 0) return g.setTo(flat);
  cv::theRNG().state = 12345;
  cv::randu(g, 0, 256);
  cv::GaussianBlur(g, g, cv::Size(0, 0), 1.5);
  return g;
}

eval::CaptureLog capture(const cv::Mat& g, const char* kind, int i, cv::Mat* out) {
  std::mt19937 rng(unsigned(1000 + i));
  eval::CaptureLog log;
  *out = eval::perturb(g, kind, rng, &log);
  return log;
}

// The centre half of a capture: inside the scene whatever the corner jitter (12% at most).
cv::Mat centre(const cv::Mat& m) { return m(cv::Rect(m.cols / 4, m.rows / 4, m.cols / 2, m.rows / 2)); }

// Mean absolute difference of horizontal neighbours across 8-pixel block edges over that within blocks.
double blockiness(const cv::Mat& m) {
  double across = 0, within = 0;
  int na = 0, nw = 0;
  for (int y = 0; y < m.rows; ++y)
    for (int x = 0; x + 1 < m.cols; ++x) {
      const double d = std::abs(int(m.at<uchar>(y, x + 1)) - int(m.at<uchar>(y, x)));
      if (x % 8 == 7)
        across += d, ++na;
      else
        within += d, ++nw;
    }
  return (across / na) / (within / nw);
}

// darkphone (issue 45): corner jitter, blur 0.3-1.5, gain 0.25-0.5, gamma 1.4-2.2, a black offset,
// sensor noise sigma 2-6, JPEG 50-85, a 30% occluder in half of them.
TEST(Perturbations, DarkPhoneIsDarkNoisyCompressedAndHalfOccluded) {
  init_gstreamer();
  const cv::Mat texture = scene(), flat = scene(160);
  int occluded = 0, dark = 0;
  for (int i = 0; i < kCaptures; ++i) {
    cv::Mat q;
    const eval::CaptureLog c = capture(texture, "darkphone", i, &q);
    ASSERT_EQ(q.size(), texture.size());
    ASSERT_EQ(q.type(), CV_8U);
    EXPECT_GE(c.gain, 0.25);
    EXPECT_LE(c.gain, 0.5);
    EXPECT_GE(c.gamma, 1.4);
    EXPECT_LE(c.gamma, 2.2);
    EXPECT_GE(c.black, 2);
    EXPECT_LE(c.black, 8);
    EXPECT_GE(c.noise_sigma, 2);
    EXPECT_LE(c.noise_sigma, 6);
    EXPECT_GE(c.blur_sigma, 0.3);
    EXPECT_LE(c.blur_sigma, 1.5);
    EXPECT_GE(c.jpeg_quality, 50);
    EXPECT_LE(c.jpeg_quality, 85);
    occluded += c.occluded;
    const double mean = cv::mean(q)[0];
    EXPECT_LT(mean, 64) << "capture " << i;
    dark += mean < 40;
    // The same draws on a flat grey 160: the centre's mean is the exposure 255 gain (160/255)^gamma + black
    // (noise and JPEG keep the mean), its spread the sensor noise (JPEG at quality 50-85 takes up to
    // 3/4 of it), in 8x8 blocks (JPEG's: neighbours differ more across a block edge than within).
    cv::Mat f;
    const eval::CaptureLog cf = capture(flat, "darkphone", i, &f);
    const double exposure = 255 * cf.gain * std::pow(160 / 255.0, cf.gamma) + cf.black;
    cv::Scalar m, sd;
    cv::meanStdDev(centre(f), m, sd);
    if (cf.occluded) continue;  // the occluder's own texture
    EXPECT_NEAR(m[0], exposure, 1.0) << "capture " << i;
    EXPECT_GT(sd[0], 0.25 * cf.noise_sigma) << "capture " << i;
    EXPECT_LT(sd[0], 1.1 * cf.noise_sigma) << "capture " << i;
    EXPECT_GT(blockiness(centre(f)), 1.25) << "capture " << i << ", quality " << cf.jpeg_quality;
  }
  EXPECT_GE(occluded, 12) << "of " << kCaptures << " (half, Binomial: 12-28 is 4.5 sigma)";
  EXPECT_LE(occluded, 28) << "of " << kCaptures;
  EXPECT_GE(dark, 3 * kCaptures / 4) << "captures with a mean grey under 40";
}

// perspective: the plane tilted 30-60 degrees, seen by a pinhole camera, kept whole in the frame.
TEST(Perturbations, PerspectiveTiltsThePlaneAndKeepsItInFrame) {
  const cv::Mat texture = scene();
  const double w = texture.cols, h = texture.rows;
  for (int i = 0; i < kCaptures; ++i) {
    cv::Mat q;
    const eval::CaptureLog c = capture(texture, "perspective", i, &q);
    ASSERT_EQ(q.size(), texture.size());
    EXPECT_GE(c.tilt_degrees, 30);
    EXPECT_LE(c.tilt_degrees, 60);
    ASSERT_EQ(c.quad.size(), 4u);
    float x0 = 1e9f, y0 = 1e9f, x1 = -1e9f, y1 = -1e9f;
    for (const cv::Point2f& p : c.quad)
      x0 = std::min(x0, p.x), y0 = std::min(y0, p.y), x1 = std::max(x1, p.x), y1 = std::max(y1, p.y);
    const cv::Rect2f box(x0, y0, x1 - x0, y1 - y0);
    EXPECT_GE(box.x, -0.01f);
    EXPECT_GE(box.y, -0.01f);
    EXPECT_LE(box.x + box.width, w + 0.01);
    EXPECT_LE(box.y + box.height, h + 0.01);
    // It fills the frame in one direction at least.
    EXPECT_TRUE(std::abs(box.width - w) < 0.01 || std::abs(box.height - h) < 0.01) << box;
    // Foreshortened: the plane covers at most cos 30 of the frame, and no parallelogram (perspective:
    // one pair of opposite sides at least is not parallel).
    const double area = cv::contourArea(c.quad);
    EXPECT_LE(area, std::cos(30 * CV_PI / 180) * w * h) << "tilt " << c.tilt_degrees;
    EXPECT_GE(area, 0.15 * w * h) << "tilt " << c.tilt_degrees;
    auto direction = [&](int a, int b) {
      const cv::Point2f d = c.quad[size_t(b)] - c.quad[size_t(a)];
      return std::atan2(d.y, d.x);
    };
    auto angle_between = [](double a, double b) {
      double d = std::fmod(std::abs(a - b), CV_PI);
      return std::min(d, CV_PI - d) * 180 / CV_PI;
    };
    EXPECT_GT(
        std::max(angle_between(direction(0, 1), direction(3, 2)), angle_between(direction(1, 2), direction(0, 3))), 2.0)
        << "tilt " << c.tilt_degrees;
    // Outside the quad, the background: a frame corner well outside it is one grey.
    for (const cv::Point corner :
         {cv::Point(1, 1), cv::Point(q.cols - 2, 1), cv::Point(q.cols - 2, q.rows - 2), cv::Point(1, q.rows - 2)}) {
      if (cv::pointPolygonTest(c.quad, cv::Point2f(corner), true) > -4) continue;
      cv::Scalar m, sd;
      cv::meanStdDev(q(cv::Rect(corner.x - 1, corner.y - 1, 3, 3)), m, sd);
      EXPECT_EQ(sd[0], 0) << "tilt " << c.tilt_degrees << " at " << corner;
    }
  }
}

}  // namespace
}  // namespace prism
