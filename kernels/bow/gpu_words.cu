#include "bow/gpu_words.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/gpu.h"
#include "common/mma.cuh"

namespace prism::bow {

namespace {

constexpr int kWordWarps = 8, kWordThreads = 32 * kWordWarps;
constexpr int kChunk = 32 * kWordWarps;  // vectors per block step: 32 per warp (two m16 tiles)
constexpr int kTilesPerStep = 4;         // tiles of 8 words per loop step
constexpr int kXsPitch = kChunk + 4;     // the A-fragment gathers fall in distinct banks
constexpr float kFp16Limit = 65000.f;    // below FP16's largest finite value, 65504

struct WordsArgs {
  const float* planes;
  int64_t plane, n;  // plane stride, W * H
  int W, H, d, k, tiles;
  unsigned index_mask;      // low mantissa bits that carry the word index
  const uint2* frags;       // B fragments: [tile][k step][lane], halves of -2 (c - mean)
  const float2* norms;      // ||c - mean||^2: [tile][lane % 4], 1e30 for padding words
  const float* dictionary;  // k x d floats, for the exact re-scoring
  const float* mean;        // d floats
  int cells;                // of the finest pyramid level, per side
  int* counts;              // [cell][word], finest level; null: none
  int* words;               // per vector; null: none
  float* distances;         // per vector; null: none
  // Exact mode: the certificate's inputs and the list of vectors it leaves to the exact scan.
  float scale, inv_scale;  // a power of two: the FP16 values are scale (x - mean), -2 scale (c - mean)
  float cmax;              // max ||c - mean||
  float pack_error;        // relative change of a float by the index bits, with a factor 2 to spare
  bool screenable;         // 2 |c - mean| fits FP16
  int* rescan;             // [0]: count, then vector indices
};

__device__ __forceinline__ uint32_t pack_halves(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &h, sizeof u);
  return u;
}

// The word index in the low mantissa bits: one float min/max then orders (distance, index) pairs
// up to a relative 2^-(23 - bits) of the distance, which the exact re-scoring absorbs.
__device__ __forceinline__ float with_index(float v, int index, unsigned mask) {
  return __int_as_float((__float_as_int(v) & ~mask) | index);
}

// nearest_centers' distance: t = x - c, s += t * t, each rounded on its own (no FMA), in dimension order.
__device__ __forceinline__ float exact_distance(const float* xs, int pitch, const float* centre, int d) {
  float s = 0.f;
  if ((d & 3) == 0) {
    const float4* c4p = reinterpret_cast<const float4*>(centre);
    for (int j = 0; j < d; j += 4) {
      const float4 c4 = __ldg(c4p + j / 4);
      const float c[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float diff = __fsub_rn(xs[(j + e) * pitch], c[e]);
        s = __fadd_rn(s, __fmul_rn(diff, diff));
      }
    }
  } else {
    for (int j = 0; j < d; ++j) {
      const float diff = __fsub_rn(xs[j * pitch], __ldg(centre + j));
      s = __fadd_rn(s, __fmul_rn(diff, diff));
    }
  }
  return s;
}

template <int KSteps, bool kExact>
__global__ void __launch_bounds__(kWordThreads) words_kernel(const WordsArgs a) {
  constexpr int kDims = 16 * KSteps;
  constexpr int kPerVector = kExact ? 3 : 2;  // candidates (and the certificate's floor) per vector
  extern __shared__ uint4 words_smem[];
  uint2* frags = reinterpret_cast<uint2*>(words_smem);
  float2* norms = reinterpret_cast<float2*>(frags + a.tiles * KSteps * 32);
  float* xs = reinterpret_cast<float*>(norms + a.tiles * 4);  // [dimension][vector of the chunk]
  float* mean = xs + kDims * kXsPitch;
  int* candidates = reinterpret_cast<int*>(mean + kDims);  // [warp][vector][kPerVector]
  for (int i = threadIdx.x; i < a.tiles * KSteps * 32; i += blockDim.x) frags[i] = a.frags[i];
  for (int i = threadIdx.x; i < a.tiles * 4; i += blockDim.x) norms[i] = a.norms[i];
  for (int i = threadIdx.x; i < kDims; i += blockDim.x) mean[i] = i < a.d ? a.mean[i] : 0.f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, q = lane & 3, r = lane >> 2;
  int* warp_candidates = candidates + warp * 32 * kPerVector;
  // (Staging the next chunk with cp.async during this one's work measured no faster: three blocks
  // per SM already cover the loads.)
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kChunk; base < a.n;
       base += static_cast<int64_t>(gridDim.x) * kChunk) {
    __syncthreads();  // the previous chunk's vectors are no longer read
    const int64_t mine = base + threadIdx.x;
    for (int f = 0; f < kDims; ++f)
      xs[f * kXsPitch + threadIdx.x] = f < a.d && mine < a.n ? a.planes[f * a.plane + mine] : 0.f;
    __syncthreads();
    uint32_t A[2][KSteps][4];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < KSteps; ++h) {
        const int p0 = warp * 32 + m * 16 + r, p1 = p0 + 8, k0 = h * 16 + 2 * q;
        auto x = [&](int dim, int p) { return (xs[dim * kXsPitch + p] - mean[dim]) * a.scale; };
        A[m][h][0] = pack_halves(x(k0, p0), x(k0 + 1, p0));
        A[m][h][1] = pack_halves(x(k0, p1), x(k0 + 1, p1));
        A[m][h][2] = pack_halves(x(k0 + 8, p0), x(k0 + 9, p0));
        A[m][h][3] = pack_halves(x(k0 + 8, p1), x(k0 + 9, p1));
      }
    // Per row: fast mode, the best (distance, word) among the thread's even and among its odd
    // columns (one LOP3 and one min per distance; the row's 8 buckets give its top-2 below, which
    // loses the second-nearest when it shares the nearest's bucket); exact mode, the thread's top-2.
    float best[2][2][2];  // [m tile][row r, r + 8][even, odd column | first, second]
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) best[m][h][0] = best[m][h][1] = FLT_MAX;
    auto keep = [&](float(&b)[2], float v, int column) {
      if constexpr (kExact) {
        const float t = fmaxf(b[0], v);
        b[0] = fminf(b[0], v);
        b[1] = fminf(b[1], t);
      } else {
        b[column] = fminf(b[column], v);
      }
    };
    // kTilesPerStep tiles of 8 words per step (a.tiles is a multiple), so that the tiles' mma.sync
    // and min chains overlap.
    for (int t = 0; t < a.tiles; t += kTilesPerStep) {
      float acc[kTilesPerStep][2][4];  // [tile][m tile][fragment]
      uint2 b[kTilesPerStep][KSteps];
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        const float2 cn = norms[(t + u) * 4 + q];
#pragma unroll
        for (int m = 0; m < 2; ++m) acc[u][m][0] = acc[u][m][2] = cn.x, acc[u][m][1] = acc[u][m][3] = cn.y;
#pragma unroll
        for (int h = 0; h < KSteps; ++h) b[u][h] = frags[((t + u) * KSteps + h) * 32 + lane];
      }
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u)
#pragma unroll
        for (int h = 0; h < KSteps; ++h) {
          gpu::mma_16816(acc[u][0], A[0][h], b[u][h].x, b[u][h].y);
          gpu::mma_16816(acc[u][1], A[1][h], b[u][h].x, b[u][h].y);
        }
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        const int word = (t + u) * 8 + 2 * q;
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          keep(best[m][0], with_index(acc[u][m][0], word, a.index_mask), 0);
          keep(best[m][0], with_index(acc[u][m][1], word + 1, a.index_mask), 1);
          keep(best[m][1], with_index(acc[u][m][2], word, a.index_mask), 0);
          keep(best[m][1], with_index(acc[u][m][3], word + 1, a.index_mask), 1);
        }
      }
    }
    // The four lanes of a row merge their top-2; lane q = 0 hands each row's two words to its
    // vector's lane. Exact mode also hands over the floor under every other word: per lane, its
    // best unless that is one of the two candidates, then its second (what the lane kept below it).
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float own0 = fminf(best[m][h][0], best[m][h][1]), own1 = fmaxf(best[m][h][0], best[m][h][1]);
        float tp[2] = {own0, own1};
