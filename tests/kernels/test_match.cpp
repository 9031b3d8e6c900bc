// The matcher's CPU path: FP16 conversions against OpenCV's, RootSIFT's properties, and top-2 /
// ratio-test scores against a double-precision brute force.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "match/match.h"
#include "match_cases.h"

namespace prism {
namespace {

TEST(Match, HalfConversionsAgreeWithOpenCv) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = match::half_to_float(uint16_t(h));
    const float cv_f = float(cv::float16_t::fromBits(uint16_t(h)));
    if (std::isnan(cv_f)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      continue;
    }
    ASSERT_EQ(f, cv_f) << h;
    ASSERT_EQ(match::float_to_half(f), uint16_t(h)) << h;
  }
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 1000000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(match::float_to_half(f), cv::float16_t(f).bits()) << f;
  }
}

TEST(Match, RootSiftIsUnitAndNonNegative) {
  std::mt19937 rng(std::random_device{}());
  const std::vector<uint16_t> d = test::random_rootsift(200, rng);
  for (int i = 0; i < 200; ++i) {
    double n2 = 0;
    for (int k = 0; k < match::kDim; ++k) {
      const float v = match::half_to_float(d[size_t(i) * match::kDim + k]);
      ASSERT_GE(v, 0.f);
      n2 += double(v) * v;
    }
    if (n2 > 0) {
      EXPECT_NEAR(n2, 1.0, 2e-3) << i;
    }
  }
  std::vector<float> zero(match::kDim, 0.f);
  std::vector<uint16_t> out(match::kDim, 1);
  match::rootsift(zero.data(), 1, out.data());
  for (uint16_t v : out) EXPECT_EQ(v, 0);
}

TEST(Match, CpuTopTwoAndScoresMatchADoubleBruteForce) {
  std::mt19937 rng(std::random_device{}());
  const test::MatchCase c = test::make_match_case(2, 48, {300, 1, 0, 37, 768}, rng);
  const match::MatchProblem& p = c.problem;
  const int Q = p.queries(), B = p.images;
  std::vector<int> scores(size_t(Q) * B, -1), index(size_t(B) * p.rows);
  std::vector<float> best(index.size()), second(index.size());
  match::match_cpu(p, {0.8f}, {scores.data(), best.data(), second.data(), index.data()});
  std::vector<int> expected(size_t(Q) * B, 0);
  int near_threshold = 0;
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < p.rows; ++r) {
      double b1 = -INFINITY, b2 = -INFINITY;
      for (int j = 0; j < c.counts[b]; ++j) {
        double dot = 0;
        for (int k = 0; k < match::kDim; ++k)
          dot += double(match::half_to_float(c.query[size_t(r) * match::kDim + k])) *
                 match::half_to_float(c.gallery[(size_t(b) * match::kSlot + j) * match::kDim + k]);
        if (dot > b1) {
          b2 = b1;
          b1 = dot;
        } else if (dot > b2) {
          b2 = dot;
        }
      }
      const size_t o = size_t(b) * p.rows + r;
      if (c.counts[b] == 0) {
        EXPECT_EQ(index[o], -1);
        EXPECT_TRUE(std::isinf(best[o]) && best[o] < 0);
        continue;
      }
      EXPECT_NEAR(best[o], b1, 1e-5) << b << " " << r;
      if (c.counts[b] >= 2) {
        EXPECT_NEAR(second[o], b2, 1e-5) << b << " " << r;
      }
      const double margin = (1 - b1) - 0.64 * (1 - b2);
      if (std::fabs(margin) < 1e-5)
        ++near_threshold;
      else if (c.counts[b] >= 2 && margin < 0)
        expected[size_t(r / p.query_rows) * B + b]++;
    }
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(scores[i], expected[i], near_threshold) << i;
  // The planted copies are found at their positions and make the planted image the best match.
  const int big = c.planted_image;
  for (int r = 0; r < p.query_rows; r += 2) {
    EXPECT_EQ(index[size_t(big) * p.rows + r], int((size_t(r) * 7919) % size_t(c.counts[big]))) << r;
    EXPECT_NEAR(best[size_t(big) * p.rows + r], 1.0, 3e-3);
  }
  for (int b = 0; b < B; ++b)
    if (b != big) {
      EXPECT_GT(scores[big], 2 * scores[b]) << b;  // query 0
    }
}

}  // namespace
}  // namespace prism
