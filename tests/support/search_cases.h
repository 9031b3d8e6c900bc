// Comparing texture index search results field by field (gtest-free), for the tests that check one way
// of searching against another (search_many against search one query at a time).
#pragma once
#include <sstream>
#include <string>

#include "texture/index.h"

namespace prism::test {

// The first field in which `a` and `b` differ, named; empty when they agree (timings aside).
inline std::string search_difference(const texture::SearchResult& a, const texture::SearchResult& b) {
  std::ostringstream out;
  const auto candidate = [&](const texture::Candidate& x, const texture::Candidate& y, const std::string& which) {
    if (x.index != y.index || x.id != y.id || x.score != y.score)
      out << which << ": " << x.id << " (" << x.index << ", score " << x.score << ") vs " << y.id << " (" << y.index
          << ", score " << y.score << ")";
    else if (x.geometry.matches != y.geometry.matches || x.geometry.inliers != y.geometry.inliers ||
             x.geometry.significance != y.geometry.significance || x.significance != y.significance)
      out << which << " " << x.id << ": matches " << x.geometry.matches << "/" << y.geometry.matches << ", inliers "
          << x.geometry.inliers << "/" << y.geometry.inliers << ", significance " << x.significance << "/"
          << y.significance;
    else if (x.geometry.homography != y.geometry.homography || x.gallery_size != y.gallery_size)
      out << which << " " << x.id << ": homography or gallery size";
  };
  if (a.identified != b.identified) out << "identified " << a.identified << " vs " << b.identified;
  if (a.searched != b.searched || a.digested != b.digested)
    out << "searched " << a.searched << "/" << b.searched << ", digested " << a.digested << "/" << b.digested;
  if (!out.str().empty()) return out.str();
  candidate(a.best, b.best, "best");
  if (!out.str().empty()) return out.str();
  if (a.candidates.size() != b.candidates.size())
    return "candidates " + std::to_string(a.candidates.size()) + " vs " + std::to_string(b.candidates.size());
  for (size_t c = 0; c < a.candidates.size() && out.str().empty(); ++c)
    candidate(a.candidates[c], b.candidates[c], "candidate " + std::to_string(c));
  return out.str();
}

}  // namespace prism::test
