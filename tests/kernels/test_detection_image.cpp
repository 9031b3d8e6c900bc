// The detection image on the CPU (kernels/texture/detection_image.h) against OpenCV 4.6 itself:
// the shrink equal bit for bit to cv::resize(INTER_AREA) and the RGBA grey to
// cv::cvtColor(COLOR_RGBA2GRAY), over the shrinks the textureid element meets and random ones.
#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <random>
#include <stdexcept>
#include <vector>

#include "detection_cases.h"
#include "texture/detection_image.h"

namespace prism {
namespace {

TEST(DetectionImage, AreaShrinkEqualsOpenCvBitForBit) {
  std::mt19937 rng(std::random_device{}());
  const std::vector<test::ShrinkCase> cases = test::shrink_cases(rng, 40);
  int kind = 0, fast = 0;
  for (const test::ShrinkCase& c : cases) {
    // A view with a padded row pitch, as a pitched frame has.
    const cv::Mat wide = test::shrink_content(rng, c.src_width + 13, c.src_height, kind++);
    const cv::Mat src = wide(cv::Rect(0, 0, c.src_width, c.src_height));
    cv::Mat expected;
    cv::resize(src, expected, cv::Size(c.dst_width, c.dst_height), 0, 0, cv::INTER_AREA);
    const texture::AreaPlan plan = texture::make_area_plan(c.src_width, c.src_height, c.dst_width, c.dst_height);
    fast += plan.block_x > 0;
    cv::Mat ours(c.dst_height, c.dst_width, CV_8UC1, cv::Scalar(7));
    texture::area_resize(plan, src.data, src.step, ours.data, ours.step);
    ASSERT_EQ(cv::countNonZero(ours != expected), 0) << c.name() << ", content " << (kind - 1) % 4;
  }
  EXPECT_GE(fast, 2);  // 2048x1536 (2x2 blocks) and 3072x3072 (3x3) took OpenCV's integer path
}

TEST(DetectionImage, DetectionSizeIsTheFeatureExtractorsShrink) {
  double scale = 0;
  EXPECT_EQ(texture::detection_size(1920, 1080, 1024, &scale), cv::Size(1024, 576));
  EXPECT_DOUBLE_EQ(scale, 1.875);
  EXPECT_EQ(texture::detection_size(1080, 1920, 1024, &scale), cv::Size(576, 1024));
  EXPECT_EQ(texture::detection_size(3840, 2160, 1024, &scale), cv::Size(1024, 576));
  EXPECT_DOUBLE_EQ(scale, 3.75);
  EXPECT_EQ(texture::detection_size(1024, 700, 1024, &scale), cv::Size(1024, 700));
  EXPECT_EQ(scale, 1.0);
  EXPECT_EQ(texture::detection_size(5000, 4000, 0, &scale), cv::Size(5000, 4000));  // 0: every size kept
  EXPECT_EQ(scale, 1.0);
}

TEST(DetectionImage, AreaPlanRefusesAnythingButAShrink) {
  EXPECT_THROW(texture::make_area_plan(100, 100, 101, 50), std::invalid_argument);
  EXPECT_THROW(texture::make_area_plan(100, 100, 50, 0), std::invalid_argument);
  EXPECT_THROW(texture::make_area_plan(0, 100, 0, 50), std::invalid_argument);
  EXPECT_NO_THROW(texture::make_area_plan(100, 100, 100, 1));
}

// Every (r, g) pair with the extreme and middle blues, then random pixels, in a padded view.
TEST(DetectionImage, RgbaGreyEqualsCvtColorBitForBit) {
  std::mt19937 rng(std::random_device{}());
  const int blues[] = {0, 1, 127, 128, 254, 255};
  cv::Mat all(256 * 6, 256 + 3, CV_8UC4);
  for (int b = 0; b < 6; ++b)
    for (int r = 0; r < 256; ++r)
      for (int g = 0; g < 256 + 3; ++g)
        all.at<cv::Vec4b>(b * 256 + r, g) = {uchar(r), uchar(g & 255), uchar(blues[b]), 9};
  cv::Mat noise(301, 517, CV_8UC4);
  cv::theRNG().state = rng();
  cv::randu(noise, 0, 256);
  for (const cv::Mat& wide : {all, noise}) {
    const cv::Mat rgba = wide(cv::Rect(0, 0, wide.cols - 3, wide.rows));
    cv::Mat expected, ours(rgba.size(), CV_8UC1);
    cv::cvtColor(rgba, expected, cv::COLOR_RGBA2GRAY);
    texture::grey_from_rgba(rgba.data, rgba.step, rgba.cols, rgba.rows, ours.data, ours.step);
    EXPECT_EQ(cv::countNonZero(ours != expected), 0) << rgba.size();
  }
}

}  // namespace
}  // namespace prism
