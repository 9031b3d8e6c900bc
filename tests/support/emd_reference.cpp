// Reference EMD by min-cost flow: the successive shortest path algorithm with node potentials (reduced costs),
// as in Ahuja, Magnanti & Orlin, "Network Flows: Theory, Algorithms, and Applications" (1993), section 9.7
// ("Successive Shortest Path Algorithm"); the potentials make every residual reduced cost non-negative, so
// each shortest path can be found by Dijkstra (the Johnson / Edmonds-Karp reweighting).
//
// Network (dense bipartite):  s -> row i  (cap a_i, cost 0)
//                             row i -> col j  (cap infinite, cost c_ij)
//                             col j -> t  (cap b_j, cost 0)
// Each augmentation sends flow along a cheapest s-t path of the residual network; with no negative cycle at the
// start (costs >= 0, zero flow), the flow stays a min-cost flow of its value after every augmentation, so once
// F = min(sum a, sum b) units have moved it is an optimal partial transport.
#include "emd_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace prism::test {

double emd_reference_cost(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& cost,
                          double* flow) {
  const size_t n = a.size();
  if (b.size() != n || cost.size() != n * n)
    throw std::invalid_argument("emd_reference_cost: need a.size() == b.size() == n and cost.size() == n*n");
  for (double v : a)
    if (!(v >= 0) || !std::isfinite(v)) throw std::invalid_argument("emd_reference_cost: bad mass in a");
  for (double v : b)
    if (!(v >= 0) || !std::isfinite(v)) throw std::invalid_argument("emd_reference_cost: bad mass in b");
  for (double v : cost)
    if (!(v >= 0) || !std::isfinite(v)) throw std::invalid_argument("emd_reference_cost: bad cost");

  const double sum_a = std::accumulate(a.begin(), a.end(), 0.0);
  const double sum_b = std::accumulate(b.begin(), b.end(), 0.0);
  // A supply / demand / arc flow at or below eps counts as exhausted. Exact bottlenecks reach 0 exactly (x - x
  // == 0 in floating point); eps only absorbs the rounding drift of partial subtractions, which would otherwise
  // leave residues of ~1e-17 that cost an augmentation each. Every augmentation therefore moves more than eps.
  const double eps = 1e-12 * std::max(sum_a, sum_b);

  // Node numbering: s = 0, row i = 1 + i, col j = 1 + n + j, t = 1 + 2n.
  const size_t num_nodes = 2 * n + 2;
  const size_t s = 0, t = 2 * n + 1;
  auto row = [](size_t i) { return 1 + i; };
  auto col = [n](size_t j) { return 1 + n + j; };

  std::vector<double> supply(a);      // residual capacity of s -> row i
  std::vector<double> demand(b);      // residual capacity of col j -> t
  std::vector<double> x(n * n, 0.0);  // flow on row i -> col j (= residual capacity of col j -> row i)

  // Potentials: all zero is valid at the start since every cost is >= 0.
  std::vector<double> pot(num_nodes, 0.0);
  std::vector<double> dist(num_nodes);
  std::vector<size_t> pred(num_nodes);
  std::vector<char> done(num_nodes);
  const double inf = std::numeric_limits<double>::infinity();

  auto exhausted = [eps](const std::vector<double>& v) {
    return std::none_of(v.begin(), v.end(), [eps](double r) { return r > eps; });
  };

  // Each augmentation saturates a supply, a demand or a reverse arc; in practice that is O(n) to O(n^2)
  // augmentations. The cap is far above anything seen in the tests and only guards against a bug.
  const size_t max_augmentations = 100 * (n + 1) * (n + 1) + 1000;
  size_t augmentations = 0;

  while (!exhausted(supply) && !exhausted(demand)) {
    if (++augmentations > max_augmentations)
      throw std::runtime_error("emd_reference_cost: augmentation cap exceeded (n = " + std::to_string(n) + ")");

    // Dijkstra from s on reduced costs c(u,v) + pot[u] - pot[v] >= 0. O(V^2) with the arcs enumerated on the fly
    // (V <= 68 for n <= 33, no heap needed). Reduced costs are clamped at 0: in exact arithmetic they are >= 0,
    // but rounding in the potentials does make some slightly negative (tie-level), and Dijkstra needs >= 0.
    std::fill(dist.begin(), dist.end(), inf);
    std::fill(done.begin(), done.end(), 0);
    dist[s] = 0;
    auto relax = [&](size_t u, size_t v, double c) {
      if (done[v]) return;  // settled nodes keep their predecessor, so pred[] stays a tree rooted at s
      const double nd = dist[u] + std::max(0.0, c + pot[u] - pot[v]);
      if (nd < dist[v]) {
        dist[v] = nd;
        pred[v] = u;
      }
    };
    for (;;) {
      size_t u = num_nodes;
      for (size_t v = 0; v < num_nodes; ++v)
        if (!done[v] && dist[v] < inf && (u == num_nodes || dist[v] < dist[u])) u = v;
      if (u == num_nodes) break;
      done[u] = 1;
      if (u == s) {
        for (size_t i = 0; i < n; ++i)
          if (supply[i] > eps) relax(s, row(i), 0.0);
      } else if (u <= n) {  // row i: forward arcs to every column (infinite capacity)
        const size_t i = u - 1;
        for (size_t j = 0; j < n; ++j) relax(u, col(j), cost[i * n + j]);
      } else if (u < t) {  // col j: reverse arcs to rows that ship to it, and the arc to t
        const size_t j = u - 1 - n;
        for (size_t i = 0; i < n; ++i)
          if (x[i * n + j] > eps) relax(u, row(i), -cost[i * n + j]);
        if (demand[j] > eps) relax(u, t, 0.0);
      }
      // Residual arcs into s (row -> s) and out of t (t -> col) are left out: a simple s-t path never uses them.
    }
    // Some row has supply and some column has demand, and every row reaches every column: t is reachable.
    if (!(dist[t] < inf)) throw std::runtime_error("emd_reference_cost: sink unreachable (internal error)");

    // Potential update pot += min(dist, dist[t]): keeps every residual reduced cost >= 0, including those of the
    // reverse arcs the augmentation creates (the path's arcs get reduced cost exactly 0). Capping at dist[t] also
    // covers nodes that were unreachable (dist = inf).
    for (size_t v = 0; v < num_nodes; ++v) pot[v] += std::min(dist[v], dist[t]);

    // Bottleneck of the path t <- ... <- s. Arcs row -> col are uncapacitated.
    double delta = inf;
    for (size_t v = t; v != s; v = pred[v]) {
      const size_t u = pred[v];
      if (u == s)
        delta = std::min(delta, supply[v - 1]);
      else if (v == t)
        delta = std::min(delta, demand[u - 1 - n]);
      else if (u > n)
        delta = std::min(delta, x[(v - 1) * n + (u - 1 - n)]);  // reverse arc col -> row
    }
    for (size_t v = t; v != s; v = pred[v]) {
      const size_t u = pred[v];
      if (u == s)
        supply[v - 1] -= delta;
      else if (v == t)
        demand[u - 1 - n] -= delta;
      else if (u > n)
        x[(v - 1) * n + (u - 1 - n)] -= delta;  // cancel flow on row v -> col u
      else
        x[(u - 1) * n + (v - 1 - n)] += delta;  // row u -> col v
    }
  }

  double total_cost = 0, total_flow = 0;
  for (size_t k = 0; k < n * n; ++k) {
    total_cost += x[k] * cost[k];
    total_flow += x[k];
  }
  if (flow) *flow = total_flow;
  return total_cost;
}

double emd_reference_l1_closed_form(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("emd_reference_l1_closed_form: size mismatch");
  // In 1-D with cost |i-j|, exactly |A_k - B_k| units must cross the boundary between bins k and k+1.
  double ca = 0, cb = 0, total = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    ca += a[k];
    cb += b[k];
    total += std::abs(ca - cb);
  }
  return total;
}

}  // namespace prism::test
