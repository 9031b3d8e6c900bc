// Bag-of-visual-words scene recognition, stage 1: the filter bank. Every pixel of a grey image (values
// in [0, 1]) becomes a vector of filter responses: for each size s, a Gaussian, a Laplacian of
// Gaussian, a horizontal and a vertical Sobel derivative, all s x s. The default 8 sizes 3..31 give
// the 32 filters of the reference system (../shared/FACTS.md, "bowclassify").
//
// Every filter is separable or a sum of two separable terms, so it is applied as 1-D passes (the
// "separable-filter trick" that cuts the bank's work about 7.6x):
// - Gaussian: g x g, with g = cv::getGaussianKernel(s, sigma(s)) and OpenCV's default
//   sigma(s) = 0.3 ((s - 1) / 2 - 1) + 0.8;
// - LoG: g'' x g + g x g'', with g'' the second derivative of the same sampled Gaussian, its mean
//   removed so that flat regions give 0;
// - Sobel x / y: cv::getDerivKernels(1, 0, s, normalize) and (0, 1) - the derivative and smoothing
//   kernels OpenCV's Sobel uses at that aperture, normalised so that the scales are comparable.
// Borders are BORDER_REFLECT_101 (OpenCV's default).
#pragma once
#include <opencv2/core.hpp>

#include <vector>

namespace prism::bow {

constexpr int kFilterKinds = 4;  // Gaussian, LoG, Sobel x, Sobel y (the response order within a size)

struct FilterBankParams {
  std::vector<int> sizes = {3, 7, 11, 15, 19, 23, 27, 31};  // odd, 3..31
};

// One separable term: response += column (vertical) pass of `y` over the row (horizontal) pass of `x`.
struct SeparableTerm {
  std::vector<float> x, y;
};

class FilterBank {
 public:
  explicit FilterBank(const FilterBankParams& params = {});  // std::invalid_argument on a bad size
  int filters() const { return int(filters_.size()); }
  const std::vector<int>& sizes() const { return sizes_; }
  // The terms of filter f (one, or two for a LoG); filter f = kFilterKinds * size index + kind.
  const std::vector<SeparableTerm>& terms(int f) const { return filters_.at(f); }
  // The dense s x s kernel of filter f (for tests and pictures).
  cv::Mat dense(int f) const;

 private:
  std::vector<int> sizes_;
  std::vector<std::vector<SeparableTerm>> filters_;
};

// Responses of `grey` (CV_8UC1, or CV_32FC1 in [0, 1]): a CV_32FC(filters) image, pixel-major.
// CPU path (cv::sepFilter2D per term).
cv::Mat filter_responses(const cv::Mat& grey, const FilterBank& bank);

}  // namespace prism::bow
