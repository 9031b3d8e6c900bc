#include "bow/gpu_histogram.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "bow/gpu_words.h"
#include "bow/histogram.h"
#include "common/border.h"
#include "common/device_array.h"
#include "common/gpu.h"

namespace prism::bow {

namespace {

// ---- Filter bank -------------------------------------------------------------------------------

constexpr int kMaxRadius = 15;           // 31 taps, the largest filter size
constexpr int kMaxTaps = 32;             // taps padded with zeros to a multiple of 8
constexpr int kMaxSizes = 16;            // 64 filters
constexpr int kTileW = 32, kTileH = 64;  // output pixels per block
constexpr int kRun = 8;                  // outputs per thread along the filter's direction, and taps per step
constexpr int kColumnRun = 16;           // the column pass's run: 4 planes are read per step, so a longer run
                                         // keeps it under the shared-memory bandwidth
constexpr int kInW = kTileW + 2 * kMaxRadius, kInH = kTileH + 2 * kMaxRadius;
constexpr int kInPitch = kInW + 1;     // 63, odd: the row pass walks rows across lanes, so rows start in distinct banks
constexpr int kRowPitch = kTileW + 1;  // 33: likewise for the row-pass planes
// Shared memory: the input tile, then the 4 row-pass planes, then slack. The zero taps of a size's
// last step read up to 7 samples past a row (into the next row or plane) and 7 rows past the last
// plane (into the slack); all of it holds finite values, so those products add 0.
constexpr int kSlack = kRun * kRowPitch;  // (the column pass's last row read: 15 - R + 48 + 2R + 22 = 85 + R)
constexpr int kBankThreads = 128;
constexpr size_t kBankSmem =
    sizeof(float) * (kInH * kInPitch + 4 * kInH * kRowPitch + kSlack);  // 74 KB: 3 blocks per SM

enum Kernel1D { kGauss, kGauss2, kDeriv, kSmooth };

// Each size's 1-D kernels, tap by tap as (g, g'', d, m), padded with zero taps to a multiple of 8.
struct alignas(16) BankTaps {
  float tap[kMaxSizes][kMaxTaps][4];
  int radius[kMaxSizes];
  int sizes;
};

// out[v] += taps[j].<kernel> * window[v + j] for 8 taps and 8 outputs (the caller picks the kernel).
template <int N, class Tap>
__device__ __forceinline__ void slide8(float (&out)[N], const float (&window)[N + kRun - 1], const float4 (&taps)[kRun],
                                       Tap tap) {
#pragma unroll
  for (int j = 0; j < kRun; ++j)
#pragma unroll
    for (int v = 0; v < N; ++v) out[v] = fmaf(tap(taps[j]), window[v + j], out[v]);
}

// Responses as planes: out[f * W * H + y * W + x]. Per size: the row pass of the four 1-D kernels
// over the tile's rows and border into shared memory, then the five column passes. One loop body
// serves every size (8 taps per step; the zero taps of the last step cost at most 7 FMAs per tap
// row): fully unrolled code per size ran out of the instruction cache.
__global__ void __launch_bounds__(kBankThreads) filter_bank_kernel(const uint8_t* grey, size_t pitch, int W, int H,
                                                                   const __grid_constant__ BankTaps t, float* out) {
  extern __shared__ float bank_smem[];
  float* in = bank_smem;
  float* rows = in + kInH * kInPitch;  // [kernel][row][column]
  const int x0 = blockIdx.x * kTileW, y0 = blockIdx.y * kTileH;
  for (int i = threadIdx.x; i < kInH * kInPitch; i += blockDim.x) {
    const int ty = i / kInPitch, tx = i % kInPitch;
    float v = 0.f;  // the padding columns stay 0 (read by zero taps only)
    if (tx < kInW) {
      const int gy = reflect101(y0 - kMaxRadius + ty, H), gx = reflect101(x0 - kMaxRadius + tx, W);
      v = float(grey[static_cast<int64_t>(gy) * pitch + gx]) * (1.0f / 255.0f);
    }
    in[i] = v;
  }
  for (int i = threadIdx.x; i < 4 * kInH * kRowPitch + kSlack; i += blockDim.x) rows[i] = 0.f;  // finite everywhere
  __syncthreads();
  const int64_t plane = static_cast<int64_t>(W) * H;
  for (int si = 0; si < t.sizes; ++si) {
    const int R = t.radius[si], steps = (2 * R + kRun) / kRun;     // ceil((2R + 1) / 8)
    const float4* k = reinterpret_cast<const float4*>(t.tap[si]);  // uniform: constant-bank loads
    // Row pass over tile rows kMaxRadius - R .. kMaxRadius + kTileH + R - 1; lanes take consecutive rows.
    const int row_count = kTileH + 2 * R, segments = kTileW / kRun;
    for (int task = threadIdx.x; task < row_count * segments; task += blockDim.x) {
      const int row = kMaxRadius - R + task % row_count, seg = task / row_count;
      const float* src = in + row * kInPitch + kMaxRadius - R + seg * kRun;
      float acc[4][kRun] = {};
      for (int step = 0; step < steps; ++step) {
        float window[2 * kRun - 1];
        float4 k8[kRun];
#pragma unroll
        for (int i = 0; i < 2 * kRun - 1; ++i) window[i] = src[step * kRun + i];
#pragma unroll
        for (int j = 0; j < kRun; ++j) k8[j] = k[step * kRun + j];
        slide8(acc[kGauss], window, k8, [](float4 c) { return c.x; });
        slide8(acc[kGauss2], window, k8, [](float4 c) { return c.y; });
        slide8(acc[kDeriv], window, k8, [](float4 c) { return c.z; });
        slide8(acc[kSmooth], window, k8, [](float4 c) { return c.w; });
      }
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int v = 0; v < kRun; ++v) rows[(q * kInH + row) * kRowPitch + seg * kRun + v] = acc[q][v];
    }
    __syncthreads();
    // Column passes (G = g|g, LoG = g''|g + g|g'', Sobel x = d|m, Sobel y = m|d); lanes take
    // consecutive columns, each thread a run of 16 rows.
    for (int task = threadIdx.x; task < kTileW * (kTileH / kColumnRun); task += blockDim.x) {
      const int col = task % kTileW, group = task / kTileW;
      float g[kColumnRun] = {}, log[kColumnRun] = {}, sx[kColumnRun] = {}, sy[kColumnRun] = {};
      const float* src = rows + (kMaxRadius - R + group * kColumnRun) * kRowPitch + col;
      for (int step = 0; step < steps; ++step) {
        float4 k8[kRun];
#pragma unroll
        for (int j = 0; j < kRun; ++j) k8[j] = k[step * kRun + j];
        float window[kColumnRun + kRun - 1];
        auto load = [&](int q) {
#pragma unroll
          for (int i = 0; i < kColumnRun + kRun - 1; ++i) window[i] = src[(q * kInH + step * kRun + i) * kRowPitch];
        };
        load(kGauss);
        slide8(g, window, k8, [](float4 c) { return c.x; });
        slide8(log, window, k8, [](float4 c) { return c.y; });
        load(kGauss2);
        slide8(log, window, k8, [](float4 c) { return c.x; });
        load(kDeriv);
        slide8(sx, window, k8, [](float4 c) { return c.w; });
        load(kSmooth);
        slide8(sy, window, k8, [](float4 c) { return c.z; });
      }
      const int x = x0 + col;
#pragma unroll
      for (int v = 0; v < kColumnRun; ++v) {
        const int y = y0 + group * kColumnRun + v;
        if (x < W && y < H) {
          float* o = out + 4 * si * plane + static_cast<int64_t>(y) * W + x;
          o[0] = g[v];
          o[plane] = log[v];
          o[2 * plane] = sx[v];
          o[3 * plane] = sy[v];
        }
      }
    }
    __syncthreads();
  }
}

// The 1-D kernels of each size, checked against the bank's terms (filter 4s + kind: G = g|g,
// LoG = g''|g + g|g'', Sobel x = d|m, Sobel y = m|d; row kernel | column kernel).
BankTaps bank_taps(const FilterBank& bank) {
  const int sizes = int(bank.sizes().size());
  if (bank.filters() != 4 * sizes || sizes > kMaxSizes)
    throw std::invalid_argument("GpuHistogrammer: the bank must have 4 filters per size and at most 16 sizes");
  BankTaps t{};
  t.sizes = sizes;
  for (int si = 0; si < sizes; ++si) {
    const auto &G = bank.terms(4 * si), &L = bank.terms(4 * si + 1), &X = bank.terms(4 * si + 2),
               &Y = bank.terms(4 * si + 3);
    const bool shaped = G.size() == 1 && L.size() == 2 && X.size() == 1 && Y.size() == 1 && G[0].x == G[0].y &&
                        L[0].y == G[0].x && L[1].x == G[0].x && L[1].y == L[0].x && X[0].x == Y[0].y &&
                        X[0].y == Y[0].x;
    const int taps = int(G[0].x.size()), radius = taps / 2;
    if (!shaped || taps % 2 == 0 || radius < 1 || radius > kMaxRadius)
      throw std::invalid_argument("GpuHistogrammer: filter size " + std::to_string(taps) +
                                  " is not of the bank's form");
    const std::vector<float>* kernels[4] = {&G[0].x, &L[0].x, &X[0].x, &X[0].y};  // g, g'', d, m
    for (int q = 0; q < 4; ++q) {
      if (int(kernels[q]->size()) != taps)
        throw std::invalid_argument("GpuHistogrammer: 1-D kernels of unequal length");
      for (int j = 0; j < taps; ++j) t.tap[si][j][q] = (*kernels[q])[j];
    }
    t.radius[si] = radius;
  }
  return t;
}

}  // namespace

