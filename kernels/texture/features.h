// Texture features: SIFT keypoints (OpenCV's cv::SIFT, Lowe 2004), the strongest kMaxFeatures per
// image, with RootSIFT descriptors in 8 bits (match/match.h: COLMAP's round(512 x), what the gallery
// stores and the index matches) and each keypoint's geometry for the geometric verification.
#pragma once
#include <cstdint>
#include <vector>

#include <opencv2/core.hpp>

#include "match/match.h"
#include "texture/normalise.h"

namespace prism::texture {

struct Keypoint {
  float x = 0, y = 0;  // pixel coordinates in the image given to extract_features
  float size = 0, angle = 0, response = 0;
  int32_t octave = 0;
};

struct Features {
  int width = 0, height = 0;         // the image's size
  std::vector<Keypoint> keypoints;   // strongest first
  std::vector<uint8_t> descriptors;  // [count][match::kDim] RootSIFT, 8-bit (match::rootsift_u8)
  // The same RootSIFT in FP16 (match::rootsift), only when FeatureParams::keep_fp16 asked for it:
  // `prism texture eval` compares 8-bit against FP16 matching. Never stored in a gallery.
  std::vector<uint16_t> descriptors_fp16;
  // The same RootSIFT in float (match::rootsift_float), only when FeatureParams::keep_fp32 asked:
  // the FP32 reference the eval compares both precisions' ratio-test decisions against.
  std::vector<float> descriptors_fp32;
  int count() const { return int(keypoints.size()); }
};

struct FeatureParams {
  int max_features = match::kSlot;  // the strongest by SIFT response; at most match::kSlot
  // Images whose longer side exceeds this are downscaled for detection (keypoints are reported in
  // the original image's coordinates); 0 keeps every size.
  int max_side = 1024;
  // The contrast normalisation applied to the grey image after the shrink and before SIFT
  // (normalise.h): a gallery's entries and its queries must use the same one, the gallery's
  // (Gallery::normalisation). None by default.
  Normalisation normalisation{};
  bool keep_fp16 = false;  // also fill Features::descriptors_fp16
  bool keep_fp32 = false;  // also fill Features::descriptors_fp32
};

// Features of an 8-bit image with 1, 3 (BGR) or 4 (BGRA) channels. Throws std::invalid_argument on
// an empty image or another type.
Features extract_features(const cv::Mat& image, const FeatureParams& params = {});

// Variance of the Laplacian of an 8-bit grey image: a cheap sharpness measure (blurred or defocused
// frames score low).
// `scratch` (optional) holds the Laplacian between calls, so a video element allocates it once.
double sharpness(const cv::Mat& grey, cv::Mat* scratch = nullptr);

}  // namespace prism::texture
