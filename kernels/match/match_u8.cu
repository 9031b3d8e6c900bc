// The 8-bit matcher on the GPU (match.h): one fused kernel on the integer tensor cores, and the
// plain reference kernel the GPU tests check it against.
//
// The fused kernel (first written for FP16 descriptors, docs/benchmarks/matching.md): a block of 8 warps takes 32 query
// rows per warp against one gallery image; each warp keeps its rows' A fragments (two m16 tiles x 128 bytes, 32
// registers) and streams the image through shared memory in chunks of 128 descriptors (cp.async
// double buffering; rows padded to 144 bytes so that the 8 rows of an ldmatrix fall in distinct
// banks). Once a chunk has arrived the block computes |g|^2 of its descriptors (dp4a, two threads
// per descriptor) into shared memory. Every 8 descriptors are loaded as B fragments with two
// ldmatrix.x4 and used by both m16 tiles: eight mma.sync m16n8k32 (u8 x u8 -> s32, exact), whose
// dot products go straight into the running top-2 of the thread's four rows, ranked by
// e = |g|^2 - 2 q.g (the squared distance less the row's |q|^2): one multiply-add and three integer
// min/max per distance when only the scores are wanted. Columns past the image's count (the chunk
// reads the slot's padding) get |g|^2 = 2^30, larger than any real e, and are never reported. The
// four lanes that share a row merge their top-2 with shuffles; |q|^2 comes from the A fragments.
// The scores take one integer atomic per m16 tile (all its rows belong to one query).
#include <climits>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>

#include <cub/warp/warp_reduce.cuh>

#include "common/gpu.h"
#include "common/mma.cuh"
#include "match/match.h"
#include "match/match_u8_wgmma.h"

