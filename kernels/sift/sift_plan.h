// Host-side pieces shared by kernels/sift's CPU and CUDA paths: the pyramid's shape and blur
// kernels, and the selection of keypoints (duplicates out, strongest first, cut). Not public.
#pragma once
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

// Extrema found in the pyramid (coordinates of octave 0, octave field packed with the pyramid
// octave) to cv::SIFT's keypoints: duplicates removed (KeyPointsFilter::removeDuplicatedSorted),
// sorted strongest first in a total order, cut to `nfeatures` (0: all), and mapped back to the
// input image's coordinates (the first octave was upsampled).
std::vector<cv::KeyPoint> select_keypoints(std::vector<cv::KeyPoint> raw, int nfeatures);

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
