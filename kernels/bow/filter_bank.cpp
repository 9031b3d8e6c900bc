#include "bow/filter_bank.h"

#include <opencv2/imgproc.hpp>

#include <cmath>
#include <stdexcept>
#include <string>

namespace prism::bow {

namespace {

std::vector<float> column_to_vector(const cv::Mat& k) {
  cv::Mat f;
  k.convertTo(f, CV_32F);
  return std::vector<float>(f.begin<float>(), f.end<float>());
}

}  // namespace

FilterBank::FilterBank(const FilterBankParams& params) : sizes_(params.sizes) {
  if (sizes_.empty()) throw std::invalid_argument("filter bank: no sizes");
  for (int s : sizes_) {
    if (s < 3 || s > 31 || s % 2 == 0)
      throw std::invalid_argument("filter bank: size " + std::to_string(s) + " is not an odd number in 3..31");
    const double sigma = 0.3 * ((s - 1) * 0.5 - 1) + 0.8;  // OpenCV's default for an s-tap Gaussian
    const std::vector<float> g = column_to_vector(cv::getGaussianKernel(s, sigma, CV_64F));
    std::vector<float> g2(s);
    double mean = 0;
    for (int i = 0; i < s; ++i) {
      const double x = i - (s - 1) / 2;
      g2[i] = float(g[i] * (x * x / (sigma * sigma * sigma * sigma) - 1.0 / (sigma * sigma)));
      mean += g2[i] / s;
    }
    for (float& v : g2) v = float(v - mean);  // zero sum: no response on flat regions
    cv::Mat dx_x, dx_y, dy_x, dy_y;
    cv::getDerivKernels(dx_x, dx_y, 1, 0, s, true, CV_32F);
    cv::getDerivKernels(dy_x, dy_y, 0, 1, s, true, CV_32F);
    filters_.push_back({{g, g}});
    filters_.push_back({{g2, g}, {g, g2}});
    filters_.push_back({{column_to_vector(dx_x), column_to_vector(dx_y)}});
    filters_.push_back({{column_to_vector(dy_x), column_to_vector(dy_y)}});
  }
}

cv::Mat FilterBank::dense(int f) const {
  const auto& t = terms(f);
  const int s = int(t.front().x.size());
  cv::Mat k = cv::Mat::zeros(s, s, CV_32F);
  for (const SeparableTerm& term : t)
    for (int r = 0; r < s; ++r)
      for (int c = 0; c < s; ++c) k.at<float>(r, c) += term.y[r] * term.x[c];
  return k;
}

cv::Mat filter_responses(const cv::Mat& grey, const FilterBank& bank) {
  if (grey.empty()) throw std::invalid_argument("filter_responses: empty image");
  cv::Mat g;
  if (grey.type() == CV_8UC1)
    grey.convertTo(g, CV_32F, 1.0 / 255.0);
  else if (grey.type() == CV_32FC1)
    g = grey;
  else
    throw std::invalid_argument("filter_responses: the image must be CV_8UC1 or CV_32FC1");
  std::vector<cv::Mat> planes(bank.filters());
  cv::parallel_for_(cv::Range(0, bank.filters()), [&](const cv::Range& r) {
    for (int f = r.start; f < r.end; ++f) {
      cv::Mat sum;
      for (const SeparableTerm& t : bank.terms(f)) {
        cv::Mat one;
        cv::sepFilter2D(g, one, CV_32F, cv::Mat(t.x), cv::Mat(t.y), cv::Point(-1, -1), 0, cv::BORDER_REFLECT_101);
        if (sum.empty())
          sum = one;
        else
          sum += one;
      }
      planes[f] = sum;
    }
  });
  cv::Mat out;
  cv::merge(planes, out);
  return out;
}

}  // namespace prism::bow
