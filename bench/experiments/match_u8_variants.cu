// An experiment, not part of the build: variants of the 8-bit matcher's scores-only kernel
// (kernels/match/match_u8.cu) timed against each other on one GPU, with their scores checked against the
// first variant and a brute-force host reference. BENCHMARKS.md ("The 8-bit kernel's ceiling") gives the
// figures and what they showed. Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a match_u8_variants.cu -o v && ./v 8192 20 1
// argv: gallery images (8,192), timed launches per variant (30), 2 = only the kernels before, the packed
// 16-bit-key variants (with exact_rows for the rows they cannot decide) and the wgmma ones.
// Standalone on purpose (one nvcc line, sm_90a): its mma/ldmatrix/cp.async wrappers, ratio_pass and
// constants copy kernels/common/mma.cuh and kernels/match/match.h; the kernel in the build is match_u8.cu.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

constexpr int kDim = 128, kSlot = 768, kSlotBytes = kSlot * kDim;
constexpr int kChunk = 128, kPitch = kDim + 16, kStages = 2;
constexpr int32_t kFar = 1 << 30;

__device__ __forceinline__ void mma(int32_t c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_nv(int32_t c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void ldm4(uint32_t r[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void cpa16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cpa_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cpa_wait1() { asm volatile("cp.async.wait_group 1;\n" ::); }

__host__ __device__ inline bool ratio_pass(int32_t d1, int32_t d2, float ratio) {
  const double r = ratio;
  return double(d1) < r * r * double(d2);
}

struct Top2 {
  int32_t best, second;
};
__device__ __forceinline__ void offer1(Top2& t, int32_t e) {
  t.second = min(t.second, max(t.best, e));
  t.best = min(t.best, e);
}
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

// Packed top-2 (kPack): rows g and g + 8 of a thread share one 32-bit register per rank, each half the
// row's key x >> 8 with x = |g|^2 + kBias - 2 q.g (0 <= x < 2^24 for any u8 rows: kBias = 2^23 exceeds
// every |q|^2). The key is monotone in the distance, so the two smallest keys are the keys of the two
// smallest distances: the ratio test is decided from their 256-wide ranges and, where a range straddles
// it, the row is matched again exactly (exact_pass). Two distances take one PRMT and the top-2 of both
// rows 2.5 16x2 min/max (DPX), against 5 32-bit min/max.
constexpr int32_t kBias = 1 << 23, kPadKey = 0xFFFFFF;  // a padding column: zero row, x = 0xFFFFFF
struct P2 {
  uint32_t best, second;
};
__device__ __forceinline__ uint32_t pack_keys(int32_t x_lo, int32_t x_hi) { return __byte_perm(x_lo, x_hi, 0x6521); }
__device__ __forceinline__ void offer2p(P2& t, uint32_t p0, uint32_t p1) {
  const uint32_t lo = __vminu2(p0, p1), hi = __vmaxu2(p0, p1);
  t.second = __vimin3_u16x2(t.second, hi, __vmaxu2(t.best, lo));
  t.best = __vminu2(t.best, lo);
}
__device__ __forceinline__ void mergep(P2& t, const P2& o) {
  t.second = __vminu2(__vmaxu2(t.best, o.best), __vminu2(t.second, o.second));
  t.best = __vminu2(t.best, o.best);
}
// 0: fails, 1: passes, 2: the key ranges straddle the ratio test.
__device__ __forceinline__ int decide(int k1, int k2, int32_t qn, float ratio) {
  auto lo = [&](int k) { return int32_t(max(int64_t(0), int64_t(k) * 256 - kBias + qn)); };
  auto hi = [&](int k) { return int32_t(min(int64_t(INT32_MAX), int64_t(k) * 256 + 255 - kBias + qn)); };
  if (ratio_pass(hi(k1), lo(k2), ratio)) return 1;
  if (!ratio_pass(lo(k1), hi(k2), ratio)) return 0;
  return 2;
}
__device__ unsigned long long g_ambiguous;  // rows re-matched, over all launches (statistics)
// The rows to match again exactly: (image, row), appended by the scores kernels, consumed by exact_rows.
constexpr unsigned kListCap = 1u << 23;  // every row of 8,192 images x 768 (the forced runs)
__device__ unsigned g_count;
__device__ uint2 g_list[kListCap];
// The ratio test of listed rows against their images, exactly: one warp per row, added to the scores.
__global__ void exact_rows(const uint8_t* __restrict__ query, int rows, int query_rows,
                           const uint8_t* __restrict__ gallery, const int* __restrict__ counts, int images, float ratio,
                           int* scores) {
  const int lane = threadIdx.x & 31, warps = gridDim.x * (blockDim.x >> 5);
  const unsigned count = min(g_count, kListCap);
  for (unsigned w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); w < count; w += warps) {
    const uint2 e = g_list[w];
    const int image = int(e.x), r = int(e.y), n = counts[image];
    const uint8_t* qrow = query + static_cast<int64_t>(r) * kDim;
    const uint8_t* img = gallery + static_cast<int64_t>(image) * kSlotBytes;
    int32_t b1 = INT32_MAX, b2 = INT32_MAX;
    const uint4* q4 = reinterpret_cast<const uint4*>(qrow);
    for (int j = lane; j < n; j += 32) {
      const uint4* g4 = reinterpret_cast<const uint4*>(img + static_cast<int64_t>(j) * kDim);
      uint32_t d = 0;
#pragma unroll
      for (int v = 0; v < kDim / 16; ++v) {
        const uint4 q = q4[v], gg = g4[v];
        uint32_t x = __vabsdiffu4(q.x, gg.x);
        d = __dp4a(x, x, d);
        x = __vabsdiffu4(q.y, gg.y);
        d = __dp4a(x, x, d);
        x = __vabsdiffu4(q.z, gg.z);
        d = __dp4a(x, x, d);
        x = __vabsdiffu4(q.w, gg.w);
        d = __dp4a(x, x, d);
      }
      b2 = min(b2, max(b1, int32_t(d)));
      b1 = min(b1, int32_t(d));
    }
    for (int mask = 16; mask > 0; mask >>= 1) {
      const int32_t o1 = __shfl_xor_sync(0xFFFFFFFFu, b1, mask), o2 = __shfl_xor_sync(0xFFFFFFFFu, b2, mask);
      b2 = min(max(b1, o1), min(b2, o2));
      b1 = min(b1, o1);
    }
    if (lane == 0 && ratio_pass(b1, b2, ratio))
      atomicAdd(&scores[static_cast<int64_t>(r / query_rows) * images + image], 1);
  }
}
// One packed state per thread row pair (g, g + 8) at the end of an image: the passes of the lanes' rows
// (the warp's sum on lane 0); rows whose key ranges straddle the test are listed for exact_rows. kForce
// lists every row (the test of that path).
template <bool kForce>
__device__ __forceinline__ int packed_passes(P2 t, int row_a, int rows, const int32_t (&qn)[2], int n, float ratio,
                                             int image, int lane) {
  for (int mask = 1; mask <= 2; mask <<= 1)
    mergep(t, P2{__shfl_xor_sync(0xFFFFFFFFu, t.best, mask), __shfl_xor_sync(0xFFFFFFFFu, t.second, mask)});
  int pass = 0;
  if ((lane & 3) == 0)
    for (int h = 0; h < 2; ++h) {
      const int r = row_a + h * 8;
      if (r >= rows || n < 2 || qn[h] <= 0) continue;
      const int k1 = (t.best >> (16 * h)) & 0xFFFF, k2 = (t.second >> (16 * h)) & 0xFFFF;
      const int dc = kForce ? 2 : decide(k1, k2, qn[h], ratio);
      pass += dc == 1;
      if (dc == 2) {
        const unsigned i = atomicAdd(&g_count, 1u);
        if (i < kListCap) g_list[i] = make_uint2(unsigned(image), unsigned(r));
        atomicAdd(&g_ambiguous, 1ull);
      }
    }
  for (int off = 16; off > 0; off >>= 1) pass += __shfl_down_sync(0xFFFFFFFFu, pass, off);
  return pass;
}

// Options: kBatch n-tiles whose mma run before their epilogues; kSwp: the next batch's mma are issued before
// this batch's epilogue (fully unrolled).
template <int kBatch>
__device__ __forceinline__ void mma_batch(const uint8_t* lane_row, const int32_t* gnorm, int nt, int c2,
                                          const uint32_t (&a)[2][4][4], int32_t (&c)[kBatch][2][4],
                                          int2 (&gn)[kBatch]) {
  uint32_t b[kBatch][2][4];
#pragma unroll
  for (int u = 0; u < kBatch; ++u) {
#pragma unroll
    for (int h = 0; h < 2; ++h) ldm4(b[u][h], lane_row + (nt + u) * 8 * kPitch + h * 64);
    gn[u] = *reinterpret_cast<const int2*>(gnorm + (nt + u) * 8 + c2);
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int i = 0; i < 4; ++i) c[u][m][i] = 0;
  }
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
#pragma unroll
      for (int m = 0; m < 2; ++m) mma(c[u][m], a[m][ks], b[u][ks / 2][(ks & 1) * 2], b[u][ks / 2][(ks & 1) * 2 + 1]);
}
template <int kBatch, bool kPair>
__device__ __forceinline__ void epilogue(const int32_t (&c)[kBatch][2][4], const int2 (&gn)[kBatch], Top2 (&top)[4]) {
#pragma unroll
  for (int u = 0; u < kBatch; ++u)
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      if (kPair) {
        offer2(top[2 * m], gn[u].x - 2 * c[u][m][0], gn[u].y - 2 * c[u][m][1]);
        offer2(top[2 * m + 1], gn[u].x - 2 * c[u][m][2], gn[u].y - 2 * c[u][m][3]);
      } else {
        offer1(top[2 * m], gn[u].x - 2 * c[u][m][0]);
        offer1(top[2 * m + 1], gn[u].x - 2 * c[u][m][2]);
        offer1(top[2 * m], gn[u].y - 2 * c[u][m][1]);
        offer1(top[2 * m + 1], gn[u].y - 2 * c[u][m][3]);
      }
    }
}
template <int kBatch, bool kPair, bool kSwp>
__device__ __forceinline__ void match_chunk(const uint8_t (*tile)[kPitch], const int32_t* gnorm,
                                            const uint32_t (&a)[2][4][4], Top2 (&top)[4], int lane) {
  const int c2 = (lane & 3) * 2;
  const uint8_t* lane_row = &tile[lane & 7][(lane >> 3) * 16];
  if (kSwp) {
    int32_t c[2][kBatch][2][4];
    int2 gn[2][kBatch];
    mma_batch<kBatch>(lane_row, gnorm, 0, c2, a, c[0], gn[0]);
#pragma unroll
    for (int nt = kBatch, p = 1; nt < kChunk / 8; nt += kBatch, p ^= 1) {
      mma_batch<kBatch>(lane_row, gnorm, nt, c2, a, c[p], gn[p]);
      epilogue<kBatch, kPair>(c[p ^ 1], gn[p ^ 1], top);
    }
    epilogue<kBatch, kPair>(c[((kChunk / 8 / kBatch) - 1) & 1], gn[((kChunk / 8 / kBatch) - 1) & 1], top);
  } else {
#pragma unroll(kBatch == 1 ? 2 : 1)
    for (int nt = 0; nt < kChunk / 8; nt += kBatch) {
      int32_t c[kBatch][2][4];
      int2 gn[kBatch];
      mma_batch<kBatch>(lane_row, gnorm, nt, c2, a, c, gn);
      epilogue<kBatch, kPair>(c, gn, top);
    }
  }
}

template <int kBatch>
__device__ __forceinline__ void match_chunk_packed(const uint8_t (*tile)[kPitch], const int32_t* gnorm,
                                                   const uint32_t (&a)[2][4][4], P2 (&top)[2], int lane) {
  const int c2 = (lane & 3) * 2;
  const uint8_t* lane_row = &tile[lane & 7][(lane >> 3) * 16];
#pragma unroll(kBatch == 1 ? 2 : 1)
  for (int nt = 0; nt < kChunk / 8; nt += kBatch) {
    int32_t c[kBatch][2][4];
    int2 gn[kBatch];
    mma_batch<kBatch>(lane_row, gnorm, nt, c2, a, c, gn);
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
#pragma unroll
      for (int m = 0; m < 2; ++m)
        offer2p(top[m], pack_keys(gn[u].x - 2 * c[u][m][0], gn[u].x - 2 * c[u][m][2]),
                pack_keys(gn[u].y - 2 * c[u][m][1], gn[u].y - 2 * c[u][m][3]));
  }
}

template <int kBatch, bool kPair, bool kSwp, int kMinBlocks, bool kPersistent, bool kPreNorm = false, int kWarps = 8,
          int kPack = 0>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks)
    kern(const uint8_t* __restrict__ query, int rows, int query_rows, const uint8_t* __restrict__ gallery,
         const int* __restrict__ counts, const int32_t* __restrict__ norms, int images, float ratio, int* scores) {
  constexpr int kThreads = 32 * kWarps;
  __shared__ __align__(16) uint8_t tile[kStages][kChunk][kPitch];
  __shared__ __align__(16) int32_t gnorm[kStages][kChunk];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = (lane & 3) * 4;
  const int row0 = blockIdx.y * kThreads + warp * 32;
  uint32_t a[2][4][4];
  int32_t qn[4];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int ra = row0 + m * 16 + g, rb = ra + 8;
    auto word = [&](int r, int k) -> uint32_t {
      return r < rows ? *reinterpret_cast<const uint32_t*>(query + static_cast<int64_t>(r) * kDim + k) : 0u;
    };
    uint32_t sa = 0, sb = 0;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const int k = ks * 32 + t4;
      a[m][ks][0] = word(ra, k);
      a[m][ks][1] = word(rb, k);
      a[m][ks][2] = word(ra, k + 16);
      a[m][ks][3] = word(rb, k + 16);
      sa = __dp4a(a[m][ks][0], a[m][ks][0], sa);
      sa = __dp4a(a[m][ks][2], a[m][ks][2], sa);
      sb = __dp4a(a[m][ks][1], a[m][ks][1], sb);
      sb = __dp4a(a[m][ks][3], a[m][ks][3], sb);
    }
    for (int mask = 1; mask <= 2; mask <<= 1) {
      sa += __shfl_xor_sync(0xFFFFFFFFu, sa, mask);
      sb += __shfl_xor_sync(0xFFFFFFFFu, sb, mask);
    }
    qn[2 * m] = int32_t(sa);
    qn[2 * m + 1] = int32_t(sb);
  }
  Top2 top[4];
