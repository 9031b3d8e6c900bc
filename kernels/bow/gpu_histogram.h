// The bag-of-words image path on the GPU: filter bank, visual words and word histogram of an 8-bit
// grey image, computing Model::histogram's function (filter_responses, visual_words, word_histogram).
// Two kernels per image and one small download:
// - Filter bank (one block per 32 x 64 output tile): the tile and a 15-pixel border (BORDER_REFLECT_101,
//   as on the CPU) are read once as floats into shared memory; per filter size, the four 1-D row
//   kernels (Gaussian g, its second derivative g'', Sobel's derivative d and smoothing m) run over the
//   tile's rows into shared memory, then the five column passes give that size's four responses
//   (G = g|g, LoG = g''|g + g|g'', Sobel x = d|m, Sobel y = m|d), written as float planes. Each thread
//   slides a run of outputs (8 in the row pass, 16 in the column pass) over 8 taps per step; one
//   looped body serves every size (taps zero-padded to a multiple of 8). The sums run in another
//   order than cv::sepFilter2D's, so responses agree to float rounding, not bits.
// - Words and counts: GpuWords (gpu_words.h) in its fast mode, tensor cores with an exact re-score
//   of the FP16 top-2: the word equals the CPU's nearest_centers on the same responses except at
//   near ties. Each pixel adds 1 to its finest pyramid cell's count (integer atomics:
//   deterministic); coarser levels are summed on the host.
// Buffers are allocated for the largest image seen and reused; one stream per instance. Needs an
// sm_80 or newer GPU (mma.sync).
#pragma once
#include <opencv2/core.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "bow/filter_bank.h"

namespace prism::bow {

class GpuHistogrammer {
 public:
  // Throws gpu::CudaError without a usable sm_80+ GPU, std::invalid_argument for a bank or
  // dictionary the kernels cannot hold.
  GpuHistogrammer(const FilterBank& bank, const cv::Mat& dictionary, int levels);
  ~GpuHistogrammer();
  GpuHistogrammer(const GpuHistogrammer&) = delete;
  GpuHistogrammer& operator=(const GpuHistogrammer&) = delete;

  // `grey8`: CV_8UC1 in host memory, any row step (one 2-D copy uploads it).
  std::vector<float> histogram(const cv::Mat& grey8);
  // An 8-bit grey image already in device memory (`pitch` bytes per row), e.g. a CUDA frame's Y plane.
  std::vector<float> histogram_device(const uint8_t* grey, size_t pitch, int width, int height);
  // The intermediate results, downloaded (for tests): CV_32FC(filters) and CV_32SC1.
  cv::Mat responses(const cv::Mat& grey8);
  cv::Mat words(const cv::Mat& grey8);
  // Milliseconds of the last image's filter-bank and words kernels (CUDA events; for benchmarks).
  void last_stage_ms(float* filters, float* words) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::bow
