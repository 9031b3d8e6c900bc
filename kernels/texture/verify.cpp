#include "texture/verify.h"

#include <opencv2/calib3d.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <unordered_map>

namespace prism::texture {

std::vector<Correspondence> ratio_matches(const int32_t* best, const int32_t* second, const int* best_index, int rows,
                                          float ratio) {
  std::unordered_map<int, Correspondence> by_gallery;
  for (int r = 0; r < rows; ++r) {
    if (best_index[r] < 0 || second[r] == INT32_MAX) continue;  // image with fewer than 2 descriptors
    if (!match::ratio_pass(best[r], second[r], ratio)) continue;
    auto [it, inserted] = by_gallery.try_emplace(best_index[r], Correspondence{r, best_index[r], best[r]});
    if (!inserted && best[r] < it->second.distance) it->second = {r, best_index[r], best[r]};
  }
  std::vector<Correspondence> out;
  out.reserve(by_gallery.size());
  for (const auto& kv : by_gallery) out.push_back(kv.second);
  std::sort(out.begin(), out.end(), [](const Correspondence& a, const Correspondence& b) { return a.query < b.query; });
  return out;
}

double chance_significance(int inliers, int matches) {
  const int n = matches - 4, k = inliers - 4;
  if (k <= 0 || n < k) return 0.0;
  // Upper tail of Binomial(n, p), summed from its largest term down in log space.
  const double lp = std::log(kChanceInlier), lq = std::log1p(-kChanceInlier);
  auto log_term = [&](int i) {
    return std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) + i * lp + (n - i) * lq;
  };
  const double top = log_term(k);
  double sum = 0;
  for (int i = k; i <= n; ++i) {
    const double r = std::exp(log_term(i) - top);
    sum += r;
    if (r < 1e-17 * sum) break;  // the terms fall geometrically past the mean n p < k
  }
  return -(top + std::log(sum)) / std::log(10.0);
}

Verification verify_geometry(const Features& query, const std::vector<cv::Point2f>& gallery,
                             const std::vector<Correspondence>& matches, const VerifyParams& params) {
  Verification v;
  v.matches = int(matches.size());
  if (matches.size() < 4) return v;
  std::vector<cv::Point2f> from, to;
  from.reserve(matches.size());
  to.reserve(matches.size());
  for (const Correspondence& c : matches) {
    const Keypoint& a = query.keypoints.at(c.query);
    from.emplace_back(a.x, a.y);
    to.push_back(gallery.at(c.gallery));
  }
  cv::Mat mask;
  const cv::Mat h =
      cv::findHomography(from, to, cv::RANSAC, params.reprojection_px, mask, params.max_iterations, params.confidence);
  if (h.empty()) return v;
  // A homography that folds or collapses the plane is no re-capture of the same surface.
  const double det = h.at<double>(0, 0) * h.at<double>(1, 1) - h.at<double>(0, 1) * h.at<double>(1, 0);
  if (!(det > 1e-3 && det < 1e3)) return v;
  v.homography = cv::Matx33d(h.ptr<double>());
  float x0 = 1e30f, y0 = 1e30f, x1 = -1e30f, y1 = -1e30f;
  for (size_t i = 0; i < from.size(); ++i) {
    if (!mask.at<uchar>(int(i))) continue;
    ++v.inliers;
    x0 = std::min(x0, from[i].x);
    y0 = std::min(y0, from[i].y);
    x1 = std::max(x1, from[i].x);
    y1 = std::max(y1, from[i].y);
  }
  if (v.inliers > 0) v.query_box = cv::Rect2f(x0, y0, x1 - x0, y1 - y0);
  v.significance = chance_significance(v.inliers, v.matches);
  return v;
}

}  // namespace prism::texture
