// emdtracker's objects and tracks (kernels/emd/objects.h): the mask's words against the pixels, the
// run labelling and gap merge against a pixel flood fill and a naive merge, the tracks' ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "emd/objects.h"

namespace prism {
namespace {

// A distance map of random blobs (ellipses of small distances) over larger distances, with some
// NaN and +infinity pixels, and a speckle of isolated on-target pixels.
std::vector<float> blob_map(int W, int H, std::mt19937& rng) {
  std::vector<float> d(static_cast<size_t>(W) * H);
  std::uniform_real_distribution<float> far(1.5f, 4.f), near(0.f, 1.f), unit(0.f, 1.f);
  for (float& v : d) {
    const float u = unit(rng);
    v = u < 0.01f ? NAN : u < 0.02f ? INFINITY : u < 0.03f ? near(rng) : far(rng);
  }
  const int blobs = 1 + static_cast<int>(rng() % 8);
  for (int b = 0; b < blobs; ++b) {
    const float cx = unit(rng) * W, cy = unit(rng) * H, rx = 1 + unit(rng) * W / 5, ry = 1 + unit(rng) * H / 4;
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const float dx = (x - cx) / rx, dy = (y - cy) / ry;
        if (dx * dx + dy * dy <= 1.f && unit(rng) < 0.85f) d[static_cast<size_t>(y) * W + x] = near(rng);
      }
  }
  return d;
}

struct RefObject {
  int x0, y0, x1, y1;  // inclusive
  int64_t pixels;
  float distance;  // smallest on-target distance of its pixels
};

// Independent reference: 8-connected flood fill on the pixels, then the gap merge done naively
// (any two groups within the gap joined, repeated until none are), then the area filter.
std::vector<RefObject> reference(const std::vector<float>& d, int W, int H, float threshold,
                                 const emd::ObjectParams& p) {
  std::vector<int> label(d.size(), -1);
  std::vector<RefObject> regions;
  for (int start = 0; start < W * H; ++start) {
    if (label[start] >= 0 || !(d[start] <= threshold)) continue;
    RefObject r{W, H, -1, -1, 0, INFINITY};
    std::vector<int> stack{start};
    label[start] = static_cast<int>(regions.size());
    while (!stack.empty()) {
      const int c = stack.back();
      stack.pop_back();
      const int cx = c % W, cy = c / W;
      r.x0 = std::min(r.x0, cx), r.x1 = std::max(r.x1, cx), r.y0 = std::min(r.y0, cy), r.y1 = std::max(r.y1, cy);
      ++r.pixels;
      r.distance = std::min(r.distance, d[c]);
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
          const int nx = cx + dx, ny = cy + dy;
          if (nx < 0 || ny < 0 || nx >= W || ny >= H) continue;
          const int n = ny * W + nx;
          if (label[n] >= 0 || !(d[n] <= threshold)) continue;
          label[n] = label[start];
          stack.push_back(n);
        }
    }
    regions.push_back(r);
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t a = 0; a < regions.size() && !changed; ++a)
      for (size_t b = a + 1; b < regions.size() && !changed; ++b) {
        RefObject &A = regions[a], &B = regions[b];
        const int gx = std::max(A.x0, B.x0) - std::min(A.x1, B.x1) - 1;
        const int gy = std::max(A.y0, B.y0) - std::min(A.y1, B.y1) - 1;
        if (gx > p.merge_gap || gy > p.merge_gap) continue;
        A = {std::min(A.x0, B.x0), std::min(A.y0, B.y0), std::max(A.x1, B.x1),
             std::max(A.y1, B.y1), A.pixels + B.pixels,  std::min(A.distance, B.distance)};
        regions.erase(regions.begin() + b);
        changed = true;
      }
  }
  std::vector<RefObject> out;
  for (const RefObject& r : regions)
    if (r.pixels >= p.min_area && r.pixels <= p.max_area) out.push_back(r);
  return out;
}

