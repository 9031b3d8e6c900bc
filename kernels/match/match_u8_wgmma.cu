// The 8-bit matcher's scores on Hopper's warpgroup MMA (wgmma, sm_90a), the kernel that match_u8.cu
// takes for scores alone on an H100 or H200 (match.h, GpuPath; docs/benchmarks/matching.md, "The 8-bit
// kernel's ceiling", says what was tried on the way and what it gave).
//
// A persistent block of four warpgroups holds a whole query of 768 rows in registers: each warpgroup
// three tiles of 64 rows, as wgmma's A operand (the mma.sync m16n8k32 A layout, per warp). The block
// walks the batch's images, each staged whole (768 descriptors, 96 KiB) into shared memory with
// cp.async, double buffered across images, in the no-swizzle K-major core-matrix layout wgmma reads B
// from (PTX ISA, "Shared Memory Matrix Layout": 8 rows x 16 bytes per core matrix). For each chunk of
// 64 gallery descriptors and each of its row tiles a warpgroup issues four wgmma m64n64k32 (u8 x u8
// -> s32, exact), waits, and folds the 64 x 64 dot products into its rows' top-2 exactly as the
// mma.sync kernel does: e = |g|^2 - 2 q.g, one multiply-add and 2.5 integer min/max per distance.
// One accumulator set per warpgroup: while one warpgroup ranks, the other three keep the tensor
// cores busy (the overlap a second accumulator set would give costs registers a block of 512 threads
// does not have). Halfway through an image each thread waits for its own copies of the next one and
// computes their share of its |g|^2, so that one block barrier per image suffices. Where the caller
// keeps |g|^2 beside the gallery (MatchU8Problem::norms), they are staged with the bytes instead.
//
// Why whole queries per block: with 256 rows per block every image is staged three times over, its
// copies and barriers three times; a whole query per block stages it once (docs/benchmarks/
// matching.md has the difference this made).
#include "match/match_u8_wgmma.h"

#include <algorithm>
#include <climits>

#include <cub/warp/warp_reduce.cuh>

#include "common/gpu.h"
#include "common/mma.cuh"

