#include "bow/gpu_histogram.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "bow/histogram.h"
#include "common/gpu.h"
#include "common/mma.cuh"

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
constexpr int kInPitch = kInW + 1;      // 63, odd: the row pass walks rows across lanes, so rows start in distinct banks
constexpr int kRowPitch = kTileW + 1;    // 33: likewise for the row-pass planes
// Shared memory: the input tile, then the 4 row-pass planes, then slack. The zero taps of a size's
// last step read up to 7 samples past a row (into the next row or plane) and 7 rows past the last
// plane (into the slack); all of it holds finite values, so those products add 0.
constexpr int kSlack = kRun * kRowPitch;  // (the column pass's last row read: 15 - R + 48 + 2R + 22 = 85 + R)
constexpr int kBankThreads = 128;
constexpr size_t kBankSmem = sizeof(float) * (kInH * kInPitch + 4 * kInH * kRowPitch + kSlack);  // 74 KB: 3 blocks per SM

enum Kernel1D { kGauss, kGauss2, kDeriv, kSmooth };

// Each size's 1-D kernels, tap by tap as (g, g'', d, m), padded with zero taps to a multiple of 8.
struct alignas(16) BankTaps {
  float tap[kMaxSizes][kMaxTaps][4];
  int radius[kMaxSizes];
  int sizes;
};

// BORDER_REFLECT_101 (gfedcb|abcdefgh|gfedcba), also for offsets longer than the image.
__device__ __forceinline__ int reflect101(int i, int n) {
  if (n == 1) return 0;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
  return i;
}