TEST(EmdObjects, MaskWordsAreThePixels) {
  std::mt19937 rng(3);
  for (const int W : {1, 31, 32, 33, 64, 95}) {
    const int H = 7;
    const std::vector<float> d = blob_map(W, H, rng);
    const int wpr = emd::mask_words_per_row(W);
    std::vector<emd::MaskWord> m(static_cast<size_t>(wpr) * H, {0xdeadbeef, 0.f});
    emd::make_mask_cpu(d.data(), W, H, 1.f, m.data());
    for (int y = 0; y < H; ++y)
      for (int w = 0; w < wpr; ++w) {
        uint32_t bits = 0;
        float low = INFINITY;
        for (int i = 0; i < 32; ++i) {
          const int x = 32 * w + i;
          if (x < W && d[static_cast<size_t>(y) * W + x] <= 1.f) {  // NaN compares false: off
            bits |= 1u << i;
            low = std::min(low, d[static_cast<size_t>(y) * W + x]);
          }
        }
        EXPECT_EQ(m[y * wpr + w].bits, bits) << "width " << W << " row " << y << " word " << w;
        EXPECT_EQ(m[y * wpr + w].min_distance, low) << "width " << W << " row " << y << " word " << w;
      }
  }
}

// The finder's objects of distance map `d` against the reference's, object by object; returns how
// many were compared.
int expect_reference_objects(const std::vector<float>& d, int W, int H, const emd::ObjectParams& p,
                             emd::ObjectFinder& finder, const std::string& what) {
  std::vector<emd::MaskWord> m(static_cast<size_t>(emd::mask_words_per_row(W)) * H);
  emd::make_mask_cpu(d.data(), W, H, 1.f, m.data());
  finder.configure(W, H);
  const std::vector<emd::Detection> got = finder.find(m.data(), p);
  std::vector<RefObject> want = reference(d, W, H, 1.f, p);
  std::sort(want.begin(), want.end(), [](const RefObject& a, const RefObject& b) {
    if (a.pixels != b.pixels) return a.pixels > b.pixels;
    return a.y0 != b.y0 ? a.y0 < b.y0 : a.x0 < b.x0;
  });
  EXPECT_EQ(got.size(), want.size()) << what << " " << W << "x" << H << " gap " << p.merge_gap;
  if (got.size() != want.size()) return 0;
  for (size_t k = 0; k < want.size(); ++k) {
    const emd::Detection& g = got[k];
    const RefObject& r = want[k];
    EXPECT_TRUE(g.x == r.x0 && g.y == r.y0 && g.w == r.x1 - r.x0 + 1 && g.h == r.y1 - r.y0 + 1 && g.pixels == r.pixels)
        << what << " object " << k << ": " << g.x << "," << g.y << " " << g.w << "x" << g.h << " " << g.pixels
        << " want " << r.x0 << "," << r.y0 << " " << r.x1 - r.x0 + 1 << "x" << r.y1 - r.y0 + 1 << " " << r.pixels;
    // exact when no other object can share a 32-pixel row segment; never above the true minimum
    if (p.merge_gap >= 31) {
      EXPECT_EQ(g.distance, r.distance) << what << " object " << k;
    }
    EXPECT_LE(g.distance, r.distance) << what << " object " << k;
    EXPECT_EQ(g.track_id, 0);
  }
  return static_cast<int>(want.size());
}

TEST(EmdObjects, MatchFloodFillAndNaiveMerge) {
  std::mt19937 rng(17);
  emd::ObjectFinder finder;
  int compared = 0, merged_cases = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const int W = 1 + static_cast<int>(rng() % 130), H = 1 + static_cast<int>(rng() % 70);
    const std::vector<float> d = blob_map(W, H, rng);
    emd::ObjectParams p;
    p.merge_gap = static_cast<int>(trial % 2 ? rng() % 6 : 31 + rng() % 10);  // fragments; exact distances
    p.min_area = 1 + static_cast<int64_t>(rng() % 20);
    p.max_area = trial % 3 == 0 ? static_cast<int64_t>(W) * H / 8 + 1 : INT64_MAX;
    const int n = expect_reference_objects(d, W, H, p, finder, "trial " + std::to_string(trial));
    compared += n;
    merged_cases += n > 0;
  }
  EXPECT_GT(compared, 80);
  EXPECT_GT(merged_cases, 50);
}

