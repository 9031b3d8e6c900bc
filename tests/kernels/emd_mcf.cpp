// Successive shortest paths for min-cost flow (Ahuja, Magnanti & Orlin, "Network Flows", 1993,
// section 9.7) on the transportation graph source -> a_i -> b_j -> sink, with Johnson potentials
// so that Dijkstra sees non-negative reduced costs. Dense O(V^2) Dijkstra: V <= 68.
#include "emd_mcf.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace prism::test {

double mcf_transport_cost(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& cost,
                          double* flow_out) {
  const int n = static_cast<int>(a.size()), m = static_cast<int>(b.size());
  double sa = 0, sb = 0;
  for (double x : a) sa += std::max(x, 0.0);
  for (double x : b) sb += std::max(x, 0.0);
  const double target = std::min(sa, sb);
  if (flow_out) *flow_out = target;
  if (target <= 0) return 0.0;
  const double eps = 1e-13 * std::max(sa, sb);
  std::vector<double> supply(n), demand(m), x(static_cast<size_t>(n) * m, 0.0);
  for (int i = 0; i < n; ++i) supply[i] = std::max(a[i], 0.0);
  for (int j = 0; j < m; ++j) demand[j] = std::max(b[j], 0.0);
  // Nodes: 0..n-1 the first signature's bins, n..n+m-1 the second's, S = n+m, T = n+m+1. Arcs:
  // S -> i (residual supply_i), i -> j (unbounded, cost c_ij), j -> T (residual demand_j), and
  // the reverses of arcs that carry flow. Potentials start at 0 (all costs >= 0).
  const int S = n + m, T = n + m + 1, V = n + m + 2;
  std::vector<double> pot(V, 0.0), dist(V);
  std::vector<int> prev(V);
  std::vector<char> done(V);
  const double inf = std::numeric_limits<double>::infinity();
  double moved = 0;
  auto relax = [&](int u, int v, double c) {
    const double d = dist[u] + c + pot[u] - pot[v];
    if (d < dist[v]) {
      dist[v] = d;
      prev[v] = u;
    }
  };
  for (int iter = 0; moved < target - eps; ++iter) {
    if (iter > 100 * V * V) throw std::runtime_error("mcf: no convergence");
    std::fill(dist.begin(), dist.end(), inf);
    std::fill(prev.begin(), prev.end(), -1);
    std::fill(done.begin(), done.end(), 0);
    dist[S] = 0;
    for (;;) {
      int u = -1;
      for (int v = 0; v < V; ++v)
        if (!done[v] && dist[v] < inf && (u < 0 || dist[v] < dist[u])) u = v;
      if (u < 0) break;
      done[u] = 1;
      if (u == S) {
        for (int i = 0; i < n; ++i)
          if (supply[i] > eps) relax(S, i, 0.0);
      } else if (u == T) {
        for (int j = 0; j < m; ++j)
          if (std::max(b[j], 0.0) - demand[j] > eps) relax(T, n + j, 0.0);
      } else if (u < n) {
        for (int j = 0; j < m; ++j) relax(u, n + j, cost[static_cast<size_t>(u) * m + j]);
        if (std::max(a[u], 0.0) - supply[u] > eps) relax(u, S, 0.0);
      } else {
        const int j = u - n;
        for (int i = 0; i < n; ++i)
          if (x[static_cast<size_t>(i) * m + j] > eps) relax(u, i, -cost[static_cast<size_t>(i) * m + j]);
        if (demand[j] > eps) relax(u, T, 0.0);
      }
    }
    if (dist[T] == inf) throw std::runtime_error("mcf: no augmenting path");
    // Unreached nodes move by the largest finite distance, which keeps every residual arc's
    // reduced cost non-negative for the next Dijkstra.
    double reach = 0;
    for (int v = 0; v < V; ++v)
      if (dist[v] < inf) reach = std::max(reach, dist[v]);
    for (int v = 0; v < V; ++v) pot[v] += dist[v] < inf ? dist[v] : reach;
    // Bottleneck along T <- ... <- S.
    double delta = target - moved;
    for (int v = T; v != S; v = prev[v]) {
      const int u = prev[v];
      if (u == S) delta = std::min(delta, supply[v]);
      else if (v == T) delta = std::min(delta, demand[u - n]);
      else if (u == T) delta = std::min(delta, std::max(b[v - n], 0.0) - demand[v - n]);
      else if (v == S) delta = std::min(delta, std::max(a[u], 0.0) - supply[u]);
      else if (u >= n && v < n) delta = std::min(delta, x[static_cast<size_t>(v) * m + (u - n)]);
    }
    for (int v = T; v != S; v = prev[v]) {
      const int u = prev[v];
      if (u == S) supply[v] -= delta;
      else if (v == T) demand[u - n] -= delta;
      else if (u == T) demand[v - n] += delta;
      else if (v == S) supply[u] += delta;
      else if (u < n) x[static_cast<size_t>(u) * m + (v - n)] += delta;
      else x[static_cast<size_t>(v) * m + (u - n)] -= delta;
    }
    moved += delta;
  }
  double total = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) total += x[static_cast<size_t>(i) * m + j] * cost[static_cast<size_t>(i) * m + j];
  return total;
}

double emd_l1_closed_form(const std::vector<double>& a, const std::vector<double>& b) {
  double ca = 0, cb = 0, total = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    ca += a[k];
    cb += b[k];
    total += std::abs(ca - cb);
  }
  return total;
}

}  // namespace prism::test
