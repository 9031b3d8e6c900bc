#include "bow/gpu_histogram.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "bow/histogram.h"
#include "bow/nearest_kernel.cuh"
#include "common/gpu.h"

namespace prism::bow {

namespace {

constexpr int kMaxTaps = 2048;  // all 1-D kernels of a bank (the default needs 4 x 136)
constexpr int kMaxFilters = 64;
constexpr int kMaxTerms = 2;
__constant__ float c_taps[kMaxTaps];

struct RowKernel {
  int offset, length;
};
struct Term {
  int plane, offset, length;  // row-pass plane, column kernel in c_taps
};
struct FilterTerms {
  int count;
  Term term[kMaxTerms];
};
struct BankTables {
  int planes, filters;
  RowKernel row[kMaxFilters * kMaxTerms];
  FilterTerms filter[kMaxFilters];
};

// BORDER_REFLECT_101 (gfedcb|abcdefgh|gfedcba), also for offsets longer than the image.
__device__ __forceinline__ int reflect101(int i, int n) {
  if (n == 1) return 0;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
  return i;
}

__global__ void to_float_kernel(const uint8_t* in, int n, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = float(in[i]) * (1.0f / 255.0f);
}

// plane p = the row (horizontal) pass of 1-D kernel p.
__global__ void row_pass_kernel(const float* in, int W, int H, BankTables t, float* planes) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, p = blockIdx.z;
  if (x >= W) return;
  const RowKernel k = t.row[p];
  const int r = k.length / 2;
  const float* row = in + static_cast<int64_t>(y) * W;
  float s = 0.f;
  for (int i = 0; i < k.length; ++i) s += c_taps[k.offset + i] * row[reflect101(x + i - r, W)];
  planes[(static_cast<int64_t>(p) * H + y) * W + x] = s;
}

// Every filter's column passes, summed, into the pixel-major responses.
__global__ void column_pass_kernel(const float* planes, int W, int H, BankTables t, float* responses) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x >= W) return;
  float* out = responses + (static_cast<int64_t>(y) * W + x) * t.filters;
  for (int f = 0; f < t.filters; ++f) {
    const FilterTerms ft = t.filter[f];
    float s = 0.f;
    for (int q = 0; q < ft.count; ++q) {
      const Term term = ft.term[q];
      const int r = term.length / 2;
      const float* plane = planes + static_cast<int64_t>(term.plane) * H * W + x;
      for (int j = 0; j < term.length; ++j) s += c_taps[term.offset + j] * plane[static_cast<int64_t>(reflect101(y + j - r, H)) * W];
    }
    out[f] = s;
  }
}

// Integer counts per (pyramid cell, word): order-independent, so deterministic.
__global__ void count_kernel(const int* words, int W, int H, int k, int levels, int* counts) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x >= W) return;
  const int w = words[static_cast<int64_t>(y) * W + x];
  int offset = 0;
  for (int l = 0; l <= levels; ++l) {
    const int cells = 1 << l;
    const int cell = (y * cells / H) * cells + x * cells / W;
    atomicAdd(&counts[offset + cell * k + w], 1);
    offset += cells * cells * k;
  }
}

}  // namespace

struct GpuHistogrammer::Impl {
  cudaStream_t stream = nullptr;
  BankTables tables{};
  int filters = 0, k = 0, levels = 0, length = 0;
  float* d_dictionary = nullptr;
  int* d_counts = nullptr;
  int capacity = 0;  // pixels
  uint8_t* d_grey = nullptr;
  float *d_in = nullptr, *d_planes = nullptr, *d_responses = nullptr;
  int* d_words = nullptr;
  std::vector<int> counts;

  ~Impl() {
    release();
    cudaFree(d_dictionary);
    cudaFree(d_counts);
    if (stream) cudaStreamDestroy(stream);
  }
  void release() {
    cudaFree(d_grey);
    cudaFree(d_in);
    cudaFree(d_planes);
    cudaFree(d_responses);
    cudaFree(d_words);
    d_grey = nullptr, d_in = d_planes = d_responses = nullptr, d_words = nullptr;
    capacity = 0;
  }
  void reserve(int pixels) {
    if (pixels <= capacity) return;
    release();
    d_grey = gpu::device_alloc<uint8_t>(pixels);
    d_in = gpu::device_alloc<float>(pixels);
    d_planes = gpu::device_alloc<float>(size_t(pixels) * tables.planes);
    d_responses = gpu::device_alloc<float>(size_t(pixels) * filters);
    d_words = gpu::device_alloc<int>(pixels);
    capacity = pixels;
  }

  // Upload, filter bank and words of one image (asynchronous on the stream).
  void run(const cv::Mat& grey8, bool words) {
    if (grey8.empty() || grey8.type() != CV_8UC1) throw std::invalid_argument("GpuHistogrammer: the image must be 8-bit grey");
    const int W = grey8.cols, H = grey8.rows, n = W * H;
    reserve(n);
    const cv::Mat g = grey8.isContinuous() ? grey8 : grey8.clone();
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_grey, g.data, n, cudaMemcpyHostToDevice, stream));
    to_float_kernel<<<(n + 255) / 256, 256, 0, stream>>>(d_grey, n, d_in);
    const dim3 block(128), rows_grid((W + 127) / 128, H, tables.planes), grid((W + 127) / 128, H);
    row_pass_kernel<<<rows_grid, block, 0, stream>>>(d_in, W, H, tables, d_planes);
    column_pass_kernel<<<grid, block, 0, stream>>>(d_planes, W, H, tables, d_responses);
    if (words) {
      const size_t smem = sizeof(float) * size_t(k) * filters;
      if (filters == 32) nearest_kernel<32, true><<<(n + 127) / 128, 128, smem, stream>>>(d_responses, n, filters, d_dictionary, k, d_words, nullptr);
      else nearest_kernel<kMaxFilters, false><<<(n + 127) / 128, 128, smem, stream>>>(d_responses, n, filters, d_dictionary, k, d_words, nullptr);
    }
    PRISM_CUDA_CHECK(cudaGetLastError());
  }
};

