// Bag-of-visual-words, stage 4: classifiers over word histograms.
// - k-NN with the chi-squared distance 1/2 sum (a - b)^2 / (a + b) (bins with a + b = 0 skipped).
// - A linear SVM, one-vs-rest, L2-regularised hinge loss, trained by dual coordinate descent
//   (Hsieh et al., "A Dual Coordinate Descent Method for Large-scale Linear SVM", ICML 2008), with a
//   bias feature. Deterministic for a seed. On histograms it is best used after the Hellinger map
//   (element-wise square root): a linear SVM on sqrt(h) is a Hellinger-kernel SVM.
#pragma once
#include <opencv2/core.hpp>

#include <cstdint>
#include <vector>

namespace prism::bow {

double chi2_distance(const float* a, const float* b, int n);

struct Prediction {
  int label = -1;
  // k-NN: share of the votes; SVM: softmax of the decision values, or 0 when one of them is not
  // finite (weights so large that the dot product overflowed). Never NaN.
  double confidence = 0;
  // One per class, in class order: what the decision is made on, so that an application can rank
  // the other classes too. k-NN: each class's share of the K votes (the label has the most; between
  // classes with as many, the one whose voters are closer in total, then the lower). SVM: the
  // one-vs-rest decision values w.x + b (margins: positive says "this class" by that class's SVM;
  // the label is the largest, a tie to the lower class, NaN lowest; confidence is the softmax of
  // the label's). May hold non-finite values when the SVM's dot products overflow.
  std::vector<double> scores;
};

// `train`: N x D CV_32F histograms with `labels` in [0, classes). Votes of the K nearest; a tie
// goes to the class whose voters are closer in total, then to the lower class.
Prediction knn_chi2(const cv::Mat& train, const std::vector<int>& labels, int classes, const float* query, int K);

struct SvmParams {
  double C = 1.0;
  int epochs = 200;         // passes over the data at most
  double tolerance = 1e-3;  // stop when the largest projected-gradient violation falls below it
  uint64_t seed = 1;
};

class LinearSvm {
 public:
  LinearSvm() = default;
  // One binary SVM per class (that class against the rest).
  void train(const cv::Mat& x, const std::vector<int>& labels, int classes, const SvmParams& params = {});
  std::vector<double> decision(const float* x) const;  // one value per class
  // The class of the largest decision value (NaN ranks lowest; a tie goes to the lower class).
  Prediction predict(const float* x) const;
  // The model: classes x (D + 1) weights, the bias last.
  const cv::Mat& weights() const { return w_; }
  void set_weights(const cv::Mat& w) { w_ = w.clone(); }
  int classes() const { return w_.rows; }
  int dimensions() const { return w_.empty() ? 0 : w_.cols - 1; }

 private:
  cv::Mat w_;  // CV_64F
};

}  // namespace prism::bow
