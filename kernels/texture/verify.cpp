#include "texture/verify.h"

#include <opencv2/calib3d.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>
#include <unordered_map>

namespace prism::texture {

namespace {

// Rows that pass (`pass(r)`), made one-to-one: per gallery descriptor the row of the smallest
// `distance(r)` (a double: exact for the 8-bit integers), the lower query index on a tie.
template <class Pass, class Distance>
std::vector<Correspondence> one_to_one(const int* best_index, int rows, Pass pass, Distance distance) {
  struct Pick {
    Correspondence c;
    double d;
  };
  std::unordered_map<int, Pick> by_gallery;
  for (int r = 0; r < rows; ++r) {
    if (best_index[r] < 0 || !pass(r)) continue;
    const double d = distance(r);
    const Pick pick{{r, best_index[r], int32_t(std::lround(d))}, d};
    auto [it, inserted] = by_gallery.try_emplace(best_index[r], pick);
    if (!inserted && d < it->second.d) it->second = pick;
  }
  std::vector<Correspondence> out;
  out.reserve(by_gallery.size());
  for (const auto& kv : by_gallery) out.push_back(kv.second.c);
  std::sort(out.begin(), out.end(), [](const Correspondence& a, const Correspondence& b) { return a.query < b.query; });
  return out;
}

// Whether `h` (query -> gallery) is a view of one flat surface where its inliers (`mask`) lie: a
// homography that folds or collapses the plane there is no re-capture of the same surface. The
// horizon (w = 0) must not cross the inliers (w of one sign at all of them), and the local scale at
// their centroid, the Jacobian determinant det(h) / w^3, must keep the orientation and lie within
// 1e-3..1e3. For a nearly affine h that is the determinant of its upper-left 2x2, the test before
// issue 45, which read a strong perspective (a plane tilted 30-60 degrees) as degenerate. `jacobian`
// receives that local scale (chance_inlier's).
bool keeps_the_plane(const cv::Matx33d& h, const std::vector<cv::Point2f>& from, const cv::Mat& mask,
                     double& jacobian) {
  double sx = 0, sy = 0;
  int n = 0, sign = 0;
  for (size_t i = 0; i < from.size(); ++i) {
    if (!mask.at<uchar>(int(i))) continue;
    const double w = h(2, 0) * from[i].x + h(2, 1) * from[i].y + h(2, 2);
    const int s = w > 0 ? 1 : w < 0 ? -1 : 0;
    if (s == 0 || (sign != 0 && s != sign)) return false;
    sign = s;
    sx += from[i].x;
    sy += from[i].y;
    ++n;
  }
  if (n == 0) return false;
  const double w = h(2, 0) * (sx / n) + h(2, 1) * (sy / n) + h(2, 2);
  jacobian = cv::determinant(h) / (w * w * w);
  return jacobian > 1e-3 && jacobian < 1e3;
}

}  // namespace

bool ratio_row_passes(int32_t best, int32_t second, float ratio) {
  return second != INT32_MAX && match::ratio_pass(best, second, ratio);
}
bool ratio_row_passes(float best, float second, float ratio) {
  return std::isfinite(second) && match::ratio_pass_dot(best, second, ratio);
}

std::vector<Correspondence> ratio_matches(const int32_t* best, const int32_t* second, const int* best_index, int rows,
                                          float ratio) {
  return one_to_one(
      best_index, rows, [&](int r) { return ratio_row_passes(best[r], second[r], ratio); },
      [&](int r) { return double(best[r]); });
}

std::vector<Correspondence> ratio_matches(const float* best, const float* second, const int* best_index, int rows,
                                          float ratio) {
  constexpr double kScale = 512.0 * 512.0;  // quantize_u8's 512, squared
  return one_to_one(
      best_index, rows, [&](int r) { return ratio_row_passes(best[r], second[r], ratio); },
      [&](int r) { return kScale * (2.0 - 2.0 * double(best[r])); });
}

double chance_significance(int inliers, int matches, double chance) {
  const int n = matches - 4, k = inliers - 4;
  if (k <= 0 || n < k || !(chance > 0) || !(chance < 1)) return 0.0;
  // Upper tail of Binomial(n, p), summed from its largest term down in log space.
  const double lp = std::log(chance), lq = std::log1p(-chance);
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
  return std::max(0.0, -(top + std::log(sum)) / std::log(10.0));
}

double chance_inlier(double jacobian, double query_area, double gallery_area) {
  if (!(jacobian > 0) || !std::isfinite(jacobian)) return 1.0;
  const double areas = query_area > 0 && gallery_area > 0 ? gallery_area / query_area : 1.0;
  return std::min(1.0, kChanceInlier * std::max(1.0, areas / jacobian));
}

GalleryInQuery gallery_in_query(const cv::Matx33d& query_to_gallery, cv::Size gallery) {
  GalleryInQuery out;
  if (gallery.width <= 0 || gallery.height <= 0) return out;
  bool ok = false;
  cv::Matx33d inv = query_to_gallery.inv(cv::DECOMP_LU, &ok);
  if (!ok || !std::isfinite(inv(2, 2)) || std::abs(inv(2, 2)) < 1e-12) return out;
  inv *= 1.0 / inv(2, 2);
  const double w = gallery.width - 0.5, h = gallery.height - 0.5;
  const cv::Point2d corners[4] = {{-0.5, -0.5}, {w, -0.5}, {w, h}, {-0.5, h}};
  cv::Point2d quad[4];
  for (int i = 0; i < 4; ++i) {
    const cv::Vec3d p = inv * cv::Vec3d(corners[i].x, corners[i].y, 1.0);
    // The horizon (z = 0) must not cross the image: with [2][2] = 1 its inside has z > 0.
    if (!(p[2] > 1e-9)) return out;
    quad[i] = {p[0] / p[2], p[1] / p[2]};
    if (!std::isfinite(quad[i].x) || !std::isfinite(quad[i].y)) return out;
  }
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c)
      if (!std::isfinite(inv(r, c))) return out;
  out.valid = true;
  out.homography = inv;
  std::copy(quad, quad + 4, out.quad);
  return out;
}

Verification verify_geometry(const Features& query, const std::vector<cv::Point2f>& gallery,
                             const std::vector<Correspondence>& matches, const VerifyParams& params,
                             cv::Size gallery_size) {
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
  const cv::Matx33d m(h.ptr<double>());
  double jacobian = 0;
  if (!keeps_the_plane(m, from, mask, jacobian)) return v;
  v.homography = m;
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
  const double query_area = double(query.width) * query.height;
  const double gallery_area = gallery_size.empty() ? query_area : double(gallery_size.width) * gallery_size.height;
  v.chance = chance_inlier(jacobian, query_area, gallery_area);
  v.significance = chance_significance(v.inliers, v.matches, v.chance);
  return v;
}

}  // namespace prism::texture