// out[v] += taps[j].<kernel> * window[v + j] for 8 taps and 8 outputs (the caller picks the kernel).
template <int N, class Tap>
__device__ __forceinline__ void slide8(float (&out)[N], const float (&window)[N + kRun - 1], const float4 (&taps)[kRun], Tap tap) {
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
    const int R = t.radius[si], steps = (2 * R + kRun) / kRun;  // ceil((2R + 1) / 8)
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

// ---- Words and counts --------------------------------------------------------------------------

constexpr int kWordWarps = 8, kWordThreads = 32 * kWordWarps;
constexpr int kChunk = 32 * kWordWarps;  // pixels per block step: 32 per warp (two m16 tiles)
constexpr int kTilesPerStep = 4;        // tiles of 8 words per loop step
constexpr int kXsPitch = kChunk + 4;     // 132 floats: the A-fragment gathers fall in distinct banks

struct WordsArgs {
  const float* planes;  // the filter bank's output
  int64_t plane, n;     // W * H
  int W, H, d, k, tiles;
  unsigned index_mask;  // low mantissa bits that carry the word index
  const uint2* frags;   // B fragments: [tile][k step][lane], halves of -2 (c - mean)
  const float2* norms;  // ||c - mean||^2: [tile][lane % 4], 1e30 for padding words
  const float* dictionary;  // k x d floats, for the exact re-scoring
  const float* mean;        // d floats
  int cells;                // of the finest pyramid level, per side
  int* counts;              // [cell][word], finest level; null: none
  int* words;               // per pixel; null: none
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

template <int KSteps>
__global__ void __launch_bounds__(kWordThreads) words_kernel(const WordsArgs a) {
  constexpr int kDims = 16 * KSteps;
  extern __shared__ uint4 words_smem[];
  uint2* frags = reinterpret_cast<uint2*>(words_smem);
  float2* norms = reinterpret_cast<float2*>(frags + a.tiles * KSteps * 32);
  float* xs = reinterpret_cast<float*>(norms + a.tiles * 4);  // [dimension][pixel of the chunk]
  float* mean = xs + kDims * kXsPitch;
  int* candidates = reinterpret_cast<int*>(mean + kDims);  // [warp][pixel][2]
  for (int i = threadIdx.x; i < a.tiles * KSteps * 32; i += blockDim.x) frags[i] = a.frags[i];
  for (int i = threadIdx.x; i < a.tiles * 4; i += blockDim.x) norms[i] = a.norms[i];
  for (int i = threadIdx.x; i < kDims; i += blockDim.x) mean[i] = i < a.d ? a.mean[i] : 0.f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, q = lane & 3, r = lane >> 2;
  int* warp_candidates = candidates + warp * 64;
  // (Staging the next chunk with cp.async during this one's work measured no faster on the H100:
  // three blocks per SM already cover the loads.)
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kChunk; base < a.n; base += static_cast<int64_t>(gridDim.x) * kChunk) {
    __syncthreads();  // the previous chunk's responses are no longer read
    const int64_t mine = base + threadIdx.x;
    for (int f = 0; f < kDims; ++f) xs[f * kXsPitch + threadIdx.x] = f < a.d && mine < a.n ? a.planes[f * a.plane + mine] : 0.f;
    __syncthreads();
    uint32_t A[2][KSteps][4];
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < KSteps; ++h) {
        const int p0 = warp * 32 + m * 16 + r, p1 = p0 + 8, k0 = h * 16 + 2 * q;
        auto x = [&](int dim, int p) { return xs[dim * kXsPitch + p] - mean[dim]; };
        A[m][h][0] = pack_halves(x(k0, p0), x(k0 + 1, p0));
        A[m][h][1] = pack_halves(x(k0, p1), x(k0 + 1, p1));
        A[m][h][2] = pack_halves(x(k0 + 8, p0), x(k0 + 9, p0));
        A[m][h][3] = pack_halves(x(k0 + 8, p1), x(k0 + 9, p1));
      }
    // Per row, the best (distance, word) among the thread's even and among its odd columns: one
    // LOP3 and one min per distance. The row's 8 buckets (4 lanes x 2) give its top-2 below; that
    // loses the second-nearest only when it shares the nearest's bucket.
    float best[2][2][2];  // [m tile][row r, r + 8][even, odd column]
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) best[m][h][0] = best[m][h][1] = FLT_MAX;
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
          best[m][0][0] = fminf(best[m][0][0], with_index(acc[u][m][0], word, a.index_mask));
          best[m][0][1] = fminf(best[m][0][1], with_index(acc[u][m][1], word + 1, a.index_mask));
          best[m][1][0] = fminf(best[m][1][0], with_index(acc[u][m][2], word, a.index_mask));
          best[m][1][1] = fminf(best[m][1][1], with_index(acc[u][m][3], word + 1, a.index_mask));
        }
      }
    }
    // The four lanes of a row merge their top-2; lane q = 0 hands each row's two words to its pixel's lane.
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float tp[2] = {fminf(best[m][h][0], best[m][h][1]), fmaxf(best[m][h][0], best[m][h][1])};
#pragma unroll
        for (int mask = 1; mask <= 2; mask <<= 1) {
          const float o0 = __shfl_xor_sync(0xFFFFFFFFu, tp[0], mask), o1 = __shfl_xor_sync(0xFFFFFFFFu, tp[1], mask);
          tp[1] = fminf(fmaxf(tp[0], o0), fminf(tp[1], o1));
          tp[0] = fminf(tp[0], o0);
        }
        if (q == 0) {
          const int row = m * 16 + h * 8 + r;
          warp_candidates[2 * row] = __float_as_int(tp[0]) & a.index_mask;
          warp_candidates[2 * row + 1] = __float_as_int(tp[1]) & a.index_mask;
        }
      }
    __syncwarp();
    const int pixel = warp * 32 + lane;
    const int64_t p = base + pixel;
    if (p < a.n) {
      // Re-score both candidates exactly as nearest_centers does on the CPU.
      int best = -1;
      float best_d = INFINITY;
      for (int c = 0; c < 2; ++c) {
        const int w = warp_candidates[2 * lane + c];
        if (w >= a.k) continue;
        const float4* centre = reinterpret_cast<const float4*>(a.dictionary + static_cast<int64_t>(w) * a.d);
        float s = 0.f;
        for (int j = 0; j < a.d; j += 4) {  // d = 4 x sizes
          const float4 c4 = __ldg(centre + j / 4);
          const float c[4] = {c4.x, c4.y, c4.z, c4.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float diff = __fsub_rn(xs[(j + e) * kXsPitch + pixel], c[e]);
            s = __fadd_rn(s, __fmul_rn(diff, diff));
          }
        }
        if (s < best_d || (s == best_d && w < best)) best_d = s, best = w;
      }
      if (a.words) a.words[p] = best;
      if (a.counts) {
        const int y = int(p / a.W), x = int(p - static_cast<int64_t>(y) * a.W);
        const int cell = (y * a.cells / a.H) * a.cells + x * a.cells / a.W;
        atomicAdd(&a.counts[cell * a.k + best], 1);
      }
    }
  }
}

