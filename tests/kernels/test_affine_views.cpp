// ASIFT's affine-simulated views (texture/affine_views.h): the view's matrix against the math written
// out by hand, the pixels against it (a blob drawn in the image lands where the matrix says), and the
// features put back in the image's pixels.
#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <cmath>
#include <random>

#include "texture/affine_views.h"

namespace prism {
namespace {

// A dark image with one Gaussian blob (sigma 3) at (x, y).
cv::Mat blob_image(cv::Size size, double x, double y) {
  cv::Mat m(size, CV_8U);
  for (int r = 0; r < size.height; ++r)
    for (int c = 0; c < size.width; ++c)
      m.at<uchar>(r, c) =
          cv::saturate_cast<uchar>(10 + 240 * std::exp(-((c - x) * (c - x) + (r - y) * (r - y)) / 18.0));
  return m;
}

cv::Point2d centroid_over(const cv::Mat& m, int floor) {
  double sw = 0, sx = 0, sy = 0;
  for (int r = 0; r < m.rows; ++r)
    for (int c = 0; c < m.cols; ++c) {
      const double w = std::max(0, int(m.at<uchar>(r, c)) - floor);
      sw += w, sx += w * c, sy += w * r;
    }
  return {sx / sw, sy / sw};
}

TEST(TextureAffineViews, MatrixIsTheRotationShiftAndSubsamplingWrittenOut) {
  // 100 x 60 at longitude 90, tilt 2: x' = y, y' = -x; the outline [-0.5, 99.5] x [-0.5, 59.5] turns
  // into [-0.5, 59.5] x [-99.5, 0.5], a 60 x 100 canvas shifted by (0, 99); x then halves about the
  // pixel edge: x'' = (x' + 0.5) / 2 - 0.5 on a 30 x 100 view.
  cv::Size canvas, view;
  const cv::Matx23d m = texture::affine_view_matrix({100, 60}, {2, 90}, &canvas, &view);
  EXPECT_EQ(canvas, cv::Size(60, 100));
  EXPECT_EQ(view, cv::Size(30, 100));
  const cv::Matx23d want(0, 0.5, -0.25, -1, 0, 99);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(m.val[i], want.val[i], 1e-12) << i;
  // Longitude 0, tilt sqrt(2) of 99 x 40: no rotation, x scaled by round(99 / sqrt 2) / 99 = 70 / 99.
  const cv::Matx23d m0 = texture::affine_view_matrix({99, 40}, {std::sqrt(2.0), 0}, &canvas, &view);
  EXPECT_EQ(view, cv::Size(70, 40));
  const double s = 70.0 / 99.0;
  const cv::Matx23d want0(s, 0, 0.5 * s - 0.5, 0, 1, 0);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(m0.val[i], want0.val[i], 1e-12) << i;
  // Tilt 1 at longitude 0 is the identity.
  EXPECT_EQ(texture::affine_view_matrix({64, 48}, {1, 0}), cv::Matx23d(1, 0, 0, 0, 1, 0));
  EXPECT_THROW(texture::affine_view_matrix({64, 48}, {0.5, 0}), std::invalid_argument);
}

TEST(TextureAffineViews, ABlobLandsWhereTheMatrixSays) {
  const cv::Size size(160, 120);
  for (const texture::AffineView& v : texture::default_affine_views())
    for (const cv::Point2d p : {cv::Point2d(40, 30), cv::Point2d(117, 85), cv::Point2d(80, 60)}) {
      const texture::SimulatedView sv = texture::simulate_view(blob_image(size, p.x, p.y), v);
      ASSERT_EQ(sv.image.size(), sv.valid.size());
      const cv::Point2d want(sv.to_view(0, 0) * p.x + sv.to_view(0, 1) * p.y + sv.to_view(0, 2),
                             sv.to_view(1, 0) * p.x + sv.to_view(1, 1) * p.y + sv.to_view(1, 2));
      const cv::Point2d got = centroid_over(sv.image, 40);
      EXPECT_NEAR(got.x, want.x, 0.35) << "tilt " << v.tilt << " longitude " << v.longitude << " at " << p;
      EXPECT_NEAR(got.y, want.y, 0.35) << "tilt " << v.tilt << " longitude " << v.longitude << " at " << p;
      // The view shows the image's area shrunk by the tilt, and the canvas around it is marked.
      EXPECT_NEAR(cv::countNonZero(sv.valid), size.area() / v.tilt, 0.03 * size.area());
    }
}

TEST(TextureAffineViews, FeaturesComeBackInTheImagesPixels) {
  // A blurred random texture: for every view, keypoints with their descriptors, each inside the image.
  std::mt19937 rng(7);
  cv::Mat noise(180, 240, CV_8U);
  for (int r = 0; r < noise.rows; ++r)
    for (int c = 0; c < noise.cols; ++c) noise.at<uchar>(r, c) = uchar(rng() % 256);
  cv::Mat grey;
  cv::GaussianBlur(noise, grey, {0, 0}, 2.0);
  cv::normalize(grey, grey, 0, 255, cv::NORM_MINMAX);
  texture::FeatureParams params;
  params.device = gpu::Device::kCpu;
  const texture::Features own = texture::extract_features(grey, params);
  // Tilt 1 at longitude 0 keeps the image's own features, less those within 8 px of its border.
  const texture::Features same = texture::extract_view_features(grey, {1, 0}, params);
  int inner = 0;
  for (const texture::Keypoint& k : own.keypoints) {
    const int x = int(std::lround(k.x)), y = int(std::lround(k.y));
    inner += x >= 8 && y >= 8 && x < grey.cols - 8 && y < grey.rows - 8;
  }
  ASSERT_EQ(same.count(), inner);
  EXPECT_EQ(same.width, grey.cols);
  const cv::Mat before = grey.clone();
  for (const texture::AffineView& v : texture::default_affine_views()) {
    const texture::SimulatedView sv = texture::simulate_view(grey, v);
    ASSERT_EQ(cv::norm(grey, before, cv::NORM_INF), 0.0) << "the image itself changed";
    const texture::Features f = texture::extract_view_features(grey, v, params);
    ASSERT_GT(f.count(), 20) << v.tilt << " " << v.longitude;
    EXPECT_EQ(f.width, grey.cols);
    EXPECT_EQ(f.height, grey.rows);
    EXPECT_EQ(f.descriptors.size(), size_t(f.count()) * match::kDim);
    for (const texture::Keypoint& k : f.keypoints) {
      EXPECT_GE(k.x, -0.5f);
      EXPECT_GE(k.y, -0.5f);
      EXPECT_LT(k.x, grey.cols - 0.5f);
      EXPECT_LT(k.y, grey.rows - 0.5f);
    }
  }
}

}  // namespace
}  // namespace prism
