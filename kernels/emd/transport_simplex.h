// The transportation simplex for the Earth Mover's Distance between two histograms of n <= 32
// bins, one problem per call, written once for the CPU path and for one CUDA thread.
//
// Algorithm: the transportation simplex on the bipartite graph of non-zero bins (Dantzig, "Linear
// Programming and Extensions", ch. 14; Rubner et al., "The Earth Mover's Distance as a Metric for
// Image Retrieval", 2000, for its use as EMD):
//  - zero-mass bins are dropped (they carry no flow in any optimum); unequal masses get a dummy
//    bin on the lighter side, at cost 0, that takes the excess: the lighter side moves in full;
//  - the north-west corner rule gives a feasible basis at once (no phase 1): a spanning tree of
//    rows + cols - 1 cells, degenerate (zero-flow) cells included;
//  - each iteration computes the potentials u_i + v_j = c_ij on the tree, enters the most negative
//    reduced cost c_ij - u_i - v_j (Dantzig's rule) and pivots around the cycle it closes;
//  - anti-cycling: histograms of pixel counts are heavily degenerate, and Dantzig's rule can cycle
//    on them. After rows + cols consecutive degenerate pivots the solver switches to Bland's rule
//    (the first improving cell in row-major order enters; the first minimising cell in that order
//    leaves), which cannot cycle, until a pivot moves flow again. An iteration cap as a last guard
//    reports itself in Stats::capped (never seen in the tests).
//
// T is the arithmetic type (double on the CPU, double or float on the GPU).
#pragma once
#include <cmath>
#include <cstdint>

#include "common/hostdevice.h"