#pragma unroll
  for (int h = 0; h < 4; ++h) top[h] = {INT32_MAX, INT32_MAX};
  P2 ptop[2] = {{0xFFFFFFFFu, 0xFFFFFFFFu}, {0xFFFFFFFFu, 0xFFFFFFFFu}};

  const int first = kPersistent ? blockIdx.x : blockIdx.x;
  const int step = kPersistent ? gridDim.x : images;
  // The sequence of (image, chunk) this block works through.
  int img = first, chunk = 0;
  if (img >= images) return;
  int n = counts[img], chunks = (n + kChunk - 1) / kChunk;
  auto stage = [&](int image, int ch, int buf) {
    const uint8_t* src = gallery + static_cast<int64_t>(image) * kSlotBytes;
    for (int v = threadIdx.x; v < kChunk * kDim / 16; v += kThreads) {
      const int r = v / (kDim / 16), c = (v % (kDim / 16)) * 16;
      cpa16(&tile[buf][r][c], src + static_cast<int64_t>(ch * kChunk + r) * kDim + c);
    }
    if (kPreNorm && threadIdx.x < kChunk / 4)
      cpa16(&gnorm[buf][threadIdx.x * 4], norms + static_cast<int64_t>(image) * kSlot + ch * kChunk + threadIdx.x * 4);
    cpa_commit();
  };
  // next(): the (image, chunk) after (i, c), or image >= images.
  auto next = [&](int& i, int& c, int& nn, int& cc) {
    if (++c < cc) return;
    c = 0;
    for (i += step; i < images; i += step) {  // images without descriptors stage nothing
      nn = counts[i];
      cc = (nn + kChunk - 1) / kChunk;
      if (cc > 0) return;
    }
  };
  int si = img, sc = chunk, sn = n, scc = chunks;  // the staging cursor, one ahead
  if (chunks > 0) stage(si, sc, 0);
  next(si, sc, sn, scc);
  int buf = 0;
  while (img < images) {
    if (chunks > 0) {
      if (si < images && scc > 0)
        stage(si, sc, buf ^ 1);
      else
        cpa_commit();
      cpa_wait1();
      __syncthreads();
      if (!kPreNorm)
        for (int d0 = 0; d0 < kChunk; d0 += kThreads / 2) {
          const int d = d0 + (threadIdx.x >> 1);
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
          const bool in = chunk * kChunk + d < n;
          if (kPack && !in) {
            uint4* w = reinterpret_cast<uint4*>(&tile[buf][d][(threadIdx.x & 1) * 64]);
            for (int i = 0; i < 4; ++i) w[i] = make_uint4(0, 0, 0, 0);
          }
          if ((threadIdx.x & 1) == 0)
            gnorm[buf][d] = kPack ? (in ? int32_t(s) + kBias : kPadKey) : in ? int32_t(s) : kFar;
        }
      if (!kPreNorm) __syncthreads();
      if (kPack)
        match_chunk_packed<kBatch>(tile[buf], gnorm[buf], a, ptop, lane);
      else
        match_chunk<kBatch, kPair, kSwp>(tile[buf], gnorm[buf], a, top, lane);
      __syncthreads();
      buf ^= 1;
      if (si < images) next(si, sc, sn, scc);
    }
    if (kPack && chunk + 1 >= chunks) {
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int32_t q2[2] = {qn[2 * m], qn[2 * m + 1]};
        const int pass = packed_passes<kPack == 2>(ptop[m], row0 + m * 16 + g, rows, q2, n, ratio, img, lane);
        ptop[m] = {0xFFFFFFFFu, 0xFFFFFFFFu};
        const int tile_row0 = row0 + m * 16;
        if (lane == 0 && pass > 0 && tile_row0 < rows)
          atomicAdd(&scores[static_cast<int64_t>(tile_row0 / query_rows) * images + img], pass);
      }
      img += step;
      chunk = 0;
      if (img < images) {
        n = counts[img];
        chunks = (n + kChunk - 1) / kChunk;
      }
    } else if (chunk + 1 >= chunks) {  // the image is done: report it and start the next
      Top2 t[4];
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        t[h] = top[h];
        for (int mask = 1; mask <= 2; mask <<= 1) {
          const Top2 o{__shfl_xor_sync(0xFFFFFFFFu, t[h].best, mask), __shfl_xor_sync(0xFFFFFFFFu, t[h].second, mask)};
          merge(t[h], o);
        }
        top[h] = {INT32_MAX, INT32_MAX};
      }
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        int pass = 0;
        if ((lane & 3) == 0)
          for (int h = 2 * m; h < 2 * m + 2; ++h) {
            const int r = row0 + m * 16 + g + (h & 1) * 8;
            if (r >= rows) continue;
            const bool some = qn[h] > 0 && t[h].best<kFar / 2, two = qn[h]> 0 && t[h].second < kFar / 2;
            const int32_t d1 = some ? qn[h] + t[h].best : INT32_MAX, d2 = two ? qn[h] + t[h].second : INT32_MAX;
            pass += n >= 2 && qn[h] > 0 && ratio_pass(d1, d2, ratio);
          }
        for (int off = 16; off > 0; off >>= 1) pass += __shfl_down_sync(0xFFFFFFFFu, pass, off);
        const int tile_row0 = row0 + m * 16;
        if (lane == 0 && pass > 0 && tile_row0 < rows)
          atomicAdd(&scores[static_cast<int64_t>(tile_row0 / query_rows) * images + img], pass);
      }
      img += step;
      chunk = 0;
      if (img < images) {
        n = counts[img];
        chunks = (n + kChunk - 1) / kChunk;
      }
    } else {
      ++chunk;
    }
  }
}