#pragma unroll
        for (int mask = 1; mask <= 2; mask <<= 1) {
          const float o0 = __shfl_xor_sync(0xFFFFFFFFu, tp[0], mask), o1 = __shfl_xor_sync(0xFFFFFFFFu, tp[1], mask);
          tp[1] = fminf(fmaxf(tp[0], o0), fminf(tp[1], o1));
          tp[0] = fminf(tp[0], o0);
        }
        float others = 0.f;  // the floor under the non-candidates
        if constexpr (kExact) {
          others = own0 == tp[0] || own0 == tp[1] ? own1 : own0;
          others = fminf(others, __shfl_xor_sync(0xFFFFFFFFu, others, 1));
          others = fminf(others, __shfl_xor_sync(0xFFFFFFFFu, others, 2));
        }
        if (q == 0) {
          int* to = warp_candidates + kPerVector * (m * 16 + h * 8 + r);
          to[0] = __float_as_int(tp[0]) & a.index_mask;
          to[1] = __float_as_int(tp[1]) & a.index_mask;
          if constexpr (kExact) to[2] = __float_as_int(others);
        }
      }
    __syncwarp();
    const int vec = warp * 32 + lane;
    const int64_t p = base + vec;
    if (p < a.n) {
      // Re-score both candidates exactly as nearest_centers does on the CPU (ties: lower index).
      int best_w = -1;
      float best_d = INFINITY;
      for (int c = 0; c < 2; ++c) {
        const int w = warp_candidates[kPerVector * lane + c];
        if (w >= a.k) continue;
        const float s = exact_distance(xs + vec, kXsPitch, a.dictionary + static_cast<int64_t>(w) * a.d, a.d);
        if (s < best_d || (s == best_d && w < best_w)) best_d = s, best_w = w;
      }
      bool done = true;
      if constexpr (kExact) {
        // Certificate. Every other word c has FP16 value >= floor (in units of scale^2), so
        // (packing error aside) ||x - c||^2 >= floor / scale^2 + ||x - mean||^2 - err, where err
        // bounds the FP16 rounding of (x - mean) and (c - mean) (2^-11 relative each, 2^-25 / scale
        // absolute below FP16's normal range), the norm's float rounding and the FP32 accumulation
        // (KSteps + 1 roundings of 2^-22 at most). The float sums of the CPU lie within
        // (d + 3) 2^-24 of the real distances.
        double xn2 = 0;
        float xinf = 0.f;
        for (int j = 0; j < a.d; ++j) {
          const float v = xs[j * kXsPitch + vec] - mean[j];
          xn2 += double(v) * v;
          xinf = fmaxf(xinf, fabsf(v));
        }
        const double xn = sqrt(xn2), c = a.cmax;
        const double err = 1.96e-3 * xn * c + 6.0e-8 * a.inv_scale * sqrt(double(a.d)) * (xn + c) + 2.0e-7 * c * c +
                           (KSteps + 1) * 4.8e-7 * (c * c + 2.002 * xn * c);
        const double floor_fp16 =
            double(__int_as_float(warp_candidates[kPerVector * lane + 2])) * a.inv_scale * a.inv_scale;
        const double others = floor_fp16 - fabs(floor_fp16) * a.pack_error + xn2 * (1.0 - 1e-6) - err;
        // (Written so that NaN or infinity fails it.)
        done = a.screenable && xinf * a.scale < kFp16Limit && best_w >= 0 &&
               double(best_d) < (1.0 - (a.d + 3) * 6.0e-8) * others;
        if (!done) a.rescan[1 + atomicAdd(a.rescan, 1)] = int(p);
      }
      if (done) {
        if (a.words) a.words[p] = best_w;
        if (a.distances) a.distances[p] = best_d;
        if (a.counts) {
          const int y = int(p / a.W), x = int(p - static_cast<int64_t>(y) * a.W);
          const int cell = (y * a.cells / a.H) * a.cells + x * a.cells / a.W;
          atomicAdd(&a.counts[cell * a.k + best_w], 1);
        }
      }
    }
  }
}

