// The test oracle for the EMD: an exact min-cost-flow solver in double, written independently of
// kernels/emd (a different algorithm: successive shortest paths, not the transportation simplex).
#pragma once
#include <vector>

namespace prism::test {

// Moves F = min(sum a, sum b) units from a's bins to b's at cost[i * n + j] per unit (the larger
// side's excess stays: partial matching). Returns the total cost; *flow = F.
double mcf_transport_cost(const std::vector<double>& a, const std::vector<double>& b,
                          const std::vector<double>& cost, double* flow = nullptr);

// Closed form for cost |i - j| and equal masses: sum_k |A_k - B_k| over the cumulative sums.
double emd_l1_closed_form(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace prism::test