// wgmma with A from registers, s32 += u8 x u8, as inline PTX (N/2 accumulator registers per thread).
template <int N>
__device__ void wgmma_u8(int32_t (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc, int scale_d);
template <>
__device__ __forceinline__ void wgmma_u8<64>(int32_t (&d)[32], const uint32_t (&a)[4], uint64_t desc, int scale_d) {
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
}
template <>
__device__ __forceinline__ void wgmma_u8<128>(int32_t (&d)[64], const uint32_t (&a)[4], uint64_t desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.u8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
      "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
      "%58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]),
        "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]),
        "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]),
        "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]),
        "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]),
        "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]),
        "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]),
        "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(0), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wgmma_u8<256>(int32_t (&d)[128], const uint32_t (&a)[4], uint64_t desc, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %134, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.s32.u8.u8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, "
      "%14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "
      "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, "
      "%58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, "
      "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, "
      "%120, %121, %122, %123, %124, %125, %126, %127}, "
      "{%128, %129, %130, %131}, %132, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]),
        "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]),
        "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]),
        "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]),
        "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]),
        "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]),
        "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]),
        "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63]), "+r"(d[64]),
        "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]), "+r"(d[70]), "+r"(d[71]), "+r"(d[72]),
        "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]), "+r"(d[77]), "+r"(d[78]), "+r"(d[79]), "+r"(d[80]),
        "+r"(d[81]), "+r"(d[82]), "+r"(d[83]), "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]), "+r"(d[88]),
        "+r"(d[89]), "+r"(d[90]), "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]), "+r"(d[96]),
        "+r"(d[97]), "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]), "+r"(d[104]),
        "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]), "+r"(d[110]), "+r"(d[111]), "+r"(d[112]),
        "+r"(d[113]), "+r"(d[114]), "+r"(d[115]), "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]), "+r"(d[120]),
        "+r"(d[121]), "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(0), "r"(scale_d));
}
// The wgmma variant: a warpgroup takes 64 query rows (A from registers, the mma.sync m16n8k32 A layout per
// warp); the block stages chunks of kN gallery descriptors in the no-swizzle K-major core-matrix layout
// (8 rows x 16 bytes per core matrix; core matrix (nb, kc) at (kc * kN / 8 + nb) * 128 bytes), |g|^2 from
// a precomputed array; chunk c's wgmma run while chunk c-1's epilogue does the top-2.
__device__ __forceinline__ uint64_t smem_desc(const void* p, uint32_t lbo, uint32_t sbo) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return uint64_t((a & 0x3FFFF) >> 4) | (uint64_t((lbo & 0x3FFFF) >> 4) << 16) | (uint64_t((sbo & 0x3FFFF) >> 4) << 32);
}
template <int kN, int kWG, int kStagesW, int kMinBlocks, bool kSwapLS>
__global__ void __launch_bounds__(128 * kWG, kMinBlocks)
    kern_wg(const uint8_t* __restrict__ query, int rows, int query_rows, const uint8_t* __restrict__ gallery,
            const int* __restrict__ counts, const int32_t* __restrict__ norms, int images, float ratio, int* scores) {
  constexpr int kThreads = 128 * kWG, kTileBytes = kN * kDim;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* tiles = smem;                                                      // [kStagesW][kTileBytes]
  int32_t* gnorm = reinterpret_cast<int32_t*>(smem + kStagesW * kTileBytes);  // [kStagesW][kN]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.y * (64 * kWG) + warp * 16;  // this warp's 16 rows
  const int image = blockIdx.x, n = counts[image], chunks = kSlot / kN;
  const uint8_t* img = gallery + static_cast<int64_t>(image) * kSlotBytes;
  uint32_t a[4][4];
  int32_t qn[2];
  {
    const int ra = row0 + g, rb = ra + 8;
    auto word = [&](int r, int k) -> uint32_t {
      return r < rows ? *reinterpret_cast<const uint32_t*>(query + static_cast<int64_t>(r) * kDim + k) : 0u;
    };
    uint32_t sa = 0, sb = 0;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const int k = ks * 32 + t * 4;
      a[ks][0] = word(ra, k);
      a[ks][1] = word(rb, k);
      a[ks][2] = word(ra, k + 16);
      a[ks][3] = word(rb, k + 16);
      sa = __dp4a(a[ks][0], a[ks][0], sa);
      sa = __dp4a(a[ks][2], a[ks][2], sa);
      sb = __dp4a(a[ks][1], a[ks][1], sb);
      sb = __dp4a(a[ks][3], a[ks][3], sb);
    }
    for (int mask = 1; mask <= 2; mask <<= 1) {
      sa += __shfl_xor_sync(0xFFFFFFFFu, sa, mask);
      sb += __shfl_xor_sync(0xFFFFFFFFu, sb, mask);
    }
    qn[0] = int32_t(sa);
    qn[1] = int32_t(sb);
  }
  Top2 top[2] = {{INT32_MAX, INT32_MAX}, {INT32_MAX, INT32_MAX}};
  auto stage = [&](int ch) {
    if (ch < chunks) {
      const int buf = ch % kStagesW;
      uint8_t* dst = tiles + buf * kTileBytes;
      for (int v = threadIdx.x; v < kN * kDim / 16; v += kThreads) {
        const int r = v >> 3, kc = v & 7;  // descriptor r of the chunk, bytes 16 kc..
        cpa16(dst + (kc * (kN / 8) + (r >> 3)) * 128 + (r & 7) * 16,
              img + static_cast<int64_t>(ch * kN + r) * kDim + kc * 16);
      }
      for (int v = threadIdx.x; v < kN / 4; v += kThreads)
        cpa16(gnorm + buf * kN + v * 4, norms + static_cast<int64_t>(image) * kSlot + ch * kN + v * 4);
    }
    cpa_commit();
  };
  constexpr uint32_t kLbo = kSwapLS ? 128 : (kN / 8) * 128, kSbo = kSwapLS ? (kN / 8) * 128 : 128;
  int32_t d[2][kN / 2];
  auto fence_regs = [](int32_t(&acc)[kN / 2]) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) asm volatile("" : "+r"(acc[i])::"memory");
  };
  auto issue = [&](int ch, int32_t(&acc)[kN / 2]) {
    const uint8_t* tile = tiles + (ch % kStagesW) * kTileBytes;
    fence_regs(acc);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_u8<kN>(acc, a[ks], smem_desc(tile + ks * 2 * (kN / 8) * 128, kLbo, kSbo), ks);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    fence_regs(acc);
  };
  auto epilogue = [&](int ch, const int32_t(&acc)[kN / 2]) {
    const int32_t* gn = gnorm + (ch % kStagesW) * kN + 2 * t;
#pragma unroll
    for (int i = 0; i < kN / 8; ++i) {
      const int2 v = *reinterpret_cast<const int2*>(gn + 8 * i);
      offer2(top[0], v.x - 2 * acc[4 * i], v.y - 2 * acc[4 * i + 1]);
      offer2(top[1], v.x - 2 * acc[4 * i + 2], v.y - 2 * acc[4 * i + 3]);
    }
  };
  // Every chunk of the slot, fully unrolled: ptxas tracks which accumulators a wgmma.wait_group has released
  // only in straight-line code (a loop serialises the wgmma). Chunks past the count are padding: |g|^2 = kFar.
  constexpr int kChunks = kSlot / kN;
