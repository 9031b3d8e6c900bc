// The EMD CPU path (transportation simplex, kernels/emd) against the independent min-cost-flow
// reference (emd_reference.cpp) and the cumulative-histogram closed form; edge cases; the
// cache and deduplication of CpuEmdMap never change a result.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <cmath>
#include <fstream>
#include <mutex>

#include "emd/emd_map.h"
#include "emd_cases.h"
#include "emd_reference.h"
#include "prism_test.h"

namespace prism {
namespace {

using emd::GroundDistance;
using emd::Normalization;
using test::SignatureKind;

struct Worst {
  std::mutex mu;
  double rel = 0;
  std::string what;
  int capped = 0;
  void offer(double r, const std::string& w) {
    std::lock_guard<std::mutex> l(mu);
    if (r > rel) {
      rel = r;
      what = w;
    }
  }
};

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Our total cost vs the reference's on `count` random problems of `n` bins.
template <class T>
void check_against_reference(int n, int count, SignatureKind kind, bool l1_cost, Worst& worst, uint32_t seed) {
  cv::parallel_for_(cv::Range(0, 16), [&](const cv::Range& r) {
    for (int part = r.start; part < r.end; ++part) {
      std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(n) * 131u + static_cast<uint32_t>(part));
      for (int k = part; k < count; k += 16) {
        const std::vector<float> cost = l1_cost ? GroundDistance::abs_diff(n).values() : test::random_cost(rng, n);
        const GroundDistance g(cost, n);
        const auto a = test::random_signature(rng, n, kind);
        const auto b = test::random_signature(rng, n, kind == SignatureKind::Unequal ? SignatureKind::Dense : kind);
        const emd::Transport<T> ours = emd::solve_transport<T>(a.data(), b.data(), g.view());
        double flow = 0;
        const double ref = test::emd_reference_cost(to_double(a), to_double(b), to_double(cost), &flow);
        const double scale = std::max(1.0, static_cast<double>(g.view().max_cost)) * std::max(flow, 1e-30);
        const double rel = std::abs(static_cast<double>(ours.cost) - ref) / std::max(std::abs(ref), 1e-9 * scale);
        worst.offer(rel, std::to_string(n) + " bins " + test::kind_name(kind) + (l1_cost ? " |i-j|" : " random cost") +
                             " problem " + std::to_string(k) + ": ours " + std::to_string(ours.cost) + " reference " +
                             std::to_string(ref));
        if (ours.stats.capped) {
          std::lock_guard<std::mutex> l(worst.mu);
          ++worst.capped;
        }
      }
    }
  });
}

TEST(Emd, MatchesTheMinCostFlowReferenceOnEverySize) {
  const int count = test::problems_per_size(1500);
  for (SignatureKind kind : {SignatureKind::Dense, SignatureKind::Sparse, SignatureKind::Counts, SignatureKind::Unequal}) {
    Worst worst;
    for (int n = 2; n <= emd::kMaxBins; ++n) {
      check_against_reference<double>(n, count, kind, false, worst, 1);
      check_against_reference<double>(n, count / 4, kind, true, worst, 2);
    }
    std::cout << "  " << test::kind_name(kind) << ": " << count << " problems per size, worst relative error "
              << worst.rel << " (" << worst.what << ")\n";
    EXPECT_LE(worst.rel, 1e-9) << worst.what;
    EXPECT_EQ(worst.capped, 0) << "the iteration cap was reached";
  }
}

TEST(Emd, FloatArithmeticMissesTheBarSoBothPathsUseDouble) {
  // The same solver in float: its relative error on small distances goes past the 1e-5
  // (about 2e-4 at 32 bins), which is why the CPU and CUDA paths both solve in double. Reported;
  // held only to terminating and staying within 1e-3.
  Worst worst;
  for (int n : {2, 4, 8, 11, 16, 32})
    for (SignatureKind kind : {SignatureKind::Dense, SignatureKind::Counts, SignatureKind::Unequal})
      check_against_reference<float>(n, 400, kind, false, worst, 3);
  std::cout << "  float: worst relative error " << worst.rel << " (" << worst.what << ")\n";
  EXPECT_LE(worst.rel, 1e-3) << worst.what;
  EXPECT_EQ(worst.capped, 0);
}

TEST(Emd, AbsDiffCostEqualsTheCumulativeClosedForm) {
  std::mt19937 rng(5);
  double worst = 0;
  for (int n = 2; n <= emd::kMaxBins; ++n) {
    const GroundDistance g = GroundDistance::abs_diff(n);
    for (int k = 0; k < 300; ++k) {
      const SignatureKind kind = static_cast<SignatureKind>(k % 3);
      auto a = test::random_signature(rng, n, kind), b = test::random_signature(rng, n, kind);
      // equal masses: rescale b to a's total in double, then round to float
      double sa = 0, sb = 0;
      for (int i = 0; i < n; ++i) sa += a[i], sb += b[i];
      std::vector<double> ad = to_double(a), bd(n);
      for (int i = 0; i < n; ++i) bd[i] = b[i] * (sa / sb);
      for (int i = 0; i < n; ++i) b[i] = static_cast<float>(bd[i]);
      bd = to_double(b);
      const double closed = test::emd_reference_l1_closed_form(ad, bd);
      const emd::Transport<double> t = emd::solve_transport<double>(a.data(), b.data(), g.view());
      // masses differ by float rounding only; the closed form assumes them equal
      const double slack = std::abs(t.mass_a - t.mass_b) * n;
      worst = std::max(worst, (std::abs(t.cost - closed) - slack) / std::max(closed, 1e-12));
    }
  }
  EXPECT_LE(worst, 1e-9);
}

TEST(Emd, NormalisationsAndEmptySignatures) {
  const GroundDistance g = GroundDistance::abs_diff(4);
  const std::vector<float> a = {1, 0, 0, 0}, b = {0, 0, 0, 2}, zero = {0, 0, 0, 0};
  // One unit moves 3 bins; the other unit of b stays (partial matching).
  EXPECT_DOUBLE_EQ(emd::emd_cpu(a.data(), b.data(), g, Normalization::Flow), 3.0);
  EXPECT_DOUBLE_EQ(emd::emd_cpu(a.data(), b.data(), g, Normalization::LargerMass), 1.5);
  EXPECT_EQ(emd::emd_cpu(zero.data(), zero.data(), g), 0.0);
  EXPECT_TRUE(std::isinf(emd::emd_cpu(a.data(), zero.data(), g)));
  EXPECT_TRUE(std::isinf(emd::emd_cpu(zero.data(), b.data(), g, Normalization::LargerMass)));
  // Negative and NaN bins count as zero.
  const std::vector<float> odd = {1, -5, std::nanf(""), 0};
  EXPECT_DOUBLE_EQ(emd::emd_cpu(odd.data(), a.data(), g), 0.0);
  EXPECT_DOUBLE_EQ(emd::emd_cpu(a.data(), a.data(), g), 0.0);
}

TEST(Emd, DegenerateCountHistogramsTerminate) {
  // Many equal counts and an all-ties cost matrix: the worst case for cycling.
  for (int n : {8, 16, 32}) {
    const GroundDistance g(std::vector<float>(static_cast<size_t>(n) * n, 1.f), n);
    std::vector<float> a(n, 4.f), b(n, 0.f);
    for (int i = 0; i < n; i += 2) b[i] = 8.f;
    emd::Stats st;
    const double d = emd::emd_cpu(a.data(), b.data(), g, Normalization::Flow, &st);
    EXPECT_FALSE(st.capped);
    EXPECT_NEAR(d, 1.0, 1e-12);
    const GroundDistance l1 = GroundDistance::abs_diff(n);
    EXPECT_NEAR(emd::emd_cpu(a.data(), b.data(), l1, Normalization::Flow, &st), 0.5, 1e-12);
    EXPECT_FALSE(st.capped);
  }
}

TEST(Emd, GroundDistanceValidationAndFiles) {
  EXPECT_THROW(GroundDistance::abs_diff(1), std::invalid_argument);
  EXPECT_THROW(GroundDistance::abs_diff(33), std::invalid_argument);
  EXPECT_THROW(GroundDistance({0, 1, -1, 0}, 2), std::invalid_argument);
  EXPECT_THROW(GroundDistance({0, 1, 1}, 2), std::invalid_argument);
  const GroundDistance w = GroundDistance::from_wavelengths({450, 550, 700});
  EXPECT_FLOAT_EQ(w.values()[0 * 3 + 2], 250.f);

  test::TempDir dir;
  const std::string good = dir.file("cost.txt"), bad = dir.file("bad.txt"), ragged = dir.file("ragged.txt");
  std::ofstream(good) << "# 3 bins\n0, 1, 2\n1 0 1\n2\t1\t0\n";
  std::ofstream(bad) << "0 1\n1 x\n";
  std::ofstream(ragged) << "0 1 2\n1 0\n";
  const GroundDistance g = GroundDistance::load(good);
  EXPECT_EQ(g.bins(), 3);
  EXPECT_FLOAT_EQ(g.values()[2], 2.f);
  auto message = [](const std::string& path) {
    try {
      GroundDistance::load(path);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(bad).find(bad + ":2:"), std::string::npos) << message(bad);
  EXPECT_NE(message(ragged).find(ragged + ":2:"), std::string::npos) << message(ragged);
  EXPECT_NE(message(dir.file("missing.txt")).find("cannot open"), std::string::npos);

  EXPECT_THROW(emd::validate_target({0, 0, 0}, 3), std::invalid_argument);
  EXPECT_THROW(emd::validate_target({1, 0}, 3), std::invalid_argument);
  EXPECT_THROW(emd::validate_target({1, -1, 0}, 3), std::invalid_argument);
  EXPECT_NO_THROW(emd::validate_target({1, 0, 0}, 3));
}

// A "frame" of count signatures with few distinct values, like a static scene.
std::vector<float> scene(std::mt19937& rng, int n, int pixels, int distinct) {
  std::vector<std::vector<float>> pool;
  for (int i = 0; i < distinct; ++i) pool.push_back(test::random_signature(rng, n, SignatureKind::Counts));
  std::vector<float> f;
  for (int p = 0; p < pixels; ++p) {
    const auto& s = pool[rng() % distinct];
    f.insert(f.end(), s.begin(), s.end());
  }
  return f;
}

TEST(EmdMap, CacheAndDedupNeverChangeAResult) {
  const int n = 11, pixels = 20000;
  std::mt19937 rng(9);
  std::vector<float> target = test::random_signature(rng, n, SignatureKind::Counts);
  emd::EmdMapConfig plain;
  plain.dedup = false;
  emd::EmdMapConfig cached;
  cached.cache_capacity = 7000;
  emd::CpuEmdMap reference(GroundDistance::abs_diff(n), target, plain);
  emd::CpuEmdMap map(GroundDistance::abs_diff(n), target, cached);
  std::vector<float> frame = scene(rng, n, pixels, 3000);
  std::vector<float> want(pixels), got(pixels);
  for (int f = 0; f < 5; ++f) {
    if (f == 2) frame = scene(rng, n, pixels, 6000);  // a new scene: misses; frame 3 no longer fits: flush
    const emd::FrameStats rs = reference.compute(frame.data(), pixels, want.data());
    const emd::FrameStats s = map.compute(frame.data(), pixels, got.data());
    EXPECT_EQ(rs.solved, pixels);
    for (int p = 0; p < pixels; ++p) ASSERT_EQ(std::memcmp(&got[p], &want[p], 4), 0) << "frame " << f << " pixel " << p;
    EXPECT_EQ(s.solved + s.duplicates + s.cache_hits, pixels);
    std::cout << "  frame " << f << ": solved " << s.solved << ", duplicates " << s.duplicates << ", cache hits "
              << s.cache_hits << (s.flushed ? " (flushed)" : "") << "\n";
    if (f == 1 || f == 4) {
      EXPECT_EQ(s.solved, 0);  // the same frame again: everything cached
      EXPECT_EQ(s.cache_hits, pixels);
    }
    if (f == 3) {
      EXPECT_TRUE(s.flushed);
      EXPECT_GT(s.solved, 0);
    }
    if (f == 0) {
      EXPECT_LE(s.solved, 3000);
    }
  }
}

}  // namespace
}  // namespace prism
