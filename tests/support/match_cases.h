// Matching test problems shared by the CPU and GPU tests: RootSIFT descriptors of random SIFT-like
// vectors (sparse, non-negative), gallery images with 0, 1, a few and kSlot descriptors, batched
// queries, and query descriptors planted (copied) into one image.
#pragma once
#include <random>
#include <vector>

#include "match/match.h"

namespace prism::test {

struct MatchCase {
  std::vector<uint16_t> query, gallery;
  std::vector<int> counts;
  match::MatchProblem problem;
  int planted_image = -1;
};

inline std::vector<uint16_t> random_rootsift(int count, std::mt19937& rng) {
  std::vector<float> sift(size_t(count) * match::kDim);
  for (float& v : sift) v = rng() % 4 == 0 ? float(rng() % 256) : 0.f;  // SIFT: sparse, clipped
  std::vector<uint16_t> out(sift.size());
  match::rootsift(sift.data(), count, out.data());
  return out;
}

inline MatchCase make_match_case(int queries, int query_rows, std::vector<int> counts, std::mt19937& rng) {
  MatchCase c;
  c.counts = counts;
  const int rows = queries * query_rows;
  c.query = random_rootsift(rows, rng);
  c.gallery.assign(size_t(counts.size()) * match::kSlot * match::kDim, 0);
  for (size_t b = 0; b < counts.size(); ++b) {
    const std::vector<uint16_t> img = random_rootsift(match::kSlot, rng);  // padding rows hold values too
    std::copy(img.begin(), img.end(), c.gallery.begin() + b * match::kSlot * match::kDim);
  }
  // Plant every other query row of query 0 into the largest image, at scattered positions.
  size_t big = 0;
  for (size_t b = 0; b < counts.size(); ++b)
    if (counts[b] > counts[big]) big = b;
  c.planted_image = int(big);
  for (int r = 0; r < query_rows && r < counts[big]; r += 2) {
    const size_t j = (size_t(r) * 7919) % size_t(counts[big]);
    std::copy_n(&c.query[size_t(r) * match::kDim], match::kDim, &c.gallery[(big * match::kSlot + j) * match::kDim]);
  }
  c.problem.query = c.query.data();
  c.problem.rows = rows;
  c.problem.query_rows = query_rows;
  c.problem.gallery = c.gallery.data();
  c.problem.counts = c.counts.data();
  c.problem.images = int(counts.size());
  return c;
}

}  // namespace prism::test
