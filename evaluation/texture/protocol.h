// The evaluation's protocol: every query against the 8-bit index (top-1 identification, 1:1 against
// its own product and 3 random others, the open-set impostors' best candidate), the digest ranks of
// --digest, the Oxford corner errors, the threshold calibration and the ratio-test decisions against
// FP32 on real pairs.
//
// The decision threshold on the inliers' significance (texture::chance_significance) is the smallest
// multiple of 0.1 at which the 1:1 impostor accept rate is at most 0.1% (calibrate); the report gives
// it per perturbation, then held out (calibrated on half the queries, measured on the other half).
#pragma once
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>

#include "common/gpu.h"
#include "datasets.h"
#include "ratio_decisions.h"
#include "texture/features.h"
#include "texture/index.h"

namespace prism::eval {

class ScoresCsv;  // report.h

// One 1:1 decision's evidence (or the rank-1 result's, with query -1 when rank 1 is wrong).
struct Score {
  int query = 0, inliers = 0;
  double significance = 0;
};

struct Tally {
  int queries = 0, top1 = 0, identified = 0, genuine_accept = 0, impostor_pairs = 0, impostor_accept = 0;
  std::vector<Score> genuine, top1_best, impostor;
};

// One precision's index and everything measured on it.
struct PrecisionRun {
  std::string name;  // "8-bit"
  std::string tag;   // "u8" (csv, file names)
  std::unique_ptr<texture::TextureIndex> index;
  std::map<std::string, Tally> tally;
  std::vector<Score> open_set, all_genuine, all_impostor;
  std::vector<double> corner_error;  // Oxford queries
  double threshold = 0;
};

// --digest: slots of `rows` rows (in `order`) of `per_slot` products each, matched as one image; the rank
// of the genuine product's slot per query set.
struct DigestRun {
  int rows = 0, per_slot = 0;
  texture::DigestOrder order = texture::DigestOrder::kStrongest;
  std::unique_ptr<texture::TextureIndex> index;
  std::vector<int> slot_of;  // exact index position -> digest index position
  std::vector<int> keep;     // the Ks of "in the K best slots"
  struct Tally {
    int queries = 0, exact_first = 0, first = 0, kept = 0;
    std::vector<int> kept_top_keep;  // of those first exactly, in the keep[k] best
    std::vector<double> margin;      // the genuine slot's score over the best other slot's (+1 each)
  };
  std::map<std::string, Tally> tally;
};

// The queries of one set themselves.
struct QueryStats {
  int dark = 0;                   // captures with a mean grey under 40
  std::pair<int, int> keypoints;  // median, min
};

// Median and minimum of the keypoint counts.
std::pair<int, int> keypoint_median_min(const std::vector<texture::Features>& f);

// Scores of `v` (of queries of the given parity, -1: all) at or over `threshold`; rank-1 misses
// (query -1) never count.
int accepted(const std::vector<Score>& v, double threshold, int parity = -1);
int count_parity(const std::vector<Score>& v, int parity);
// The smallest multiple of 0.1 at which at most 0.1% of `impostor` (of the given query parity) pass.
double calibrate(const std::vector<Score>& impostor, int parity = -1);

// Runs the query sets one after the other against every precision's index (with the same impostor
// claims) and every digest run, writing each decision's evidence to `csv`.
class QuerySets {
 public:
  QuerySets(std::vector<PrecisionRun>& runs, std::vector<DigestRun>& digests, const texture::FeatureParams& qparams,
            const texture::SearchParams& params, unsigned seed, bool decoys, ScoresCsv& csv);
  // `truth`: each query's genuine product, by entry position.
  void run(const std::string& set, const std::vector<cv::Mat>& queries, const std::vector<int>& truth);
  // A set of `queries` queries left out (--perturbations): its impostor claims are drawn all the same,
  // so that every set run is claimed against the products a full run's would be.
  void skip(size_t queries) { pick_.discard(kClaims * queries); }
  // --enrol-views: each entry's product (the position of the product's own entry) and each product's
  // entries (its own and its views', by its own entry's position); impostor claims are drawn among
  // the products' own entries.
  void set_products(std::vector<int> product_of, std::vector<std::vector<int>> views_of) {
    products_.clear();
    for (size_t e = 0; e < product_of.size(); ++e)
      if (product_of[e] == int(e)) products_.push_back(int(e));
    product_of_ = std::move(product_of);
    views_of_ = std::move(views_of);
  }
  const std::vector<std::string>& order() const { return order_; }  // the sets as run
  const std::map<std::string, QueryStats>& stats() const { return stats_; }

 private:
  std::vector<PrecisionRun>& runs_;
  std::vector<DigestRun>& digests_;
  const texture::FeatureParams& qparams_;
  const texture::SearchParams& params_;
  bool decoys_;
  ScoresCsv& csv_;
  static constexpr int kClaims = 3;  // 1:1 impostor claims per query
  std::mt19937 pick_;
  std::vector<std::string> order_;
  std::map<std::string, QueryStats> stats_;
  std::vector<int> products_;  // empty: every entry is a product of its own
  std::vector<int> product_of_;
  std::vector<std::vector<int>> views_of_;
  // A 1:1 verification of the product at `entry`: the best of its entries', less log10 of their number.
  texture::SearchResult verify_product(texture::TextureIndex& index, const texture::Features& q, int entry) const;
};

// Corner error of the recovered query->gallery homography against the ground truth (img1->imgN), per
// Oxford re-capture (`features` its features, `truth` its product's entry position); -1 without one.
void corner_errors(std::vector<PrecisionRun>& runs, const Recaptures& oxford,
                   const std::vector<texture::Features>& features, const std::vector<int>& truth,
                   const texture::SearchParams& params);

// Open-set impostors: photos never enrolled (`features`); their best candidate's evidence.
void open_set(std::vector<PrecisionRun>& runs, const std::vector<texture::Features>& features,
              const texture::SearchParams& params, ScoresCsv& csv, const std::vector<int>& product_of = {});

// Threshold per precision, by the same rule (calibrate over all the sets' 1:1 impostors).
void calibrate_thresholds(std::vector<PrecisionRun>& runs);

// Ratio-test decisions on real pairs of one surface against the FP32 reference, per pair set and run.
struct DecisionSweep {
  std::vector<std::vector<DecisionDiff>> diffs;  // [pair set][run]
  std::vector<int> reference_passes;             // [pair set]
};
DecisionSweep decision_sweep(const std::vector<PairSet>& pair_sets, size_t runs, const texture::FeatureParams& fparams,
                             gpu::Device query_device, float ratio);

}  // namespace prism::eval
