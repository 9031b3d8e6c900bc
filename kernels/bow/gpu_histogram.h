// The bag-of-words image path on the GPU: filter bank, visual words and word histogram of an 8-bit
// grey image, computing Model::histogram's function (filter_responses, visual_words, word_histogram).
//
// - Filter bank: one pass per distinct 1-D row kernel into float planes (shared by the terms that
//   use it: the Gaussian row serves the Gaussian and one LoG term), then per filter the column
//   passes summed into the pixel-major response image. BORDER_REFLECT_101 as on the CPU. The sums
//   run in another order than cv::sepFilter2D's, so responses agree to float rounding, not bits.
// - Words: the dictionary in shared memory; each thread evaluates sum (x - c)^2 per word with the
//   CPU path's sequence of separately rounded float operations, so equal responses give the same
//   word; ties go to the lower index.
// - Histogram: integer counts per pyramid cell (integer atomics: deterministic), weighted and
//   normalised on the host exactly as word_histogram does.
// Buffers are allocated for the largest image seen and reused; one stream per instance.
#pragma once
#include <opencv2/core.hpp>

#include <memory>
#include <vector>

#include "bow/filter_bank.h"

namespace prism::bow {

class GpuHistogrammer {
 public:
  // Throws gpu::CudaError without a usable GPU.
  GpuHistogrammer(const FilterBank& bank, const cv::Mat& dictionary, int levels);
  ~GpuHistogrammer();
  GpuHistogrammer(const GpuHistogrammer&) = delete;
  GpuHistogrammer& operator=(const GpuHistogrammer&) = delete;

  std::vector<float> histogram(const cv::Mat& grey8);
  // The intermediate results, downloaded (for tests): CV_32FC(filters) and CV_32SC1.
  cv::Mat responses(const cv::Mat& grey8);
  cv::Mat words(const cv::Mat& grey8);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::bow