// The exact scan of the whole dictionary (staged in shared memory) for the vectors the certificate
// left, with nearest_centers' arithmetic: its word and distance, bit for bit.
template <int kMaxDim>
__global__ void rescan_kernel(const float* planes, int64_t plane, int d, const float* dictionary, int k,
                              const int* rescan, int* words, float* distances, unsigned long long* total) {
  const int count = rescan[0];
  if (blockIdx.x == 0 && threadIdx.x == 0) *total += static_cast<unsigned long long>(count);
  if (count == 0) return;
  extern __shared__ float centres[];
  for (int i = threadIdx.x; i < k * d; i += blockDim.x) centres[i] = dictionary[i];
  __syncthreads();
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < count; t += gridDim.x * blockDim.x) {
    const int64_t p = rescan[1 + t];
    float v[kMaxDim];
#pragma unroll
    for (int j = 0; j < kMaxDim; ++j) v[j] = j < d ? planes[j * plane + p] : 0.f;
    int best = 0;
    float best_d = INFINITY;
    for (int c = 0; c < k; ++c) {
      const float* centre = centres + c * d;
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < kMaxDim; ++j)
        if (j < d) {
          const float diff = __fsub_rn(v[j], centre[j]);
          s = __fadd_rn(s, __fmul_rn(diff, diff));
        }
      if (s < best_d) best_d = s, best = c;
    }
    if (words) words[p] = best;
    if (distances) distances[p] = best_d;
  }
}

