// Fresh random textures for the texture-identification tests and benchmarks: smoothed Gaussian
// noise at two scales (blob-rich, like wood, stone or cork), and random mild homographies.
#pragma once
#include <opencv2/imgproc.hpp>

#include <random>
#include <string>
#include <vector>

#include "texture/features.h"

namespace prism::test {

inline cv::Mat random_texture(std::mt19937& rng, int w = 320, int h = 240) {
  cv::Mat coarse(h, w, CV_32F), fine(h, w, CV_32F), out;
  cv::theRNG().state = rng();
  cv::randn(coarse, 0, 1);
  cv::randn(fine, 0, 1);
  cv::GaussianBlur(coarse, coarse, cv::Size(0, 0), 6);
  cv::GaussianBlur(fine, fine, cv::Size(0, 0), 1.5);
  cv::normalize(coarse * 3 + fine, out, 0, 255, cv::NORM_MINMAX, CV_8U);
  return out;
}

inline cv::Matx33d random_homography(std::mt19937& rng, int w, int h) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<cv::Point2f> src{{0, 0}, {float(w), 0}, {float(w), float(h)}, {0, float(h)}}, dst;
  for (const auto& p : src) dst.emplace_back(float(p.x + u(rng) * 0.08 * w), float(p.y + u(rng) * 0.08 * h));
  const cv::Mat m = cv::getPerspectiveTransform(src, dst);
  return cv::Matx33d(m.ptr<double>());
}

// A photo of `texture`: warped by random_homography (edges reflected), with Gaussian sensor noise
// of sigma 4 grey levels.
inline cv::Mat noisy_capture(const cv::Mat& texture, std::mt19937& rng) {
  cv::Mat out, noise(texture.size(), CV_16S), wide;
  cv::warpPerspective(texture, out, cv::Mat(random_homography(rng, texture.cols, texture.rows)), texture.size(),
                      cv::INTER_LINEAR, cv::BORDER_REFLECT);
  cv::theRNG().state = rng();
  cv::randn(noise, 0, 4);
  out.convertTo(wide, CV_16S);
  wide += noise;
  wide.convertTo(out, CV_8U);
  return out;
}

// "" when `a` and `b` are the same features bit for bit (size, every keypoint field, the 8-bit
// descriptors), else the first difference.
inline std::string features_difference(const texture::Features& a, const texture::Features& b) {
  if (a.width != b.width || a.height != b.height) return "image size";
  if (a.count() != b.count()) return "count " + std::to_string(a.count()) + " vs " + std::to_string(b.count());
  for (int i = 0; i < a.count(); ++i) {
    const texture::Keypoint &p = a.keypoints[i], &q = b.keypoints[i];
    if (p.x != q.x || p.y != q.y || p.size != q.size || p.angle != q.angle || p.response != q.response ||
        p.octave != q.octave)
      return "keypoint " + std::to_string(i);
  }
  if (a.descriptors != b.descriptors) return "descriptors";
  return "";
}

}  // namespace prism::test
