// The 8-bit matcher on the CPU (match.h): exact integer squared distances, the top-2 per query row
// and the ratio test, with SIMD integer dot products chosen at run time.
//
// Per gallery image the descriptors are packed once into blocks of kLanes = 16 (descriptor 16 b + t
// is lane t of block b), k-interleaved for the path's multiply-add; per query row and lane a running
// top-2 of e = |g|^2 - 2 q.g (the squared distance less the row's constant |q|^2, so the ranking is
// the same) and the index of the smallest. The inner step takes 4 query rows against one or two
// blocks (8 accumulators, the gallery registers shared by the rows) over all 128 dimensions, then
// folds the 16-lane results into the top-2 with min/max/compare (lanes see their columns in
// increasing order, so a strict compare keeps the lower index). The image is walked in chunks of
// 128 descriptors (16 KB in 8 bits: level-1 cache) and every row block runs against a chunk before
// the next. At the end of the image each row's 16 lanes are merged (ties to the lower index).
// Paths (every one exact, the same integers as the scalar one):
// - AVX-512 VNNI: vpdpbusd multiplies u8 by s8, so the query is stored biased, q - 128, and
//   q.g = acc + 128 sum(g); the correction is folded into the per-descriptor constant
//   c = |g|^2 - 256 sum(g), and e = c - 2 acc.
// - AVX2: bytes widened to s16 in pairs along k, vpmaddwd (exact: 2 x 255^2 < 2^31) and vpaddd.
// - scalar: the same blocking in plain C++ (any x86-64 or other CPU).
// Lanes past the image's count hold zero bytes and c = INT32_MAX, so e never beats a real one.
#include <opencv2/core.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PRISM_MATCH_X86 1
#endif