template <int KSteps>
size_t words_smem(int tiles) {
  return sizeof(uint2) * tiles * KSteps * 32 + sizeof(float2) * tiles * 4 + sizeof(float) * 16 * KSteps * (kXsPitch + 1) +
         sizeof(int) * kWordWarps * 64;
}

// The launch of words_kernel<KSteps> for KSteps = 1..4 (16 to 64 response dimensions).
struct WordsLaunch {
  void (*kernel)(WordsArgs) = nullptr;
  size_t smem = 0;
  int grid = 0;
};

template <int KSteps>
WordsLaunch prepare_words(int tiles) {
  WordsLaunch l;
  l.kernel = words_kernel<KSteps>;
  l.smem = words_smem<KSteps>(tiles);
  int device = 0, smem_max = 0, sms = 0, per_sm = 0;
  PRISM_CUDA_CHECK(cudaGetDevice(&device));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (l.smem > size_t(smem_max))
    throw std::invalid_argument("GpuHistogrammer: a dictionary of " + std::to_string(tiles * 8) +
                                " words does not fit in shared memory");
  PRISM_CUDA_CHECK(cudaFuncSetAttribute(l.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(l.smem)));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  PRISM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, l.kernel, kWordThreads, l.smem));
  l.grid = std::max(1, per_sm) * sms;
  return l;
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
    const auto& G = bank.terms(4 * si), &L = bank.terms(4 * si + 1), &X = bank.terms(4 * si + 2), &Y = bank.terms(4 * si + 3);
    const bool shaped = G.size() == 1 && L.size() == 2 && X.size() == 1 && Y.size() == 1 && G[0].x == G[0].y &&
                        L[0].y == G[0].x && L[1].x == G[0].x && L[1].y == L[0].x && X[0].x == Y[0].y && X[0].y == Y[0].x;
    const int taps = int(G[0].x.size()), radius = taps / 2;
    if (!shaped || taps % 2 == 0 || radius < 1 || radius > kMaxRadius)
      throw std::invalid_argument("GpuHistogrammer: filter size " + std::to_string(taps) + " is not of the bank's form");
    const std::vector<float>* kernels[4] = {&G[0].x, &L[0].x, &X[0].x, &X[0].y};  // g, g'', d, m
    for (int q = 0; q < 4; ++q) {
      if (int(kernels[q]->size()) != taps) throw std::invalid_argument("GpuHistogrammer: 1-D kernels of unequal length");
      for (int j = 0; j < taps; ++j) t.tap[si][j][q] = (*kernels[q])[j];
    }
    t.radius[si] = radius;
  }
  return t;
}

}  // namespace

struct GpuHistogrammer::Impl {
  cudaStream_t stream = nullptr;
  cudaEvent_t marks[3] = {};
  BankTaps taps{};
  WordsLaunch launch;
  int filters = 0, k = 0, levels = 0, tiles = 0;
  unsigned index_mask = 0;
  float *d_dictionary = nullptr, *d_mean = nullptr;
  uint2* d_frags = nullptr;
  float2* d_norms = nullptr;
  int* d_counts = nullptr;
  int64_t capacity = 0;  // pixels
  uint8_t* d_grey = nullptr;
  float* d_planes = nullptr;
  int* d_words = nullptr;
  std::vector<int> fine_counts, counts;

