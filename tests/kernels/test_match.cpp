// The matcher's CPU path: FP16 conversions against OpenCV's, RootSIFT's properties, and top-2 /
// ratio-test scores against a double-precision brute force; the 8-bit quantisation against a double
// reference and the 8-bit matcher, on every CPU path, against an int64 brute force (exact equality).
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <climits>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

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

// round(512 x) with halves away from zero, saturating at 255, in double.
int quantize_reference(double x) {
  if (!(x > 0)) return 0;
  const double v = std::floor(512.0 * x + 0.5);
  return v >= 255 ? 255 : int(v);
}

TEST(MatchU8, QuantizeRoundsHalvesAwayAndSaturates) {
  // Every half-way point and its float neighbours, the saturation edge, zero, negatives, NaN.
  for (int i = 0; i <= 300; ++i) {
    const float h = (i + 0.5f) / 512.f;
    for (float x : {h, std::nextafter(h, 0.f), std::nextafter(h, 1.f), i / 512.f})
      ASSERT_EQ(match::quantize_u8(x), quantize_reference(x)) << x;
  }
  EXPECT_EQ(match::quantize_u8(0.5f / 512.f), 1);  // a half rounds up
  EXPECT_EQ(match::quantize_u8(254.5f / 512.f), 255);
  EXPECT_EQ(match::quantize_u8(std::nextafter(254.5f / 512.f, 0.f)), 254);
  EXPECT_EQ(match::quantize_u8(1.f), 255);
  EXPECT_EQ(match::quantize_u8(1e30f), 255);
  EXPECT_EQ(match::quantize_u8(INFINITY), 255);
  EXPECT_EQ(match::quantize_u8(0.f), 0);
  EXPECT_EQ(match::quantize_u8(-0.3f), 0);
  EXPECT_EQ(match::quantize_u8(NAN), 0);
  EXPECT_EQ(match::quantize_u8(1e-40f), 0);  // subnormal
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-0.1f, 0.7f);
  for (int i = 0; i < 200000; ++i) {
    const float x = u(rng);
    ASSERT_EQ(match::quantize_u8(x), quantize_reference(x)) << x;
  }
}

TEST(MatchU8, RootSiftU8AgreesWithADoubleReference) {
  std::mt19937 rng(std::random_device{}());
  const int count = 3000;
  std::vector<float> sift(size_t(count) * match::kDim, 0.f);
  for (int i = 0; i < count; ++i)
    for (int k = 0; k < match::kDim; ++k) {
      float& v = sift[size_t(i) * match::kDim + k];
      if (i % 7 == 3)
        v = k == i % match::kDim ? 9.f : 0.f;  // one bin: the component is 1 and saturates
      else if (i % 7 == 4)
        v = 0.f;  // all zero stays zero
      else if (rng() % 4 == 0)
        v = float(rng() % 256);
    }
  std::vector<uint8_t> out(sift.size());
  match::rootsift_u8(sift.data(), count, out.data());
  int near_half = 0, saturated = 0;
  for (int i = 0; i < count; ++i) {
    const float* v = &sift[size_t(i) * match::kDim];
    double l1 = 0;
    for (int k = 0; k < match::kDim; ++k) l1 += v[k];
    for (int k = 0; k < match::kDim; ++k) {
      const double x = l1 > 0 ? std::sqrt(v[k] / l1) : 0.0;
      const int got = out[size_t(i) * match::kDim + k];
      saturated += got == 255;
      // The float rounding of the square root may cross a half-way point within 2^-24 of it.
      const double frac = 512.0 * x - std::floor(512.0 * x);
      if (std::fabs(frac - 0.5) < 1e-4) {
        ++near_half;
        ASSERT_LE(std::abs(got - quantize_reference(x)), 1) << i << " " << k;
      } else {
        ASSERT_EQ(got, quantize_reference(x)) << i << " " << k;
      }
    }
  }
  EXPECT_GT(saturated, 0);
  EXPECT_LT(near_half, count * match::kDim / 1000);
}

// The 8-bit matcher's definition, written out: squared distances as sums of squared differences in
// int64, the two smallest with ties to the lower index, and the ratio test compared exactly
// (the float ratio is m 2^-e, so d1 < r^2 d2 <=> d1 2^(2e) < m^2 d2 in 128-bit integers).
struct U8Reference {
  std::vector<int64_t> best, second;
  std::vector<int> index, scores;
};