#include "match/match.h"
namespace prism::match {

uint8_t quantize_u8(float x) {
  if (!(x > 0.f)) return 0;
  const float v = std::round(512.f * x);  // half away from zero, as COLMAP
  return v >= 255.f ? 255 : uint8_t(v);
}

void rootsift_u8(const float* sift, int count, uint8_t* out) {
  float r[kDim];
  for (int i = 0; i < count; ++i) {
    rootsift_float(sift + int64_t(i) * kDim, 1, r);
    for (int k = 0; k < kDim; ++k) out[int64_t(i) * kDim + k] = quantize_u8(r[k]);
  }
}

namespace {

constexpr int kLanes = 16;                      // gallery descriptors per packed block
constexpr int kBlocks = kSlot / kLanes;         // blocks per image at most
constexpr int kChunkBlocks = 8;                 // blocks per cache chunk
constexpr int kRowBlock = 4;                    // query rows per inner step
constexpr int kBlockBytesU8 = kLanes * kDim;    // [k / 4][lane][4] bytes
constexpr int kBlockHalvesS16 = kLanes * kDim;  // [k / 2][lane][2] s16
constexpr int32_t kNone = INT32_MAX;

// A query row's top-2 per lane (e = |g|^2 - 2 q.g, or its biased form; see above).
struct LaneTop2 {
  int32_t best[kLanes], second[kLanes], index[kLanes];
};

int32_t norm2(const uint8_t* v) {
  int32_t s = 0;
  for (int k = 0; k < kDim; ++k) s += int32_t(v[k]) * v[k];
  return s;
}

// The image's n descriptors in blocks [block][k / 4][lane][4] (VNNI and scalar), with c = |g|^2, or
// |g|^2 - 256 sum(g) when `biased` (the VNNI path); lanes past n are zero with c = kNone.
void pack_u8(const uint8_t* img, int n, bool biased, uint8_t* packed, int32_t* c) {
  const int blocks = (n + kLanes - 1) / kLanes;
  for (int j = 0; j < blocks * kLanes; ++j) {
    uint8_t* dst = packed + size_t(j / kLanes) * kBlockBytesU8 + (j % kLanes) * 4;
    if (j >= n) {
      for (int k4 = 0; k4 < kDim / 4; ++k4) std::memset(dst + k4 * kLanes * 4, 0, 4);
      c[j] = kNone;
      continue;
    }
    const uint8_t* g = img + size_t(j) * kDim;
    int32_t sum = 0;
    for (int k = 0; k < kDim; ++k) sum += g[k];
    for (int k4 = 0; k4 < kDim / 4; ++k4) std::memcpy(dst + k4 * kLanes * 4, g + 4 * k4, 4);
    c[j] = norm2(g) - (biased ? 256 * sum : 0);
  }
}

// The same as s16 pairs along k, [block][k / 2][lane][2] (AVX2), c = |g|^2.
void pack_s16(const uint8_t* img, int n, int16_t* packed, int32_t* c) {
  const int blocks = (n + kLanes - 1) / kLanes;
  for (int j = 0; j < blocks * kLanes; ++j) {
    int16_t* dst = packed + size_t(j / kLanes) * kBlockHalvesS16 + (j % kLanes) * 2;
    const uint8_t* g = img + size_t(j) * kDim;
    for (int k2 = 0; k2 < kDim / 2; ++k2) {
      dst[k2 * kLanes * 2] = j < n ? g[2 * k2] : 0;
      dst[k2 * kLanes * 2 + 1] = j < n ? g[2 * k2 + 1] : 0;
    }
    c[j] = j < n ? norm2(g) : kNone;
  }
}

// ---- scalar ----

// kRowBlock rows (u8, [row][kDim]) against `blocks` packed blocks whose first descriptor is j0.
void chunk_scalar(const uint8_t* q, const uint8_t* g, const int32_t* c, int blocks, int j0, LaneTop2* st) {
  for (int b = 0; b < blocks; ++b, g += kBlockBytesU8)
    for (int r = 0; r < kRowBlock; ++r) {
      int32_t acc[kLanes] = {};
      const uint8_t* qr = q + r * kDim;
      for (int k4 = 0; k4 < kDim / 4; ++k4)
        for (int t = 0; t < kLanes; ++t)
          for (int u = 0; u < 4; ++u) acc[t] += int32_t(qr[4 * k4 + u]) * g[(k4 * kLanes + t) * 4 + u];
      LaneTop2& s = st[r];
      for (int t = 0; t < kLanes; ++t) {
        const int32_t e = c[b * kLanes + t] - 2 * acc[t];  // acc = 0 where c = kNone
        if (e < s.best[t]) s.index[t] = j0 + b * kLanes + t;
        s.second[t] = std::min(s.second[t], std::max(s.best[t], e));
        s.best[t] = std::min(s.best[t], e);
      }
    }
}

#if defined(PRISM_MATCH_X86)
// ---- AVX-512 VNNI ----
// GCC 12 warns inside its own intrinsics here (_mm512_undefined_epi32 reads itself on purpose).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define PRISM_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

template <int G>
PRISM_VNNI inline __attribute__((always_inline)) void step_vnni(const int8_t* q, const uint8_t* g, const int32_t* c,
                                                                int j, __m512i (&best)[kRowBlock],
                                                                __m512i (&second)[kRowBlock],
                                                                __m512i (&index)[kRowBlock]) {
  __m512i acc[kRowBlock][G];
  for (int r = 0; r < kRowBlock; ++r)
    for (int b = 0; b < G; ++b) acc[r][b] = _mm512_setzero_si512();
  for (int k4 = 0; k4 < kDim / 4; ++k4) {
    __m512i gv[G];
    for (int b = 0; b < G; ++b) gv[b] = _mm512_loadu_si512(g + b * kBlockBytesU8 + k4 * kLanes * 4);
    for (int r = 0; r < kRowBlock; ++r) {
      int32_t q4;
      std::memcpy(&q4, q + r * kDim + 4 * k4, 4);
      const __m512i qb = _mm512_set1_epi32(q4);
      for (int b = 0; b < G; ++b) acc[r][b] = _mm512_dpbusd_epi32(acc[r][b], gv[b], qb);
    }
  }
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int b = 0; b < G; ++b) {
    const __m512i cv = _mm512_loadu_si512(c + b * kLanes);
    const __m512i jv = _mm512_add_epi32(_mm512_set1_epi32(j + b * kLanes), lanes);
    for (int r = 0; r < kRowBlock; ++r) {
      // c = kNone lanes have acc = 0 (zero bytes): e stays kNone.
      const __m512i e = _mm512_sub_epi32(cv, _mm512_add_epi32(acc[r][b], acc[r][b]));
      const __mmask16 lt = _mm512_cmplt_epi32_mask(e, best[r]);
      second[r] = _mm512_min_epi32(second[r], _mm512_max_epi32(best[r], e));
      best[r] = _mm512_min_epi32(best[r], e);
      index[r] = _mm512_mask_mov_epi32(index[r], lt, jv);
    }
  }
}

PRISM_VNNI void chunk_vnni(const int8_t* q, const uint8_t* g, const int32_t* c, int blocks, int j0, LaneTop2* st) {
  __m512i best[kRowBlock], second[kRowBlock], index[kRowBlock];
  for (int r = 0; r < kRowBlock; ++r) {
    best[r] = _mm512_loadu_si512(st[r].best);
    second[r] = _mm512_loadu_si512(st[r].second);
    index[r] = _mm512_loadu_si512(st[r].index);
  }
  int b = 0;
  for (; b + 2 <= blocks; b += 2)
    step_vnni<2>(q, g + size_t(b) * kBlockBytesU8, c + b * kLanes, j0 + b * kLanes, best, second, index);
  if (b < blocks) step_vnni<1>(q, g + size_t(b) * kBlockBytesU8, c + b * kLanes, j0 + b * kLanes, best, second, index);
  for (int r = 0; r < kRowBlock; ++r) {
    _mm512_storeu_si512(st[r].best, best[r]);
    _mm512_storeu_si512(st[r].second, second[r]);
    _mm512_storeu_si512(st[r].index, index[r]);
  }
}

#pragma GCC diagnostic pop

// ---- AVX2 ----
#define PRISM_AVX2 __attribute__((target("avx2")))

// kRowBlock rows (s16 pairs) against `blocks` packed s16 blocks; the state stays in memory (16
// registers hold the 8 accumulators and the operands only).
PRISM_AVX2 void chunk_avx2(const int16_t* q, const int16_t* g, const int32_t* c, int blocks, int j0, LaneTop2* st) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int b = 0; b < blocks; ++b, g += kBlockHalvesS16) {
    __m256i acc[kRowBlock][2];
    for (int r = 0; r < kRowBlock; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (int k2 = 0; k2 < kDim / 2; ++k2) {
      const __m256i g0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + k2 * kLanes * 2));
      const __m256i g1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + k2 * kLanes * 2 + 16));
      for (int r = 0; r < kRowBlock; ++r) {
        int32_t q2;
        std::memcpy(&q2, q + r * kDim + 2 * k2, 4);
        const __m256i qb = _mm256_set1_epi32(q2);
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(g0, qb));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(g1, qb));
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i cv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + b * kLanes + 8 * h));
      const __m256i jv = _mm256_add_epi32(_mm256_set1_epi32(j0 + b * kLanes + 8 * h), lanes);
      for (int r = 0; r < kRowBlock; ++r) {
        __m256i* pb = reinterpret_cast<__m256i*>(st[r].best + 8 * h);
        __m256i* ps = reinterpret_cast<__m256i*>(st[r].second + 8 * h);
        __m256i* pi = reinterpret_cast<__m256i*>(st[r].index + 8 * h);
        const __m256i best = _mm256_loadu_si256(pb), second = _mm256_loadu_si256(ps);
        const __m256i e = _mm256_sub_epi32(cv, _mm256_add_epi32(acc[r][h], acc[r][h]));
        const __m256i lt = _mm256_cmpgt_epi32(best, e);
        _mm256_storeu_si256(ps, _mm256_min_epi32(second, _mm256_max_epi32(best, e)));
        _mm256_storeu_si256(pb, _mm256_min_epi32(best, e));
        _mm256_storeu_si256(pi, _mm256_blendv_epi8(_mm256_loadu_si256(pi), jv, lt));
      }
    }
  }
}
#endif