GpuHistogrammer::GpuHistogrammer(const FilterBank& bank, const cv::Mat& dictionary, int levels)
    : impl_(std::make_unique<Impl>()) {
  std::string why;
  if (!gpu::available(&why)) throw gpu::CudaError("bag-of-words on the GPU: " + why);
  Impl& m = *impl_;
  m.filters = bank.filters();
  m.k = dictionary.rows;
  m.levels = levels;
  m.length = histogram_length(m.k, levels);
  if (m.filters > kMaxFilters) throw std::invalid_argument("GpuHistogrammer: at most 64 filters");
  if (dictionary.type() != CV_32FC1 || dictionary.cols != m.filters || m.k < 1)
    throw std::invalid_argument("GpuHistogrammer: the dictionary must be k x " + std::to_string(m.filters) + " CV_32F");
  const size_t smem = sizeof(float) * size_t(m.k) * m.filters;
  int device = 0, smem_max = 0;
  PRISM_CUDA_CHECK(cudaGetDevice(&device));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (smem > size_t(smem_max))
    throw std::invalid_argument("GpuHistogrammer: a dictionary of " + std::to_string(m.k) + " x " + std::to_string(m.filters) +
                                " does not fit in shared memory");
  PRISM_CUDA_CHECK(cudaFuncSetAttribute(nearest_kernel<32, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  PRISM_CUDA_CHECK(cudaFuncSetAttribute(nearest_kernel<kMaxFilters, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));

  // The 1-D kernels: each distinct row kernel once (its plane), column kernels after them.
  std::vector<float> taps;
  std::vector<std::vector<float>> rows;
  auto add_taps = [&](const std::vector<float>& v) {
    const int off = int(taps.size());
    taps.insert(taps.end(), v.begin(), v.end());
    if (taps.size() > size_t(kMaxTaps)) throw std::invalid_argument("GpuHistogrammer: filter bank too large");
    return off;
  };
  m.tables.filters = m.filters;
  for (int f = 0; f < m.filters; ++f) {
    const auto& terms = bank.terms(f);
    if (terms.size() > size_t(kMaxTerms)) throw std::invalid_argument("GpuHistogrammer: a filter of more than 2 terms");
    m.tables.filter[f].count = int(terms.size());
    for (size_t q = 0; q < terms.size(); ++q) {
      auto it = std::find(rows.begin(), rows.end(), terms[q].x);
      int plane = int(it - rows.begin());
      if (it == rows.end()) {
        rows.push_back(terms[q].x);
        m.tables.row[plane] = {add_taps(terms[q].x), int(terms[q].x.size())};
      }
      m.tables.filter[f].term[q] = {plane, add_taps(terms[q].y), int(terms[q].y.size())};
    }
  }
  m.tables.planes = int(rows.size());
  PRISM_CUDA_CHECK(cudaMemcpyToSymbol(c_taps, taps.data(), taps.size() * sizeof(float)));
  PRISM_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  const cv::Mat dict = dictionary.isContinuous() ? dictionary : dictionary.clone();
  m.d_dictionary = gpu::device_alloc<float>(dict.total());
  PRISM_CUDA_CHECK(cudaMemcpy(m.d_dictionary, dict.ptr<float>(), dict.total() * sizeof(float), cudaMemcpyHostToDevice));
  m.d_counts = gpu::device_alloc<int>(m.length);
  m.counts.resize(m.length);
}

GpuHistogrammer::~GpuHistogrammer() = default;

std::vector<float> GpuHistogrammer::histogram(const cv::Mat& grey8) {
  Impl& m = *impl_;
  m.run(grey8, true);
  const int W = grey8.cols, H = grey8.rows;
  PRISM_CUDA_CHECK(cudaMemsetAsync(m.d_counts, 0, sizeof(int) * m.length, m.stream));
  count_kernel<<<dim3((W + 127) / 128, H), 128, 0, m.stream>>>(m.d_words, W, H, m.k, m.levels, m.d_counts);
  PRISM_CUDA_CHECK(cudaGetLastError());
  PRISM_CUDA_CHECK(cudaMemcpyAsync(m.counts.data(), m.d_counts, sizeof(int) * m.length, cudaMemcpyDeviceToHost, m.stream));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return histogram_from_counts(m.counts.data(), m.k, m.levels);
}

cv::Mat GpuHistogrammer::responses(const cv::Mat& grey8) {
  Impl& m = *impl_;
  m.run(grey8, false);
  cv::Mat out(grey8.rows, grey8.cols, CV_32FC(m.filters));
  PRISM_CUDA_CHECK(cudaMemcpyAsync(out.data, m.d_responses, out.total() * out.elemSize(), cudaMemcpyDeviceToHost, m.stream));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return out;
}

cv::Mat GpuHistogrammer::words(const cv::Mat& grey8) {
  Impl& m = *impl_;
  m.run(grey8, true);
  cv::Mat out(grey8.rows, grey8.cols, CV_32SC1);
  PRISM_CUDA_CHECK(cudaMemcpyAsync(out.data, m.d_words, out.total() * sizeof(int), cudaMemcpyDeviceToHost, m.stream));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return out;
}

}  // namespace prism::bow
