// Visual words on the GPU: the nearest dictionary word of each response vector as a matrix product
// on the tensor cores plus a fused argmin (the "matrix product plus a fused argmin"). Used
// by the per-frame histogram (gpu_histogram.cu) and by the k-means assignment (gpu_kmeans.cu).
//
// Per 32 vectors a warp holds s (x - mean) as FP16 A fragments and streams the dictionary's FP16 B
// fragments, -2 s (c - mean), from shared memory; mma.sync m16n8k16 starts from s^2 ||c - mean||^2
// and accumulates in FP32, so each accumulator is s^2 (||x - c||^2 - ||x - mean||^2) up to FP16
// rounding. s is a power of two that keeps the values in FP16's normal range.
// The word index is packed into the low mantissa bits, so one float min orders (distance, word).
// Two modes:
// - Fast (frames): each thread keeps the best of its even and of its odd columns per row (one LOP3
//   and one min per distance); the row's 8 buckets give a top-2, re-scored with the CPU path's exact
//   float sequence (t = x - c, s += t * t, no FMA). The word equals the CPU's nearest_centers unless
//   the true nearest word was outside that top-2: then the two are a near tie.
// - Exact (k-means): each thread keeps its true top-2 (three more ops per distance); the row's
//   top-2 is re-scored exactly, and is certified when every other word's FP16 distance, less a
//   bound on the FP16 rounding, the index packing and the FP32 accumulation (taken as at most two
//   roundings per mma.sync, with a margin), is still farther than the re-scored winner.
//   Vectors that fail the certificate (near ties; FP16 range exceeded) go to an exact scan of the
//   whole dictionary. The word and distance are then nearest_centers' own, bit for bit.
// Each vector may add 1 to its pyramid cell's count (integer atomics: deterministic).
// Needs an sm_80 or newer GPU (mma.sync); the caller checks.
#pragma once
#include <cuda_runtime_api.h>
#include <opencv2/core.hpp>

#include <cstdint>
#include <vector>

#include "common/device_array.h"

namespace prism::bow {

class GpuWords {
 public:
  // A dictionary of k words of d <= 64 dimensions, all work on `stream`. Throws
  // std::invalid_argument when it does not fit in shared memory.
  GpuWords(int k, int d, bool exact, cudaStream_t stream);
  GpuWords(const GpuWords&) = delete;
  GpuWords& operator=(const GpuWords&) = delete;

  // A k x d CV_32F dictionary, uploaded on the stream (the host matrix may change afterwards).
  void set_dictionary(const cv::Mat& dictionary);

  struct Outputs {
    int* words = nullptr;        // per vector (device), or null
    float* distances = nullptr;  // per vector (device): nearest_centers' float squared distance, or null
    int* counts = nullptr;       // [cell][word] at the finest pyramid level (device), or null
    int cells = 1;               // cells per side of that level
  };
  // Nearest word of the W x H vectors held as d planes in device memory (vector i's dimension f at
  // planes[f * plane_stride + i], i in row order over the W x H grid, which places the counts).
  void assign(const float* planes, int64_t plane_stride, int W, int H, const Outputs& out);

  // Exact mode: vectors left to the exact scan since construction (synchronises the stream).
  int64_t rescanned() const;

 private:
  int k_, d_, tiles_ = 0;
  bool exact_;
  cudaStream_t stream_;
  unsigned index_mask_ = 0;
  float scale_ = 1;         // power of two applied to the centred values before FP16
  float cmax_ = 0;          // max ||c - mean|| over the words
  bool screenable_ = true;  // 2 |c - mean| fits FP16
  size_t words_smem_ = 0, scan_smem_ = 0;
  int words_grid_ = 0, scan_grid_ = 0;
  gpu::DeviceArray<float> d_dictionary_, d_mean_;
  gpu::DeviceArray<uint2> d_frags_;
  gpu::DeviceArray<float2> d_norms_;
  gpu::DeviceArray<int> d_rescan_;  // exact mode: [0] this call's count, then the list; grown as needed
  gpu::DeviceArray<unsigned long long> d_rescanned_;  // exact mode
  std::vector<uint2> frags_;
  std::vector<float2> norms_;
  std::vector<float> mean_;
};

}  // namespace prism::bow