template <int KSteps>
size_t words_smem(int tiles, bool exact) {
  return sizeof(uint2) * tiles * KSteps * 32 + sizeof(float2) * tiles * 4 +
         sizeof(float) * 16 * KSteps * (kXsPitch + 1) + sizeof(int) * kWordWarps * 32 * (exact ? 3 : 2);
}

using WordsKernel = void (*)(WordsArgs);

template <int KSteps>
WordsKernel words_kernel_for(bool exact) {
  return exact ? words_kernel<KSteps, true> : words_kernel<KSteps, false>;
}

WordsKernel words_kernel_for(int ksteps, bool exact) {
  switch (ksteps) {
    case 1: return words_kernel_for<1>(exact);
    case 2: return words_kernel_for<2>(exact);
    case 3: return words_kernel_for<3>(exact);
    case 4: return words_kernel_for<4>(exact);
  }
  throw std::invalid_argument("visual words on the GPU: at most 64 dimensions");
}

size_t words_smem_for(int ksteps, int tiles, bool exact) {
  switch (ksteps) {
    case 1: return words_smem<1>(tiles, exact);
    case 2: return words_smem<2>(tiles, exact);
    case 3: return words_smem<3>(tiles, exact);
    default: return words_smem<4>(tiles, exact);
  }
}

using RescanKernel = void (*)(const float*, int64_t, int, const float*, int, const int*, int*, float*,
                              unsigned long long*);
RescanKernel rescan_kernel_for(int d) { return d <= 32 ? rescan_kernel<32> : rescan_kernel<64>; }

// Blocks of `kernel` that fill the GPU with `smem` bytes of shared memory each.
int fill_grid(const void* kernel, int threads, size_t smem, const char* what) {
  int device = 0, smem_max = 0, sms = 0, per_sm = 0;
  PRISM_CUDA_CHECK(cudaGetDevice(&device));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (smem > size_t(smem_max))
    throw std::invalid_argument(std::string("visual words on the GPU: ") + what + " does not fit in shared memory");
  // The device's whole opt-in limit, not this instance's size: instances of other sizes share the kernel.
  PRISM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  PRISM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return std::max(1, per_sm) * sms;
}

uint32_t pack_halves_host(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t u;
  std::memcpy(&u, &h, sizeof u);
  return u;
}

}  // namespace

