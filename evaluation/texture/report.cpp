#include "report.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "texture_util.h"

namespace prism::eval {

namespace {

namespace fs = std::filesystem;

// The SIFT a FeatureParams::device selects, as the report names it.
std::string sift_name(gpu::Device d) {
  if (d == gpu::Device::kCpu) return "cv::SIFT (CPU)";
  if (d == gpu::Device::kCuda) return "kernels/sift (CUDA)";
  return gpu::available() ? "kernels/sift (CUDA, auto)" : "cv::SIFT (CPU, auto)";
}

// The Oxford-affine rows: the rank-1 result of each re-capture (`oxname`), its corner error.
void oxford_table(std::ostringstream& md, const std::vector<PrecisionRun>& runs,
                  const std::vector<std::string>& oxname) {
  const bool both = runs.size() > 1;
  md << "\nOxford-affine (img1 enrolled; rank-1 result, max corner error of the recovered homography vs the "
        "ground truth):\n\n| query |";
  for (const char* col : {"top-1 id", "inliers", "significance", "corner error px"})
    for (const auto& run : runs) md << " " << col << (both ? " " + run.name : "") << " |";
  md << "\n|---|";
  for (size_t c = 0; c < 4 * runs.size(); ++c) md << "---|";
  md << "\n";
  for (size_t q = 0; q < oxname.size(); ++q) {
    md << "| " << oxname[q] << " |";
    for (auto& run : runs) md << (run.tally.at("oxford-affine").top1_best[q].query >= 0 ? " correct |" : " WRONG |");
    for (auto& run : runs) md << " " << run.tally.at("oxford-affine").genuine[q].inliers << " |";
    for (auto& run : runs) md << cv::format(" %.1f |", run.tally.at("oxford-affine").genuine[q].significance);
    for (auto& run : runs)
      md << " " << (run.corner_error[q] >= 0 ? cv::format("%.1f", run.corner_error[q]) : std::string("-")) << " |";
    md << "\n";
  }
}

// The ratio-test decisions on real pairs against the FP32 reference, per pair set.
void decisions_table(std::ostringstream& md, const std::vector<PrecisionRun>& runs,
                     const std::vector<PairSet>& pair_sets, const DecisionSweep& decisions, float ratio) {
  const std::vector<std::vector<DecisionDiff>>& pair_diffs = decisions.diffs;
  const std::vector<int>& reference_passes = decisions.reference_passes;
  auto pct = [](double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; };
  md << "\nRatio-test decisions on real pairs of one surface, against the FP32 reference (RootSIFT in float, "
        "squared distances in double, ratio "
     << cv::format("%.2f", ratio)
     << "): per query descriptor, pass or fail and its nearest gallery descriptor. A decision differs when it "
        "flips, or when both pass with another nearest. Oxford: img1 against img2..6; KTH-TIPS: each material's "
        "scale-5 image 1 against images 2..9 (other poses and lights).\n\n"
     << "| pairs | n | query descriptors | FP32 passes |";
  for (const auto& run : runs) md << " " << run.name << " differ: of all, of FP32 passes (flips + other nearest) |";
  md << "\n|---|---|---|---|";
  for (size_t k = 0; k < runs.size(); ++k) md << "---|";
  md << "\n";
  std::vector<DecisionDiff> all_diff(runs.size());
  int all_passes = 0;
  size_t all_pairs = 0;
  // The share of all query descriptors, then of the FP32 passes (the matches that count).
  auto diff_cell = [&](const DecisionDiff& d, int passes) {
    return cv::format(" %.3f%%, %.2f%% of passes (%d + %d) |", pct(d.differ(), d.rows), pct(d.differ(), passes),
                      d.flips, d.other_nearest);
  };
  for (size_t si = 0; si < pair_sets.size(); ++si) {
    md << "| " << pair_sets[si].name << " | " << pair_sets[si].pairs.size() << " | " << pair_diffs[si][0].rows << " | "
       << reference_passes[si] << " |";
    for (size_t k = 0; k < runs.size(); ++k) {
      md << diff_cell(pair_diffs[si][k], reference_passes[si]);
      all_diff[k] += pair_diffs[si][k];
    }
    md << "\n";
    all_passes += reference_passes[si];
    all_pairs += pair_sets[si].pairs.size();
  }
  md << "| **all** | " << all_pairs << " | " << all_diff[0].rows << " | " << all_passes << " |";
  for (const auto& d : all_diff) md << diff_cell(d, all_passes);
  md << "\n";
}

}  // namespace

ScoresCsv::ScoresCsv(const fs::path& path) : out_(path) {
  out_ << "precision,set,query,true_id,kind,claimed_id,inliers,matches,significance\n";
}

void ScoresCsv::add(const std::string& tag, const std::string& set, size_t query, const std::string& true_id,
                    const std::string& kind, const std::string& claimed_id, int inliers, int matches,
                    double significance) {
  out_ << tag << "," << set << "," << query << "," << true_id << "," << kind << "," << claimed_id << "," << inliers
       << "," << matches << "," << significance << "\n";
}

std::string candidates_table(const std::vector<CandidateResult>& results, double min_significance) {
  std::ostringstream cand_md;
  cand_md << "Contrast normalisations compared (--candidates): top-1 / identified at the default threshold "
          << cv::format("%.1f", min_significance)
          << " (8-bit index), then the queries' keypoints (median, min):\n\n| normalisation |";
  const std::vector<CandidateResult::Set> none;
  const std::vector<CandidateResult::Set>& sets = results.empty() ? none : results.front().sets;
  for (const CandidateResult::Set& s : sets) cand_md << " " << s.name << " |";
  cand_md << " **all** |\n|---|";
  for (size_t p = 0; p <= sets.size(); ++p) cand_md << "---|";
  cand_md << "\n";
  for (const CandidateResult& c : results) {
    cand_md << "| " << c.name << " |";
    for (const CandidateResult::Set& s : c.sets)
      cand_md << cv::format(" %.1f%% / %.1f%% (%d, %d) |", 100.0 * s.top1 / s.n, 100.0 * s.identified / s.n,
                            s.keypoints_median, s.keypoints_min);
    cand_md << cv::format(" %.1f%% / %.1f%% |", 100.0 * c.top1 / c.n, 100.0 * c.identified / c.n) << "\n";
  }
  cand_md << "\n";
  return cand_md.str();
}

std::string report_markdown(const ReportInput& in) {
  const std::vector<PrecisionRun>& runs = *in.runs;
  const std::vector<std::string>& order = *in.order;
  const std::map<std::string, QueryStats>& query_stats = *in.query_stats;
  const std::vector<DigestRun>& digests = *in.digests;
  const bool both = runs.size() > 1;
  auto pct = [](double a, double b) { return b > 0 ? 100.0 * a / b : 0.0; };
  std::ostringstream md;
  md << "| queries | n |";
  for (const char* col :
       {"top-1 (rank 1)", "identified at threshold", "TAR (1:1 genuine accepted)", "FAR (1:1 impostors accepted)"})
    for (const auto& run : runs) md << " " << col << (both ? " " + run.name : "") << " |";
  md << "\n|---|---|";
  for (size_t c = 0; c < 4 * runs.size(); ++c) md << "---|";
  md << "\n";
  std::vector<Tally> total(runs.size());
  // Where the precisions differ in identification at their thresholds: (set, 8-bit - FP16) in queries.
  std::vector<std::pair<std::string, int>> ident_delta;
  for (const auto& name : order) {
    md << "| " << name << " | " << runs.front().tally.at(name).queries << " |";
    std::vector<int> ident(runs.size()), tar(runs.size()), far(runs.size());
    for (size_t k = 0; k < runs.size(); ++k) {
      const Tally& t = runs[k].tally.at(name);
      ident[k] = accepted(t.top1_best, runs[k].threshold);
      tar[k] = accepted(t.genuine, runs[k].threshold);
      far[k] = accepted(t.impostor, runs[k].threshold);
      total[k].queries += t.queries;
      total[k].top1 += t.top1;
      total[k].identified += ident[k];
      total[k].genuine_accept += tar[k];
      total[k].impostor_accept += far[k];
      total[k].impostor_pairs += int(t.impostor.size());
    }
    for (const auto& run : runs)
      md << cv::format(" %.1f%% |", pct(run.tally.at(name).top1, run.tally.at(name).queries));
    for (size_t k = 0; k < runs.size(); ++k)
      md << cv::format(" %.1f%% |", pct(ident[k], runs[k].tally.at(name).queries));
    for (size_t k = 0; k < runs.size(); ++k) md << cv::format(" %.1f%% |", pct(tar[k], runs[k].tally.at(name).queries));
    for (size_t k = 0; k < runs.size(); ++k)
      md << cv::format(" %.3f%% (%d/%zu) |", pct(far[k], runs[k].tally.at(name).impostor.size()), far[k],
                       runs[k].tally.at(name).impostor.size());
    md << "\n";
    if (both && ident[0] != ident[1]) ident_delta.push_back({name, ident[0] - ident[1]});
  }
  md << "| **all** | " << total.front().queries << " |";
  for (const auto& t : total) md << cv::format(" %.1f%% |", pct(t.top1, t.queries));
  for (const auto& t : total) md << cv::format(" %.1f%% |", pct(t.identified, t.queries));
  for (const auto& t : total) md << cv::format(" %.1f%% |", pct(t.genuine_accept, t.queries));
  for (const auto& t : total)
    md << cv::format(" %.3f%% (%d/%d) |", pct(t.impostor_accept, t.impostor_pairs), t.impostor_accept,
                     t.impostor_pairs);
  md << "\n";
  if (both) {
    md << "\n8-bit against FP16, each at its own calibrated threshold: ";
    if (ident_delta.empty()) {
      md << "identical identification in every query set";
    } else {
      md << "identified queries differ in ";
      for (size_t i = 0; i < ident_delta.size(); ++i)
        md << (i ? ", " : "") << ident_delta[i].first << " (" << (ident_delta[i].second > 0 ? "8-bit +" : "FP16 +")
           << std::abs(ident_delta[i].second) << ")";
    }
    const int d = total[0].identified - total[1].identified;
    md << "; over all " << total[0].queries << " queries "
       << (d == 0 ? std::string("the same count")
                  : (d > 0 ? "8-bit identifies " : "FP16 identifies ") + std::to_string(std::abs(d)) + " more")
       << cv::format(" (8-bit %d, FP16 %d; TAR %.2f%% vs %.2f%%).\n", total[0].identified, total[1].identified,
                     pct(total[0].genuine_accept, total[0].queries), pct(total[1].genuine_accept, total[1].queries));
  }
  md << "\nHeld out (threshold calibrated on half of the queries, rates measured on the other half):\n\n"
     << (both ? "| precision " : "") << "| calibrated on | threshold | TAR | FAR |\n"
     << (both ? "|---" : "") << "|---|---|---|---|\n";
  for (const auto& run : runs)
    for (int parity = 0; parity < 2; ++parity) {
      const double thr = calibrate(run.all_impostor, parity);
      const int other = 1 - parity;
      md << (both ? "| " + run.name + " " : "")
         << cv::format("| %s queries | %.1f | %.2f%% | %.3f%% |\n", parity ? "odd" : "even", thr,
                       pct(accepted(run.all_genuine, thr, other), count_parity(run.all_genuine, other)),
                       pct(accepted(run.all_impostor, thr, other), count_parity(run.all_impostor, other)));
    }
  for (const auto& run : runs) {  // The same rule on the bare inlier count, for comparison.
    int min_inliers = 4;
    auto passing = [&](const std::vector<Score>& v) {
      return int(std::count_if(v.begin(), v.end(), [&](const Score& s) { return s.inliers >= min_inliers; }));
    };
    while (passing(run.all_impostor) > 0.001 * run.all_impostor.size()) ++min_inliers;
    md << cv::format(
        "\n%sDeciding on the inlier count alone instead: threshold %d inliers, TAR %.2f%% at FAR %.3f%%.\n",
        both ? (run.name + ": ").c_str() : "", min_inliers, pct(passing(run.all_genuine), run.all_genuine.size()),
        pct(passing(run.all_impostor), run.all_impostor.size()));
  }
  std::ostringstream head;
  head << "Gallery: " << in.products << " products (" << in.textures
       << " sun8 photos, 3 skimage textures, 8 Oxford img1); "
       << "mean " << int(in.mean_features + 0.5) << " RootSIFT features each, contrast normalisation "
       << in.normalisation << " at enrolment and query. SIFT: " << sift_name(in.enrol_device) << " at enrolment, "
       << sift_name(in.query_device) << " for the queries. Matching on " << in.matching_on << "; a search verifies "
       << in.shortlist
       << " candidates. Threshold (min significance, smallest 0.1 step with 1:1 FAR <= 0.1%, calibrated per precision "
          "by "
          "the same rule):";
  for (const auto& run : runs) head << " " << run.name << " **" << cv::format("%.1f", run.threshold) << "**";
  head << ".\n\n";
  md << "\nOpen-set (1:M) impostors: " << in.outsiders << " sun8 photos never enrolled; identified as some "
     << "product at the threshold:";
  for (const auto& run : runs) {
    const int open_accept = accepted(run.open_set, run.threshold);
    md << " " << run.name << " " << open_accept << cv::format(" (%.1f%%)", pct(open_accept, run.open_set.size()));
  }
  md << ".\n";
  if (in.oxford_names)
    oxford_table(md, runs, *in.oxford_names);
  else
    md << "\nOxford-affine queries: not run (--skip oxford).\n";
  if (in.pair_sets && in.decisions)
    decisions_table(md, runs, *in.pair_sets, *in.decisions, in.ratio);
  else
    md << "\nRatio-test decisions on real pairs: not run (--skip decisions).\n";

  md << "\nEvaluation time " << int(in.total_s) << " s on " << in.threads << " threads; enrolment (decode excluded) "
     << cv::format("%.1f", in.enrol_images_per_s) << " images/s.\n";
  md << "\nThe queries (normalisation " << in.normalisation
     << "): captures with a mean grey under 40, and keypoints per query.\n\n"
     << "| queries | n | mean grey < 40 | keypoints median | keypoints min |\n|---|---|---|---|---|\n";
  for (const auto& name : order) {
    const QueryStats& q = query_stats.at(name);
    const int n = runs.front().tally.at(name).queries;
    md << "| " << name << " | " << n << cv::format(" | %.1f%% (%d) | ", pct(q.dark, n), q.dark) << q.keypoints.first
       << " | " << q.keypoints.second << " |\n";
  }
  for (const DigestRun& d : digests) {
    const int slots = int(d.index->size());
    md << "\nDigest prefilter (--digest " << d.rows << " --digest-order " << texture::digest_order_name(d.order)
       << "): " << d.per_slot << " products' " << d.rows << " rows per slot, " << slots << " slots";
    if (in.decoys > 0)
      md << " (" << in.decoys << " decoys' digests in " << (in.decoys + d.per_slot - 1) / d.per_slot << " of them)";
    md << "; ranks by ratio-test score, ties against the genuine.\n\n"
       << "| queries | n | exact: genuine product first | digest: its slot first | of those first exactly, first by "
          "digest |";
    for (int k : d.keep) md << " of those first exactly, in the best " << k << " |";
    md << " margin: genuine / best other slot, median (10th percentile) |\n|---|---|---|---|---|";
    for (size_t k = 0; k < d.keep.size(); ++k) md << "---|";
    md << "---|\n";
    auto margins = [](std::vector<double> v) {
      if (v.empty()) return std::string(" - |");
      std::sort(v.begin(), v.end());
      return cv::format(" %.1f (%.1f) |", v[v.size() / 2], v[v.size() / 10]);
    };
    auto row = [&](const std::string& name, const DigestRun::Tally& t) {
      md << "| " << name << " | " << t.queries
         << cv::format(" | %.1f%% | %.1f%% | %.1f%% |", pct(t.exact_first, t.queries), pct(t.first, t.queries),
                       pct(t.kept, t.exact_first));
      for (size_t k = 0; k < d.keep.size(); ++k) md << cv::format(" %.1f%% |", pct(t.kept_top_keep[k], t.exact_first));
      md << margins(t.margin) << "\n";
    };
    DigestRun::Tally all;
    all.kept_top_keep.assign(d.keep.size(), 0);
    for (const auto& name : order) {
      const DigestRun::Tally& t = d.tally.at(name);
      row(name, t);
      all.queries += t.queries, all.exact_first += t.exact_first, all.first += t.first, all.kept += t.kept;
      for (size_t k = 0; k < t.kept_top_keep.size(); ++k) all.kept_top_keep[k] += t.kept_top_keep[k];
      all.margin.insert(all.margin.end(), t.margin.begin(), t.margin.end());
    }
    row("**all**", all);
    std::fprintf(stderr,
                 "eval: digest %d rows, %s, %d slots: the genuine slot first for %.1f%% of %d queries (%.1f%% of "
                 "those first exactly; exact: %.1f%%)",
                 d.rows, texture::digest_order_name(d.order), slots, pct(all.first, all.queries), all.queries,
                 pct(all.kept, all.exact_first), pct(all.exact_first, all.queries));
    for (size_t k = 0; k < d.keep.size(); ++k)
      std::fprintf(stderr, "; in the best %d: %.1f%%", d.keep[k], pct(all.kept_top_keep[k], all.exact_first));
    std::fprintf(stderr, " of those first exactly\n");
  }
  return head.str() + md.str();
}

// Histogram picture of genuine vs impostor significance (log counts) with the threshold.
cv::Mat score_plot(const std::vector<Score>& genuine, const std::vector<Score>& impostor, double threshold) {
  const int W = 900, H = 420, L = 60, B = 50, bins = 64;
  const double per_bin = 0.5;  // significance units per bin; the last bin takes everything above
  auto bin_of = [&](double v) { return std::clamp(int(v / per_bin), 0, bins - 1); };
  std::vector<double> hg(bins), hi(bins);
  for (const Score& s : genuine) hg[bin_of(s.significance)] += 1;
  for (const Score& s : impostor) hi[bin_of(s.significance)] += 1;
  for (auto* h : {&hg, &hi})
    for (double& c : *h) c = std::log10(1.0 + c);
  const double top = std::max(*std::max_element(hg.begin(), hg.end()), *std::max_element(hi.begin(), hi.end()));
  cv::Mat img(H, W, CV_8UC3, cv::Scalar(255, 255, 255));
  const double bw = double(W - L - 20) / bins;
  for (int b = 0; b < bins; ++b) {
    const int x = L + int(b * bw);
    cv::rectangle(img, cv::Point(x, H - B - int(hi[b] / top * (H - B - 40))), cv::Point(x + int(bw) - 1, H - B),
                  cv::Scalar(60, 60, 220), cv::FILLED);
    cv::rectangle(img, cv::Point(x, H - B - int(hg[b] / top * (H - B - 40))), cv::Point(x + int(bw) - 1, H - B),
                  cv::Scalar(200, 120, 30), 2);
  }
  const int tx = L + int(threshold / per_bin * bw);
  cv::line(img, cv::Point(tx, 30), cv::Point(tx, H - B), cv::Scalar(0, 0, 0), 2);
  for (int v = 0; v <= 30; v += 5) {
    const int x = L + int(v / per_bin * bw);
    cv::putText(img, v == 30 ? "30+" : std::to_string(v), cv::Point(x, H - B + 20), cv::FONT_HERSHEY_SIMPLEX, 0.45,
                cv::Scalar(0, 0, 0), 1);
  }
  cv::putText(img,
              "significance -log10 P(chance); bars: log10(1 + pairs); blue outline: genuine 1:1, red: impostor; "
              "line: threshold " +
                  cv::format("%.1f", threshold),
              cv::Point(L, H - 12), cv::FONT_HERSHEY_SIMPLEX, 0.4, cv::Scalar(0, 0, 0), 1);
  cv::putText(img, "texture identification: significance of the RANSAC inliers", cv::Point(L, 22),
              cv::FONT_HERSHEY_SIMPLEX, 0.6, cv::Scalar(0, 0, 0), 1);
  return img;
}

void write_report(const fs::path& out, const std::string& report, const std::vector<PrecisionRun>& runs) {
  std::ofstream(out / "texture-eval.md") << report;
  // significance.png for the first precision, significance-TAG.png for the others.
  for (size_t k = 0; k < runs.size(); ++k)
    cli::write_png(
        score_plot(runs[k].all_genuine, runs[k].all_impostor, runs[k].threshold),
        (out / (k == 0 ? std::string("significance.png") : "significance-" + runs[k].tag + ".png")).string());
  std::fputs(report.c_str(), stdout);
}

}  // namespace prism::eval