namespace prism::emd {

constexpr int kMaxBins = 32;
constexpr int kMaxNodes = kMaxBins + 1;  // + the dummy bin

// How the total cost becomes a distance.
enum class Normalization : int {
  Flow = 0,        // Rubner: divided by the flow moved, the smaller total mass (default)
  LargerMass = 1,  // cv::EMD: divided by the larger total mass
};

// Ground distance: cost[i * n + j] moves one unit from bin i of the first signature to bin j of
// the second. Non-negative; max_cost is its largest entry (scales the optimality tolerance).
struct CostMatrix {
  const float* cost;
  int n;
  float max_cost;
};

struct Stats {
  int pivots = 0;
  int degenerate_pivots = 0;
  bool capped = false;  // stopped by the iteration cap (not proven optimal)
};

template <class T>
struct Transport {
  T cost = T(0);    // total cost of the optimal flow
  T flow = T(0);    // flow moved: the smaller total mass
  T mass_a = T(0);  // total masses (negative and NaN bins counted as 0)
  T mass_b = T(0);
  Stats stats;
};

namespace detail {

template <class T>
struct Tolerance;
template <>
struct Tolerance<double> {
  PRISM_HD static double eps() { return 1e-12; }
};
template <>
struct Tolerance<float> {
  PRISM_HD static float eps() { return 2e-6f; }
};

// One problem's state: rows are the first signature's non-zero bins (+ dummy), columns the
// second's. Bin index -1 is the dummy.
template <class T>
struct Tableau {
  int rows, cols;
  int8_t row_bin[kMaxNodes], col_bin[kMaxNodes];
  T supply[kMaxNodes], demand[kMaxNodes];
  // Basis: rows + cols - 1 cells.
  int8_t cell_row[2 * kMaxNodes], cell_col[2 * kMaxNodes];
  T flow[2 * kMaxNodes];
  uint64_t basic[kMaxNodes];  // bit j of basic[i]: cell (i, j) is in the basis
  // Tree (nodes 0..rows-1 are rows, rows..rows+cols-1 columns), rooted at row 0.
  int8_t parent[2 * kMaxNodes], parent_cell[2 * kMaxNodes], depth[2 * kMaxNodes];
  T potential[2 * kMaxNodes];  // u for rows, v for columns
};

template <class T>
PRISM_HD T cell_cost(const CostMatrix& c, int row_bin, int col_bin) {
  if (row_bin < 0 || col_bin < 0) return T(0);
  return static_cast<T>(c.cost[row_bin * c.n + col_bin]);
}

// Parents, depths and potentials of the basis tree, by repeated sweeps over the cells (at most
// 65 cells; each sweep attaches every cell with exactly one endpoint in the tree).
template <class T>
PRISM_HD void build_tree(Tableau<T>& t, const CostMatrix& c) {
  const int nodes = t.rows + t.cols, cells = nodes - 1;
  for (int v = 0; v < nodes; ++v) t.depth[v] = -1;
  t.depth[0] = 0;
  t.parent[0] = -1;
  t.parent_cell[0] = -1;
  t.potential[0] = T(0);
  int attached = 1;
  while (attached < nodes) {
    const int before = attached;
    for (int k = 0; k < cells; ++k) {
      const int r = t.cell_row[k], col = t.rows + t.cell_col[k];
      const bool in_r = t.depth[r] >= 0, in_c = t.depth[col] >= 0;
      if (in_r == in_c) continue;
      const T cost = cell_cost<T>(c, t.row_bin[t.cell_row[k]], t.col_bin[t.cell_col[k]]);
      const int from = in_r ? r : col, to = in_r ? col : r;
      t.parent[to] = static_cast<int8_t>(from);
      t.parent_cell[to] = static_cast<int8_t>(k);
      t.depth[to] = static_cast<int8_t>(t.depth[from] + 1);
      t.potential[to] = cost - t.potential[from];  // u_r + v_c = cost
      ++attached;
    }
    if (attached == before) break;  // not a spanning tree: cannot happen with a valid basis
  }
}

}  // namespace detail

// The optimal transport between a and b (c.n bins each; negative and NaN bins count as 0).
// Either empty: cost 0, flow 0.
template <class T>
PRISM_HD Transport<T> solve_transport(const float* a, const float* b, const CostMatrix& c) {
  Transport<T> res;
  detail::Tableau<T> t;
  T sum_a = T(0), sum_b = T(0);
  t.rows = 0;
  t.cols = 0;
  for (int i = 0; i < c.n; ++i) {
    const float x = a[i] > 0.f ? a[i] : 0.f;  // also maps NaN to 0
    if (x > 0.f) {
      t.row_bin[t.rows] = static_cast<int8_t>(i);
      t.supply[t.rows++] = static_cast<T>(x);
      sum_a += static_cast<T>(x);
    }
    const float y = b[i] > 0.f ? b[i] : 0.f;
    if (y > 0.f) {
      t.col_bin[t.cols] = static_cast<int8_t>(i);
      t.demand[t.cols++] = static_cast<T>(y);
      sum_b += static_cast<T>(y);
    }
  }
  res.mass_a = sum_a;
  res.mass_b = sum_b;
  res.flow = sum_a < sum_b ? sum_a : sum_b;
  if (t.rows == 0 || t.cols == 0) return res;
  if (sum_a > sum_b) {
    t.col_bin[t.cols] = -1;
    t.demand[t.cols++] = sum_a - sum_b;
  } else if (sum_b > sum_a) {
    t.row_bin[t.rows] = -1;
    t.supply[t.rows++] = sum_b - sum_a;
  }
  const int cells = t.rows + t.cols - 1;

  // North-west corner: a staircase of rows + cols - 1 cells; a tie exhausts the row first.
  {
    T rs = t.supply[0], rd = t.demand[0];
    int i = 0, j = 0;
    for (int k = 0; k < t.rows; ++k) t.basic[k] = 0;
    for (int k = 0; k < cells; ++k) {
      const T x = rs < rd ? rs : rd;
      t.cell_row[k] = static_cast<int8_t>(i);
      t.cell_col[k] = static_cast<int8_t>(j);
      t.flow[k] = x > T(0) ? x : T(0);
      t.basic[i] |= uint64_t(1) << j;
      rs -= x;
      rd -= x;
      if (k == cells - 1) break;
      if (i == t.rows - 1) {
        rd = t.demand[++j];
      } else if (j == t.cols - 1 || rs <= rd) {
        rs = t.supply[++i];
      } else {
        rd = t.demand[++j];
      }
    }
  }

  const T tol = detail::Tolerance<T>::eps() * (static_cast<T>(c.max_cost) > T(1) ? static_cast<T>(c.max_cost) : T(1));
  const T flow_tol = detail::Tolerance<T>::eps() * (sum_a > sum_b ? sum_a : sum_b);
  const int max_pivots = 64 * (t.rows + t.cols) * (t.rows + t.cols);
  int degenerate_run = 0;
  Stats& st = res.stats;
  for (;;) {
    detail::build_tree(t, c);
    const bool bland = degenerate_run >= t.rows + t.cols;
    // Entering cell.
    int ei = -1, ej = -1;
    T best = -tol;
    for (int i = 0; i < t.rows && !(bland && ei >= 0); ++i) {
      const T u = t.potential[i];
      for (int j = 0; j < t.cols; ++j) {
        if (t.basic[i] >> j & 1) continue;
        const T r = detail::cell_cost<T>(c, t.row_bin[i], t.col_bin[j]) - u - t.potential[t.rows + j];
        if (r < best) {
          best = r;
          ei = i;
          ej = j;
          if (bland) break;
        }
      }
    }
    if (ei < 0) break;  // optimal
    if (st.pivots >= max_pivots) {
      st.capped = true;
      break;
    }
    // The cycle: the tree path from column ej to row ei, whose cells alternate -, +, -, ... from
    // the column's side (the entering cell is +).
    int8_t path[2 * kMaxNodes];
    int8_t tail[2 * kMaxNodes];
    int np = 0, nt = 0;
    int a = t.rows + ej, b = ei;
    while (a != b) {
      if (t.depth[a] >= t.depth[b]) {
        path[np++] = t.parent_cell[a];
        a = t.parent[a];
      } else {
        tail[nt++] = t.parent_cell[b];
        b = t.parent[b];
      }
    }
    while (nt > 0) path[np++] = tail[--nt];
    // Leaving cell: the smallest flow among the - cells; ties go to the first in row-major order.
    int leave = -1;
    T theta = T(0);
    for (int k = 0; k < np; k += 2) {
      const int cell = path[k];
      const T f = t.flow[cell];
      if (leave < 0 || f < theta ||
          (f == theta &&
           (t.cell_row[cell] * kMaxNodes + t.cell_col[cell] < t.cell_row[leave] * kMaxNodes + t.cell_col[leave]))) {
        leave = cell;
        theta = f;
      }
    }
    for (int k = 0; k < np; ++k) {
      const int cell = path[k];
      T f = (k & 1) ? t.flow[cell] + theta : t.flow[cell] - theta;
      t.flow[cell] = f > T(0) ? f : T(0);
    }
    t.basic[t.cell_row[leave]] &= ~(uint64_t(1) << t.cell_col[leave]);
    t.basic[ei] |= uint64_t(1) << ej;
    t.cell_row[leave] = static_cast<int8_t>(ei);
    t.cell_col[leave] = static_cast<int8_t>(ej);
    t.flow[leave] = theta;
    ++st.pivots;
    if (theta <= flow_tol) {
      ++st.degenerate_pivots;
      ++degenerate_run;
    } else {
      degenerate_run = 0;
    }
  }
  for (int k = 0; k < cells; ++k)
    res.cost += t.flow[k] * detail::cell_cost<T>(c, t.row_bin[t.cell_row[k]], t.col_bin[t.cell_col[k]]);
  return res;
}

// The distance: total cost over the flow (Normalization::Flow) or the larger mass. Both
// signatures empty: 0. One empty: +infinity (nothing can be matched; never a detection).
template <class T>
PRISM_HD T distance_of(const Transport<T>& r, Normalization norm) {
  if (r.mass_a == T(0) && r.mass_b == T(0)) return T(0);
  if (r.mass_a == T(0) || r.mass_b == T(0)) return static_cast<T>(INFINITY);
  const T denom = norm == Normalization::Flow ? r.flow : (r.mass_a > r.mass_b ? r.mass_a : r.mass_b);
  return r.cost / denom;
}

template <class T>
PRISM_HD T earth_movers_distance(const float* a, const float* b, const CostMatrix& c, Normalization norm,
                                 Stats* stats = nullptr) {
  const Transport<T> r = solve_transport<T>(a, b, c);
  if (stats) *stats = r.stats;
  return distance_of(r, norm);
}

}  // namespace prism::emd
