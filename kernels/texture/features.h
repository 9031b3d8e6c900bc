// Texture features: SIFT keypoints (OpenCV's cv::SIFT, Lowe 2004), the strongest kMaxFeatures per
// image, with RootSIFT descriptors in FP16 (match/match.h) and each keypoint's geometry for the
// geometric verification.
#pragma once
#include <cstdint>
#include <vector>

#include <opencv2/core.hpp>

#include "match/match.h"

namespace prism::texture {

struct Keypoint {
  float x = 0, y = 0;  // pixel coordinates in the image given to extract_features
  float size = 0, angle = 0, response = 0;
  int32_t octave = 0;
};

struct Features {
  int width = 0, height = 0;          // the image's size
  std::vector<Keypoint> keypoints;    // strongest first
  std::vector<uint16_t> descriptors;  // [count][match::kDim] RootSIFT, FP16
  int count() const { return int(keypoints.size()); }
};

struct FeatureParams {
  int max_features = match::kSlot;  // the strongest by SIFT response; at most match::kSlot
  // Images whose longer side exceeds this are downscaled for detection (keypoints are reported in
  // the original image's coordinates); 0 keeps every size.
  int max_side = 1024;
};

// Features of an 8-bit image with 1, 3 (BGR) or 4 (BGRA) channels. Throws std::invalid_argument on
// an empty image or another type.
Features extract_features(const cv::Mat& image, const FeatureParams& params = {});

// Variance of the Laplacian of an 8-bit grey image: a cheap sharpness measure (blurred or defocused
// frames score low).
// `scratch` (optional) holds the Laplacian between calls, so a video element allocates it once.
double sharpness(const cv::Mat& grey, cv::Mat* scratch = nullptr);

}  // namespace prism::texture
