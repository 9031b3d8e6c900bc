#include "emd/objects.h"

#include <algorithm>
#include <cmath>

namespace prism::emd {

void make_mask_cpu(const float* d, int width, int height, float threshold, MaskWord* words) {
  const int wpr = mask_words_per_row(width);
  for (int y = 0; y < height; ++y)
    for (int w = 0; w < wpr; ++w) {
      MaskWord m{0u, INFINITY};
      for (int i = 0; i < 32 && 32 * w + i < width; ++i) {
        const float v = d[static_cast<int64_t>(y) * width + 32 * w + i];
        if (on_target(v, threshold)) {
          m.bits |= 1u << i;
          m.min_distance = std::min(m.min_distance, v);
        }
      }
      words[static_cast<int64_t>(y) * wpr + w] = m;
    }
}

void ObjectFinder::configure(int width, int height) {
  width_ = width;
  height_ = height;
  // A row holds at most ceil(width / 2) runs; reserve a quarter of the worst case (a mask that
  // sparse and fragmented is noise) and let a worse frame grow it once.
  const size_t runs = static_cast<size_t>(height) * ((width + 1) / 2) / 4 + 16;
  runs_.clear();
  runs_.reserve(runs);
  run_parent_.reserve(runs);
  run_region_.reserve(runs);
  regions_.clear();
  regions_.reserve(runs / 4);
  region_parent_.reserve(runs / 4);
  grid_.resize(static_cast<size_t>((width + kCell - 1) / kCell) * ((height + kCell - 1) / kCell));
  objects_.clear();
  objects_.reserve(256);
}

int ObjectFinder::find_root(std::vector<int>& parent, int i) {
  while (parent[i] != i) {
    parent[i] = parent[parent[i]];  // path halving
    i = parent[i];
  }
  return i;
}

namespace {
// Pixels strictly between two inclusive intervals; negative when they overlap.
inline int interval_gap(int a0, int a1, int b0, int b1) { return std::max(a0, b0) - std::min(a1, b1) - 1; }
}  // namespace

const std::vector<Detection>& ObjectFinder::find(const MaskWord* words, const ObjectParams& p) {
  const int W = width_, H = height_, wpr = mask_words_per_row(W);
  runs_.clear();
  run_parent_.clear();
  // Pass 1: runs of set bits, row by row (sorted by x within a row), each joined with the runs of
  // the row above that it touches in 8-connectivity (x ranges overlapping once widened by 1).
  size_t above_begin = 0, above_end = 0;
  auto unite_runs = [&](int a, int b) {
    a = find_root(run_parent_, a);
    b = find_root(run_parent_, b);
    if (a != b) run_parent_[std::max(a, b)] = std::min(a, b);  // the root is the first run
  };
  for (int y = 0; y < H; ++y) {
    const size_t row_begin = runs_.size();
    const MaskWord* row = words + static_cast<int64_t>(y) * wpr;
    bool in_run = false;
    int start = 0;
    auto emit = [&](int x0, int x1) {
      const int index = static_cast<int>(runs_.size());
      runs_.push_back({y, x0, x1, index});
      run_parent_.push_back(index);
    };
    for (int w = 0; w < wpr; ++w) {
      const uint32_t b = row[w].bits;
      int i = 0;
      while (i < 32) {
        if (!in_run) {
          const uint32_t rest = b >> i;
          if (!rest) break;
          i += __builtin_ctz(rest);
          in_run = true;
          start = 32 * w + i;
        } else {
          const uint32_t rest = ~b >> i;
          if (!rest) break;  // the run goes on into the next word
          i += __builtin_ctz(rest);
          in_run = false;
          emit(start, 32 * w + i - 1);
        }
      }
    }
    if (in_run) emit(start, W - 1);
    // join with the row above: both lists are sorted and disjoint, so one merge-like walk
    size_t j = above_begin;
    for (size_t r = row_begin; r < runs_.size(); ++r) {
      const Run& run = runs_[r];
      while (j < above_end && runs_[j].x1 < run.x0 - 1) ++j;
      for (size_t k = j; k < above_end && runs_[k].x0 <= run.x1 + 1; ++k)
        unite_runs(static_cast<int>(r), static_cast<int>(k));
    }
    above_begin = row_begin;
    above_end = runs_.size();
  }
  // Pass 2: one region per root, in the order of their first runs (raster order).
  regions_.clear();
  region_parent_.clear();
  run_region_.assign(runs_.size(), -1);
  for (size_t r = 0; r < runs_.size(); ++r) {
    const int root = find_root(run_parent_, static_cast<int>(r));
    int& region = run_region_[root];
    if (region < 0) {
      region = static_cast<int>(regions_.size());
      regions_.push_back({W, H, -1, -1, INFINITY, 0, 0, -1, 0, -1});
      region_parent_.push_back(region);
    }
    Region& g = regions_[region];
    const Run& run = runs_[r];
    g.x0 = std::min(g.x0, run.x0);
    g.x1 = std::max(g.x1, run.x1);
    g.y0 = std::min(g.y0, run.y);
    g.y1 = std::max(g.y1, run.y);
    g.pixels += run.x1 - run.x0 + 1;
    for (int w = run.x0 / 32; w <= run.x1 / 32; ++w)
      g.distance = std::min(g.distance, words[static_cast<int64_t>(run.y) * wpr + w].min_distance);
  }
  // Pass 3: join regions whose boxes are within merge_gap (Chebyshev distance between the boxes),
  // until no two groups' boxes are: a joined box is larger and may reach another region. The result
  // does not depend on the order (boxes only grow, so a pair once close stays close: every join is
  // one any order makes), so it equals the naive sweep over all pairs, without its O(n^2) per sweep
  // on a speckle mask. A uniform grid (the broad phase of collision detection; Ericson, Real-Time
  // Collision Detection, 7.1) lists in each cell the groups whose boxes reach it. Each group in turn
  // absorbs the groups listed in the cells its box widened by gap + 1 reaches that are close to it,
  // looking again while its box grows, then is listed in its new cells. A group absorbed leaves the
  // lists as they are visited (its absorber is listed wherever it was). As every other group is
  // listed in the cells of its current box, a group that is done has no close group left, and one
  // that grows later is the one that looks; so no two groups at the end are close.
  const int gap = std::max(0, p.merge_gap);
  const int n = static_cast<int>(regions_.size());
  const int cell = std::max(kCell, gap);
  const int gw = (W + cell - 1) / cell, gh = (H + cell - 1) / cell;
  if (grid_.size() < static_cast<size_t>(gw) * gh) grid_.resize(static_cast<size_t>(gw) * gh);
  for (size_t c = 0; c < static_cast<size_t>(gw) * gh; ++c) grid_[c].clear();
  // Lists region r in the cells of its box that it is not listed in yet (boxes only grow).
  auto list_region = [&](int r) {
    Region& g = regions_[r];
    const int cx0 = g.x0 / cell, cx1 = g.x1 / cell, cy0 = g.y0 / cell, cy1 = g.y1 / cell;
    for (int cy = cy0; cy <= cy1; ++cy)
      for (int cx = cx0; cx <= cx1; ++cx)
        if (cx < g.cx0 || cx > g.cx1 || cy < g.cy0 || cy > g.cy1) grid_[static_cast<size_t>(cy) * gw + cx].push_back(r);
    g.cx0 = cx0, g.cx1 = cx1, g.cy0 = cy0, g.cy1 = cy1;
  };
  for (int r = 0; r < n; ++r) list_region(r);
  for (int a = 0; a < n; ++a) {
    if (region_parent_[a] != a) continue;
    Region& ra = regions_[a];
    for (bool grew = true; grew;) {
      grew = false;
      // close: gap or fewer pixels strictly between, so the box widened by gap + 1 reaches it
      const int reach = gap + 1;
      const int qx0 = std::max(0, ra.x0 - reach) / cell, qx1 = std::min(W - 1, ra.x1 + reach) / cell;
      const int qy0 = std::max(0, ra.y0 - reach) / cell, qy1 = std::min(H - 1, ra.y1 + reach) / cell;
      for (int cy = qy0; cy <= qy1; ++cy)
        for (int cx = qx0; cx <= qx1; ++cx) {
          std::vector<int>& list = grid_[static_cast<size_t>(cy) * gw + cx];
          size_t kept = 0;
          for (const int b : list) {
            if (region_parent_[b] != b) continue;  // absorbed: dropped from the list
            const Region& rb = regions_[b];
            if (b != a && interval_gap(ra.x0, ra.x1, rb.x0, rb.x1) <= gap &&
                interval_gap(ra.y0, ra.y1, rb.y0, rb.y1) <= gap) {
              ra.x0 = std::min(ra.x0, rb.x0);
              ra.y0 = std::min(ra.y0, rb.y0);
              ra.x1 = std::max(ra.x1, rb.x1);
              ra.y1 = std::max(ra.y1, rb.y1);
              ra.pixels += rb.pixels;
              ra.distance = std::min(ra.distance, rb.distance);
              region_parent_[b] = a;
              grew = true;
              continue;
            }
            list[kept++] = b;
          }
          list.resize(kept);
        }
      if (grew) list_region(a);
    }
  }
  objects_.clear();
  for (int a = 0; a < n; ++a) {
    const Region& g = regions_[a];
    if (region_parent_[a] != a || g.pixels < p.min_area || g.pixels > p.max_area) continue;
    objects_.push_back({g.x0, g.y0, g.x1 - g.x0 + 1, g.y1 - g.y0 + 1, g.distance, g.pixels, 0});
  }
  std::sort(objects_.begin(), objects_.end(), [](const Detection& a, const Detection& b) {
    if (a.pixels != b.pixels) return a.pixels > b.pixels;
    return a.y != b.y ? a.y < b.y : a.x < b.x;
  });
  return objects_;
}

// ---- tracks ----

double box_iou(double ax0, double ay0, double ax1, double ay1, double bx0, double by0, double bx1, double by1) {
  const double iw = std::min(ax1, bx1) - std::max(ax0, bx0), ih = std::min(ay1, by1) - std::max(ay0, by0);
  if (iw <= 0 || ih <= 0) return 0.0;
  const double inter = iw * ih;
  return inter / ((ax1 - ax0) * (ay1 - ay0) + (bx1 - bx0) * (by1 - by0) - inter);
}

void MotionTracker::reserve(size_t n) {
  tracks_.reserve(n);
  pairs_.reserve(n * 4);
  track_taken_.reserve(n);
  det_taken_.reserve(n);
}

void MotionTracker::update(std::vector<Detection>& dets, const TrackParams& p) {
  // predict: constant velocity
  for (Track& t : tracks_) {
    t.cx += t.vx;
    t.cy += t.vy;
  }
  // candidate pairs, best IoU first (ties: older track, larger object), taken greedily
  pairs_.clear();
  for (int k = 0; k < static_cast<int>(tracks_.size()); ++k) {
    const Track& t = tracks_[k];
    for (int d = 0; d < static_cast<int>(dets.size()); ++d) {
      const Detection& o = dets[d];
      const double iou =
          box_iou(t.cx - t.w / 2, t.cy - t.h / 2, t.cx + t.w / 2, t.cy + t.h / 2, o.x, o.y, o.x + o.w, o.y + o.h);
      if (iou >= p.min_iou && iou > 0) pairs_.push_back({iou, k, d});
    }
  }
  std::sort(pairs_.begin(), pairs_.end(), [](const Pair& a, const Pair& b) {
    if (a.iou != b.iou) return a.iou > b.iou;
    return a.track != b.track ? a.track < b.track : a.detection < b.detection;
  });
  track_taken_.assign(tracks_.size(), 0);
  det_taken_.assign(dets.size(), 0);
  for (const Pair& q : pairs_) {
    if (track_taken_[q.track] || det_taken_[q.detection]) continue;
    track_taken_[q.track] = det_taken_[q.detection] = 1;
    Track& t = tracks_[q.track];
    Detection& o = dets[q.detection];
    const double rx = (o.x + o.w / 2.0) - t.cx, ry = (o.y + o.h / 2.0) - t.cy;
    t.cx += p.alpha * rx;
    t.cy += p.alpha * ry;
    t.vx += p.beta * rx;
    t.vy += p.beta * ry;
    t.w += p.alpha * (o.w - t.w);
    t.h += p.alpha * (o.h - t.h);
    t.age = 0;
    ++t.hits;
    o.track_id = t.id;
  }
  // unmatched tracks coast; too old ones go (order kept: oldest first)
  size_t kept = 0;
  for (size_t k = 0; k < tracks_.size(); ++k) {
    Track t = tracks_[k];
    if (!track_taken_[k]) ++t.age;
    if (t.age <= p.max_age) tracks_[kept++] = t;
  }
  tracks_.resize(kept);
  // unmatched objects start tracks
  for (size_t d = 0; d < dets.size(); ++d) {
    if (det_taken_[d]) continue;
    Detection& o = dets[d];
    o.track_id = next_id_++;
    tracks_.push_back({o.track_id, o.x + o.w / 2.0, o.y + o.h / 2.0, double(o.w), double(o.h), 0.0, 0.0, 0, 1});
  }
}

}  // namespace prism::emd