// Speckle (many tiny regions: specks of 1 to 4 pixels, some touching) at densities from sparse to
// dense enough that the gap merge chains across the frame, with gaps from 0 past the grid's cell
// (32 pixels) and masks smaller and larger than a cell: the grid merge equals the naive one.
TEST(EmdObjects, SpeckleMatchesTheNaiveMerge) {
  std::mt19937 rng(23);
  emd::ObjectFinder finder;
  int compared = 0;
  const int gaps[] = {0, 1, 2, 3, 5, 8, 13, 31, 40};
  for (int trial = 0; trial < 60; ++trial) {
    const int W = 1 + static_cast<int>(rng() % 160), H = 1 + static_cast<int>(rng() % 90);
    std::vector<float> d(static_cast<size_t>(W) * H, 3.f);
    const int specks = static_cast<int>(rng() % (1 + W * H / (trial % 3 == 0 ? 8 : 40)));
    for (int k = 0; k < specks && k < 250; ++k) {
      const int x = static_cast<int>(rng() % W), y = static_cast<int>(rng() % H);
      const int sw = 1 + static_cast<int>(rng() % 2), sh = 1 + static_cast<int>(rng() % 2);
      for (int yy = y; yy < std::min(H, y + sh); ++yy)
        for (int xx = x; xx < std::min(W, x + sw); ++xx)
          d[static_cast<size_t>(yy) * W + xx] = static_cast<float>(rng() % 100) / 100.f;
    }
    emd::ObjectParams p;
    p.merge_gap = gaps[trial % 9];
    p.min_area = 1 + static_cast<int64_t>(rng() % 3);
    compared += expect_reference_objects(d, W, H, p, finder, "speckle trial " + std::to_string(trial));
  }
  EXPECT_GT(compared, 300);
}

// A 1080p speckle mask of 50,000 isolated specks (what a noisy threshold gives): the merge completes
// (the naive sweep is 1.25 billion pair tests per pass here) and keeps every pixel, in groups no two
// of which are within the gap.
TEST(EmdObjects, LargeSpeckleMaskCompletes) {
  const int W = 1920, H = 1080, wpr = emd::mask_words_per_row(W);
  std::mt19937 rng(29);
  std::vector<emd::MaskWord> m(static_cast<size_t>(wpr) * H, {0u, INFINITY});
  int64_t set = 0;
  // specks on a 3-pixel lattice (never touching): exactly 50,000 regions before the merge
  std::vector<int> sites(static_cast<size_t>(W / 3) * (H / 3));
  for (size_t i = 0; i < sites.size(); ++i) sites[i] = static_cast<int>(i);
  std::shuffle(sites.begin(), sites.end(), rng);
  for (int k = 0; k < 50000; ++k) {
    const int x = 3 * (sites[k] % (W / 3)), y = 3 * (sites[k] / (W / 3));
    emd::MaskWord& w = m[static_cast<size_t>(y) * wpr + x / 32];
    w.bits |= 1u << (x % 32);
    w.min_distance = 0.5f;
    ++set;
  }
  emd::ObjectFinder finder;
  finder.configure(W, H);
  for (const int gap : {0, 1, 2, 8}) {
    emd::ObjectParams p;
    p.merge_gap = gap;
    p.min_area = 1;
    const std::vector<emd::Detection> got = finder.find(m.data(), p);
    int64_t pixels = 0;
    for (const emd::Detection& o : got) pixels += o.pixels;
    EXPECT_EQ(pixels, set) << "gap " << gap;
    // Specks 3 apart on the lattice are 2 pixels apart: gap 0 and 1 keep them (50,000 objects),
    // gap 2 joins neighbours on the lattice into groups, gap 8 into larger ones.
    if (gap < 2) {
      EXPECT_EQ(got.size(), 50000u) << "gap " << gap;
    } else {
      EXPECT_LT(got.size(), 50000u) << "gap " << gap;
    }
    // No two objects are within the gap (a sweep over the boxes sorted by x, as the test's own check).
    std::vector<emd::Detection> by_x = got;
    std::sort(by_x.begin(), by_x.end(), [](const emd::Detection& a, const emd::Detection& b) { return a.x < b.x; });
    int close = 0;
    for (size_t i = 0; i < by_x.size(); ++i)
      for (size_t j = i + 1; j < by_x.size() && by_x[j].x <= by_x[i].x + by_x[i].w + gap; ++j) {
        const emd::Detection &a = by_x[i], &b = by_x[j];
        const int gy = std::max(a.y, b.y) - std::min(a.y + a.h, b.y + b.h);  // pixels strictly between
        close += gy <= gap;
      }
    EXPECT_EQ(close, 0) << "gap " << gap;
  }
}