GpuWords::GpuWords(int k, int d, bool exact, cudaStream_t stream) : k_(k), d_(d), exact_(exact), stream_(stream) {
  if (k < 1 || d < 1 || d > 64)
    throw std::invalid_argument("visual words on the GPU: needs k >= 1 words of 1..64 dimensions");
  const int ksteps = (d + 15) / 16;
  tiles_ = (k + 8 * kTilesPerStep - 1) / (8 * kTilesPerStep) * kTilesPerStep;  // whole steps of the kernel
  int bits = 0;
  while ((1 << bits) < tiles_ * 8) ++bits;
  index_mask_ = (1u << bits) - 1;
  words_smem_ = words_smem_for(ksteps, tiles_, exact);
  words_grid_ = fill_grid(reinterpret_cast<const void*>(words_kernel_for(ksteps, exact)), kWordThreads, words_smem_,
                          ("a dictionary of " + std::to_string(k) + " words").c_str());
  if (exact) {
    scan_smem_ = sizeof(float) * size_t(k) * d;
    scan_grid_ = fill_grid(reinterpret_cast<const void*>(rescan_kernel_for(d)), 128, scan_smem_,
                           ("k x d = " + std::to_string(k) + " x " + std::to_string(d)).c_str());
    d_rescanned_.resize(1);
    PRISM_CUDA_CHECK(cudaMemsetAsync(d_rescanned_.data(), 0, sizeof(unsigned long long), stream_));
  }
  frags_.resize(size_t(tiles_) * ksteps * 32);
  norms_.resize(size_t(tiles_) * 4);
  mean_.resize(d);
  d_dictionary_.resize(size_t(k) * d);
  d_mean_.resize(d);
  d_frags_.resize(frags_.size());
  d_norms_.resize(norms_.size());
}

void GpuWords::set_dictionary(const cv::Mat& dictionary) {
  if (dictionary.type() != CV_32FC1 || dictionary.rows != k_ || dictionary.cols != d_)
    throw std::invalid_argument("visual words on the GPU: the dictionary must be " + std::to_string(k_) + " x " +
                                std::to_string(d_) + " CV_32F");
  const cv::Mat dict = dictionary.isContinuous() ? dictionary : dictionary.clone();
  // B fragments of -2 (c - mean) and the norms ||c - mean||^2 (centring keeps the FP16 products
  // small next to the distances).
  const int d = d_, ksteps = (d + 15) / 16;
  std::vector<double> mean_d(d, 0.0);
  for (int c = 0; c < k_; ++c)
    for (int j = 0; j < d; ++j) mean_d[j] += dict.at<float>(c, j);
  for (int j = 0; j < d; ++j) mean_[j] = float(mean_d[j] / k_);
  auto centred = [&](int word, int dim) {  // 0 for padding words and dimensions
    return word < k_ && dim < d ? dict.at<float>(word, dim) - mean_[dim] : 0.f;
  };
  // A power-of-two scale puts the largest |c - mean| near 2^10: FP16's normal range below it, room
  // for vectors 64 times farther out above it (exact: it only moves exponents).
  double cmax2 = 0, cinf = 0;
  for (int c = 0; c < k_; ++c) {
    double s2 = 0;
    for (int j = 0; j < d; ++j) {
      s2 += double(centred(c, j)) * centred(c, j);
      cinf = std::max(cinf, std::fabs(double(centred(c, j))));
    }
    cmax2 = std::max(cmax2, s2);
  }
  const bool finite = cinf > 0 && std::isfinite(cinf);
  scale_ = finite ? std::ldexp(1.f, std::clamp(int(std::floor(std::log2(1024.0 / cinf))), -100, 100)) : 1.f;
  const double scale2 = double(scale_) * scale_;
  for (int t = 0; t < tiles_; ++t)
    for (int lane = 0; lane < 32; ++lane) {
      const int word = t * 8 + lane / 4, q = lane % 4;
      for (int h = 0; h < ksteps; ++h) {
        const int k0 = h * 16 + 2 * q;
        auto b = [&](int dim) { return -2 * scale_ * centred(word, dim); };
        frags_[(size_t(t) * ksteps + h) * 32 + lane] = {pack_halves_host(b(k0), b(k0 + 1)),
                                                        pack_halves_host(b(k0 + 8), b(k0 + 9))};
      }
    }
  for (int t = 0; t < tiles_; ++t)
    for (int q = 0; q < 4; ++q) {
      float n2[2];
      for (int e = 0; e < 2; ++e) {
        const int word = t * 8 + 2 * q + e;
        double s2 = 0;
        for (int j = 0; j < d; ++j) s2 += double(centred(word, j)) * centred(word, j);
        n2[e] = word < k_ ? float(s2 * scale2) : 1e30f;
      }
      norms_[size_t(t) * 4 + q] = {n2[0], n2[1]};
    }
  cmax_ = float(std::sqrt(cmax2) * (1 + 1e-6));
  screenable_ = 2 * cinf * scale_ < kFp16Limit && std::isfinite(cmax2);
  // (Pageable copies: each returns once the host data is staged, so the vectors may be refilled.)
  PRISM_CUDA_CHECK(cudaMemcpyAsync(d_dictionary_.data(), dict.ptr<float>(), sizeof(float) * dict.total(),
                                   cudaMemcpyHostToDevice, stream_));
  PRISM_CUDA_CHECK(cudaMemcpyAsync(d_mean_.data(), mean_.data(), sizeof(float) * d, cudaMemcpyHostToDevice, stream_));
  PRISM_CUDA_CHECK(
      cudaMemcpyAsync(d_frags_.data(), frags_.data(), sizeof(uint2) * frags_.size(), cudaMemcpyHostToDevice, stream_));
  PRISM_CUDA_CHECK(
      cudaMemcpyAsync(d_norms_.data(), norms_.data(), sizeof(float2) * norms_.size(), cudaMemcpyHostToDevice, stream_));
}

