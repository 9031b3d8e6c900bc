// Checks of the EMD reference (emd_reference.h) against things it shares no code with: the 1-D closed form for
// cost |i-j|, the analytic optimum for n = 2, brute-force enumeration of the transportation polytope's vertices
// for tiny n, the closed form of the discrete (0/1) metric, and structural properties (sub-measures, symmetry,
// triangle inequality, invariance under cost shifts and permutations).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "emd_reference.h"

namespace prism::test {
namespace {

using Vec = std::vector<double>;

double sum(const Vec& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

Vec l1_cost(size_t n) {
  Vec c(n * n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) c[i * n + j] = std::abs(static_cast<double>(i) - static_cast<double>(j));
  return c;
}

Vec squared_cost(size_t n) {
  Vec c(n * n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) c[i * n + j] = (static_cast<double>(i) - j) * (static_cast<double>(i) - j);
  return c;
}

// Random non-negative cost matrix; with probability 1/4 an entry is taken from a small set of integers (0..3) so
// that ties and zero-cost arcs are common.
Vec random_cost(size_t n, std::mt19937& rng, bool symmetric = false) {
  std::uniform_real_distribution<double> u(0.0, 10.0);
  std::uniform_int_distribution<int> pick(0, 3);
  Vec c(n * n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) c[i * n + j] = pick(rng) == 0 ? static_cast<double>(pick(rng)) : u(rng);
  if (symmetric)
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < i; ++j) c[i * n + j] = c[j * n + i];
  return c;
}

// Histogram generators. kind: 0 dense real, 1 sparse real (~80% zero bins), 2 integer counts of an 11x11 window
// (121 pixels over n bins, clustered around a random centre like a grey-level patch), 3 small integers 0..2
// (many duplicates and zeros). Never all-zero.
Vec random_hist(size_t n, int kind, std::mt19937& rng) {
  Vec h(n, 0.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  switch (kind) {
    case 0:
      for (auto& v : h) v = u(rng);
      break;
    case 1:
      for (auto& v : h) v = u(rng) < 0.8 ? 0.0 : u(rng);
      break;
    case 2: {
      std::normal_distribution<double> spread(u(rng) * (n - 1), 0.5 + u(rng) * n / 4.0);
      for (int p = 0; p < 121; ++p) {
        const long bin = std::lround(spread(rng));
        h[static_cast<size_t>(std::clamp(bin, 0L, static_cast<long>(n) - 1))] += 1.0;
      }
      break;
    }
    default:
      for (auto& v : h) v = static_cast<double>(std::uniform_int_distribution<int>(0, 2)(rng));
      break;
  }
  if (sum(h) == 0) h[std::uniform_int_distribution<size_t>(0, n - 1)(rng)] = 1.0;
  return h;
}

// Makes the masses equal: unchanged when they already are (the 121-pixel window counts), else both normalised to 1.
void equalise(Vec& a, Vec& b) {
  const double sa = sum(a), sb = sum(b);
  if (sa == sb) return;
  for (auto& v : a) v /= sa;
  for (auto& v : b) v /= sb;
}

// Brute-force LP optimum of the (balanced) transportation problem with r sources and c sinks by enumerating its
// vertices: every vertex is a basic solution whose r + c - 1 basic arcs form a spanning tree of K_{r,c}, and its
// flows follow by peeling leaves. Returns the least cost over the feasible (non-negative) basic solutions.
double brute_force_transport(const Vec& supply, const Vec& demand, const Vec& cost) {
  const size_t r = supply.size(), c = demand.size(), arcs = r * c, basis = r + c - 1;
  const double tol = 1e-12 * std::max(1.0, sum(supply));
  double best = std::numeric_limits<double>::infinity();
  std::vector<char> chosen(arcs, 0);
  std::fill(chosen.begin(), chosen.begin() + basis, 1);
  std::sort(chosen.begin(), chosen.end());  // smallest permutation first, for next_permutation
  do {
    std::vector<size_t> sel;
    for (size_t k = 0; k < arcs; ++k)
      if (chosen[k]) sel.push_back(k);
    // Nodes 0..r-1 are sources, r..r+c-1 sinks. Peel leaves; a cycle among the chosen arcs shows up as arcs that
    // never become leaf arcs (a tree on r + c nodes with r + c - 1 arcs peels completely).
    Vec rest(supply);
    rest.insert(rest.end(), demand.begin(), demand.end());
    std::vector<char> used(sel.size(), 0);
    Vec x(sel.size(), 0.0);
    size_t peeled = 0;
    bool progress = true;
    while (progress) {
      progress = false;
      for (size_t node = 0; node < r + c; ++node) {
        size_t degree = 0, last = 0;
        for (size_t e = 0; e < sel.size(); ++e) {
          if (used[e]) continue;
          const size_t src = sel[e] / c, snk = r + sel[e] % c;
          if (src == node || snk == node) ++degree, last = e;
        }
        if (degree != 1) continue;
        const size_t src = sel[last] / c, snk = r + sel[last] % c;
        const size_t other = src == node ? snk : src;
        x[last] = rest[node];
        rest[other] -= rest[node];
        rest[node] = 0;
        used[last] = 1;
        ++peeled;
        progress = true;
      }
    }
    if (peeled != sel.size()) continue;                                                   // not a spanning tree
    if (std::any_of(x.begin(), x.end(), [tol](double v) { return v < -tol; })) continue;  // infeasible
    double total = 0;
    for (size_t e = 0; e < sel.size(); ++e) total += x[e] * cost[sel[e]];
    best = std::min(best, total);
  } while (std::next_permutation(chosen.begin(), chosen.end()));
  return best;
}

// Brute force for possibly unequal masses: a zero-cost dummy bin on the lighter side absorbs the heavier side's
// excess (the textbook balancing of an unbalanced transportation problem).
double brute_force_partial(const Vec& a, const Vec& b, const Vec& cost) {
  const size_t n = a.size();
  const double sa = sum(a), sb = sum(b);
  if (sa == sb) return brute_force_transport(a, b, cost);
  if (sa > sb) {  // dummy column
    Vec b2(b), c2;
    b2.push_back(sa - sb);
    for (size_t i = 0; i < n; ++i) {
      c2.insert(c2.end(), cost.begin() + i * n, cost.begin() + (i + 1) * n);
      c2.push_back(0.0);
    }
    return brute_force_transport(a, b2, c2);
  }
  Vec a2(a), c2(cost);  // dummy row
  a2.push_back(sb - sa);
  c2.insert(c2.end(), n, 0.0);
  return brute_force_transport(a2, b, c2);
}

// |got - want| within 1e-12 relative to max(|want|, scale); scale (a mass) keeps the bound meaningful when want = 0.
::testing::AssertionResult close_rel(double got, double want, double scale) {
  const double tol = 1e-12 * std::max(std::abs(want), scale);
  if (std::abs(got - want) <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "got " << got << ", want " << want << " (diff " << got - want << ", tol "
                                       << tol << ")";
}

TEST(EmdReference, L1ClosedFormRandomEqualMass) {
  std::mt19937 rng(20261122);
  for (size_t n = 2; n <= 32; ++n) {
    const Vec cost = l1_cost(n);
    for (int trial = 0; trial < 300; ++trial) {
      const int kind = trial % 4;
      Vec a = random_hist(n, kind, rng), b = random_hist(n, kind, rng);
      equalise(a, b);
      double flow = -1;
      const double w = emd_reference_cost(a, b, cost, &flow);
      const double closed = emd_reference_l1_closed_form(a, b);
      ASSERT_TRUE(close_rel(w, closed, sum(a))) << "n=" << n << " trial=" << trial << " kind=" << kind;
      ASSERT_TRUE(close_rel(flow, sum(a), sum(a))) << "n=" << n << " trial=" << trial;
      // Integer counts with integer costs: every distance, bottleneck and flow is an integer, so exact.
      if (kind == 2 && sum(a) == 121) {
        ASSERT_EQ(w, closed) << "n=" << n << " trial=" << trial;
      }
    }
  }
}

// n = 2, equal masses M: with x the flow on 0->0, the others are x01 = a0 - x, x10 = b0 - x, x11 = b1 - a0 + x,
// feasible for x in [max(0, a0 - b1), min(a0, b0)]; the cost is linear in x, so the optimum is at an end.
TEST(EmdReference, TwoBinsAnalytic) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 2000; ++trial) {
    Vec a{u(rng), u(rng)}, b{u(rng), u(rng)};
    if (trial % 5 == 0) a[trial % 2] = 0;  // zero bins
    if (trial % 7 == 0) b[(trial / 7) % 2] = 0;
    if (sum(a) == 0 || sum(b) == 0) continue;
    const double scale = sum(a) / sum(b);
    for (auto& v : b) v *= scale;
    b[1] = std::max(0.0, sum(a) - b[0]);  // masses equal up to one rounding
    const Vec c = random_cost(2, rng);
    auto cost_at = [&](double x) {
      return c[0] * x + c[1] * (a[0] - x) + c[2] * (b[0] - x) + c[3] * (b[1] - a[0] + x);
    };
    const double lo = std::max(0.0, a[0] - b[1]), hi = std::min(a[0], b[0]);
    const double want = std::min(cost_at(lo), cost_at(hi));
    const double cmax = *std::max_element(c.begin(), c.end());
    ASSERT_TRUE(close_rel(emd_reference_cost(a, b, c), want, cmax * sum(a))) << "trial " << trial;
  }
}

// Vertex enumeration of the transportation polytope for n = 2, 3, 4, equal and unequal masses, general costs.
TEST(EmdReference, BruteForceVertexEnumeration) {
  std::mt19937 rng(1234);
  for (size_t n = 2; n <= 4; ++n) {
    const int trials = n == 4 ? 30 : 300;
    for (int trial = 0; trial < trials; ++trial) {
      const int kind = trial % 4;
      Vec a = random_hist(n, kind, rng), b = random_hist(n, kind, rng);
      // n = 4 with unequal masses would enumerate 20 choose 8 bases of a 4x5 problem: equal masses only there.
      if ((trial / 4) % 2 == 0 || n == 4) equalise(a, b);
      const Vec c = random_cost(n, rng);
      double flow = -1;
      const double w = emd_reference_cost(a, b, c, &flow);
      const double want = brute_force_partial(a, b, c);
      const double cmax = *std::max_element(c.begin(), c.end());
      const double f = std::min(sum(a), sum(b));
      ASSERT_TRUE(close_rel(w, want, cmax * f)) << "n=" << n << " trial=" << trial;
      ASSERT_TRUE(close_rel(flow, f, f)) << "n=" << n << " trial=" << trial;
    }
  }
}

// A sub-measure of the other side moves for free under |i-j| (each bin stays put): a vs 2a, a vs a + extra.
TEST(EmdReference, UnequalMassSubMeasureIsFree) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (size_t n = 1; n <= 33; ++n) {
    const Vec cost = l1_cost(n);
    for (int trial = 0; trial < 20; ++trial) {
      const Vec a = random_hist(n, trial % 4, rng);
      Vec twice(a), more(a);
      for (auto& v : twice) v *= 2;
      for (auto& v : more) v += u(rng) < 0.5 ? 0.0 : u(rng);
      for (const Vec* big : {&twice, &more}) {
        double flow = -1;
        EXPECT_EQ(emd_reference_cost(a, *big, cost, &flow), 0.0) << "n=" << n;
        EXPECT_TRUE(close_rel(flow, sum(a), sum(a)));
        EXPECT_EQ(emd_reference_cost(*big, a, cost, &flow), 0.0) << "n=" << n;
        EXPECT_TRUE(close_rel(flow, sum(a), sum(a)));
      }
    }
  }
}

// Unequal masses, general costs: the routed flow is min(sum a, sum b). With the discrete metric (0 on the diagonal,
// 1 elsewhere) the optimum keeps min(a_i, b_i) in place and moves the rest at 1: W = F - sum_i min(a_i, b_i).
TEST(EmdReference, UnequalMassFlowAndDiscreteMetric) {
  std::mt19937 rng(555);
  for (size_t n = 1; n <= 33; ++n) {
    Vec discrete(n * n, 1.0);
    for (size_t i = 0; i < n; ++i) discrete[i * n + i] = 0.0;
    for (int trial = 0; trial < 40; ++trial) {
      const Vec a = random_hist(n, trial % 4, rng), b = random_hist(n, (trial / 4) % 4, rng);
      const double f = std::min(sum(a), sum(b));
      double flow = -1;
      const double w = emd_reference_cost(a, b, random_cost(n, rng), &flow);
      EXPECT_GE(w, 0.0);
      EXPECT_TRUE(close_rel(flow, f, f)) << "n=" << n << " trial=" << trial;
      double kept = 0;
      for (size_t i = 0; i < n; ++i) kept += std::min(a[i], b[i]);
      EXPECT_TRUE(close_rel(emd_reference_cost(a, b, discrete, &flow), f - kept, f)) << "n=" << n;
      EXPECT_TRUE(close_rel(flow, f, f));
    }
  }
}

TEST(EmdReference, ZeroSignatures) {
  std::mt19937 rng(3);
  for (size_t n : std::vector<size_t>{1, 2, 5, 16, 33}) {
    const Vec zero(n, 0.0), h = random_hist(n, 0, rng), c = random_cost(n, rng);
    for (auto [a, b] : {std::pair{&zero, &zero}, std::pair{&zero, &h}, std::pair{&h, &zero}}) {
      double flow = -1;
      EXPECT_EQ(emd_reference_cost(*a, *b, c, &flow), 0.0) << "n=" << n;
      EXPECT_EQ(flow, 0.0) << "n=" << n;
    }
  }
  // n = 1: everything moves along the single arc.
  double flow = -1;
  EXPECT_EQ(emd_reference_cost({3.0}, {5.0}, {7.0}, &flow), 21.0);
  EXPECT_EQ(flow, 3.0);
  EXPECT_EQ(emd_reference_cost({5.0}, {3.0}, {7.0}, nullptr), 21.0);
}

// Heavily degenerate inputs terminate with the right flow: a constant cost matrix (every transport plan is
// optimal, W = c * F), all-equal histograms, isolated spikes, integer window counts with zero-cost ties.
TEST(EmdReference, DegenerateInputsTerminate) {
  std::mt19937 rng(42);
  for (size_t n = 1; n <= 33; ++n) {
    const Vec constant(n * n, 2.5), l1 = l1_cost(n), zero_cost(n * n, 0.0);
    const Vec flat(n, 121.0 / n), spike_lo = [&] {
      Vec v(n, 0.0);
      v[0] = 121;
      return v;
    }();
    const Vec spike_hi = [&] {
      Vec v(n, 0.0);
      v[n - 1] = 121;
      return v;
    }();
    for (int trial = 0; trial < 20; ++trial) {
      const Vec a = random_hist(n, 2 + trial % 2, rng), b = random_hist(n, 2 + trial % 2, rng);
      const double f = std::min(sum(a), sum(b));
      double flow = -1;
      EXPECT_TRUE(close_rel(emd_reference_cost(a, b, constant, &flow), 2.5 * f, f)) << "n=" << n;
      EXPECT_TRUE(close_rel(flow, f, f));
      EXPECT_EQ(emd_reference_cost(a, b, zero_cost, &flow), 0.0);
      EXPECT_TRUE(close_rel(flow, f, f));
      EXPECT_EQ(emd_reference_cost(a, a, l1, &flow), 0.0);
    }
    // Two spikes at opposite ends: everything travels n - 1.
    EXPECT_EQ(emd_reference_cost(spike_lo, spike_hi, l1), 121.0 * (n - 1));
    EXPECT_TRUE(close_rel(emd_reference_cost(flat, spike_lo, l1), emd_reference_l1_closed_form(flat, spike_lo), 121));
  }
}

// For a symmetric cost the problem transposes onto itself, also with unequal masses.
TEST(EmdReference, SymmetryForSymmetricCosts) {
  std::mt19937 rng(11);
  for (size_t n = 2; n <= 33; n += 3) {
    for (int trial = 0; trial < 30; ++trial) {
      const Vec a = random_hist(n, trial % 4, rng), b = random_hist(n, (trial + 1) % 4, rng);
      for (const Vec& c : {l1_cost(n), squared_cost(n), random_cost(n, rng, true)}) {
        const double ab = emd_reference_cost(a, b, c), ba = emd_reference_cost(b, a, c);
        const double cmax = *std::max_element(c.begin(), c.end());
        EXPECT_TRUE(close_rel(ab, ba, cmax * std::min(sum(a), sum(b)))) << "n=" << n << " trial=" << trial;
      }
    }
  }
}

// The 1-D EMD with cost |i-j| and equal masses is a metric: W(a,c) <= W(a,b) + W(b,c).
TEST(EmdReference, TriangleInequalityL1) {
  std::mt19937 rng(12);
  for (size_t n = 2; n <= 33; n += 2) {
    const Vec cost = l1_cost(n);
    for (int trial = 0; trial < 30; ++trial) {
      Vec a = random_hist(n, trial % 4, rng), b = random_hist(n, trial % 4, rng), c = random_hist(n, trial % 4, rng);
      for (Vec* h : {&a, &b, &c}) {
        const double s = sum(*h);
        for (auto& v : *h) v /= s;
      }
      const double ac = emd_reference_cost(a, c, cost), ab = emd_reference_cost(a, b, cost);
      const double bc = emd_reference_cost(b, c, cost);
      EXPECT_LE(ac, ab + bc + 1e-12 * n) << "n=" << n << " trial=" << trial;
    }
  }
}

// Metamorphic checks on general costs up to n = 33 (where no closed form exists). With equal masses every row
// ships all of a_i and every column receives all of b_j, so adding u_i + v_j to cost[i][j] adds exactly
// sum u_i a_i + sum v_j b_j to every plan's cost and leaves the optimum's plan unchanged. Permuting the bins of a
// (with the rows of the cost) or of b (with its columns) relabels the same problem. Scaling masses or costs
// scales W.
TEST(EmdReference, ShiftPermutationScaleInvariance) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<double> u(0.0, 3.0);
  for (size_t n = 2; n <= 33; n += 1) {
    for (int trial = 0; trial < 8; ++trial) {
      Vec a = random_hist(n, trial % 4, rng), b = random_hist(n, (trial / 4) % 4, rng);
      equalise(a, b);
      const Vec c = random_cost(n, rng);
      const double w = emd_reference_cost(a, b, c);
      const double cmax = *std::max_element(c.begin(), c.end());
      const double mass = sum(a);

      Vec us(n), vs(n), shifted(c);
      for (auto& v : us) v = u(rng);
      for (auto& v : vs) v = u(rng);
      double offset = 0;
      for (size_t i = 0; i < n; ++i) offset += us[i] * a[i] + vs[i] * b[i];
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < n; ++j) shifted[i * n + j] += us[i] + vs[j];
      EXPECT_TRUE(close_rel(emd_reference_cost(a, b, shifted), w + offset, (cmax + 6) * mass)) << "n=" << n;

      std::vector<size_t> p(n), q(n);
      std::iota(p.begin(), p.end(), 0);
      std::iota(q.begin(), q.end(), 0);
      std::shuffle(p.begin(), p.end(), rng);
      std::shuffle(q.begin(), q.end(), rng);
      Vec pa(n), qb(n), pc(n * n);
      for (size_t i = 0; i < n; ++i) pa[i] = a[p[i]], qb[i] = b[q[i]];
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < n; ++j) pc[i * n + j] = c[p[i] * n + q[j]];
      EXPECT_TRUE(close_rel(emd_reference_cost(pa, qb, pc), w, cmax * mass)) << "n=" << n;

      Vec a3(a), b3(b), c2(c);
      for (auto& v : a3) v *= 3;
      for (auto& v : b3) v *= 3;
      for (auto& v : c2) v *= 0.5;
      EXPECT_TRUE(close_rel(emd_reference_cost(a3, b3, c2), 1.5 * w, 1.5 * cmax * mass)) << "n=" << n;
    }
  }
}

TEST(EmdReference, InvalidInputThrows) {
  EXPECT_THROW(emd_reference_cost({1, 2}, {1}, {0, 1, 1, 0}), std::invalid_argument);
  EXPECT_THROW(emd_reference_cost({1, 2}, {2, 1}, {0, 1, 1}), std::invalid_argument);
  EXPECT_THROW(emd_reference_cost({1, -2}, {2, 1}, {0, 1, 1, 0}), std::invalid_argument);
  EXPECT_THROW(emd_reference_cost({1, 2}, {2, 1}, {0, -1, 1, 0}), std::invalid_argument);
  EXPECT_THROW(emd_reference_cost({1, NAN}, {2, 1}, {0, 1, 1, 0}), std::invalid_argument);
}

}  // namespace
}  // namespace prism::test
