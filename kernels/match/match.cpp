#include "match/match.h"

#include <opencv2/core.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace prism::match {

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return uint16_t(sign | (abs > 0x7F800000u ? 0x7E00u : 0x7C00u));  // NaN, inf
  if (abs >= 0x477FF000u) return uint16_t(sign | 0x7C00u);                                  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                                                                  // subnormal half (or zero)
    if (abs < 0x33000000u) return uint16_t(sign);  // below half of the smallest subnormal
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - int(abs >> 23);  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));  // rebias exponent 127 -> 15
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while (!(m & 0x400u));
      x = sign | (uint32_t(112 - e) << 23) | ((m & 0x3FFu) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7F800000u | (mant << 13);
  } else {
    x = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

void rootsift_float(const float* sift, int count, float* out) {
  for (int i = 0; i < count; ++i) {
    const float* v = sift + int64_t(i) * kDim;
    double l1 = 0;
    for (int k = 0; k < kDim; ++k) l1 += std::fabs(v[k]);
    for (int k = 0; k < kDim; ++k) out[int64_t(i) * kDim + k] = l1 > 0 ? float(std::sqrt(std::fabs(v[k]) / l1)) : 0.f;
  }
}

void rootsift(const float* sift, int count, uint16_t* out) {
  float r[kDim];
  for (int i = 0; i < count; ++i) {
    rootsift_float(sift + int64_t(i) * kDim, 1, r);
    for (int k = 0; k < kDim; ++k) out[int64_t(i) * kDim + k] = float_to_half(r[k]);
  }
}

namespace {

constexpr int kLanes = 16;  // gallery descriptors per transposed block (one accumulator vector)

// The running top-2 of one query row (ties keep the lower index, as descriptors come in order).
struct RowTop2 {
  float best = -std::numeric_limits<float>::infinity(), second = -std::numeric_limits<float>::infinity();
  int index = -1;
  void offer(float dot, int j) {
    if (dot > best) {
      second = best;
      best = dot;
      index = j;
    } else if (dot > second) {
      second = dot;
    }
  }
};

}  // namespace

void match_cpu(const MatchProblem& p, const MatchParams& params, const MatchOutputs& out) {
  if (!out.scores) throw std::invalid_argument("match_cpu: scores are required");
  if (p.query_rows <= 0 || p.rows % p.query_rows != 0)
    throw std::invalid_argument("match_cpu: rows must be a multiple of query_rows");
  std::vector<float> q(size_t(p.rows) * kDim);
  for (size_t i = 0; i < q.size(); ++i) q[i] = half_to_float(p.query[i]);
  cv::parallel_for_(cv::Range(0, p.images), [&](const cv::Range& range) {
    // The image's descriptors transposed in blocks of kLanes, [block][k][lane], so that the dot
    // products of one query row with kLanes descriptors vectorise (each still sums k in order).
    constexpr int kBlocks = kSlot / kLanes;
    std::vector<float> gt(size_t(kBlocks) * kDim * kLanes);
    for (int b = range.start; b < range.end; ++b) {
      const int n = p.counts[b];
      const int blocks = (n + kLanes - 1) / kLanes;
      const uint16_t* img = p.gallery + size_t(b) * kSlot * kDim;
      for (int jb = 0; jb < blocks; ++jb)
        for (int t = 0; t < kLanes; ++t) {
          const int j = jb * kLanes + t;
          for (int k = 0; k < kDim; ++k)
            gt[(size_t(jb) * kDim + k) * kLanes + t] = j < n ? half_to_float(img[size_t(j) * kDim + k]) : 0.f;
        }
      for (int qi = 0; qi < p.queries(); ++qi) out.scores[size_t(qi) * p.images + b] = 0;
      for (int r = 0; r < p.rows; ++r) {
        const float* qr = &q[size_t(r) * kDim];
        RowTop2 top;
        for (int jb = 0; jb < blocks; ++jb) {
          float acc[kLanes] = {};
          const float* g = &gt[size_t(jb) * kDim * kLanes];
          for (int k = 0; k < kDim; ++k)
            for (int t = 0; t < kLanes; ++t) acc[t] += qr[k] * g[k * kLanes + t];
          for (int t = 0; t < kLanes && jb * kLanes + t < n; ++t) top.offer(acc[t], jb * kLanes + t);
        }
        if (n >= 2 && ratio_pass_dot(top.best, top.second, params.ratio))
          out.scores[size_t(r / p.query_rows) * p.images + b]++;
        const size_t o = size_t(b) * p.rows + r;
        if (out.best) out.best[o] = top.best;
        if (out.second) out.second[o] = top.second;
        if (out.best_index) out.best_index[o] = top.index;
      }
    }
  });
}

}  // namespace prism::match