namespace prism::match {
namespace {

using gpu::cp_async16;
using gpu::cp_async_commit;
using gpu::cp_async_wait_one;
using gpu::ldmatrix_x4;
using gpu::mma_16832_u8;

constexpr int kWarps = 8, kThreads = 32 * kWarps;
// Three blocks per SM (at most 85 registers): six warps per scheduler hide the mma and min/max latencies
// better than the four that 102 registers allowed (docs/benchmarks/matching.md, "The 8-bit kernel's ceiling").
constexpr int kMinBlocks = 3;
constexpr int kRowsPerWarp = 32;  // two m16 tiles share every B fragment
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kChunk = 128;        // gallery descriptors per shared-memory stage
constexpr int kPitch = kDim + 16;  // bytes per staged row
constexpr int kStages = 2;
constexpr int32_t kFar = 1 << 30;  // |g|^2 of a column past the count: e >= 2^30 - 2 x 128 x 255^2 > any real e

struct Top2 {
  int32_t best, second;
  int index;
};

// Scores only: the two smallest so far, no index.
__device__ __forceinline__ void offer(Top2& t, int32_t e, int, std::false_type) {
  t.second = min(t.second, max(t.best, e));
  t.best = min(t.best, e);
}
// With the smallest's index; a thread's columns arrive in increasing order, so ties keep the lower.
__device__ __forceinline__ void offer(Top2& t, int32_t e, int j, std::true_type) {
  if (e < t.best) {
    t.second = t.best;
    t.best = e;
    t.index = j;
  } else if (e < t.second) {
    t.second = e;
  }
}

// Merges another lane's top-2 (disjoint columns): the union's two smallest; equal bests keep the
// lower index.
__device__ __forceinline__ void merge(Top2& t, const Top2& o) {
  const int32_t second = min(max(t.best, o.best), min(t.second, o.second));
  if (o.best < t.best || (o.best == t.best && o.index < t.index)) {
    t.best = o.best;
    t.index = o.index;
  }
  t.second = second;
}

__device__ __forceinline__ Top2 shuffle_xor(const Top2& t, int mask) {
  return {__shfl_xor_sync(0xFFFFFFFFu, t.best, mask), __shfl_xor_sync(0xFFFFFFFFu, t.second, mask),
          __shfl_xor_sync(0xFFFFFFFFu, t.index, mask)};
}

// One staged chunk (its first descriptor is j0) against the warp's 32 rows.
template <typename TrackIndex>
__device__ __forceinline__ void match_chunk(const uint8_t (*tile)[kPitch], const int32_t* gnorm,
                                            const uint32_t (&a)[2][4][4], Top2 (&top)[4], int j0, int lane) {
  const int c2 = (lane & 3) * 2;
  const uint8_t* lane_row = &tile[lane & 7][(lane >> 3) * 16];
#pragma unroll 2
  for (int nt = 0; nt < kChunk / 8; ++nt) {
    uint32_t b[2][4];  // b[h] = {b0, b1} of k-step 2h, then of k-step 2h + 1
#pragma unroll
    for (int h = 0; h < 2; ++h) ldmatrix_x4(b[h], lane_row + nt * 8 * kPitch + h * 64);
    const int2 gn = *reinterpret_cast<const int2*>(gnorm + nt * 8 + c2);
    int32_t c[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const uint32_t b0 = b[ks / 2][(ks & 1) * 2], b1 = b[ks / 2][(ks & 1) * 2 + 1];
      mma_16832_u8(c[0], a[0][ks], b0, b1);
      mma_16832_u8(c[1], a[1][ks], b0, b1);
    }
    const int j = j0 + nt * 8 + c2;
    constexpr TrackIndex track{};
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      offer(top[2 * m], gn.x - 2 * c[m][0], j, track);
      offer(top[2 * m + 1], gn.x - 2 * c[m][2], j, track);
      offer(top[2 * m], gn.y - 2 * c[m][1], j + 1, track);
      offer(top[2 * m + 1], gn.y - 2 * c[m][3], j + 1, track);
    }
  }
}

template <typename TrackIndex>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    match_u8_kernel(const uint8_t* __restrict__ query, int rows, int query_rows, const uint8_t* __restrict__ gallery,
                    const int* __restrict__ counts, const int* __restrict__ slots, int images, float ratio, int* scores,
                    int32_t* out_best, int32_t* out_second, int* out_index) {
  __shared__ __align__(16) uint8_t tile[kStages][kChunk][kPitch];
  __shared__ __align__(16) int32_t gnorm[kStages][kChunk];
  __shared__ cub::WarpReduce<int>::TempStorage pass_sum[kWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = (lane & 3) * 4;
  const int image = blockIdx.x;  // x: gridDim.y would cap a batch at 65,535 images
  const int row0 = blockIdx.y * kRowsPerBlock + warp * kRowsPerWarp;
  const int slot = slots ? slots[image] : image;
  const int n = counts[slot];
  const uint8_t* img = gallery + static_cast<int64_t>(slot) * kSlotBytes;

  // The warp's 32 query rows as A fragments (two m16 tiles) for the 4 k-steps.
  uint32_t a[2][4][4];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int ra = row0 + m * 16 + g, rb = ra + 8;
    auto word = [&](int r, int k) -> uint32_t {
      return r < rows ? *reinterpret_cast<const uint32_t*>(query + static_cast<int64_t>(r) * kDim + k) : 0u;
    };
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const int k = ks * 32 + t4;
      a[m][ks][0] = word(ra, k);
      a[m][ks][1] = word(rb, k);
      a[m][ks][2] = word(ra, k + 16);
      a[m][ks][3] = word(rb, k + 16);
    }
  }

  // top[0..3]: rows g, g + 8 (first m16 tile), g + 16, g + 24 (second) of the warp's 32.
  Top2 top[4];
#pragma unroll
  for (int h = 0; h < 4; ++h) top[h] = {INT32_MAX, INT32_MAX, -1};
  const int chunks = (n + kChunk - 1) / kChunk;  // whole chunks stay inside the slot (kSlot % kChunk == 0)
  auto stage = [&](int chunk, int buf) {         // 128 rows x 128 bytes = 1024 vectors of 16 bytes
    for (int v = threadIdx.x; v < kChunk * kDim / 16; v += kThreads) {
      const int r = v / (kDim / 16), c = (v % (kDim / 16)) * 16;
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
    {  // |g|^2 of the chunk: two threads per descriptor, 64 bytes each
      const int d = threadIdx.x >> 1;
      const uint4* src = reinterpret_cast<const uint4*>(&tile[buf][d][(threadIdx.x & 1) * 64]);
      uint32_t s = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint4 v = src[i];
        s = __dp4a(v.x, v.x, s);
        s = __dp4a(v.y, v.y, s);
        s = __dp4a(v.z, v.z, s);
        s = __dp4a(v.w, v.w, s);
      }
      s += __shfl_xor_sync(0xFFFFFFFFu, s, 1);
      if ((threadIdx.x & 1) == 0) gnorm[buf][d] = chunk * kChunk + d < n ? int32_t(s) : kFar;
    }
    __syncthreads();
    match_chunk<TrackIndex>(tile[buf], gnorm[buf], a, top, chunk * kChunk, lane);
    __syncthreads();  // the buffer is restaged by the next iteration
  }
  // The four lanes of a row hold disjoint columns.
#pragma unroll
  for (int h = 0; h < 4; ++h)
    for (int mask = 1; mask <= 2; mask <<= 1) merge(top[h], shuffle_xor(top[h], mask));