#pragma unroll
  for (int s = 0; s < kStagesW - 2; ++s) stage(s);
#pragma unroll
  for (int ch = 0; ch < kChunks; ++ch) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kStagesW - 3) : "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    stage(ch + kStagesW - 2);
    issue(ch, d[ch & 1]);
    if (ch > 0) {
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      fence_regs(d[(ch - 1) & 1]);
      epilogue(ch - 1, d[(ch - 1) & 1]);
    }
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  fence_regs(d[(kChunks - 1) & 1]);
  epilogue(kChunks - 1, d[(kChunks - 1) & 1]);
  for (int h = 0; h < 2; ++h)
    for (int mask = 1; mask <= 2; mask <<= 1) {
      const Top2 o{__shfl_xor_sync(0xFFFFFFFFu, top[h].best, mask), __shfl_xor_sync(0xFFFFFFFFu, top[h].second, mask)};
      merge(top[h], o);
    }
  int pass = 0;
  if (t == 0)
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + g + h * 8;
      if (r >= rows) continue;
      const bool some = qn[h] > 0 && top[h].best<kFar / 2, two = qn[h]> 0 && top[h].second < kFar / 2;
      const int32_t d1 = some ? qn[h] + top[h].best : INT32_MAX, d2 = two ? qn[h] + top[h].second : INT32_MAX;
      pass += n >= 2 && qn[h] > 0 && ratio_pass(d1, d2, ratio);
    }
  for (int off = 16; off > 0; off >>= 1) pass += __shfl_down_sync(0xFFFFFFFFu, pass, off);
  if (lane == 0 && pass > 0 && row0 < rows)
    atomicAdd(&scores[static_cast<int64_t>(row0 / query_rows) * images + image], pass);
}

