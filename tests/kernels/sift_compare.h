// Comparing two SIFT extractions (ours against cv::SIFT, or the CUDA path against the CPU path):
// which keypoints of the reference the other found at the same position, scale and orientation,
// and how their descriptors differ. Used by the CPU and the GPU tests of kernels/sift.
#pragma once
#include <opencv2/core.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace prism::test {

struct SiftAgreement {
  int reference = 0, other = 0;  // keypoint counts
  int found = 0;                 // reference keypoints the other has (same place, scale, angle)
  int identical = 0;             // of those, descriptors equal in all 128 values
  int close = 0;                 // of those, descriptors within L1 = 2
  double max_l1 = 0;             // the largest descriptor L1 difference among those found
  double found_share() const { return reference ? double(found) / reference : 1.0; }
  double identical_share() const { return found ? double(identical) / found : 1.0; }
  double close_share() const { return found ? double(close) / found : 1.0; }
  std::string str() const {
    std::ostringstream s;
    s << found << " of " << reference << " reference keypoints found (" << other << " in the other), " << identical
      << " identical descriptors, " << close << " within L1 2, max L1 " << max_l1;
    return s.str();
  }
};

// The tolerance kernels/sift claims against cv::SIFT (its tests check it on the CPU and the GPU):
// at least 99% of the reference's keypoints found, 99% of their descriptors identical, 99.9%
// within L1 = 2 (of 128 values 0..255, norm 512) and none beyond L1 = 16. A value at a rounding
// edge of the 0.2 clamp or of the 512 x scaling moves by one; a bin near the clamp moves a few.
inline bool within_tolerance(const SiftAgreement& a) {
  return a.found_share() >= 0.99 && a.identical_share() >= 0.99 && a.close_share() >= 0.999 && a.max_l1 <= 16;
}

// Same keypoint: positions within 0.01 px, sizes within 0.01 px, angles within 0.1 degree.
inline SiftAgreement compare_sift(const std::vector<cv::KeyPoint>& ref, const cv::Mat& ref_desc,
                                  const std::vector<cv::KeyPoint>& other, const cv::Mat& other_desc) {
  SiftAgreement a;
  a.reference = int(ref.size());
  a.other = int(other.size());
  std::multimap<long, int> by_cell;  // other's keypoints by 1-pixel cell
  auto cell = [](const cv::Point2f& p) { return long(std::floor(p.y)) * 100000 + long(std::floor(p.x)); };
  for (int j = 0; j < int(other.size()); ++j) by_cell.emplace(cell(other[j].pt), j);
  std::vector<char> used(other.size());
  for (int i = 0; i < int(ref.size()); ++i) {
    const cv::KeyPoint& k = ref[i];
    int best = -1;
    for (int dy = -1; dy <= 1 && best < 0; ++dy)
      for (int dx = -1; dx <= 1 && best < 0; ++dx) {
        auto range = by_cell.equal_range(cell(k.pt + cv::Point2f(float(dx), float(dy))));
        for (auto it = range.first; it != range.second; ++it) {
          const cv::KeyPoint& o = other[it->second];
          const float da = std::abs(k.angle - o.angle);
          if (!used[it->second] && std::abs(k.pt.x - o.pt.x) < 0.01f && std::abs(k.pt.y - o.pt.y) < 0.01f &&
              std::abs(k.size - o.size) < 0.01f && std::min(da, 360.f - da) < 0.1f) {
            best = it->second;
            break;
          }
        }
      }
    if (best < 0) continue;
    used[best] = 1;
    ++a.found;
    const double l1 = cv::norm(ref_desc.row(i), other_desc.row(best), cv::NORM_L1);
    a.identical += l1 == 0;
    a.close += l1 <= 2;
    a.max_l1 = std::max(a.max_l1, l1);
  }
  return a;
}

}  // namespace prism::test