  // |q|^2 of the rows, from the A fragments once the gallery is done (fewer registers live through the
  // loop): qn[2m] for row g of tile m, qn[2m + 1] for row g + 8; the four lanes of a row each sum 32
  // of its bytes, then exchange.
  int32_t qn[4];
#pragma unroll
  for (int m = 0; m < 2; ++m) gpu::u8_fragment_norms(a[m], qn[2 * m], qn[2 * m + 1]);
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    int pass = 0;
    if ((lane & 3) == 0) {
      for (int h = 2 * m; h < 2 * m + 2; ++h) {
        const int r = row0 + m * 16 + g + (h & 1) * 8;
        if (r >= rows) continue;
        const bool some = qn[h] > 0 && top[h].best<kFar / 2, two = qn[h]> 0 && top[h].second < kFar / 2;
        const int32_t d1 = some ? qn[h] + top[h].best : INT32_MAX, d2 = two ? qn[h] + top[h].second : INT32_MAX;
        pass += n >= 2 && qn[h] > 0 && ratio_pass(d1, d2, ratio);
        const int64_t o = static_cast<int64_t>(image) * rows + r;
        if (out_best) out_best[o] = d1;
        if (out_second) out_second[o] = d2;
        if (out_index) out_index[o] = some ? top[h].index : -1;
      }
    }
    pass = cub::WarpReduce<int>(pass_sum[warp]).Sum(pass);  // lane 0's is the warp's
    const int tile_row0 = row0 + m * 16;
    if (lane == 0 && pass > 0 && tile_row0 < rows)
      atomicAdd(&scores[static_cast<int64_t>(tile_row0 / query_rows) * images + image], pass);
  }
}

template <typename TrackIndex>
void launch(const MatchU8Problem& p, float ratio, const MatchU8Outputs& out, cudaStream_t stream) {
  const dim3 grid(p.images, (p.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  match_u8_kernel<TrackIndex><<<grid, kThreads, 0, stream>>>(p.query, p.rows, p.query_rows, p.gallery, p.counts,
                                                             p.slots, p.images, ratio, out.scores, out.best, out.second,
                                                             out.best_index);
}

__global__ void match_u8_plain(const uint8_t* query, int rows, int query_rows, const uint8_t* gallery,
                               const int* counts, const int* slots, int images, float ratio, int* scores,
                               int32_t* out_best, int32_t* out_second, int* out_index) {
  const int r = blockIdx.y * blockDim.x + threadIdx.x, b = blockIdx.x;
  if (r >= rows) return;
  const int slot = slots ? slots[b] : b;
  const int n = counts[slot];
  const uint8_t* q = query + int64_t(r) * kDim;
  const uint8_t* img = gallery + int64_t(slot) * kSlotBytes;
  int32_t qn = 0;
  for (int k = 0; k < kDim; ++k) qn += int32_t(q[k]) * q[k];
  int32_t best = INT32_MAX, second = INT32_MAX;
  int index = -1;
  if (qn > 0)
    for (int j = 0; j < n; ++j) {
      const uint8_t* g = img + int64_t(j) * kDim;
      int32_t dot = 0, gn = 0;
      for (int k = 0; k < kDim; ++k) dot += int32_t(q[k]) * g[k], gn += int32_t(g[k]) * g[k];
      const int32_t d = qn + gn - 2 * dot;
      if (d < best) {
        second = best, best = d, index = j;
      } else if (d < second) {
        second = d;
      }
    }
  if (n >= 2 && qn > 0 && ratio_pass(best, second, ratio)) atomicAdd(&scores[int64_t(r / query_rows) * images + b], 1);
  const int64_t o = int64_t(b) * rows + r;
  if (out_best) out_best[o] = best;
  if (out_second) out_second[o] = second;
  if (out_index) out_index[o] = index;
}

void check(const MatchU8Problem& p, const MatchU8Outputs& out, const char* who) {
  if (!out.scores) throw std::invalid_argument(std::string(who) + ": scores are required");
  if (p.query_rows <= 0 || p.query_rows % 16 != 0 || p.rows % p.query_rows != 0)
    throw std::invalid_argument(std::string(who) + ": rows must be whole queries of a multiple of 16 rows");
}

struct DeviceInfo {
  int major = 0, minor = 0, sms = 0;
};
// Read once per device: a search launches the matcher once per run of slots.
DeviceInfo current_device() {
  int device = 0;
  PRISM_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::unordered_map<int, DeviceInfo> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  DeviceInfo d;
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, device));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device));
  return known.emplace(device, d).first->second;
}
bool has_wgmma(const DeviceInfo& d) { return d.major == 9 && d.minor == 0; }