// Persistent wgmma variant: 4 warpgroups (256 query rows) per block, one block per SM; the whole gallery
// image (768 descriptors, 12 chunks of 64 in the core-matrix layout) and its |g|^2 are staged at once, double
// buffered across images: two block barriers per image, none per chunk.
template <int kWGp, int kEpi = 1, int kPack = 0, int kSplit = 1>
__global__ void __launch_bounds__(128 * kWGp, 1)
    kern_wgp(const uint8_t* __restrict__ query, int rows, int query_rows, const uint8_t* __restrict__ gallery,
             const int* __restrict__ counts, const int32_t* __restrict__ norms, int images, float ratio, int* scores) {
  constexpr int kN = 64, kThreads = 128 * kWGp, kImgBytes = kSlot * kDim, kChunks = kSlot / kN;
  extern __shared__ __align__(128) uint8_t smem[];
  int32_t* gnorm = reinterpret_cast<int32_t*>(smem + 2 * kImgBytes);  // [2][kSlot]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.y * (64 * kWGp) + warp * 16;
  uint32_t a[4][4];
  int32_t qn[2];
  {
    const int ra = row0 + g, rb = ra + 8;
    auto word = [&](int r, int k) -> uint32_t {
      return r < rows ? *reinterpret_cast<const uint32_t*>(query + static_cast<int64_t>(r) * kDim + k) : 0u;
    };
    uint32_t sa = 0, sb = 0;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const int k = ks * 32 + t * 4;
      a[ks][0] = word(ra, k);
      a[ks][1] = word(rb, k);
      a[ks][2] = word(ra, k + 16);
      a[ks][3] = word(rb, k + 16);
      sa = __dp4a(a[ks][0], a[ks][0], sa);
      sa = __dp4a(a[ks][2], a[ks][2], sa);
      sb = __dp4a(a[ks][1], a[ks][1], sb);
      sb = __dp4a(a[ks][3], a[ks][3], sb);
    }
    for (int mask = 1; mask <= 2; mask <<= 1) {
      sa += __shfl_xor_sync(0xFFFFFFFFu, sa, mask);
      sb += __shfl_xor_sync(0xFFFFFFFFu, sb, mask);
    }
    qn[0] = int32_t(sa);
    qn[1] = int32_t(sb);
  }
  auto stage = [&](int image, int buf) {
    if (image < images) {
      const uint8_t* img = gallery + static_cast<int64_t>(image) * kSlotBytes;
      uint8_t* dst = smem + buf * kImgBytes;
      for (int v = threadIdx.x; v < kSlot * kDim / 16; v += kThreads) {
        const int r = v >> 3, kc = v & 7, c = r / kN, rr = r % kN;
        cpa16(dst + c * (kN * kDim) + (kc * (kN / 8) + (rr >> 3)) * 128 + (rr & 7) * 16,
              img + static_cast<int64_t>(r) * kDim + kc * 16);
      }
      for (int v = threadIdx.x; v < kSlot / 4; v += kThreads)
        cpa16(gnorm + buf * kSlot + v * 4, norms + static_cast<int64_t>(image) * kSlot + v * 4);
    }
    cpa_commit();
  };
  auto fence_regs = [](int32_t(&acc)[kN / 2]) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) asm volatile("" : "+r"(acc[i])::"memory");
  };
  int32_t d[2][kN / 2];
  Top2 top[2], tops[2][kSplit > 1 ? kSplit - 1 : 1];  // tops: more running top-2 per row (kSplit)
  P2 ptop;
  int buf = 0;
  stage(blockIdx.x, 0);
  for (int image = blockIdx.x; image < images; image += gridDim.x, buf ^= 1) {
    __syncthreads();  // every warpgroup is done with the other buffer
    stage(image + gridDim.x, buf ^ 1);
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const uint8_t* tiles = smem + buf * kImgBytes;
    const int32_t* gimg = gnorm + buf * kSlot + 2 * t;
    top[0] = top[1] = Top2{INT32_MAX, INT32_MAX};
#pragma unroll
    for (int s = 0; s < kSplit - 1; ++s) tops[0][s] = tops[1][s] = Top2{INT32_MAX, INT32_MAX};
    ptop = P2{0xFFFFFFFFu, 0xFFFFFFFFu};
    auto issue = [&](int ch, int32_t(&acc)[kN / 2]) {
      const uint8_t* tile = tiles + ch * (kN * kDim);
      fence_regs(acc);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        wgmma_u8<kN>(acc, a[ks], smem_desc(tile + ks * 2 * (kN / 8) * 128, (kN / 8) * 128, 128), ks);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      fence_regs(acc);
    };
    auto epilogue = [&](int ch, const int32_t(&acc)[kN / 2]) {
      const int32_t* gn = gimg + ch * kN;
      if (kPack) {
#pragma unroll
        for (int i = 0; i < kN / 8; ++i) {
          const int2 v = *reinterpret_cast<const int2*>(gn + 8 * i);
          offer2p(ptop, pack_keys(v.x - 2 * acc[4 * i], v.x - 2 * acc[4 * i + 2]),
                  pack_keys(v.y - 2 * acc[4 * i + 1], v.y - 2 * acc[4 * i + 3]));
        }
        return;
      }
      if (kEpi == 0) {
#pragma unroll
        for (int i = 0; i < kN / 2; i += 4) top[0].best ^= acc[i] + acc[i + 1] + acc[i + 2] + acc[i + 3];
        return;
      }
#pragma unroll
      for (int rep = 0; rep < kEpi; ++rep)
#pragma unroll
        for (int i = 0; i < kN / 8; ++i) {
          const int2 v = *reinterpret_cast<const int2*>(gn + 8 * i);
          Top2& t0 = i % kSplit == 0 ? top[0] : tops[0][i % kSplit - 1];
          Top2& t1 = i % kSplit == 0 ? top[1] : tops[1][i % kSplit - 1];
          offer2(t0, v.x - 2 * acc[4 * i] + rep, v.y - 2 * acc[4 * i + 1]);
          offer2(t1, v.x - 2 * acc[4 * i + 2] + rep, v.y - 2 * acc[4 * i + 3]);
        }
    };
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch) {
      issue(ch, d[ch & 1]);
      if (ch > 0) {
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        fence_regs(d[(ch - 1) & 1]);
        epilogue(ch - 1, d[(ch - 1) & 1]);
      }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    fence_regs(d[(kChunks - 1) & 1]);
    epilogue(kChunks - 1, d[(kChunks - 1) & 1]);
    const int n = counts[image];
    if (kPack) {
      const int pass = packed_passes<kPack == 2>(ptop, row0 + g, rows, qn, n, ratio, image, lane);
      if (lane == 0 && pass > 0 && row0 < rows)
        atomicAdd(&scores[static_cast<int64_t>(row0 / query_rows) * images + image], pass);
      continue;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int s = 0; s < kSplit - 1; ++s) merge(top[h], tops[h][s]);
    for (int h = 0; h < 2; ++h)
      for (int mask = 1; mask <= 2; mask <<= 1) {
        const Top2 o{__shfl_xor_sync(0xFFFFFFFFu, top[h].best, mask),
                     __shfl_xor_sync(0xFFFFFFFFu, top[h].second, mask)};
        merge(top[h], o);
      }
    int pass = 0;
    if (t == 0)
      for (int h = 0; h < 2; ++h) {
        const int r = row0 + g + h * 8;
        if (r >= rows) continue;
        const bool some = qn[h] > 0 && top[h].best<kFar / 2, two = qn[h]> 0 && top[h].second < kFar / 2;
        const int32_t d1 = some ? qn[h] + top[h].best : INT32_MAX, d2 = two ? qn[h] + top[h].second : INT32_MAX;
        pass += n >= 2 && qn[h] > 0 && ratio_pass(d1, d2, ratio);
      }
    for (int off = 16; off > 0; off >>= 1) pass += __shfl_down_sync(0xFFFFFFFFu, pass, off);
    if (lane == 0 && pass > 0 && row0 < rows)
      atomicAdd(&scores[static_cast<int64_t>(row0 / query_rows) * images + image], pass);
  }
}

