// The decision of texture identification, apart from how scores and geometry are computed: the
// order of the shortlist, the order of verified candidates, the significance a candidate has among
// those verified, and acceptance. One implementation for the index (one gallery's shortlist) and
// the service's merge of shards' shortlists, which must decide exactly alike: a product is
// identified the same way whether its gallery is one shard or eight.
#pragma once

#include <cstddef>
#include <string_view>

namespace prism::texture {

// The thresholds (SearchParams holds them for a search).
struct DecisionParams {
  // On the significance of a candidate's inliers (chance_significance, verify.h, less the
  // multiple-test term below): the smallest 0.1 step at which the 1:1 false-accept rate is at most
  // 0.1%, calibrated by `prism-texture-eval` (docs/TEXTUREID.md).
  double min_significance = 3.6;
  int min_inliers = 5;  // a floor besides: RANSAC's 4-point sample is consistent by construction
};

// A candidate needs this many ratio-test matches to be verified at all (RANSAC's sample is 4 points).
constexpr int kMinVerifiedMatches = 4;

// The shortlist's order, before verification: more ratio-test matches first, ties by product id, so
// that the order depends neither on where entries live nor on the order they were added, and a
// sharded search cuts its global shortlist where one gallery would.
inline bool shortlist_before(int score_a, std::string_view id_a, int score_b, std::string_view id_b) {
  return score_a != score_b ? score_a > score_b : id_a < id_b;
}

// What the order of verified candidates reads of one.
struct VerifiedKey {
  double geometric_significance;  // Verification::significance
  int inliers;
  int score;  // ratio-test matches
  std::string_view id;
};
// The most significant geometry first, then more inliers, then more matches, then the product id.
bool verified_before(const VerifiedKey& a, const VerifiedKey& b);

// The significance a candidate's geometry has among `verified` candidates: less log10 of their
// number (Bonferroni: a search that verifies 8 wrong products gets 8 chances at a chance fit).
// Equal to the geometric significance for a verification (1:1).
double decision_significance(double geometric_significance, size_t verified);

// Whether a candidate of this many inliers and this decision significance is identified.
bool accepted(int inliers, double significance, const DecisionParams& params);

}  // namespace prism::texture
