// The fused matcher. A block of 8 warps takes 32 query rows per warp against one gallery image;
// each warp keeps its rows' A fragments (two m16 tiles x the whole 128-dim rows, FP16) in registers
// and streams the image's descriptors through shared memory in chunks of 64 (cp.async double
// buffering, rows padded to 272 bytes so that ldmatrix rows fall in distinct banks). Every 8
// gallery descriptors are loaded as B fragments with four ldmatrix.x4 and used by both m16 tiles:
// sixteen mma.sync m16n8k16 (FP16 in, FP32 accumulate) whose dot products go straight into the
// running top-2 of the thread's four rows - three min/max instructions per dot product when only
// the scores are wanted, a branch that also tracks the best's index when per-row outputs are. The
// four lanes that share a row merge their top-2 with shuffles at the end. Only the per-image score
// (and, on request, the top-2 per row) is written.
// Fragment layouts: PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type" and
// "ldmatrix".
#include "common/gpu.h"
#include "common/mma.cuh"
#include "match/match.h"

#include <cuda_fp16.h>

#include <type_traits>

namespace prism::match {
namespace {

using gpu::cp_async16;
using gpu::cp_async_commit;
using gpu::cp_async_wait_one;
using gpu::ldmatrix_x4;
using gpu::mma_16816;

constexpr int kWarps = 8, kThreads = 32 * kWarps;  // 8 measured faster than 4 (docs/benchmarks/matching.md)
constexpr int kRowsPerWarp = 32;                   // two m16 tiles share every B fragment
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kChunk = 64;        // gallery descriptors per shared-memory stage
constexpr int kPitch = kDim + 8;  // halves per staged row (272 bytes)
constexpr int kStages = 2;

struct Top2 {
  float best, second;
  int index;
};

// The scores-only update: the two largest so far, no index (three instructions).
__device__ __forceinline__ void offer(Top2& t, float dot, int, std::false_type) {
  t.second = fmaxf(t.second, fminf(t.best, dot));
  t.best = fmaxf(t.best, dot);
}
// With the best's index; columns arrive in increasing order per thread, so ties keep the lower.
__device__ __forceinline__ void offer(Top2& t, float dot, int j, std::true_type) {
  if (dot > t.best) {
    t.second = t.best;
    t.best = dot;
    t.index = j;
  } else if (dot > t.second) {
    t.second = dot;
  }
}

// Merges another lane's top-2 (the union's two largest; equal bests keep the lower index).
__device__ __forceinline__ void merge(Top2& t, const Top2& o) {
  if (o.best > t.best || (o.best == t.best && o.index >= 0 && (t.index < 0 || o.index < t.index))) {
    t.second = fmaxf(t.best, o.second);
    t.best = o.best;
    t.index = o.index;
  } else {
    t.second = fmaxf(t.second, o.best);
  }
}

__device__ __forceinline__ Top2 shuffle_xor(const Top2& t, int mask) {
  return {__shfl_xor_sync(0xFFFFFFFFu, t.best, mask), __shfl_xor_sync(0xFFFFFFFFu, t.second, mask),
          __shfl_xor_sync(0xFFFFFFFFu, t.index, mask)};
}

// One staged chunk against the warp's 32 rows. kCheck: the image ends inside this chunk, so
// columns at or past n are skipped (the slot's padding holds arbitrary values).
template <bool kCheck, typename TrackIndex>
__device__ __forceinline__ void match_chunk(const uint16_t (*tile)[kPitch], const uint32_t (&a)[2][8][4],
                                            Top2 (&top)[4], int j0, int n, int lane) {
  const int c2 = (lane & 3) * 2;
  const uint16_t* lane_row = &tile[lane & 7][(lane >> 3) * 8];
#pragma unroll 2
  for (int nt = 0; nt < kChunk / 8; ++nt) {
    uint32_t b[4][4];  // b[q] = {b0, b1} of k-step 2q, then of k-step 2q + 1
#pragma unroll
    for (int q = 0; q < 4; ++q) ldmatrix_x4(b[q], lane_row + nt * 8 * kPitch + q * 32);
    float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const uint32_t b0 = b[ks / 2][(ks & 1) * 2], b1 = b[ks / 2][(ks & 1) * 2 + 1];
      mma_16816(c[0], a[0][ks], b0, b1);
      mma_16816(c[1], a[1][ks], b0, b1);
    }
    const int j = j0 + nt * 8 + c2;
    constexpr TrackIndex track{};
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      if (!kCheck || j < n) {
        offer(top[2 * m], c[m][0], j, track);
        offer(top[2 * m + 1], c[m][2], j, track);
      }
      if (!kCheck || j + 1 < n) {
        offer(top[2 * m], c[m][1], j + 1, track);
        offer(top[2 * m + 1], c[m][3], j + 1, track);
      }
    }
  }
}