// Larger wgmma tiles and several query tiles per warpgroup (kern_pp): a warpgroup holds kMT tiles of 64
// query rows in registers and walks the staged image in chunks of kN descriptors; the (chunk, tile) pairs
// run in order, with kBuf accumulator sets: at 2, pair j's wgmma run while pair j-1's top-2 is done; at 1,
// only the other warpgroups' wgmma overlap a warpgroup's top-2 (ping-pong left to the scheduler).
// Rows per block 64 kWG kMT; one block per SM (the whole image staged twice), the grid persistent.
template <int kN, int kWG, int kMT, int kBuf, int kEpi = 1>
__global__ void __launch_bounds__(128 * kWG, 1)
    kern_pp(const uint8_t* __restrict__ query, int rows, int query_rows, const uint8_t* __restrict__ gallery,
            const int* __restrict__ counts, const int32_t* __restrict__ norms, int images, float ratio, int* scores) {
  constexpr int kThreads = 128 * kWG, kImgBytes = kSlot * kDim, kChunks = kSlot / kN, kPairs = kChunks * kMT;
  constexpr int kRowsPerBlock = 64 * kWG * kMT;
  extern __shared__ __align__(128) uint8_t smem[];
  int32_t* gnorm = reinterpret_cast<int32_t*>(smem + 2 * kImgBytes);  // [2][kSlot]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  auto row_of = [&](int mt) { return blockIdx.y * kRowsPerBlock + mt * 64 * kWG + warp * 16; };
  uint32_t a[kMT][4][4];
  int32_t qn[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const int ra = row_of(mt) + g, rb = ra + 8;
    auto word = [&](int r, int k) -> uint32_t {
      return r < rows ? *reinterpret_cast<const uint32_t*>(query + static_cast<int64_t>(r) * kDim + k) : 0u;
    };
    uint32_t sa = 0, sb = 0;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      const int k = ks * 32 + t * 4;
      a[mt][ks][0] = word(ra, k);
      a[mt][ks][1] = word(rb, k);
      a[mt][ks][2] = word(ra, k + 16);
      a[mt][ks][3] = word(rb, k + 16);
      sa = __dp4a(a[mt][ks][0], a[mt][ks][0], sa);
      sa = __dp4a(a[mt][ks][2], a[mt][ks][2], sa);
      sb = __dp4a(a[mt][ks][1], a[mt][ks][1], sb);
      sb = __dp4a(a[mt][ks][3], a[mt][ks][3], sb);
    }
    for (int mask = 1; mask <= 2; mask <<= 1) {
      sa += __shfl_xor_sync(0xFFFFFFFFu, sa, mask);
      sb += __shfl_xor_sync(0xFFFFFFFFu, sb, mask);
    }
    qn[mt][0] = int32_t(sa);
    qn[mt][1] = int32_t(sb);
  }
  auto stage = [&](int image, int buf) {
    if (image < images) {
      const uint8_t* img = gallery + static_cast<int64_t>(image) * kSlotBytes;
      uint8_t* dst = smem + buf * kImgBytes;
      for (int v = threadIdx.x; v < kSlot * kDim / 16; v += kThreads) {
        const int r = v >> 3, kc = v & 7, c = r / kN, rr = r % kN;
        cpa16(dst + c * (kN * kDim) + (kc * (kN / 8) + (rr >> 3)) * 128 + (rr & 7) * 16,
              img + static_cast<int64_t>(r) * kDim + kc * 16);
      }
      for (int v = threadIdx.x; v < kSlot / 4; v += kThreads)
        cpa16(gnorm + buf * kSlot + v * 4, norms + static_cast<int64_t>(image) * kSlot + v * 4);
    }
    cpa_commit();
  };
  auto fence_regs = [](int32_t(&acc)[kN / 2]) {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) asm volatile("" : "+r"(acc[i])::"memory");
  };
  int32_t d[kBuf][kN / 2];
  Top2 top[kMT][2];
  int buf = 0;
  stage(blockIdx.x, 0);
  for (int image = blockIdx.x; image < images; image += gridDim.x, buf ^= 1) {
    __syncthreads();  // every warpgroup is done with the other buffer
    stage(image + gridDim.x, buf ^ 1);
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const uint8_t* tiles = smem + buf * kImgBytes;
    const int32_t* gimg = gnorm + buf * kSlot + 2 * t;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) top[mt][0] = top[mt][1] = Top2{INT32_MAX, INT32_MAX};
    auto issue = [&](int j, int32_t(&acc)[kN / 2]) {
      const int ch = j / kMT, mt = j % kMT;
      const uint8_t* tile = tiles + ch * (kN * kDim);
      fence_regs(acc);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        wgmma_u8<kN>(acc, a[mt][ks], smem_desc(tile + ks * 2 * (kN / 8) * 128, (kN / 8) * 128, 128), ks);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      fence_regs(acc);
    };
    auto epilogue = [&](int j, const int32_t(&acc)[kN / 2]) {
      const int ch = j / kMT, mt = j % kMT;
      const int32_t* gn = gimg + ch * kN;
      if (kEpi == 0) {
#pragma unroll
        for (int i = 0; i < kN / 2; i += 4) top[mt][0].best ^= acc[i] + acc[i + 1] + acc[i + 2] + acc[i + 3];
        return;
      }
#pragma unroll
      for (int i = 0; i < kN / 8; ++i) {
        const int2 v = *reinterpret_cast<const int2*>(gn + 8 * i);
        offer2(top[mt][0], v.x - 2 * acc[4 * i], v.y - 2 * acc[4 * i + 1]);
        offer2(top[mt][1], v.x - 2 * acc[4 * i + 2], v.y - 2 * acc[4 * i + 3]);
      }
    };
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      if (kBuf == 1) {
        issue(j, d[0]);
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        fence_regs(d[0]);
        epilogue(j, d[0]);
      } else {
        issue(j, d[j % kBuf]);
        if (j > 0) {
          asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
          fence_regs(d[(j - 1) % kBuf]);
          epilogue(j - 1, d[(j - 1) % kBuf]);
        }
      }
    }
    if (kBuf > 1) {
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      fence_regs(d[(kPairs - 1) % kBuf]);
      epilogue(kPairs - 1, d[(kPairs - 1) % kBuf]);
    }
    const int n = counts[image];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      for (int h = 0; h < 2; ++h)
        for (int mask = 1; mask <= 2; mask <<= 1) {
          const Top2 o{__shfl_xor_sync(0xFFFFFFFFu, top[mt][h].best, mask),
                       __shfl_xor_sync(0xFFFFFFFFu, top[mt][h].second, mask)};
          merge(top[mt][h], o);
        }
      const int row0 = row_of(mt);
      int pass = 0;
      if (t == 0)
        for (int h = 0; h < 2; ++h) {
          const int r = row0 + g + h * 8;
          if (r >= rows) continue;
          const int32_t q = qn[mt][h];
          const bool some = q > 0 && top[mt][h].best<kFar / 2, two = q> 0 && top[mt][h].second < kFar / 2;
          const int32_t d1 = some ? q + top[mt][h].best : INT32_MAX, d2 = two ? q + top[mt][h].second : INT32_MAX;
          pass += n >= 2 && q > 0 && ratio_pass(d1, d2, ratio);
        }
      for (int off = 16; off > 0; off >>= 1) pass += __shfl_down_sync(0xFFFFFFFFu, pass, off);
      if (lane == 0 && pass > 0 && row0 < rows)
        atomicAdd(&scores[static_cast<int64_t>(row0 / query_rows) * images + image], pass);
    }
  }
}

// Brute force on the host for a few images: scores.
static int host_score(const std::vector<uint8_t>& q, int rows, const uint8_t* img, int n, float ratio) {
  int pass = 0;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* qr = &q[size_t(r) * kDim];
    int32_t qn = 0;
    for (int k = 0; k < kDim; ++k) qn += qr[k] * qr[k];
    if (qn == 0) continue;
    int32_t b1 = INT32_MAX, b2 = INT32_MAX;
    for (int j = 0; j < n; ++j) {
      const uint8_t* gr = img + size_t(j) * kDim;
      int32_t d = 0;
      for (int k = 0; k < kDim; ++k) d += (int(qr[k]) - gr[k]) * (int(qr[k]) - gr[k]);
      if (d < b1)
        b2 = b1, b1 = d;
      else if (d < b2)
        b2 = d;
    }
    pass += n >= 2 && ratio_pass(b1, b2, ratio);
  }
  return pass;
}