struct GpuHistogrammer::Impl {
  gpu::Stream stream;   // declared first: destroyed after everything that works on it
  gpu::Event marks[3];  // timing: the filter bank's and the words' times
  BankTaps taps{};
  std::unique_ptr<GpuWords> words;
  int filters = 0, k = 0, levels = 0;
  gpu::DeviceArray<int> d_counts;
  int64_t capacity = 0;  // pixels that d_grey, d_planes and d_words all hold
  gpu::DeviceArray<uint8_t> d_grey;
  gpu::DeviceArray<float> d_planes;
  gpu::DeviceArray<int> d_words;
  size_t fine_size = 0;               // ints of the finest level's counts
  gpu::PinnedArray<int> fine_counts;  // pinned: its download takes no staging buffer (which pageable copies
                                      // of the same context, e.g. cudaupload's, would hold for a whole frame)
  std::vector<int> counts;

  void reserve(int64_t pixels) {
    if (pixels <= capacity) return;
    capacity = 0;  // until all three hold `pixels` (an allocation may throw between them)
    d_grey.reset(), d_planes.reset(), d_words.reset();  // the old ones go before the new ones are allocated
    d_grey.resize(pixels);
    d_planes.resize(size_t(pixels) * filters);
    d_words.resize(pixels);
    capacity = pixels;
  }
  static void check_size(int W, int H) {
    if (W < 1 || H < 1) throw std::invalid_argument("GpuHistogrammer: empty image");
  }
  const uint8_t* upload(const cv::Mat& grey8) {
    if (grey8.empty() || grey8.type() != CV_8UC1)
      throw std::invalid_argument("GpuHistogrammer: the image must be 8-bit grey");
    reserve(int64_t(grey8.cols) * grey8.rows);
    PRISM_CUDA_CHECK(cudaMemcpy2DAsync(d_grey.data(), grey8.cols, grey8.data, grey8.step, grey8.cols, grey8.rows,
                                       cudaMemcpyHostToDevice, stream));
    return d_grey.data();
  }