template <typename TrackIndex>
__global__ void __launch_bounds__(kThreads)
    match_kernel(const uint16_t* __restrict__ query, int rows, int query_rows, const uint16_t* __restrict__ gallery,
                 const int* __restrict__ counts, int images, float ratio2, int* scores, float* out_best,
                 float* out_second, int* out_index) {
  __shared__ __align__(16) uint16_t tile[kStages][kChunk][kPitch];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;
  const int image = blockIdx.x;  // x: gridDim.y would cap a batch at 65,535 images
  const int row0 = blockIdx.y * kRowsPerBlock + warp * kRowsPerWarp;
  const int n = counts[image];
  const uint16_t* img = gallery + static_cast<int64_t>(image) * kSlot * kDim;

  // The warp's 32 query rows as A fragments (two m16 tiles) for all 8 k-steps.
  uint32_t a[2][8][4];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int ra = row0 + m * 16 + g, rb = ra + 8;
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const int k = ks * 16 + c2;
      auto pair = [&](int r, int kk) -> uint32_t {
        return r < rows ? *reinterpret_cast<const uint32_t*>(query + static_cast<int64_t>(r) * kDim + kk) : 0u;
      };
      a[m][ks][0] = pair(ra, k);
      a[m][ks][1] = pair(rb, k);
      a[m][ks][2] = pair(ra, k + 8);
      a[m][ks][3] = pair(rb, k + 8);
    }
  }

  // top[0..3]: rows g, g + 8 (first m16 tile), g + 16, g + 24 (second) of the warp's 32.
  Top2 top[4];
#pragma unroll
  for (int h = 0; h < 4; ++h) top[h] = {-INFINITY, -INFINITY, -1};
  const int chunks = (n + kChunk - 1) / kChunk;
  auto stage = [&](int chunk, int buf) {  // 64 rows x 256 bytes = 1024 vectors of 16 bytes
    for (int v = threadIdx.x; v < kChunk * kDim / 8; v += kThreads) {
      const int r = v / (kDim / 8), c = (v % (kDim / 8)) * 8;
      cp_async16(&tile[buf][r][c], img + static_cast<int64_t>(chunk * kChunk + r) * kDim + c);
    }
    cp_async_commit();
  };
  if (chunks > 0) stage(0, 0);
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int buf = chunk & 1;
    if (chunk + 1 < chunks)
      stage(chunk + 1, buf ^ 1);
    else
      cp_async_commit();  // an empty group keeps wait_group 1 meaning "all but the newest"
    cp_async_wait_one();
    __syncthreads();
    if ((chunk + 1) * kChunk <= n)
      match_chunk<false, TrackIndex>(tile[buf], a, top, chunk * kChunk, n, lane);
    else
      match_chunk<true, TrackIndex>(tile[buf], a, top, chunk * kChunk, n, lane);
    __syncthreads();  // the buffer is restaged two chunks later
  }
  // The four lanes of a row hold disjoint columns: merge (lower lane's index first on ties).
#pragma unroll
  for (int h = 0; h < 4; ++h)
    for (int mask = 1; mask <= 2; mask <<= 1) merge(top[h], shuffle_xor(top[h], mask));

      // Each m16 tile's rows belong to one query (query_rows is a multiple of 16): one integer atomic
      // per tile, so the scores are deterministic.
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    int pass = 0;
    if ((lane & 3) == 0) {
      for (int h = 2 * m; h < 2 * m + 2; ++h) {
        const int r = row0 + m * 16 + g + (h & 1) * 8;
        if (r >= rows) continue;
        pass += n >= 2 && (1.f - top[h].best) < ratio2 * (1.f - top[h].second);
        const int64_t o = static_cast<int64_t>(image) * rows + r;
        if (out_best) out_best[o] = top[h].best;
        if (out_second) out_second[o] = top[h].second;
        if (out_index) out_index[o] = top[h].index;
      }
    }
    for (int off = 16; off > 0; off >>= 1) pass += __shfl_down_sync(0xFFFFFFFFu, pass, off);
    const int tile_row0 = row0 + m * 16;
    if (lane == 0 && pass > 0 && tile_row0 < rows)
      atomicAdd(&scores[static_cast<int64_t>(tile_row0 / query_rows) * images + image], pass);
  }
}

template <typename TrackIndex>
void launch(const MatchProblem& p, float ratio2, const MatchOutputs& out, cudaStream_t stream) {
  const dim3 grid(p.images, (p.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  match_kernel<TrackIndex><<<grid, kThreads, 0, stream>>>(p.query, p.rows, p.query_rows, p.gallery, p.counts, p.images,
                                                          ratio2, out.scores, out.best, out.second, out.best_index);
}

}  // namespace

void match_cuda(const MatchProblem& p, const MatchParams& params, const MatchOutputs& out, cudaStream_t stream) {
  if (!out.scores) throw std::invalid_argument("match_cuda: scores are required");
  if (p.query_rows <= 0 || p.query_rows % 16 != 0 || p.rows % p.query_rows != 0)
    throw std::invalid_argument("match_cuda: rows must be whole queries of a multiple of 16 rows");
  int device = 0, major = 0;
  PRISM_CUDA_CHECK(cudaGetDevice(&device));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8)
    throw gpu::CudaError("match_cuda: needs an sm_80 or newer GPU (mma.sync m16n8k16, cp.async); use match_cpu");
  if (p.images == 0 || p.rows == 0) return;
  const float ratio2 = params.ratio * params.ratio;
  if (out.best || out.second || out.best_index)
    launch<std::true_type>(p, ratio2, out, stream);
  else
    launch<std::false_type>(p, ratio2, out, stream);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace prism::match