// kAuto's choice for scores alone. The wgmma kernel computes whole blocks of 768 rows, the mma.sync
// one blocks of 256, and at full blocks the first takes 0.73 of the second's time per row (docs/benchmarks/
// matching.md, "A whole query per block"); below one block per multiprocessor the persistent grid would idle.
bool prefer_wgmma(const MatchU8Problem& p, const DeviceInfo& d) {
  const int64_t y = (p.rows + detail::kWgmmaRowsPerBlock - 1) / detail::kWgmmaRowsPerBlock;
  const int64_t wgmma_rows = y * detail::kWgmmaRowsPerBlock;
  const int64_t mma_rows = (p.rows + kRowsPerBlock - 1) / kRowsPerBlock * int64_t(kRowsPerBlock);
  return int64_t(p.images) * y >= d.sms && wgmma_rows * 73 < mma_rows * 100;
}

}  // namespace

bool gpu_path_available(GpuPath path) {
  const DeviceInfo d = current_device();
  switch (path) {
    case GpuPath::kAuto:
    case GpuPath::kMmaSync: return d.major >= 8;
    case GpuPath::kWgmma: return has_wgmma(d);
  }
  return false;
}

void match_u8_cuda(const MatchU8Problem& p, const MatchParams& params, const MatchU8Outputs& out, cudaStream_t stream,
                   GpuPath path) {
  check(p, out, "match_u8_cuda");
  DeviceInfo d = current_device();
  if (p.grid_sms < 0) throw std::invalid_argument("match_u8_cuda: grid_sms must be 0 (all) or more");
  if (p.grid_sms > 0) d.sms = std::min(d.sms, p.grid_sms);
  if (d.major < 8)
    throw gpu::CudaError("match_u8_cuda: needs an sm_80 or newer GPU (mma.sync m16n8k32, cp.async); use match_u8_cpu");
  const bool per_row = out.best || out.second || out.best_index;
  if (path == GpuPath::kWgmma && per_row)
    throw std::invalid_argument("match_u8_cuda: the wgmma kernel computes scores only, not per-row outputs");
  // cp.async copies 16 bytes at a time: a misaligned source would fault and take the context with it.
  if (reinterpret_cast<uintptr_t>(p.gallery) % 16 != 0 || reinterpret_cast<uintptr_t>(p.norms) % 16 != 0)
    throw std::invalid_argument("match_u8_cuda: the gallery and its norms must be 16-byte aligned");
  if (path == GpuPath::kWgmma && !has_wgmma(d))
    throw std::invalid_argument("match_u8_cuda: the wgmma kernel needs a compute capability 9.0 GPU (H100, H200)");
  if (p.images == 0 || p.rows == 0) return;
  PRISM_CUDA_CHECK(cudaMemsetAsync(out.scores, 0, sizeof(int) * size_t(p.queries()) * p.images, stream));
  if (per_row)
    launch<std::true_type>(p, params.ratio, out, stream);
  else if (path == GpuPath::kWgmma || (path == GpuPath::kAuto && has_wgmma(d) && prefer_wgmma(p, d)))
    detail::match_u8_scores_wgmma(p, params.ratio, out.scores, d.sms, stream);
  else
    launch<std::false_type>(p, params.ratio, out, stream);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

void match_u8_cuda_reference(const MatchU8Problem& p, const MatchParams& params, const MatchU8Outputs& out,
                             cudaStream_t stream) {
  check(p, out, "match_u8_cuda_reference");
  if (p.images == 0 || p.rows == 0) return;
  PRISM_CUDA_CHECK(cudaMemsetAsync(out.scores, 0, sizeof(int) * size_t(p.queries()) * p.images, stream));
  const dim3 grid(p.images, (p.rows + 127) / 128);  // images on x: a batch may exceed 65,535
  match_u8_plain<<<grid, 128, 0, stream>>>(p.query, p.rows, p.query_rows, p.gallery, p.counts, p.slots, p.images,
                                           params.ratio, out.scores, out.best, out.second, out.best_index);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace prism::match