  // Filter bank, and words (into d_words when `keep_words`) with counts (into d_counts when `count`).
  void run(const uint8_t* grey, size_t pitch, int W, int H, bool find_words, bool keep_words, bool count) {
    check_size(W, H);
    reserve(int64_t(W) * H);
    PRISM_CUDA_CHECK(cudaEventRecord(marks[0], stream));
    const dim3 tiles_grid((W + kTileW - 1) / kTileW, (H + kTileH - 1) / kTileH);
    filter_bank_kernel<<<tiles_grid, kBankThreads, kBankSmem, stream>>>(grey, pitch, W, H, taps, d_planes.data());
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cudaEventRecord(marks[1], stream));
    if (find_words) {
      if (count) PRISM_CUDA_CHECK(cudaMemsetAsync(d_counts.data(), 0, sizeof(int) * fine_size, stream));
      GpuWords::Outputs out;
      out.words = keep_words ? d_words.data() : nullptr;
      out.counts = count ? d_counts.data() : nullptr;
      out.cells = 1 << levels;
      words->assign(d_planes.data(), int64_t(W) * H, W, H, out);
    }
    PRISM_CUDA_CHECK(cudaEventRecord(marks[2], stream));
  }

  std::vector<float> histogram(const uint8_t* grey, size_t pitch, int W, int H) {
    run(grey, pitch, W, H, true, false, true);
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(fine_counts.data(), d_counts.data(), sizeof(int) * fine_size, cudaMemcpyDeviceToHost, stream));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
    // Coarser levels: a cell at level l is the sum of its 4^(levels - l) cells at the finest level
    // (floor(y 2^l / H) = floor(y 2^levels / H) >> (levels - l)).
    std::fill(counts.begin(), counts.end(), 0);
    const int fine = 1 << levels;
    int offset = 0;
    for (int l = 0; l <= levels; ++l) {
      const int cells = 1 << l, shift = levels - l;
      for (int cy = 0; cy < fine; ++cy)
        for (int cx = 0; cx < fine; ++cx) {
          const int* from = fine_counts.data() + (cy * fine + cx) * k;
          int* to = counts.data() + offset + ((cy >> shift) * cells + (cx >> shift)) * k;
          for (int w = 0; w < k; ++w) to[w] += from[w];
        }
      offset += cells * cells * k;
    }
    return histogram_from_counts(counts.data(), k, levels);
  }
};

