#include "ratio_decisions.h"

#include <opencv2/core/utility.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "match/match.h"
#include "texture/verify.h"

namespace prism::eval {

std::vector<RatioDecision> reference_decisions(const float* query, int rows, const float* gallery, int gallery_rows,
                                               float ratio) {
  std::vector<RatioDecision> out(std::max(0, rows));
  const double r2 = double(ratio) * double(ratio);
  cv::parallel_for_(cv::Range(0, std::max(0, rows)), [&](const cv::Range& range) {
    for (int r = range.start; r < range.end; ++r) {
      const float* q = query + size_t(r) * match::kDim;
      double d1 = HUGE_VAL, d2 = HUGE_VAL;
      int nearest = -1;
      for (int g = 0; g < gallery_rows; ++g) {
        const float* v = gallery + size_t(g) * match::kDim;
        double d = 0;
        for (int k = 0; k < match::kDim; ++k) d += (double(q[k]) - double(v[k])) * (double(q[k]) - double(v[k]));
        if (d < d1) {
          d2 = d1, d1 = d, nearest = g;
        } else if (d < d2) {
          d2 = d;
        }
      }
      out[r] = {gallery_rows >= 2 && d1 < r2 * d2, nearest};
    }
  });
  return out;
}

namespace {

// A matcher's decisions: the gallery in one slot, the per-row outputs read as ratio_matches does.
template <class T, class Value, class Run>
std::vector<RatioDecision> matcher_decisions(const T* query, int rows, const T* gallery, int gallery_rows, float ratio,
                                             Run run) {
  if (gallery_rows < 0 || gallery_rows > match::kSlot)
    throw std::invalid_argument("ratio-test decisions: " + std::to_string(gallery_rows) +
                                " gallery descriptors, at most " + std::to_string(match::kSlot));
  if (rows <= 0) return {};
  std::vector<T> slot(size_t(match::kSlot) * match::kDim, T(0));
  std::copy_n(gallery, size_t(gallery_rows) * match::kDim, slot.begin());
  std::vector<Value> best(rows), second(rows);
  std::vector<int> index(rows);
  int score = 0;
  run(query, slot.data(), best.data(), second.data(), index.data(), &score);
  std::vector<RatioDecision> out(rows);
  for (int r = 0; r < rows; ++r)
    out[r] = {index[r] >= 0 && texture::ratio_row_passes(best[r], second[r], ratio), index[r]};
  return out;
}

}  // namespace

std::vector<RatioDecision> u8_decisions(const uint8_t* query, int rows, const uint8_t* gallery, int gallery_rows,
                                        float ratio) {
  return matcher_decisions<uint8_t, int32_t>(
      query, rows, gallery, gallery_rows, ratio,
      [&](const uint8_t* q, const uint8_t* slot, int32_t* best, int32_t* second, int* index, int* score) {
        match::MatchU8Problem p;
        p.query = q;
        p.rows = p.query_rows = rows;
        p.gallery = slot;
        p.counts = &gallery_rows;
        p.images = 1;
        match::MatchParams mp;
        mp.ratio = ratio;
        match::match_u8_cpu(p, mp, {score, best, second, index});
      });
}

std::vector<RatioDecision> fp16_decisions(const uint16_t* query, int rows, const uint16_t* gallery, int gallery_rows,
                                          float ratio) {
  return matcher_decisions<uint16_t, float>(
      query, rows, gallery, gallery_rows, ratio,
      [&](const uint16_t* q, const uint16_t* slot, float* best, float* second, int* index, int* score) {
        match::MatchProblem p;
        p.query = q;
        p.rows = p.query_rows = rows;
        p.gallery = slot;
        p.counts = &gallery_rows;
        p.images = 1;
        match::MatchParams mp;
        mp.ratio = ratio;
        match::match_cpu(p, mp, {score, best, second, index});
      });
}

DecisionDiff compare_decisions(const std::vector<RatioDecision>& reference, const std::vector<RatioDecision>& other) {
  if (reference.size() != other.size())
    throw std::invalid_argument("compare_decisions: " + std::to_string(reference.size()) + " reference decisions, " +
                                std::to_string(other.size()) + " to compare");
  DecisionDiff d;
  d.rows = int(reference.size());
  for (size_t r = 0; r < reference.size(); ++r) {
    if (reference[r].pass != other[r].pass)
      ++d.flips;
    else if (reference[r].pass && reference[r].nearest != other[r].nearest)
      ++d.other_nearest;
  }
  return d;
}

}  // namespace prism::eval
