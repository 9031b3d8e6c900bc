#include "bow/classifier.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace prism::bow {

double chi2_distance(const float* a, const float* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) {
    const double sum = double(a[i]) + b[i];
    if (sum > 0) {
      const double d = double(a[i]) - b[i];
      s += d * d / sum;
    }
  }
  return 0.5 * s;
}

Prediction knn_chi2(const cv::Mat& train, const std::vector<int>& labels, int classes, const float* query, int K) {
  if (train.empty() || train.type() != CV_32FC1 || int(labels.size()) != train.rows)
    throw std::invalid_argument("knn_chi2: train must be N x D CV_32F with N labels");
  if (K < 1 || classes < 1) throw std::invalid_argument("knn_chi2: need K >= 1 and classes >= 1");
  const int n = train.rows;
  std::vector<std::pair<double, int>> d(n);
  for (int i = 0; i < n; ++i) d[i] = {chi2_distance(train.ptr<float>(i), query, train.cols), i};
  const int k = std::min(K, n);
  std::partial_sort(d.begin(), d.begin() + k, d.end());
  std::vector<int> votes(classes, 0);
  std::vector<double> spread(classes, 0.0);
  for (int i = 0; i < k; ++i) {
    const int l = labels[d[i].second];
    if (l < 0 || l >= classes) throw std::invalid_argument("knn_chi2: label " + std::to_string(l) + " out of range");
    ++votes[l];
    spread[l] += d[i].first;
  }
  Prediction p;
  for (int c = 0; c < classes; ++c)
    if (p.label < 0 || votes[c] > votes[p.label] || (votes[c] == votes[p.label] && spread[c] < spread[p.label]))
      p.label = c;
  p.confidence = double(votes[p.label]) / k;
  p.scores.resize(classes);
  for (int c = 0; c < classes; ++c) p.scores[c] = double(votes[c]) / k;
  return p;
}

void LinearSvm::train(const cv::Mat& x, const std::vector<int>& labels, int classes, const SvmParams& params) {
  if (x.empty() || x.type() != CV_32FC1 || int(labels.size()) != x.rows)
    throw std::invalid_argument("LinearSvm: x must be N x D CV_32F with N labels");
  if (classes < 2) throw std::invalid_argument("LinearSvm: need at least 2 classes");
  const int n = x.rows, D = x.cols;
  w_ = cv::Mat::zeros(classes, D + 1, CV_64F);
  std::vector<double> qii(n);
  for (int i = 0; i < n; ++i) {
    const float* xi = x.ptr<float>(i);
    double s = 1.0;  // the bias feature
    for (int j = 0; j < D; ++j) s += double(xi[j]) * xi[j];
    qii[i] = s;
  }
  cv::parallel_for_(cv::Range(0, classes), [&](const cv::Range& range) {
    for (int c = range.start; c < range.end; ++c) {
      double* w = w_.ptr<double>(c);
      std::vector<double> alpha(n, 0.0);
      std::vector<int> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::mt19937_64 rng(params.seed + uint64_t(c));
      for (int epoch = 0; epoch < params.epochs; ++epoch) {
        std::shuffle(order.begin(), order.end(), rng);
        double max_violation = 0;
        for (int i : order) {
          const float* xi = x.ptr<float>(i);
          const double y = labels[i] == c ? 1.0 : -1.0;
          double wx = w[D];
          for (int j = 0; j < D; ++j) wx += w[j] * xi[j];
          const double g = y * wx - 1.0;  // gradient of the dual in alpha_i
          double pg = g;                  // projected onto 0 <= alpha <= C
          if (alpha[i] <= 0)
            pg = std::min(g, 0.0);
          else if (alpha[i] >= params.C)
            pg = std::max(g, 0.0);
          max_violation = std::max(max_violation, std::fabs(pg));
          if (pg == 0) continue;
          const double a = std::clamp(alpha[i] - g / qii[i], 0.0, params.C);
          const double step = (a - alpha[i]) * y;
          alpha[i] = a;
          for (int j = 0; j < D; ++j) w[j] += step * xi[j];
          w[D] += step;
        }
        if (max_violation < params.tolerance) break;
      }
    }
  });
}

std::vector<double> LinearSvm::decision(const float* x) const {
  if (w_.empty()) throw std::logic_error("LinearSvm: not trained");
  const int D = w_.cols - 1;
  std::vector<double> out(w_.rows);
  for (int c = 0; c < w_.rows; ++c) {
    const double* w = w_.ptr<double>(c);
    double s = w[D];
    for (int j = 0; j < D; ++j) s += w[j] * x[j];
    out[c] = s;
  }
  return out;
}

Prediction LinearSvm::predict(const float* x) const {
  Prediction p;
  p.scores = decision(x);
  const std::vector<double>& d = p.scores;
  p.label = 0;  // the largest value, NaN below everything, a tie to the lower class
  for (int c = 1; c < int(d.size()); ++c)
    if (d[c] > d[p.label] || (std::isnan(d[p.label]) && !std::isnan(d[c]))) p.label = c;
  // Finite but huge weights overflow the dot products to +-inf, or NaN from inf - inf: then the
  // softmax is undefined (NaN) and the values rank nothing reliably, so the confidence is 0.
  if (!std::all_of(d.begin(), d.end(), [](double v) { return std::isfinite(v); })) return p;
  double z = 0;
  for (double v : d) z += std::exp(v - d[p.label]);
  p.confidence = 1.0 / z;
  return p;
}

}  // namespace prism::bow
