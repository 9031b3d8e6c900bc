// Independent double-precision reference for the Earth Mover's Distance between two histograms, used as the
// test oracle for the transportation-simplex solver in kernels/emd (it shares no code with it, and uses a
// different algorithm: min-cost flow by successive shortest paths).
#pragma once
#include <vector>

namespace prism::test {

// Exact EMD by min-cost flow (successive shortest paths, Dijkstra with Johnson potentials, all in double).
// a, b: non-negative masses, n bins each (n >= 1); cost: n x n row-major, non-negative,
// cost[i*n+j] = moving one unit from bin i of a to bin j of b.
// Moves F = min(sum a, sum b) units (partial matching when masses differ: the smaller side moves in full, the
// larger side's excess stays).
// Returns the total cost W of the optimal flow (not normalised), and sets *flow = F if flow != nullptr (the
// flow actually routed, which equals F up to a relative 1e-12 termination tolerance).
// Throws std::invalid_argument on inconsistent sizes or negative / non-finite input, and std::runtime_error if
// the augmentation cap is hit (should never happen).
double emd_reference_cost(const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& cost,
                          double* flow = nullptr);

// Closed form for cost |i-j| and EQUAL masses: sum over k of |A_k - B_k| with A, B the cumulative sums.
double emd_reference_l1_closed_form(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace prism::test