namespace prism::match::detail {
namespace {

constexpr int kWarpgroups = 4, kThreads = 128 * kWarpgroups;
constexpr int kTiles = 3;  // row tiles of 64 per warpgroup: 4 x 3 x 64 = kWgmmaRowsPerBlock
constexpr int kN = 64;     // gallery descriptors per wgmma (n)
constexpr int kChunks = kSlot / kN;
constexpr int kImageBytes = kSlot * kDim;
constexpr size_t kSmemBytes = 2 * size_t(kImageBytes) + 2 * kSlot * sizeof(int32_t);
constexpr int32_t kFar = 1 << 30;  // |g|^2 of a column past the count (as in match_u8.cu)
static_assert(kWarpgroups * kTiles * 64 == kWgmmaRowsPerBlock, "a block holds one whole query");
static_assert(kSlot % kN == 0, "whole chunks per slot");
static_assert(kSlot / 4 <= kThreads, "one thread per 16-byte piece of a slot's |g|^2");

struct Top2 {
  int32_t best, second;
};
// Two new values at once: the second of {b1 <= b2} u {lo <= hi} is min(b2, hi, max(b1, lo)).
__device__ __forceinline__ void offer2(Top2& t, int32_t e0, int32_t e1) {
  const int32_t lo = min(e0, e1), hi = max(e0, e1);
  t.second = __vimin3_s32(t.second, hi, max(t.best, lo));
  t.best = min(t.best, lo);
}
__device__ __forceinline__ void merge(Top2& t, const Top2& o) {
  t.second = min(max(t.best, o.best), min(t.second, o.second));
  t.best = min(t.best, o.best);
}

// wgmma.mma_async m64n64k32 s32 += u8 x u8, A from registers, B from shared memory (descriptor);
// scale_d 0 overwrites the accumulators (the first k-step).
__device__ __forceinline__ void wgmma_m64n64k32_u8(int32_t (&d)[32], const uint32_t (&a)[4], uint64_t desc,
                                                   int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.s32.u8.u8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, "
      "%35}, %36, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]),
        "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]),
        "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]),
        "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(0), "r"(scale_d));
#else
  __trap();  // built for sm_90a only; match_u8.cu launches it on compute capability 9.0 alone
#endif
}

// A shared-memory matrix descriptor without swizzle: start address, leading-dimension byte offset
// (between core matrices along K) and stride byte offset (along N), each in 16-byte units.
__device__ __forceinline__ uint64_t smem_desc(const void* p, uint32_t lbo, uint32_t sbo) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return uint64_t((a & 0x3FFFF) >> 4) | (uint64_t((lbo & 0x3FFFF) >> 4) << 16) | (uint64_t((sbo & 0x3FFFF) >> 4) << 32);
}

// Byte offset of 16-byte piece kc of descriptor r in a staged image: chunk r / kN, core matrix
// (kc, (r % kN) / 8) at (kc x kN / 8 + (r % kN) / 8) x 128, row r % 8 within it.
__device__ __forceinline__ int staged_offset(int r, int kc) {
  const int c = r / kN, rr = r % kN;
  return c * (kN * kDim) + (kc * (kN / 8) + (rr >> 3)) * 128 + (rr & 7) * 16;
}

// Orders the accumulators against the asynchronous wgmma (the compiler must not move their reads or
// writes across the fence, the commit or the wait).
__device__ __forceinline__ void fence_regs(int32_t (&acc)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+r"(acc[i])::"memory");
}

__global__ void __launch_bounds__(kThreads, 1)
    match_u8_wgmma_kernel(const uint8_t* __restrict__ query, int rows, int query_rows,
                          const uint8_t* __restrict__ gallery, const int* __restrict__ counts,
                          const int* __restrict__ slots, const int32_t* __restrict__ gallery_norms, int images,
                          float ratio, int* scores) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) uint8_t smem[];  // [2][kImageBytes] images, then [2][kSlot] |g|^2
  int32_t* gnorm = reinterpret_cast<int32_t*>(smem + 2 * kImageBytes);
  __shared__ cub::WarpReduce<int>::TempStorage pass_sum[kThreads / 32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // Row tile m of this warp's warpgroup: 16 rows of the warp from here (the warpgroup's 64 are its 4 warps').
  auto tile_row0 = [&](int m) { return blockIdx.y * kWgmmaRowsPerBlock + m * (64 * kWarpgroups) + warp * 16; };

  uint32_t a[kTiles][4][4];  // [tile][k-step]: the mma.sync m16n8k32 A fragment of rows g, g + 8
#pragma unroll
  for (int m = 0; m < kTiles; ++m) {
    const int ra = tile_row0(m) + g, rb = ra + 8;
    auto word = [&](int r, int k) -> uint32_t {
      return r < rows ? *reinterpret_cast<const uint32_t*>(query + static_cast<int64_t>(r) * kDim + k) : 0u;
    };
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const int k = ks * 32 + t * 4;
      a[m][ks][0] = word(ra, k);
      a[m][ks][1] = word(rb, k);
      a[m][ks][2] = word(ra, k + 16);
      a[m][ks][3] = word(rb, k + 16);
    }
  }

  auto slot_of = [&](int image) { return slots ? slots[image] : image; };
  // The whole slot, padding included (its |g|^2 says kFar), into buffer `buf`; with gallery_norms,
  // the slot's |g|^2 too (192 pieces of 16 bytes, by threads 0..191).
  auto stage = [&](int image, int buf) {
    if (image < images) {
      const int64_t slot = slot_of(image);
      const uint8_t* img = gallery + slot * kSlotBytes;
      uint8_t* dst = smem + buf * kImageBytes;
      for (int v = threadIdx.x; v < kSlot * kDim / 16; v += kThreads) {
        const int r = v >> 3, kc = v & 7;
        gpu::cp_async16(dst + staged_offset(r, kc), img + static_cast<int64_t>(r) * kDim + kc * 16);
      }
      if (gallery_norms && threadIdx.x < kSlot / 4)
        gpu::cp_async16(gnorm + buf * kSlot + 4 * threadIdx.x, gallery_norms + slot * kSlot + 4 * threadIdx.x);
    }
    gpu::cp_async_commit();
  };
  // |g|^2 of an image whose copies this thread has waited for, kFar past its count. Each thread reads
  // back only the 16-byte pieces it copied itself (piece v & 7 of row v >> 3: a row's eight pieces are
  // eight neighbouring lanes of one warp), so no block barrier has to come first; shuffles sum a row.
  auto norms = [&](int image, int buf) {
    if (image >= images) return;
    const int n = counts[slot_of(image)];
    if (gallery_norms) {  // staged: only the rows past the count (padding) become kFar, in this thread's piece
      if (threadIdx.x < kSlot / 4)
        for (int i = 0; i < 4; ++i)
          if (4 * int(threadIdx.x) + i >= n) gnorm[buf * kSlot + 4 * threadIdx.x + i] = kFar;
      return;
    }
    const uint8_t* src = smem + buf * kImageBytes;
    static_assert(kSlot * kDim / 16 % kThreads == 0, "every lane takes part in every shuffle");
#pragma unroll 4
    for (int v = threadIdx.x; v < kSlot * kDim / 16; v += kThreads) {
      const int r = v >> 3;
      const uint4 w = *reinterpret_cast<const uint4*>(src + staged_offset(r, v & 7));
      uint32_t sum = __dp4a(w.x, w.x, __dp4a(w.y, w.y, __dp4a(w.z, w.z, __dp4a(w.w, w.w, 0u))));
      for (int mask = 1; mask <= 4; mask <<= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, mask);
      if ((v & 7) == 0) gnorm[buf * kSlot + r] = r < n ? int32_t(sum) : kFar;
    }
  };

  int32_t acc[32];
  Top2 top[kTiles][2];
  int buf = 0;
  // The next image's copies have landed by then (they take a small part of an image's matching).
  constexpr int kNextNorms = kChunks * kTiles / 2;
  auto landed = [&](int image, int buf) {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async wrote it; wgmma reads it
    norms(image, buf);
  };
  stage(blockIdx.x, 0);
  landed(blockIdx.x, 0);
  for (int image = blockIdx.x; image < images; image += gridDim.x, buf ^= 1) {
    // One barrier per image: this image's bytes and |g|^2 are complete, and no warp still reads the
    // other buffer (the previous image), which is staged next.
    __syncthreads();
    stage(image + gridDim.x, buf ^ 1);
    const uint8_t* tiles = smem + buf * kImageBytes;
    const int32_t* gn_lane = gnorm + buf * kSlot + 2 * t;
#pragma unroll
    for (int m = 0; m < kTiles; ++m) top[m][0] = top[m][1] = Top2{INT32_MAX, INT32_MAX};
      // Straight-line code on purpose: ptxas keeps wgmma asynchronous only where it can see which
      // accumulators a wait releases, and serialises them inside a runtime loop.
#pragma unroll
    for (int j = 0; j < kChunks * kTiles; ++j) {
      if (j == kNextNorms) landed(image + gridDim.x, buf ^ 1);
      const int ch = j / kTiles, m = j % kTiles;
      const uint8_t* chunk = tiles + ch * (kN * kDim);
      fence_regs(acc);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        wgmma_m64n64k32_u8(acc, a[m][ks], smem_desc(chunk + ks * 2 * (kN / 8) * 128, (kN / 8) * 128, 128), ks);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      fence_regs(acc);
      // acc[4i], acc[4i + 1]: row g, columns 8i + 2t, + 1; acc[4i + 2], acc[4i + 3]: row g + 8.
      const int32_t* gn = gn_lane + ch * kN;
#pragma unroll
      for (int i = 0; i < kN / 8; ++i) {
        const int2 v = *reinterpret_cast<const int2*>(gn + 8 * i);
        offer2(top[m][0], v.x - 2 * acc[4 * i], v.y - 2 * acc[4 * i + 1]);
        offer2(top[m][1], v.x - 2 * acc[4 * i + 2], v.y - 2 * acc[4 * i + 3]);
      }
    }
    const int n = counts[slot_of(image)];
#pragma unroll
    for (int m = 0; m < kTiles; ++m) {
      for (int h = 0; h < 2; ++h)
        for (int mask = 1; mask <= 2; mask <<= 1)
          merge(top[m][h], Top2{__shfl_xor_sync(0xFFFFFFFFu, top[m][h].best, mask),
                                __shfl_xor_sync(0xFFFFFFFFu, top[m][h].second, mask)});
      const int row0 = tile_row0(m);
      // |q|^2 of rows g and g + 8 of tile m, from its A fragments: recomputed per image, since registers
      // are what the block is short of, not instructions.
      int32_t qn[2];
      gpu::u8_fragment_norms(a[m], qn[0], qn[1]);
      int pass = 0;
      if (t == 0)
        for (int h = 0; h < 2; ++h) {
          const int32_t q = qn[h];
          if (row0 + g + h * 8 >= rows || q == 0) continue;
          const int32_t d1 = top[m][h].best < kFar / 2 ? q + top[m][h].best : INT32_MAX;
          const int32_t d2 = top[m][h].second < kFar / 2 ? q + top[m][h].second : INT32_MAX;
          pass += n >= 2 && ratio_pass(d1, d2, ratio);
        }
      pass = cub::WarpReduce<int>(pass_sum[warp]).Sum(pass);  // lane 0's is the warp's
      if (lane == 0 && pass > 0)  // the warp's 16 rows belong to one query (query_rows % 16 == 0)
        atomicAdd(&scores[static_cast<int64_t>(row0 / query_rows) * images + image], pass);
    }
  }
#else
  __trap();
#endif
}

}  // namespace

void match_u8_scores_wgmma(const MatchU8Problem& p, float ratio, int* scores, int sms, cudaStream_t stream) {
  // Per device, and cheap (no synchronisation): set on every launch rather than tracked per device.
  PRISM_CUDA_CHECK(
      cudaFuncSetAttribute(match_u8_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
  const int blocks_y = (p.rows + kWgmmaRowsPerBlock - 1) / kWgmmaRowsPerBlock;
  const int blocks_x = std::max(1, std::min(p.images, sms / blocks_y));
  match_u8_wgmma_kernel<<<dim3(blocks_x, blocks_y), kThreads, kSmemBytes, stream>>>(
      p.query, p.rows, p.query_rows, p.gallery, p.counts, p.slots, p.norms, p.images, ratio, scores);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace prism::match::detail