  ~Impl() {
    release();
    cudaFree(d_dictionary);
    cudaFree(d_mean);
    cudaFree(d_frags);
    cudaFree(d_norms);
    cudaFree(d_counts);
    for (cudaEvent_t e : marks)
      if (e) cudaEventDestroy(e);
    if (stream) cudaStreamDestroy(stream);
  }
  void release() {
    cudaFree(d_grey);
    cudaFree(d_planes);
    cudaFree(d_words);
    d_grey = nullptr, d_planes = nullptr, d_words = nullptr;
    capacity = 0;
  }
  void reserve(int64_t pixels) {
    if (pixels <= capacity) return;
    release();
    d_grey = gpu::device_alloc<uint8_t>(pixels);
    d_planes = gpu::device_alloc<float>(size_t(pixels) * filters);
    d_words = gpu::device_alloc<int>(pixels);
    capacity = pixels;
  }
  static void check_size(int W, int H) {
    if (W < 1 || H < 1) throw std::invalid_argument("GpuHistogrammer: empty image");
  }
  const uint8_t* upload(const cv::Mat& grey8) {
    if (grey8.empty() || grey8.type() != CV_8UC1) throw std::invalid_argument("GpuHistogrammer: the image must be 8-bit grey");
    reserve(int64_t(grey8.cols) * grey8.rows);
    PRISM_CUDA_CHECK(cudaMemcpy2DAsync(d_grey, grey8.cols, grey8.data, grey8.step, grey8.cols, grey8.rows,
                                       cudaMemcpyHostToDevice, stream));
    return d_grey;
  }

