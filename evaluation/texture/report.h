// The evaluation's output in --out: texture-eval.md (also printed on stdout), scores.csv (every
// decision's evidence) and significance.png (genuine against impostor significance, the threshold).
#pragma once
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "candidates.h"
#include "common/gpu.h"
#include "datasets.h"
#include "protocol.h"

namespace prism::eval {

// scores.csv: its header, then one line per decision (genuine, impostor, open-set-best).
class ScoresCsv {
 public:
  explicit ScoresCsv(const std::filesystem::path& path);
  void add(const std::string& tag, const std::string& set, size_t query, const std::string& true_id,
           const std::string& kind, const std::string& claimed_id, int inliers, int matches, double significance);

 private:
  std::ofstream out_;
};

// The --candidates table (before the report proper); `min_significance` is the threshold it used.
std::string candidates_table(const std::vector<CandidateResult>& results, double min_significance);

// What the report is made of.
struct ReportInput {
  size_t products = 0;
  int textures = 0;
  double mean_features = 0;
  std::string normalisation;
  gpu::Device enrol_device = gpu::Device::kCpu, query_device = gpu::Device::kCpu;
  std::string matching_on;  // the index's device_description()
  const std::vector<PrecisionRun>* runs = nullptr;
  const std::vector<std::string>* order = nullptr;  // the query sets
  const std::map<std::string, QueryStats>* query_stats = nullptr;
  size_t outsiders = 0;
  const std::vector<std::string>* oxford_names = nullptr;  // null: --skip oxford
  float ratio = 0;
  int shortlist = 0;                                // candidates a search verifies
  const std::vector<PairSet>* pair_sets = nullptr;  // these two null: --skip decisions
  const DecisionSweep* decisions = nullptr;
  const std::vector<DigestRun>* digests = nullptr;
  int decoys = 0;
  double total_s = 0, enrol_images_per_s = 0;
  int threads = 0;
};
// The report's head and tables (markdown); prints the digest runs' summaries on stderr.
std::string report_markdown(const ReportInput& in);

// Histogram picture of genuine vs impostor significance (log counts) with the threshold.
cv::Mat score_plot(const std::vector<Score>& genuine, const std::vector<Score>& impostor, double threshold);

// Writes `report` to out/texture-eval.md and the runs' pictures (significance.png for the first,
// significance-TAG.png for others), then prints the report on stdout.
void write_report(const std::filesystem::path& out, const std::string& report, const std::vector<PrecisionRun>& runs);

}  // namespace prism::eval