bool exact_ratio_pass(int64_t d1, int64_t d2, float ratio) {
  int e = 0;
  const double mant = std::frexp(double(ratio), &e);  // ratio = mant 2^e, mant in [0.5, 1)
  const int64_t m = int64_t(std::ldexp(mant, 24));    // ratio = m 2^(e - 24), exactly
  const int shift = 2 * (24 - e);
  return (__int128(d1) << shift) < __int128(m) * m * d2;
}

U8Reference brute_force_u8(const match::MatchU8Problem& p, float ratio) {
  U8Reference ref;
  const size_t n_rows = size_t(p.images) * p.rows;
  ref.best.assign(n_rows, INT32_MAX);
  ref.second.assign(n_rows, INT32_MAX);
  ref.index.assign(n_rows, -1);
  ref.scores.assign(size_t(p.queries()) * p.images, 0);
  for (int b = 0; b < p.images; ++b) {
    const int slot = p.slots ? p.slots[b] : b;
    for (int r = 0; r < p.rows; ++r) {
      const uint8_t* q = p.query + size_t(r) * match::kDim;
      bool zero = true;
      for (int k = 0; k < match::kDim; ++k) zero = zero && q[k] == 0;
      if (zero) continue;
      const size_t o = size_t(b) * p.rows + r;
      for (int j = 0; j < p.counts[slot]; ++j) {
        const uint8_t* g = p.gallery + (size_t(slot) * match::kSlot + j) * match::kDim;
        int64_t d = 0;
        for (int k = 0; k < match::kDim; ++k) d += int64_t(int(q[k]) - int(g[k])) * (int(q[k]) - int(g[k]));
        if (d < ref.best[o]) {
          ref.second[o] = ref.best[o];
          ref.best[o] = d;
          ref.index[o] = j;
        } else if (d < ref.second[o]) {
          ref.second[o] = d;
        }
      }
      if (p.counts[slot] >= 2 && exact_ratio_pass(ref.best[o], ref.second[o], ratio))
        ref.scores[size_t(r / p.query_rows) * p.images + b]++;
    }
  }
  return ref;
}

std::vector<match::CpuPath> available_cpu_paths() {
  std::vector<match::CpuPath> paths;
  for (match::CpuPath path : {match::CpuPath::kAvx512Vnni, match::CpuPath::kAvx2, match::CpuPath::kScalar})
    if (match::cpu_path_available(path))
      paths.push_back(path);
    else
      std::cerr << "*** CPU path " << match::cpu_path_name(path) << " not available here: not tested ***\n";
  return paths;
}

TEST(MatchU8, RatioPassAgreesWithTheExactComparison) {
  std::mt19937 rng(std::random_device{}());
  for (float ratio : {0.8f, 0.7f, 0.9f, 0.6f}) {
    int passes = 0;
    for (int i = 0; i < 200000; ++i) {
      const int32_t d2 = int32_t(rng() % (128 * 255 * 255 + 1)), d1 = int32_t(rng() % (uint32_t(d2) + 1));
      const bool pass = match::ratio_pass(d1, d2, ratio);
      passes += pass;
      ASSERT_EQ(pass, exact_ratio_pass(d1, d2, ratio)) << d1 << " " << d2 << " " << ratio;
    }
    EXPECT_GT(passes, 0);
  }
  // 16 / 25 is 0.64 exactly; 0.8f is a little above 0.8, so that pair passes.
  EXPECT_TRUE(match::ratio_pass(16, 25, 0.8f));
  EXPECT_FALSE(match::ratio_pass(0, 0, 0.8f));
  EXPECT_FALSE(match::ratio_pass(7, 7, 0.8f));
}

