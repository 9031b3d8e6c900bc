#include "bow/histogram.h"

#include <stdexcept>
#include <string>

#include "bow/kmeans.h"

namespace prism::bow {

cv::Mat visual_words(const cv::Mat& responses, const cv::Mat& dictionary) {
  if (responses.empty() || responses.depth() != CV_32F)
    throw std::invalid_argument("visual_words: responses must be a non-empty CV_32F image");
  if (dictionary.cols != responses.channels())
    throw std::invalid_argument("visual_words: the dictionary has " + std::to_string(dictionary.cols) +
                                " dimensions, the responses " + std::to_string(responses.channels()));
  const cv::Mat rows = responses.isContinuous() ? responses : responses.clone();
  const cv::Mat points(rows.rows * rows.cols, rows.channels(), CV_32F, const_cast<uchar*>(rows.data));
  std::vector<int> labels;
  nearest_centers(points, dictionary, labels);
  cv::Mat words(responses.rows, responses.cols, CV_32SC1);
  std::copy(labels.begin(), labels.end(), words.ptr<int>());
  return words;
}

int histogram_length(int k, int levels) { return k * ((1 << (2 * (levels + 1))) - 1) / 3; }

namespace {
double level_weight(int l, int levels) { return l == 0 ? 1.0 / (1 << levels) : 1.0 / (1 << (levels - l + 1)); }
}  // namespace

std::vector<float> coarser_pyramid(const float* h, int k, int from, int to) {
  if (to < 0 || to > from) throw std::invalid_argument("coarser_pyramid: need 0 <= to <= from");
  std::vector<double> v(histogram_length(k, to));
  double total = 0;
  int offset = 0;
  for (int l = 0; l <= to; ++l) {
    const int n = (1 << (2 * l)) * k;
    const double scale = level_weight(l, to) / level_weight(l, from);
    for (int i = 0; i < n; ++i) total += v[offset + i] = h[offset + i] * scale;
    offset += n;
  }
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float(v[i] / total);
  return out;
}

std::vector<float> word_histogram(const cv::Mat& words, int k, int levels) {
  if (words.empty() || words.type() != CV_32SC1) throw std::invalid_argument("word_histogram: words must be CV_32SC1");
  if (k < 1 || levels < 0 || levels > 4) throw std::invalid_argument("word_histogram: need k >= 1 and levels in 0..4");
  std::vector<int> counts(histogram_length(k, levels), 0);
  int offset = 0;
  for (int l = 0; l <= levels; ++l) {
    const int cells = 1 << l;
    for (int y = 0; y < words.rows; ++y) {
      const int cy = y * cells / words.rows;
      const int* w = words.ptr<int>(y);
      for (int x = 0; x < words.cols; ++x) {
        if (w[x] < 0 || w[x] >= k)
          throw std::invalid_argument("word_histogram: word " + std::to_string(w[x]) + " out of range");
        const int cx = x * cells / words.cols;
        ++counts[offset + (cy * cells + cx) * k + w[x]];
      }
    }
    offset += cells * cells * k;
  }
  return histogram_from_counts(counts.data(), k, levels);
}

std::vector<float> histogram_from_counts(const int* counts, int k, int levels) {
  std::vector<double> h(histogram_length(k, levels));
  double total = 0;
  int offset = 0;
  for (int l = 0; l <= levels; ++l) {
    const int n = (1 << (2 * l)) * k;
    for (int i = 0; i < n; ++i) total += h[offset + i] = counts[offset + i] * level_weight(l, levels);
    offset += n;
  }
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = float(h[i] / total);
  return out;
}

}  // namespace prism::bow