  // Filter bank, and words (into d_words when `keep_words`) with counts (into d_counts when `count`).
  void run(const uint8_t* grey, size_t pitch, int W, int H, bool words, bool keep_words, bool count) {
    check_size(W, H);
    reserve(int64_t(W) * H);
    PRISM_CUDA_CHECK(cudaEventRecord(marks[0], stream));
    const dim3 tiles_grid((W + kTileW - 1) / kTileW, (H + kTileH - 1) / kTileH);
    filter_bank_kernel<<<tiles_grid, kBankThreads, kBankSmem, stream>>>(grey, pitch, W, H, taps, d_planes);
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cudaEventRecord(marks[1], stream));
    if (words) {
      if (count) PRISM_CUDA_CHECK(cudaMemsetAsync(d_counts, 0, sizeof(int) * fine_counts.size(), stream));
      WordsArgs a{};
      a.planes = d_planes;
      a.plane = a.n = int64_t(W) * H;
      a.W = W, a.H = H, a.d = filters, a.k = k, a.tiles = tiles, a.index_mask = index_mask;
      a.frags = d_frags, a.norms = d_norms, a.dictionary = d_dictionary, a.mean = d_mean;
      a.cells = 1 << levels;
      a.counts = count ? d_counts : nullptr;
      a.words = keep_words ? d_words : nullptr;
      const int grid = int(std::min<int64_t>(launch.grid, (a.n + kChunk - 1) / kChunk));
      launch.kernel<<<grid, kWordThreads, launch.smem, stream>>>(a);
      PRISM_CUDA_CHECK(cudaGetLastError());
    }
    PRISM_CUDA_CHECK(cudaEventRecord(marks[2], stream));
  }

  std::vector<float> histogram(const uint8_t* grey, size_t pitch, int W, int H) {
    run(grey, pitch, W, H, true, false, true);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(fine_counts.data(), d_counts, sizeof(int) * fine_counts.size(), cudaMemcpyDeviceToHost, stream));
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
  PRISM_CUDA_CHECK(cudaFuncSetAttribute(filter_bank_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kBankSmem)));

  // The dictionary as B fragments of -2 (c - mean) and the norms ||c - mean||^2 (centring keeps the
  // FP16 products small next to the distances).
  const int d = m.filters, ksteps = (d + 15) / 16;
  m.tiles = (m.k + 8 * kTilesPerStep - 1) / (8 * kTilesPerStep) * kTilesPerStep;  // whole steps of the kernel
  int bits = 0;
  while ((1 << bits) < m.tiles * 8) ++bits;
  m.index_mask = (1u << bits) - 1;
  std::vector<double> mean_d(d, 0.0);
  for (int c = 0; c < m.k; ++c)
    for (int j = 0; j < d; ++j) mean_d[j] += dictionary.at<float>(c, j);
  std::vector<float> mean(d);
  for (int j = 0; j < d; ++j) mean[j] = float(mean_d[j] / m.k);
  auto centred = [&](int word, int dim) {  // 0 for padding words and dimensions
    return word < m.k && dim < d ? dictionary.at<float>(word, dim) - mean[dim] : 0.f;
  };
  std::vector<uint2> frags(size_t(m.tiles) * ksteps * 32);
  std::vector<float2> norms(size_t(m.tiles) * 4);
  auto pack = [](float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    uint32_t u;
    std::memcpy(&u, &h, sizeof u);
    return u;
  };
  for (int t = 0; t < m.tiles; ++t)
    for (int lane = 0; lane < 32; ++lane) {
      const int word = t * 8 + lane / 4, q = lane % 4;
      for (int h = 0; h < ksteps; ++h) {
        const int k0 = h * 16 + 2 * q;
        frags[(size_t(t) * ksteps + h) * 32 + lane] = {pack(-2 * centred(word, k0), -2 * centred(word, k0 + 1)),
                                                       pack(-2 * centred(word, k0 + 8), -2 * centred(word, k0 + 9))};
      }
    }
  for (int t = 0; t < m.tiles; ++t)
    for (int q = 0; q < 4; ++q) {
      float n2[2];
      for (int e = 0; e < 2; ++e) {
        const int word = t * 8 + 2 * q + e;
        double s = 0;
        for (int j = 0; j < d; ++j) s += double(centred(word, j)) * centred(word, j);
        n2[e] = word < m.k ? float(s) : 1e30f;
      }
      norms[size_t(t) * 4 + q] = {n2[0], n2[1]};
    }
  switch (ksteps) {
    case 1: m.launch = prepare_words<1>(m.tiles); break;
    case 2: m.launch = prepare_words<2>(m.tiles); break;
    case 3: m.launch = prepare_words<3>(m.tiles); break;
    case 4: m.launch = prepare_words<4>(m.tiles); break;
    default: throw std::invalid_argument("GpuHistogrammer: at most 64 filters");
  }

  PRISM_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  for (cudaEvent_t& e : m.marks) PRISM_CUDA_CHECK(cudaEventCreate(&e));
  const cv::Mat dict = dictionary.isContinuous() ? dictionary : dictionary.clone();
  m.d_dictionary = gpu::device_alloc<float>(dict.total());
  PRISM_CUDA_CHECK(cudaMemcpy(m.d_dictionary, dict.ptr<float>(), dict.total() * sizeof(float), cudaMemcpyHostToDevice));
  m.d_mean = gpu::device_alloc<float>(d);
  PRISM_CUDA_CHECK(cudaMemcpy(m.d_mean, mean.data(), sizeof(float) * d, cudaMemcpyHostToDevice));
  m.d_frags = gpu::device_alloc<uint2>(frags.size());
  PRISM_CUDA_CHECK(cudaMemcpy(m.d_frags, frags.data(), sizeof(uint2) * frags.size(), cudaMemcpyHostToDevice));
  m.d_norms = gpu::device_alloc<float2>(norms.size());
  PRISM_CUDA_CHECK(cudaMemcpy(m.d_norms, norms.data(), sizeof(float2) * norms.size(), cudaMemcpyHostToDevice));
  m.fine_counts.resize((size_t(1) << (2 * levels)) * m.k);
  m.counts.resize(histogram_length(m.k, levels));
  m.d_counts = gpu::device_alloc<int>(m.fine_counts.size());
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
  PRISM_CUDA_CHECK(cudaMemcpyAsync(planes.data, m.d_planes, planes.total() * sizeof(float), cudaMemcpyDeviceToHost, m.stream));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  cv::transpose(planes, pixels);  // pixel-major, as filter_responses
  return pixels.reshape(m.filters, grey8.rows).clone();
}

cv::Mat GpuHistogrammer::words(const cv::Mat& grey8) {
  Impl& m = *impl_;
  const uint8_t* grey = m.upload(grey8);
  m.run(grey, size_t(grey8.cols), grey8.cols, grey8.rows, true, true, false);
  cv::Mat out(grey8.rows, grey8.cols, CV_32SC1);
  PRISM_CUDA_CHECK(cudaMemcpyAsync(out.data, m.d_words, out.total() * sizeof(int), cudaMemcpyDeviceToHost, m.stream));
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