TEST(MatchU8, CpuPathsEqualAnInt64BruteForce) {
  std::mt19937 rng(std::random_device{}());
  struct Shape {
    int queries, query_rows;
    std::vector<int> counts, slots;
  };
  const std::vector<Shape> shapes = {
      {1, 48, {0, 1, 2, 5, 37, 768}, {}},              // single query; 0, 1, 2, few, kSlot descriptors
      {3, 21, {17, 768, 64, 63, 65, 129, 3}, {}},      // batched queries; rows not a multiple of 4 or 16
      {2, 16, {768, 40, 0, 300}, {3, 0, 3, 2, 1, 0}},  // a slot list with repeats (a scoped search)
  };
  const std::vector<match::CpuPath> paths = available_cpu_paths();
  ASSERT_FALSE(paths.empty());
  for (const Shape& s : shapes) {
    const test::MatchU8Case c = test::make_match_u8_case(s.queries, s.query_rows, s.counts, s.slots, rng);
    const match::MatchU8Problem& p = c.problem;
    const U8Reference ref = brute_force_u8(p, 0.8f);
    // The cases exercise what they claim: ties at distance zero, zero rows, passes and fails.
    int zero_ties = 0, passes = 0;
    for (size_t o = 0; o < ref.best.size(); ++o) zero_ties += ref.best[o] == 0 && ref.second[o] == 0;
    for (int v : ref.scores) passes += v;
    EXPECT_GT(zero_ties, 0);
    EXPECT_GT(passes, 0);
    for (match::CpuPath path : paths) {
      SCOPED_TRACE(match::cpu_path_name(path));
      const size_t n_rows = size_t(p.images) * p.rows;
      std::vector<int> scores(size_t(p.queries()) * p.images, -7), index(n_rows, -7);
      std::vector<int32_t> best(n_rows, -7), second(n_rows, -7);
      match::match_u8_cpu(p, {0.8f}, {scores.data(), best.data(), second.data(), index.data()}, path);
      EXPECT_EQ(scores, ref.scores);
      for (size_t o = 0; o < n_rows; ++o) {
        ASSERT_EQ(best[o], ref.best[o]) << "image " << o / p.rows << " row " << o % p.rows;
        ASSERT_EQ(second[o], ref.second[o]) << "image " << o / p.rows << " row " << o % p.rows;
        ASSERT_EQ(index[o], ref.index[o]) << "image " << o / p.rows << " row " << o % p.rows;
      }
      // Scores alone (no per-row outputs) are the same.
      std::vector<int> only(scores.size(), -7);
      match::match_u8_cpu(p, {0.8f}, {only.data()}, path);
      EXPECT_EQ(only, ref.scores);
    }
  }
}

TEST(MatchU8, PlantedCopiesAreFoundAndTiesKeepTheLowerIndex) {
  // A fresh seed each run, said on failure (once row 18, a sparse row, found an equal row nobody
  // planted at 252: make_match_u8_case now moves such rows).
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const test::MatchU8Case c = test::make_match_u8_case(1, 64, {768, 700, 500}, {}, rng);
  const match::MatchU8Problem& p = c.problem;
  std::vector<int> scores(p.images), index(size_t(p.images) * p.rows);
  std::vector<int32_t> best(index.size()), second(index.size());
  match::match_u8_cpu(p, {0.8f}, {scores.data(), best.data(), second.data(), index.data()});
  const size_t o = size_t(c.planted_slot) * p.rows;
  for (int r = 0; r < p.rows - 1; r += 2) {
    const int j = int((size_t(r) * 7919) % 768);
    EXPECT_EQ(index[o + r], j) << r;  // the copy at j + 3 (every 8th row) is the same distance, later
    EXPECT_EQ(best[o + r], 0) << r;
    if (r % 8 == 0 && j + 3 < 768) {
      EXPECT_EQ(second[o + r], 0) << r;  // a tie: best == second, so the ratio test fails
    }
  }
  const int zero_row = p.rows - 1;
  EXPECT_EQ(index[o + zero_row], -1);
  EXPECT_EQ(best[o + zero_row], INT32_MAX);
  EXPECT_EQ(second[o + zero_row], INT32_MAX);
  EXPECT_GT(scores[c.planted_slot], 2 * scores[(c.planted_slot + 1) % p.images]);
}

TEST(MatchU8, BadRequestsAreRefused) {
  std::mt19937 rng(1);
  const test::MatchU8Case c = test::make_match_u8_case(1, 16, {5}, {}, rng);
  std::vector<int> scores(1);
  match::MatchU8Problem p = c.problem;
  EXPECT_THROW(match::match_u8_cpu(p, {0.8f}, {}), std::invalid_argument);
  p.query_rows = 5;  // 16 rows are not whole queries of 5
  EXPECT_THROW(match::match_u8_cpu(p, {0.8f}, {scores.data()}), std::invalid_argument);
  for (match::CpuPath path : {match::CpuPath::kAvx512Vnni, match::CpuPath::kAvx2})
    if (!match::cpu_path_available(path)) {
      EXPECT_THROW(match::match_u8_cpu(c.problem, {0.8f}, {scores.data()}, path), std::invalid_argument);
    }
  EXPECT_TRUE(match::cpu_path_available(match::CpuPath::kScalar));
  EXPECT_TRUE(match::cpu_path_available(match::CpuPath::kAuto));
}

}  // namespace
}  // namespace prism
