// Host-side pieces shared by kernels/sift's CPU and CUDA paths: the pyramid's shape and blur
// kernels, and the selection of keypoints (duplicates out, strongest first, cut). Not public.
#pragma once
#include <cstdint>
#include <vector>

#include <opencv2/core.hpp>

#include "sift/sift.h"

namespace prism::sift::detail {

struct Pyramid {
  int octaves = 0;
  int layers = 0;              // nOctaveLayers: Gaussian levels per octave = layers + 3, DoG = layers + 2
  int threshold = 0;           // DoG extremum pre-filter, floor(0.5 x contrast / layers x 255)
  std::vector<cv::Size> size;  // per octave (octave 0 = the upsampled image)
  // Separable kernels (odd length): [0] blurs the upsampled input to sigma, [i] level i - 1 to i.
  std::vector<std::vector<float>> kernel;
};

// Throws std::invalid_argument for parameters cv::SIFT would refuse or that this port does not
// support (more than 5 octave layers).
Pyramid plan_pyramid(int width, int height, const Params& params);

// A keypoint as the orientation stage emits it: cv::KeyPoint's fields in the coordinates of
// octave 0 (the upsampled image), the octave field packed with the pyramid octave.
struct RawKeypoint {
  float x, y, size, angle, response;
  int32_t octave;
};

// The keypoints found in the pyramid to cv::SIFT's: duplicates removed
// (KeyPointsFilter::removeDuplicatedSorted), sorted strongest first in a total order, cut to
// `nfeatures` (0: all), and mapped back to the input image's coordinates.
std::vector<cv::KeyPoint> select_keypoints(const RawKeypoint* raw, size_t count, int nfeatures);

// The pyramid octave and layer a selected keypoint's descriptor is computed on, and its position
// and scale there.
struct DescriptorSource {
  int octave, layer;
  float x, y, scl, angle;
};
DescriptorSource descriptor_source(const cv::KeyPoint& kp);

// std::invalid_argument unless an 8-bit grey image of at least 8x8 (check_size: the size alone).
void check_grey(const cv::Mat& grey);
void check_size(int width, int height);

}  // namespace prism::sift::detail