void GpuWords::assign(const float* planes, int64_t plane_stride, int W, int H, const Outputs& out) {
  const int64_t n = int64_t(W) * H;
  if (n <= 0) return;
  if (exact_ && out.counts) throw std::invalid_argument("visual words on the GPU: counts are for the fast mode");
  if (exact_) {
    d_rescan_.reserve(size_t(n) + 1);
    PRISM_CUDA_CHECK(cudaMemsetAsync(d_rescan_.data(), 0, sizeof(int), stream_));
  }
  WordsArgs a{};
  a.planes = planes;
  a.plane = plane_stride;
  a.n = n;
  a.W = W, a.H = H, a.d = d_, a.k = k_, a.tiles = tiles_, a.index_mask = index_mask_;
  a.frags = d_frags_.data(), a.norms = d_norms_.data(), a.dictionary = d_dictionary_.data(), a.mean = d_mean_.data();
  a.cells = out.cells;
  a.counts = out.counts, a.words = out.words, a.distances = out.distances;
  a.scale = scale_;
  a.inv_scale = 1.f / scale_;
  a.cmax = cmax_;
  a.pack_error = std::ldexp(1.0f, -22) * float(index_mask_ + 1);
  a.screenable = screenable_;
  a.rescan = d_rescan_.data();  // null in the fast mode, as before
  const int grid = int(std::min<int64_t>(words_grid_, (n + kChunk - 1) / kChunk));
  words_kernel_for((d_ + 15) / 16, exact_)<<<grid, kWordThreads, words_smem_, stream_>>>(a);
  PRISM_CUDA_CHECK(cudaGetLastError());
  if (exact_) {
    const int scan_grid = int(std::min<int64_t>(scan_grid_, (n + 127) / 128));
    rescan_kernel_for(d_)<<<scan_grid, 128, scan_smem_, stream_>>>(planes, plane_stride, d_, d_dictionary_.data(), k_,
                                                                   d_rescan_.data(), out.words, out.distances,
                                                                   d_rescanned_.data());
    PRISM_CUDA_CHECK(cudaGetLastError());
  }
}

int64_t GpuWords::rescanned() const {
  if (!exact_) return 0;
  unsigned long long v = 0;
  PRISM_CUDA_CHECK(cudaMemcpyAsync(&v, d_rescanned_.data(), sizeof v, cudaMemcpyDeviceToHost, stream_));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return int64_t(v);
}

}  // namespace prism::bow