CpuPath resolve(CpuPath path) {
  if (path != CpuPath::kAuto) return path;
  if (cpu_path_available(CpuPath::kAvx512Vnni)) return CpuPath::kAvx512Vnni;
  if (cpu_path_available(CpuPath::kAvx2)) return CpuPath::kAvx2;
  return CpuPath::kScalar;
}

// Merges a row's lanes (disjoint columns) into its two smallest e and the smallest's lowest index.
void merge_lanes(const LaneTop2& s, int32_t& best, int32_t& second, int& index) {
  best = kNone, second = kNone, index = -1;
  int from = -1;
  for (int t = 0; t < kLanes; ++t)
    if (s.index[t] >= 0 && (s.best[t] < best || (s.best[t] == best && s.index[t] < index)))
      best = s.best[t], index = s.index[t], from = t;
  for (int t = 0; t < kLanes; ++t) {
    second = std::min(second, s.second[t]);
    if (t != from) second = std::min(second, s.best[t]);
  }
}

}  // namespace

void u8_norms(const uint8_t* descriptors, int rows, int32_t* out) {
  for (int r = 0; r < rows; ++r) out[r] = norm2(descriptors + int64_t(r) * kDim);
}

bool cpu_path_available(CpuPath path) {
  switch (path) {
    case CpuPath::kAuto:
    case CpuPath::kScalar: return true;
#if defined(PRISM_MATCH_X86)
    case CpuPath::kAvx512Vnni:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vnni");
    case CpuPath::kAvx2: return __builtin_cpu_supports("avx2");
#endif
    default: return false;
  }
}

const char* cpu_path_name(CpuPath path) {
  switch (resolve(path)) {
    case CpuPath::kAvx512Vnni: return "avx512-vnni";
    case CpuPath::kAvx2: return "avx2";
    default: return "scalar";
  }
}

