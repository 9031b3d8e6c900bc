// The 8-bit matcher on the CPU (match.h): exact integer squared distances, the top-2 per query row
// and the ratio test.
#include <opencv2/core.hpp>

#include <climits>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "match/match.h"

namespace prism::match {

uint8_t quantize_u8(float x) {
  if (!(x > 0.f)) return 0;
  const float v = std::round(512.f * x);  // half away from zero, as COLMAP
  return v >= 255.f ? 255 : uint8_t(v);
}

void rootsift_u8(const float* sift, int count, uint8_t* out) {
  for (int i = 0; i < count; ++i) {
    const float* v = sift + int64_t(i) * kDim;
    double l1 = 0;
    for (int k = 0; k < kDim; ++k) l1 += std::fabs(v[k]);
    for (int k = 0; k < kDim; ++k)
      out[int64_t(i) * kDim + k] = quantize_u8(l1 > 0 ? float(std::sqrt(std::fabs(v[k]) / l1)) : 0.f);
  }
}

namespace {

int32_t norm2(const uint8_t* v) {
  int32_t s = 0;
  for (int k = 0; k < kDim; ++k) s += int32_t(v[k]) * v[k];
  return s;
}

}  // namespace

void match_u8_cpu(const MatchU8Problem& p, const MatchParams& params, const MatchU8Outputs& out) {
  if (!out.scores) throw std::invalid_argument("match_u8_cpu: scores are required");
  if (p.query_rows <= 0 || p.rows % p.query_rows != 0)
    throw std::invalid_argument("match_u8_cpu: rows must be a multiple of query_rows");
  std::vector<int32_t> qn(p.rows);
  for (int r = 0; r < p.rows; ++r) qn[r] = norm2(p.query + size_t(r) * kDim);
  cv::parallel_for_(cv::Range(0, p.images), [&](const cv::Range& range) {
    std::vector<int32_t> gn(kSlot);
    for (int b = range.start; b < range.end; ++b) {
      const int slot = p.slots ? p.slots[b] : b;
      const int n = p.counts[slot];
      const uint8_t* img = p.gallery + size_t(slot) * kSlotBytes;
      for (int j = 0; j < n; ++j) gn[j] = norm2(img + size_t(j) * kDim);
      for (int qi = 0; qi < p.queries(); ++qi) out.scores[size_t(qi) * p.images + b] = 0;
      for (int r = 0; r < p.rows; ++r) {
        const uint8_t* q = p.query + size_t(r) * kDim;
        int32_t best = INT32_MAX, second = INT32_MAX;
        int index = -1;
        if (qn[r] > 0)
          for (int j = 0; j < n; ++j) {
            const uint8_t* g = img + size_t(j) * kDim;
            int32_t dot = 0;
            for (int k = 0; k < kDim; ++k) dot += int32_t(q[k]) * g[k];
            const int32_t d = qn[r] + gn[j] - 2 * dot;
            if (d < best) {
              second = best, best = d, index = j;
            } else if (d < second) {
              second = d;
            }
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
