// Matching test problems shared by the CPU and GPU tests: RootSIFT descriptors of random SIFT-like
// vectors (sparse, non-negative), gallery images with 0, 1, a few and kSlot descriptors, batched
// queries, and query descriptors planted (copied) into one image. The 8-bit cases add what exact
// integer matching must get right: ties (duplicated gallery descriptors), all-zero query rows,
// saturated components, a gallery slot list, and planted copies in the padding past an image's count.
#pragma once
#include <algorithm>
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

// 8-bit RootSIFT of sparse SIFT-like vectors; every 13th has one or two non-zero bins, so that its
// components saturate at 255.
inline std::vector<uint8_t> random_rootsift_u8(int count, std::mt19937& rng) {
  std::vector<float> sift(size_t(count) * match::kDim, 0.f);
  for (int i = 0; i < count; ++i) {
    float* v = &sift[size_t(i) * match::kDim];
    if (i % 13 == 5) {
      v[rng() % match::kDim] = float(1 + rng() % 255);
      v[rng() % match::kDim] += float(rng() % 40);
    } else {
      for (int k = 0; k < match::kDim; ++k) v[k] = rng() % 4 == 0 ? float(rng() % 256) : 0.f;
    }
  }
  std::vector<uint8_t> out(sift.size());
  match::rootsift_u8(sift.data(), count, out.data());
  return out;
}

struct MatchU8Case {
  std::vector<uint8_t> query, gallery;
  std::vector<int> counts, slots;  // counts per gallery slot; slots: the batch's slot list (may be empty)
  match::MatchU8Problem problem;
  int planted_slot = -1;
};

// `counts` are per gallery slot; with a non-empty `slots` the batch is that list of slots (repeats
// allowed), else every slot in order. Query 0's even rows are copied into the largest slot at
// scattered positions and again a few positions later (an exact tie: the lower index must win and
// the ratio test must fail). Every slot repeats some of its own descriptors (ties away from zero),
// holds a copy of query row 3 in its padding (matched only if the padding is read), and one
// all-255 descriptor; the last row of every query is all zero, and query 0's row 5 all 255.
inline MatchU8Case make_match_u8_case(int queries, int query_rows, std::vector<int> counts, std::vector<int> slots,
                                      std::mt19937& rng) {
  using match::kDim;
  using match::kSlot;
  MatchU8Case c;
  c.counts = std::move(counts);
  c.slots = std::move(slots);
  const int rows = queries * query_rows;
  c.query = random_rootsift_u8(rows, rng);
  for (int q = 0; q < queries; ++q)
    std::fill_n(&c.query[(size_t(q) * query_rows + query_rows - 1) * kDim], kDim, uint8_t(0));
  if (query_rows > 6) std::fill_n(&c.query[size_t(5) * kDim], kDim, uint8_t(255));
  const size_t n_slots = c.counts.size();
  c.gallery.resize(n_slots * size_t(kSlot) * kDim);
  size_t big = 0;
  for (size_t s = 0; s < n_slots; ++s) {
    const std::vector<uint8_t> img = random_rootsift_u8(kSlot, rng);  // padding rows hold values too
    uint8_t* g = &c.gallery[s * kSlot * kDim];
    std::copy(img.begin(), img.end(), g);
    // Random RootSIFT rows are sparse and coarse, so a drawn gallery row may equal a query row (one
    // run in a few hundred): that row would be a copy nobody planted, and the test of which copy
    // wins a tie would fail. Such a row moves by 1 in one dimension.
    for (int i = 0; i < kSlot; ++i)
      for (int q = 0; q < rows; ++q)
        if (std::equal(g + size_t(i) * kDim, g + size_t(i + 1) * kDim, &c.query[size_t(q) * kDim]))
          g[size_t(i) * kDim] = uint8_t(g[size_t(i) * kDim] == 0 ? 1 : g[size_t(i) * kDim] - 1);
    const int n = c.counts[s];
    for (int j = 0; j + 5 < n; j += 11) std::copy_n(g + size_t(j) * kDim, kDim, g + size_t(j + 5) * kDim);
    if (n > 2) std::fill_n(g + size_t(n / 2) * kDim, kDim, uint8_t(255));
    if (n < kSlot && query_rows > 3) std::copy_n(&c.query[3 * kDim], kDim, g + size_t(n) * kDim);
    if (c.counts[s] > c.counts[big]) big = s;
  }
  c.planted_slot = n_slots ? int(big) : -1;
  const int nb = n_slots ? c.counts[big] : 0;
  uint8_t* g = n_slots ? &c.gallery[big * kSlot * kDim] : nullptr;
  for (int r = 0; r < query_rows - 1 && r < nb; r += 2) {
    const size_t j = (size_t(r) * 7919) % size_t(nb);
    std::copy_n(&c.query[size_t(r) * kDim], kDim, g + j * kDim);
    if (r % 8 == 0 && j + 3 < size_t(nb)) std::copy_n(&c.query[size_t(r) * kDim], kDim, g + (j + 3) * kDim);
  }
  c.problem.query = c.query.data();
  c.problem.rows = rows;
  c.problem.query_rows = query_rows;
  c.problem.gallery = c.gallery.data();
  c.problem.counts = c.counts.data();
  c.problem.images = c.slots.empty() ? int(n_slots) : int(c.slots.size());
  c.problem.slots = c.slots.empty() ? nullptr : c.slots.data();
  return c;
}

}  // namespace prism::test