void match_u8_cpu(const MatchU8Problem& p, const MatchParams& params, const MatchU8Outputs& out, CpuPath path) {
  if (!out.scores) throw std::invalid_argument("match_u8_cpu: scores are required");
  if (p.query_rows <= 0 || p.rows % p.query_rows != 0)
    throw std::invalid_argument("match_u8_cpu: rows must be a multiple of query_rows");
  if (!cpu_path_available(path))
    throw std::invalid_argument(std::string("match_u8_cpu: the ") + cpu_path_name(path) +
                                " path needs an instruction set this CPU lacks");
  path = resolve(path);
  for (int b = 0; b < p.images; ++b) {
    const int slot = p.slots ? p.slots[b] : b;
    if (slot < 0 || p.counts[slot] < 0 || p.counts[slot] > kSlot)
      throw std::invalid_argument("match_u8_cpu: batch image " + std::to_string(b) + " has a bad slot or count");
  }
  // The query once per call, in the path's form, rows padded with zeros to whole row blocks.
  const int rows_pad = (p.rows + kRowBlock - 1) / kRowBlock * kRowBlock;
  std::vector<int32_t> qn(rows_pad, 0);
  for (int r = 0; r < p.rows; ++r) qn[r] = norm2(p.query + size_t(r) * kDim);
  std::vector<uint8_t> qu8(size_t(rows_pad) * kDim, 0);
  std::memcpy(qu8.data(), p.query, size_t(p.rows) * kDim);
  std::vector<int16_t> qs16;
  if (path == CpuPath::kAvx512Vnni)
    for (uint8_t& v : qu8) v ^= 0x80;  // u8 - 128 as s8
  if (path == CpuPath::kAvx2) qs16.assign(qu8.begin(), qu8.end());

  cv::parallel_for_(cv::Range(0, p.images), [&](const cv::Range& range) {
    std::vector<uint8_t> packed_u8;
    std::vector<int16_t> packed_s16;
    if (path == CpuPath::kAvx2)
      packed_s16.resize(size_t(kBlocks) * kBlockHalvesS16);
    else
      packed_u8.resize(size_t(kBlocks) * kBlockBytesU8);
    std::vector<int32_t> c(kSlot);
    std::vector<LaneTop2> state(rows_pad);
    for (int b = range.start; b < range.end; ++b) {
      const int slot = p.slots ? p.slots[b] : b;
      const int n = p.counts[slot];
      const uint8_t* img = p.gallery + size_t(slot) * kSlotBytes;
      const int blocks = (n + kLanes - 1) / kLanes;
      if (path == CpuPath::kAvx2)
        pack_s16(img, n, packed_s16.data(), c.data());
      else
        pack_u8(img, n, path == CpuPath::kAvx512Vnni, packed_u8.data(), c.data());
      for (LaneTop2& s : state) {
        std::fill(std::begin(s.best), std::end(s.best), kNone);
        std::fill(std::begin(s.second), std::end(s.second), kNone);
        std::fill(std::begin(s.index), std::end(s.index), -1);
      }
      for (int cb = 0; cb < blocks; cb += kChunkBlocks) {
        const int nb = std::min(kChunkBlocks, blocks - cb);
        for (int r = 0; r < rows_pad; r += kRowBlock) {
          if (!(qn[r] | qn[r + 1] | qn[r + 2] | qn[r + 3])) continue;  // all-zero rows never match
          const size_t qo = size_t(r) * kDim;
          switch (path) {
#if defined(PRISM_MATCH_X86)
            case CpuPath::kAvx512Vnni:
              chunk_vnni(reinterpret_cast<const int8_t*>(&qu8[qo]), &packed_u8[size_t(cb) * kBlockBytesU8],
                         &c[cb * kLanes], nb, cb * kLanes, &state[r]);
              break;
            case CpuPath::kAvx2:
              chunk_avx2(&qs16[qo], &packed_s16[size_t(cb) * kBlockHalvesS16], &c[cb * kLanes], nb, cb * kLanes,
                         &state[r]);
              break;
#endif
            default:
              chunk_scalar(&qu8[qo], &packed_u8[size_t(cb) * kBlockBytesU8], &c[cb * kLanes], nb, cb * kLanes,
                           &state[r]);
          }
        }
      }
      for (int qi = 0; qi < p.queries(); ++qi) out.scores[size_t(qi) * p.images + b] = 0;
      for (int r = 0; r < p.rows; ++r) {
        int32_t best = kNone, second = kNone;
        int index = -1;
        if (qn[r] > 0) {
          merge_lanes(state[r], best, second, index);
          if (best != kNone) best += qn[r];
          if (second != kNone) second += qn[r];
        }
        if (n >= 2 && qn[r] > 0 && ratio_pass(best, second, params.ratio))
          out.scores[size_t(r / p.query_rows) * p.images + b]++;
        const size_t o = size_t(b) * p.rows + r;
        if (out.best) out.best[o] = best;
        if (out.second) out.second[o] = second;
        if (out.best_index) out.best_index[o] = index;
      }
    }
  });
}

}  // namespace prism::match
