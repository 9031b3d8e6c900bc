#include "protocol.h"

#include <algorithm>
#include <array>

#include "report.h"
#include "texture_util.h"

namespace prism::eval {

std::pair<int, int> keypoint_median_min(const std::vector<texture::Features>& f) {
  std::vector<int> n;
  for (const auto& x : f) n.push_back(x.count());
  if (n.empty()) return {0, 0};
  std::sort(n.begin(), n.end());
  return {n[n.size() / 2], n.front()};
}

int accepted(const std::vector<Score>& v, double threshold, int parity) {
  return int(std::count_if(v.begin(), v.end(), [&](const Score& s) {
    return s.query >= 0 && (parity < 0 || s.query % 2 == parity) && s.significance >= threshold;
  }));
}
int count_parity(const std::vector<Score>& v, int parity) {
  return int(std::count_if(v.begin(), v.end(), [&](const Score& s) { return s.query % 2 == parity; }));
}
double calibrate(const std::vector<Score>& impostor, int parity) {
  const int n = parity < 0 ? int(impostor.size()) : count_parity(impostor, parity);
  int t10 = 0;
  while (accepted(impostor, t10 / 10.0, parity) > 0.001 * n) ++t10;
  return t10 / 10.0;
}

QuerySets::QuerySets(std::vector<PrecisionRun>& runs, std::vector<DigestRun>& digests,
                     const texture::FeatureParams& qparams, const texture::SearchParams& params, unsigned seed,
                     bool decoys, ScoresCsv& csv)
    : runs_(runs),
      digests_(digests),
      qparams_(qparams),
      params_(params),
      decoys_(decoys),
      csv_(csv),
      pick_(seed * 7919u) {}

void QuerySets::run(const std::string& set, const std::vector<cv::Mat>& queries, const std::vector<int>& truth) {
  const texture::TextureIndex& first = *runs_.front().index;
  const texture::SearchParams& params = params_;
  order_.push_back(set);
  const std::vector<texture::Features> qf = texture::extract_features_batch(queries, qparams_);
  QueryStats& qs = stats_[set];
  for (const cv::Mat& q : queries) qs.dark += cv::mean(q)[0] < 40;
  qs.keypoints = keypoint_median_min(qf);
  std::vector<std::array<int, kClaims>> claims(queries.size());
  for (size_t q = 0; q < queries.size(); ++q)
    for (int& other : claims[q]) {
      if (products_.empty()) {
        other = int(pick_() % first.size());
        if (other == truth[q]) other = (other + 1) % int(first.size());
      } else {
        const size_t p = pick_() % products_.size();
        other = products_[p];
        if (other == truth[q]) other = products_[(p + 1) % products_.size()];
      }
    }
  // --digest: ranks by ratio-test score (ties counted against the genuine one).
  auto rank = [](const std::vector<int>& s, int i) {
    int r = 1;
    for (size_t j = 0; j < s.size(); ++j) r += int(j) != i && s[j] >= s[i];
    return r;
  };
  cli::Progress digest_progress("eval " + set + " digests", int(queries.size()), decoys_ && !digests_.empty());
  for (size_t q = 0; q < queries.size() && !digests_.empty(); ++q) {
    const int exact = rank(runs_.front().index->scores(qf[q], params), truth[q]);
    for (DigestRun& d : digests_) {
      const std::vector<int> s = d.index->scores(qf[q], params);
      const int r = rank(s, d.slot_of[truth[q]]);
      const auto [at, fresh] = d.tally.try_emplace(set);
      DigestRun::Tally& t = at->second;
      if (fresh) t.kept_top_keep.assign(d.keep.size(), 0);
      ++t.queries;
      t.exact_first += exact == 1;
      t.first += r == 1;
      t.kept += exact == 1 && r == 1;
      for (size_t k = 0; k < d.keep.size(); ++k) t.kept_top_keep[k] += exact == 1 && r <= d.keep[k];
      int other = 0;
      for (size_t j = 0; j < s.size(); ++j)
        if (int(j) != d.slot_of[truth[q]]) other = std::max(other, s[j]);
      t.margin.push_back((s[d.slot_of[truth[q]]] + 1.0) / (other + 1.0));
    }
    digest_progress.step();
  }
  digest_progress.finish();
  for (PrecisionRun& run : runs_) {
    texture::TextureIndex& index = *run.index;
    Tally& t = run.tally[set];
    cli::Progress progress("eval " + set + " " + run.tag, int(queries.size()), true);
    for (size_t q = 0; q < queries.size(); ++q) {
      const int true_index = truth[q];
      const texture::SearchResult r = index.search(qf[q], params);
      ++t.queries;
      const bool top1 =
          r.best.index >= 0 && (product_of_.empty() ? r.best.index : product_of_[size_t(r.best.index)]) == true_index;
      t.top1 += top1;
      t.top1_best.push_back({top1 ? int(q) : -1, r.best.geometry.inliers, r.best.significance});
      const texture::SearchResult g = verify_product(index, qf[q], true_index);
      t.genuine.push_back({int(q), g.best.geometry.inliers, g.best.significance});
      csv_.add(run.tag, set, q, index.ids()[true_index], "genuine", index.ids()[true_index], g.best.geometry.inliers,
               g.best.geometry.matches, g.best.significance);
      for (int other : claims[q]) {
        const texture::SearchResult im = verify_product(index, qf[q], other);
        t.impostor.push_back({int(q), im.best.geometry.inliers, im.best.significance});
        csv_.add(run.tag, set, q, index.ids()[true_index], "impostor", index.ids()[other], im.best.geometry.inliers,
                 im.best.geometry.matches, im.best.significance);
      }
      progress.step();
    }
    progress.finish();
  }
}

texture::SearchResult QuerySets::verify_product(texture::TextureIndex& index, const texture::Features& q,
                                                int entry) const {
  const texture::SearchParams& params = params_;
  if (views_of_.empty() || views_of_[size_t(entry)].size() < 2) return index.verify(q, index.ids()[entry], params);
  const std::vector<int>& views = views_of_[size_t(entry)];
  texture::SearchResult best;
  for (int e : views) {
    texture::SearchResult r = index.verify(q, index.ids()[e], params);
    const auto key = [](const texture::Candidate& c) {
      return texture::VerifiedKey{c.geometry.significance, c.geometry.inliers, c.score, c.id};
    };
    if (best.best.index < 0 || texture::verified_before(key(r.best), key(best.best))) best = std::move(r);
  }
  best.best.significance = texture::decision_significance(best.best.geometry.significance, views.size());
  best.identified = texture::accepted(best.best, params);
  return best;
}

void corner_errors(std::vector<PrecisionRun>& runs, const Recaptures& oxford,
                   const std::vector<texture::Features>& features, const std::vector<int>& truth,
                   const texture::SearchParams& params) {
  const std::vector<cv::Mat>& oxq = oxford.images;
  for (PrecisionRun& run : runs) {
    run.corner_error.assign(oxq.size(), -1);
    for (size_t q = 0; q < oxq.size(); ++q) {
      const texture::SearchResult r = run.index->verify(features[q], run.index->ids()[truth[q]], params);
      if (r.best.geometry.inliers < 4) continue;
      const cv::Matx33d gt_inv = oxford.homography[q].inv();  // imgN -> img1
      double worst = 0;
      for (cv::Point2d c : {cv::Point2d(0, 0), cv::Point2d(oxq[q].cols, 0), cv::Point2d(oxq[q].cols, oxq[q].rows),
                            cv::Point2d(0, oxq[q].rows)}) {
        const cv::Vec3d a = r.best.geometry.homography * cv::Vec3d(c.x, c.y, 1), b = gt_inv * cv::Vec3d(c.x, c.y, 1);
        worst = std::max(worst, cv::norm(cv::Point2d(a[0] / a[2] - b[0] / b[2], a[1] / a[2] - b[1] / b[2])));
      }
      run.corner_error[q] = worst;
    }
  }
}

void open_set(std::vector<PrecisionRun>& runs, const std::vector<texture::Features>& features,
              const texture::SearchParams& params, ScoresCsv& csv, const std::vector<int>& product_of) {
  for (PrecisionRun& run : runs)
    for (size_t i = 0; i < features.size(); ++i) {
      const texture::SearchResult r = run.index->search(features[i], params);
      run.open_set.push_back({int(i), r.best.geometry.inliers, r.best.significance});
      const int product = r.best.index >= 0 && !product_of.empty() ? product_of[size_t(r.best.index)] : r.best.index;
      csv.add(run.tag, "open-set", i, "none", "open-set-best",
              product >= 0 ? run.index->ids()[size_t(product)] : "none", r.best.geometry.inliers,
              r.best.geometry.matches, r.best.significance);
    }
}

void calibrate_thresholds(std::vector<PrecisionRun>& runs) {
  for (PrecisionRun& run : runs) {
    for (const auto& [name, t] : run.tally) {
      run.all_genuine.insert(run.all_genuine.end(), t.genuine.begin(), t.genuine.end());
      run.all_impostor.insert(run.all_impostor.end(), t.impostor.begin(), t.impostor.end());
    }
    run.threshold = calibrate(run.all_impostor);
  }
}

DecisionSweep decision_sweep(const std::vector<PairSet>& pair_sets, size_t runs, const texture::FeatureParams& fparams,
                             gpu::Device query_device, float ratio) {
  DecisionSweep sweep;
  sweep.diffs.assign(pair_sets.size(), std::vector<DecisionDiff>(runs));
  sweep.reference_passes.assign(pair_sets.size(), 0);
  texture::FeatureParams dparams = fparams;
  dparams.keep_fp32 = true;
  texture::FeatureParams dqparams = dparams;
  dqparams.device = query_device;
  for (size_t si = 0; si < pair_sets.size(); ++si) {
    cli::Progress progress("decisions " + pair_sets[si].name, int(pair_sets[si].pairs.size()), true);
    for (const auto& [gpath, qpath] : pair_sets[si].pairs) {
      const texture::Features g = texture::extract_features(cli::load_grey(gpath), dparams);
      const texture::Features q = texture::extract_features(cli::load_grey(qpath), dqparams);
      const auto ref =
          reference_decisions(q.descriptors_fp32.data(), q.count(), g.descriptors_fp32.data(), g.count(), ratio);
      for (const auto& d : ref) sweep.reference_passes[si] += d.pass;
      for (size_t k = 0; k < runs; ++k) {
        const auto other = u8_decisions(q.descriptors.data(), q.count(), g.descriptors.data(), g.count(), ratio);
        sweep.diffs[si][k] += compare_decisions(ref, other);
      }
      progress.step();
    }
    progress.finish();
  }
  return sweep;
}

}  // namespace prism::eval
