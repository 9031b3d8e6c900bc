#include "texture/decision.h"

#include <algorithm>
#include <cmath>

namespace prism::texture {

bool verified_before(const VerifiedKey& a, const VerifiedKey& b) {
  if (a.geometric_significance != b.geometric_significance) return a.geometric_significance > b.geometric_significance;
  if (a.inliers != b.inliers) return a.inliers > b.inliers;
  if (a.score != b.score) return a.score > b.score;
  return a.id < b.id;
}

double decision_significance(double geometric_significance, size_t verified) {
  return geometric_significance - std::log10(double(std::max<size_t>(1, verified)));
}

bool accepted(int inliers, double significance, const DecisionParams& params) {
  return inliers >= params.min_inliers && significance >= params.min_significance;
}

}  // namespace prism::texture