int main(int argc, char** argv) {
  const int images = argc > 1 ? atoi(argv[1]) : 8192;
  const int rows = 768, reps = argc > 2 ? atoi(argv[2]) : 30;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs, images %d\n", prop.name, prop.multiProcessorCount, images);
  std::mt19937 rng(7);
  // Sparse-ish RootSIFT-like bytes: a quarter zeros, the rest mostly small; a pool of 4096 descriptors,
  // each gallery row a pool row with a few bytes perturbed (near neighbours exist), the query from the pool.
  std::vector<uint8_t> pool(size_t(4096) * kDim);
  for (auto& v : pool) {
    const int u = rng() % 100;
    v = u < 25 ? 0 : uint8_t(std::min(255.0, std::abs(std::normal_distribution<double>(40, 35)(rng))));
  }
  std::vector<uint8_t> q(size_t(rows) * kDim);
  for (int r = 0; r < rows; ++r) std::copy_n(&pool[size_t(rng() % 4096) * kDim], kDim, &q[size_t(r) * kDim]);
  std::vector<uint8_t> gal(size_t(images) * kSlotBytes);
  std::vector<int> counts(images);
  for (int i = 0; i < images; ++i) {
    counts[i] = i % 17 == 5 ? 300 + i % 400 : kSlot;
    for (int j = 0; j < kSlot; ++j) {
      uint8_t* d = &gal[size_t(i) * kSlotBytes + size_t(j) * kDim];
      std::copy_n(&pool[size_t(rng() % 4096) * kDim], kDim, d);
      for (int p = 0; p < 6; ++p) d[rng() % kDim] = uint8_t(rng() % 90);
    }
  }
  for (int i = 0; i < images; ++i)  // rows past the count are zero (the packed kernels rely on it)
    std::fill(gal.begin() + size_t(i) * kSlotBytes + size_t(counts[i]) * kDim, gal.begin() + size_t(i + 1) * kSlotBytes,
              uint8_t(0));
  uint8_t *dq, *dg;
  int *dc, *ds;
  CK(cudaMalloc(&dq, q.size()));
  CK(cudaMalloc(&dg, gal.size()));
  CK(cudaMalloc(&dc, sizeof(int) * images));
  CK(cudaMalloc(&ds, sizeof(int) * images));
  CK(cudaMemcpy(dq, q.data(), q.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dg, gal.data(), gal.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dc, counts.data(), sizeof(int) * images, cudaMemcpyHostToDevice));
  std::vector<int32_t> norms(size_t(images) * kSlot);
  for (int i = 0; i < images; ++i)
    for (int j = 0; j < kSlot; ++j) {
      int32_t v = 0;
      for (int k = 0; k < kDim; ++k)
        v += int(gal[size_t(i) * kSlotBytes + size_t(j) * kDim + k]) *
             gal[size_t(i) * kSlotBytes + size_t(j) * kDim + k];
      norms[size_t(i) * kSlot + j] = j < counts[i] ? v : kFar;
    }
  int32_t *dn, *dnb;
  CK(cudaMalloc(&dn, sizeof(int32_t) * norms.size()));
  CK(cudaMemcpy(dn, norms.data(), sizeof(int32_t) * norms.size(), cudaMemcpyHostToDevice));
  for (auto& v : norms) v = v == kFar ? kPadKey : v + kBias;  // the packed kernels' |g|^2 + kBias
  CK(cudaMalloc(&dnb, sizeof(int32_t) * norms.size()));
  CK(cudaMemcpy(dnb, norms.data(), sizeof(int32_t) * norms.size(), cudaMemcpyHostToDevice));
  auto ambiguous = [&](int launches) {
    unsigned long long a = 0;
    CK(cudaMemcpyFromSymbol(&a, g_ambiguous, sizeof(a)));
    const unsigned long long z = 0;
    CK(cudaMemcpyToSymbol(g_ambiguous, &z, sizeof(z)));
    return double(a) / launches / (double(images) * rows);
  };
  std::vector<int> ref(images, -1);
  for (int i = 0; i < 3; ++i) ref[i] = host_score(q, rows, &gal[size_t(i) * kSlotBytes], counts[i], 0.8f);
  ref[5] = host_score(q, rows, &gal[size_t(5) * kSlotBytes], counts[5], 0.8f);
  std::vector<int> first;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  void* count_ptr = nullptr;
  CK(cudaGetSymbolAddress(&count_ptr, g_count));
  auto run = [&](const char* name, auto kernel, int blocks_x, int threads = 256) {
    const bool packed = std::string(name).find("packed") != std::string::npos;
    const dim3 grid(blocks_x, (rows + threads - 1) / threads);
    std::vector<float> ms;
    std::vector<int> out(images);
    for (int r = 0; r < reps + 3; ++r) {
      CK(cudaMemsetAsync(ds, 0, sizeof(int) * images));
      CK(cudaEventRecord(e0));
      if (packed) CK(cudaMemsetAsync(count_ptr, 0, sizeof(unsigned)));
      kernel<<<grid, threads>>>(dq, rows, rows, dg, dc, dn, images, 0.8f, ds);
      if (packed) exact_rows<<<prop.multiProcessorCount * 4, 256>>>(dq, rows, rows, dg, dc, images, 0.8f, ds);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float t;
      CK(cudaEventElapsedTime(&t, e0, e1));
      if (r >= 3) ms.push_back(t);
    }
    CK(cudaMemcpy(out.data(), ds, sizeof(int) * images, cudaMemcpyDeviceToHost));
    int bad_ref = 0;
    for (int i = 0; i < images; ++i)
      if (ref[i] >= 0 && ref[i] != out[i]) ++bad_ref;
    int diff = 0;
    if (first.empty())
      first = out;
    else
      for (int i = 0; i < images; ++i) diff += first[i] != out[i];
    std::sort(ms.begin(), ms.end());
    const float med = ms[ms.size() / 2];
    cudaFuncAttributes at;
    CK(cudaFuncGetAttributes(&at, kernel));
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, threads, 0));
    printf(
        "%-34s regs %3d blocks/SM %d  median %8.3f ms  min %8.3f  %6.3f M images/s  ref-mismatch %d  diff-vs-first "
        "%d  rows re-matched %.5f%%\n",
        name, at.numRegs, occ, med, ms.front(), images / med / 1e3, bad_ref, diff, 100 * ambiguous(reps + 3));
    fflush(stdout);
  };
  int occ = 0;
  auto pers = [&](auto kernel) {
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, 256, 0));
    return std::min(images, prop.multiProcessorCount * occ / 3 * 1);
  };
  auto runwg = [&](const char* name, auto kernel, int threads, int rows_per_block, size_t smem) {
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    const dim3 grid(images, (rows + rows_per_block - 1) / rows_per_block);
    std::vector<float> ms;
    std::vector<int> out(images);
    for (int r = 0; r < reps + 3; ++r) {
      CK(cudaMemsetAsync(ds, 0, sizeof(int) * images));
      CK(cudaEventRecord(e0));
      kernel<<<grid, threads, smem>>>(dq, rows, rows, dg, dc, dn, images, 0.8f, ds);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float tms;
      CK(cudaEventElapsedTime(&tms, e0, e1));
      if (r >= 3) ms.push_back(tms);
    }
    CK(cudaMemcpy(out.data(), ds, sizeof(int) * images, cudaMemcpyDeviceToHost));
    int bad_ref = 0, diff = 0;
    for (int i = 0; i < images; ++i) {
      if (ref[i] >= 0 && ref[i] != out[i]) ++bad_ref;
      diff += first[i] != out[i];
    }
    std::sort(ms.begin(), ms.end());
    const float med = ms[ms.size() / 2];
    cudaFuncAttributes at;
    CK(cudaFuncGetAttributes(&at, kernel));
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, threads, smem));
    printf(
        "%-34s regs %3d blocks/SM %d  median %8.3f ms  min %8.3f  %6.3f M images/s  ref-mismatch %d  diff-vs-first %d "
        "(e.g. %d vs %d)\n",
        name, at.numRegs, occ, med, ms.front(), images / med / 1e3, bad_ref, diff, out[0], first[0]);
    fflush(stdout);
  };
  const int which = argc > 3 ? atoi(argv[3]) : 0;
  run("base (batch1 offer1)", kern<1, false, false, 1, false>, images);
  run("batch2 pair mb3", kern<2, true, false, 3, false>, images);
  run("packed batch1 mb3", kern<1, true, false, 3, false, false, 8, 1>, images);
  run("packed batch2 mb3", kern<2, true, false, 3, false, false, 8, 1>, images);
  run("packed batch1 mb3 every row exact", kern<1, true, false, 3, false, false, 8, 2>, images);
  run("packed batch2 mb4", kern<2, true, false, 4, false, false, 8, 1>, images);
  if (which != 2) {
    run("batch2 pair mb3 persistent", kern<2, true, false, 3, true>, pers(kern<2, true, false, 3, true>));
    run("swp batch1 mb2", kern<1, true, true, 2, false>, images);
    run("swp batch2 mb2", kern<2, true, true, 2, false>, images);
    run("swp batch1 mb3", kern<1, true, true, 3, false>, images);
    run("swp batch2 mb3", kern<2, true, true, 3, false>, images);
    run("swp batch1 mb2 persistent", kern<1, true, true, 2, true>, pers(kern<1, true, true, 2, true>));
    run("swp batch2 mb2 persistent", kern<2, true, true, 2, true>, pers(kern<2, true, true, 2, true>));
    run("prenorm batch2 mb3", kern<2, true, false, 3, false, true>, images);
    run("prenorm swp batch1 mb2", kern<1, true, true, 2, false, true>, images);
    run("prenorm swp batch2 mb2 persistent", kern<2, true, true, 2, true, true>,
        pers(kern<2, true, true, 2, true, true>));
    run("4 warps batch2 mb6", kern<2, true, false, 6, false, false, 4>, images, 128);
    run("4 warps swp batch1 mb4", kern<1, true, true, 4, false, false, 4>, images, 128);
    run("4 warps prenorm swp batch1 mb4", kern<1, true, true, 4, false, true, 4>, images, 128);
  }
  run("base again", kern<1, false, false, 1, false>, images);
  auto sm = [](int n, int st) { return size_t(st) * n * kDim + size_t(st) * n * 4; };
  runwg("wg n64 wg4 st4", kern_wg<64, 4, 4, 1, false>, 512, 256, sm(64, 4));
  {
    const size_t smp = 2 * size_t(kSlotBytes) + 2 * kSlot * 4;
    auto runp = [&](const char* name, auto kernel, int wg, int blocks_x, const int32_t* nrm = nullptr, int mt = 1) {
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smp)));
      const int threads = 128 * wg, rpb = 64 * wg * mt;
      const dim3 grid(blocks_x, (rows + rpb - 1) / rpb);
      std::vector<float> ms;
      std::vector<int> out(images);
      for (int r = 0; r < reps + 3; ++r) {
        CK(cudaMemsetAsync(ds, 0, sizeof(int) * images));
        CK(cudaEventRecord(e0));
        if (nrm) CK(cudaMemsetAsync(count_ptr, 0, sizeof(unsigned)));
        kernel<<<grid, threads, smp>>>(dq, rows, rows, dg, dc, nrm ? nrm : dn, images, 0.8f, ds);
        if (nrm) exact_rows<<<prop.multiProcessorCount * 4, 256>>>(dq, rows, rows, dg, dc, images, 0.8f, ds);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        CK(cudaGetLastError());
        float tms;
        CK(cudaEventElapsedTime(&tms, e0, e1));
        if (r >= 3) ms.push_back(tms);
      }
      CK(cudaMemcpy(out.data(), ds, sizeof(int) * images, cudaMemcpyDeviceToHost));
      int bad_ref = 0, diff = 0;
      for (int i = 0; i < images; ++i) {
        if (ref[i] >= 0 && ref[i] != out[i]) ++bad_ref;
        diff += first[i] != out[i];
      }
      std::sort(ms.begin(), ms.end());
      const float med = ms[ms.size() / 2];
      cudaFuncAttributes at;
      CK(cudaFuncGetAttributes(&at, kernel));
      printf(
          "%-34s regs %3d grid %dx%d  median %8.3f ms  min %8.3f  %6.3f M images/s  ref-mismatch %d  diff-vs-first "
          "%d  rows re-matched %.5f%%\n",
          name, at.numRegs, grid.x, grid.y, med, ms.front(), images / med / 1e3, bad_ref, diff,
          100 * ambiguous(reps + 3));
      fflush(stdout);
    };
    const int sms = prop.multiProcessorCount;
    runp("wgp 4wg grid sms/3", kern_wgp<4>, 4, sms / 3);
    if (which == 3) {  // kern_pp: tile shapes; "-" = no top-2 (the tensor cores' ceiling for that shape)
      auto pp = [&](const char* name, auto kernel, int wg, int mt) {
        const int y = (rows + 64 * wg * mt - 1) / (64 * wg * mt);
        runp(name, kernel, wg, sms / y, nullptr, mt);
      };
      runp("wgp 4wg no epilogue", kern_wgp<4, 0>, 4, sms / 3);
      pp("pp n64 wg4 mt3 buf1", kern_pp<64, 4, 3, 1>, 4, 3);
      pp("pp n64 wg4 mt3 buf2", kern_pp<64, 4, 3, 2>, 4, 3);
      pp("pp n128 wg4 mt3 buf1", kern_pp<128, 4, 3, 1>, 4, 3);
      pp("pp n64 wg3 mt4 buf1", kern_pp<64, 3, 4, 1>, 3, 4);
      pp("pp n128 wg3 mt4 buf1", kern_pp<128, 3, 4, 1>, 3, 4);
      pp("pp n64 wg2 mt6 buf1", kern_pp<64, 2, 6, 1>, 2, 6);
      pp("pp n128 wg2 mt6 buf1", kern_pp<128, 2, 6, 1>, 2, 6);
      pp("pp n64 wg4 mt2 buf1", kern_pp<64, 4, 2, 1>, 4, 2);
      pp("pp n64 wg4 mt1 buf1", kern_pp<64, 4, 1, 1>, 4, 1);
      pp("pp n64 wg4 mt3 buf1 again", kern_pp<64, 4, 3, 1>, 4, 3);
      return 0;
    }
    runp("wgp 4wg packed", kern_wgp<4, 1, 1>, 4, sms / 3, dnb);
    runp("wgp 4wg packed every row exact", kern_wgp<4, 1, 2>, 4, sms / 3, dnb);
    runp("wgp 4wg no epilogue", kern_wgp<4, 0>, 4, sms / 3);
    runp("wgp 4wg 2 top-2 per row", kern_wgp<4, 1, 0, 2>, 4, sms / 3);
    runp("wgp 4wg 4 top-2 per row", kern_wgp<4, 1, 0, 4>, 4, sms / 3);
    if (which == 2) return 0;
    runp("wgp 4wg grid sms", kern_wgp<4>, 4, sms);
    runp("wgp 4wg no epilogue", kern_wgp<4, 0>, 4, sms / 3);
    runp("wgp 4wg epilogue x2", kern_wgp<4, 2>, 4, sms / 3);
    runp("wgp 4wg epilogue x3", kern_wgp<4, 3>, 4, sms / 3);
  }
  return 0;
}