TEST(EmdObjects, GapJoinsFragmentsAndAreasBound) {
  // two 4x4 squares 5 pixels apart (gap 5) and a 2x2 speck far away
  const int W = 40, H = 12;
  std::vector<float> d(static_cast<size_t>(W) * H, 9.f);
  auto square = [&](int x0, int y0, int n, float v) {
    for (int y = y0; y < y0 + n; ++y)
      for (int x = x0; x < x0 + n; ++x) d[static_cast<size_t>(y) * W + x] = v;
  };
  square(2, 2, 4, 0.5f);
  square(11, 3, 4, 0.25f);
  square(35, 9, 2, 0.f);
  std::vector<emd::MaskWord> m(static_cast<size_t>(emd::mask_words_per_row(W)) * H);
  emd::make_mask_cpu(d.data(), W, H, 1.f, m.data());
  emd::ObjectFinder f;
  f.configure(W, H);
  emd::ObjectParams p;
  p.min_area = 1;
  p.merge_gap = 4;
  std::vector<emd::Detection> o = f.find(m.data(), p);
  ASSERT_EQ(o.size(), 3u);  // 5 pixels apart: not joined at gap 4
  p.merge_gap = 5;
  o = f.find(m.data(), p);
  ASSERT_EQ(o.size(), 2u);
  EXPECT_TRUE(o[0].x == 2 && o[0].y == 2 && o[0].w == 13 && o[0].h == 5 && o[0].pixels == 32);
  EXPECT_EQ(o[0].distance, 0.25f);
  EXPECT_EQ(o[1].pixels, 4);
  p.min_area = 5;  // the speck goes
  EXPECT_EQ(f.find(m.data(), p).size(), 1u);
  p.max_area = 31;  // and the object too
  EXPECT_EQ(f.find(m.data(), p).size(), 0u);
}

emd::Detection box(int x, int y, int w, int h) { return {x, y, w, h, 0.f, int64_t(w) * h, 0}; }

// Two objects walking towards each other at 6 pixels a frame (boxes 20 wide: a box moves by more
// than a third of its width per frame), the first unseen for frames 4..6: ids are kept through
// the miss (the constant-velocity prediction finds it again), and new ids go only to new objects.
TEST(EmdTracks, IdsPersistThroughShortMissesWithMotion) {
  emd::MotionTracker t;
  emd::TrackParams p;
  p.max_age = 3;
  int64_t first = -1, second = -1;
  for (int f = 0; f < 12; ++f) {
    std::vector<emd::Detection> dets;
    const bool seen = f < 4 || f > 6;
    if (seen) dets.push_back(box(10 + 6 * f, 20, 20, 40));
    dets.push_back(box(200 - 6 * f, 100, 20, 40));
    t.update(dets, p);
    if (f == 0) {
      first = dets[0].track_id;
      second = dets[1].track_id;
      EXPECT_NE(first, second);
      continue;
    }
    if (seen) {
      EXPECT_EQ(dets[0].track_id, first) << "frame " << f;
    }
    EXPECT_EQ(dets.back().track_id, second) << "frame " << f;
    EXPECT_EQ(t.tracks().size(), 2u) << "frame " << f;  // the unseen one coasts
  }
  // gone for longer than max_age: the track is dropped and a new object later gets a new id
  for (int f = 0; f < 4; ++f) {
    std::vector<emd::Detection> none;
    t.update(none, p);
  }
  EXPECT_TRUE(t.tracks().empty());
  std::vector<emd::Detection> again{box(76, 20, 20, 40)};
  t.update(again, p);
  EXPECT_GT(again[0].track_id, std::max(first, second));
}

// An object far from every track starts a new one; one near a track continues it.
TEST(EmdTracks, BoxesThatStopOverlappingStartNewTracks) {
  emd::MotionTracker t;
  std::vector<emd::Detection> a{box(0, 0, 20, 20)};
  t.update(a, {});
  std::vector<emd::Detection> b{box(100, 0, 20, 20), box(2, 1, 20, 20)};
  t.update(b, {});
  EXPECT_EQ(b[1].track_id, a[0].track_id);
  EXPECT_EQ(b[0].track_id, a[0].track_id + 1);
}

}  // namespace
}  // namespace prism