GpuHistogrammer::GpuHistogrammer(const FilterBank& bank, const cv::Mat& dictionary, int levels)
    : impl_(std::make_unique<Impl>()) {
  std::string why;
  if (!gpu::available(&why)) throw gpu::CudaError("bag-of-words on the GPU: " + why);
  int device = 0, major = 0;
  PRISM_CUDA_CHECK(cudaGetDevice(&device));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) throw gpu::CudaError("bag-of-words on the GPU: needs an sm_80 or newer GPU (mma.sync); use the CPU");
  Impl& m = *impl_;
  m.filters = bank.filters();
  m.k = dictionary.rows;
  m.levels = levels;
  if (levels < 0 || levels > 4) throw std::invalid_argument("GpuHistogrammer: pyramid levels must be 0..4");
  if (dictionary.type() != CV_32FC1 || dictionary.cols != m.filters || m.k < 1)
    throw std::invalid_argument("GpuHistogrammer: the dictionary must be k x " + std::to_string(m.filters) + " CV_32F");
  m.taps = bank_taps(bank);
  PRISM_CUDA_CHECK(
      cudaFuncSetAttribute(filter_bank_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kBankSmem)));

  m.stream = gpu::Stream::create();
  for (gpu::Event& e : m.marks) e = gpu::Event::create(cudaEventDefault);
  m.words = std::make_unique<GpuWords>(m.k, m.filters, false, m.stream);
  m.words->set_dictionary(dictionary);
  m.fine_size = (size_t(1) << (2 * levels)) * m.k;
  m.fine_counts.resize(m.fine_size);
  m.counts.resize(histogram_length(m.k, levels));
  m.d_counts.resize(m.fine_size);
}

GpuHistogrammer::~GpuHistogrammer() = default;

std::vector<float> GpuHistogrammer::histogram(const cv::Mat& grey8) {
  Impl& m = *impl_;
  const uint8_t* grey = m.upload(grey8);
  return m.histogram(grey, size_t(grey8.cols), grey8.cols, grey8.rows);
}

std::vector<float> GpuHistogrammer::histogram_device(const uint8_t* grey, size_t pitch, int width, int height) {
  if (!grey || pitch < size_t(std::max(width, 0))) throw std::invalid_argument("GpuHistogrammer: bad device image");
  return impl_->histogram(grey, pitch, width, height);
}

cv::Mat GpuHistogrammer::responses(const cv::Mat& grey8) {
  Impl& m = *impl_;
  const uint8_t* grey = m.upload(grey8);
  m.run(grey, size_t(grey8.cols), grey8.cols, grey8.rows, false, false, false);
  cv::Mat planes(m.filters, int(grey8.total()), CV_32F), pixels;
  PRISM_CUDA_CHECK(cudaMemcpyAsync(planes.data, m.d_planes.data(), planes.total() * sizeof(float),
                                   cudaMemcpyDeviceToHost, m.stream));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  cv::transpose(planes, pixels);  // pixel-major, as filter_responses
  return pixels.reshape(m.filters, grey8.rows).clone();
}

cv::Mat GpuHistogrammer::words(const cv::Mat& grey8) {
  Impl& m = *impl_;
  const uint8_t* grey = m.upload(grey8);
  m.run(grey, size_t(grey8.cols), grey8.cols, grey8.rows, true, true, false);
  cv::Mat out(grey8.rows, grey8.cols, CV_32SC1);
  PRISM_CUDA_CHECK(
      cudaMemcpyAsync(out.data, m.d_words.data(), out.total() * sizeof(int), cudaMemcpyDeviceToHost, m.stream));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return out;
}

void GpuHistogrammer::last_stage_ms(float* filters, float* words) const {
  const Impl& m = *impl_;
  PRISM_CUDA_CHECK(cudaEventSynchronize(m.marks[2]));
  PRISM_CUDA_CHECK(cudaEventElapsedTime(filters, m.marks[0], m.marks[1]));
  PRISM_CUDA_CHECK(cudaEventElapsedTime(words, m.marks[1], m.marks[2]));
}

}  // namespace prism::bow
