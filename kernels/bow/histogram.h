// Bag-of-visual-words, stage 3: an image's visual words (the nearest dictionary entry of every
// pixel's filter responses) and their histogram, optionally over a spatial pyramid (Lazebnik,
// Schmid & Ponce, "Beyond Bags of Features", CVPR 2006).
#pragma once
#include <opencv2/core.hpp>

#include <vector>

namespace prism::bow {

// `responses`: CV_32FC(d) from filter_responses; `dictionary`: k x d CV_32F. Returns CV_32SC1 words.
cv::Mat visual_words(const cv::Mat& responses, const cv::Mat& dictionary);

// Histogram of `words` (CV_32SC1, values in [0, k)) over pyramid levels 0..levels: level l splits the
// image into 2^l x 2^l equal cells, each a k-bin histogram, weighted 2^-levels at level 0 and
// 2^(l - levels - 1) above; the concatenation is L1-normalised. levels = 0: the plain histogram.
// Length k (4^(levels+1) - 1) / 3.
std::vector<float> word_histogram(const cv::Mat& words, int k, int levels);
int histogram_length(int k, int levels);
// The weighted, normalised histogram from integer counts per (cell, word) in the same layout (the
// GPU path counts on the device and finishes here).
std::vector<float> histogram_from_counts(const int* counts, int k, int levels);

// A histogram of `from` pyramid levels re-weighted to `to` <= from levels, as word_histogram would
// have made it: each level's block unweighted, re-weighted and the whole re-normalised.
std::vector<float> coarser_pyramid(const float* h, int k, int from, int to);

}  // namespace prism::bow
