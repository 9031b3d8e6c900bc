// emdtracker's detections as objects and its tracks: whole objects, not the fragments of 8x8-cell
// groups it reported before (docs/benchmarks/emd.md has the difference on hand-checked people).
//
// Objects: the full-resolution on-target mask (distance <= threshold), labelled into 8-connected
// regions, then regions whose bounding boxes come within `merge_gap` pixels of each other joined
// (a person's EMD map is several blobs a few pixels apart: dark coat, legs, hair), then kept when
// their on-target pixels are within [min_area, max_area].
//
// Where the work runs: the mask is made per pixel on the CPU or on the GPU by the same function
// (one bit per pixel and, per 32-pixel row word, the smallest on-target distance); the GPU path
// downloads it (W x H / 4 bytes: 110 KB at 768x576, 518 KB at 1080p) and the labelling is host
// work on both paths, so they give the same objects by construction. The labelling walks runs of
// set bits (a run-based two-pass labelling with union-find, as He, Chao and Suzuki 2008 describe
// it): its cost grows with the runs, not the pixels, and an EMD mask is sparse. We chose this
// over a CUDA connected-components pass because the host work is small against the EMD map and the
// download is one small copy after the frame's sync, which the element waits for anyway.
//
// Tracks: each object is associated to a track by IoU against the track's predicted box (a
// constant-velocity alpha-beta filter on the box centre, size smoothed), greedily by IoU;
// unmatched tracks coast on their prediction and are dropped after `max_age` frames without a
// match; only unmatched objects start new tracks. Kalman's gains settle to an alpha-beta filter's
// for this motion model, so the fixed gains lose little and need no tuning per video.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/hostdevice.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::emd {

// One 32-pixel segment of a mask row: bit i is pixel 32 * word + i; the smallest distance of its
// on-target pixels (+infinity when none).
struct MaskWord {
  uint32_t bits;
  float min_distance;
};

inline int mask_words_per_row(int width) { return (width + 31) / 32; }

// A pixel is on target when its distance is at most the threshold (NaN: before the target is
// known, never).
PRISM_HD bool on_target(float d, float threshold) { return d <= threshold; }

// distances [height][width] -> words [height][mask_words_per_row(width)].
void make_mask_cpu(const float* distances, int width, int height, float threshold, MaskWord* words);
#if defined(PRISM_HAVE_CUDA)
void make_mask_cuda(const float* distances, int width, int height, float threshold, MaskWord* words,
                    cudaStream_t stream);
#endif

struct ObjectParams {
  int64_t min_area = 64;         // fewest on-target pixels of an object
  int64_t max_area = INT64_MAX;  // most on-target pixels of an object
  int merge_gap = 8;             // regions whose boxes are this close (pixels) are one object
};

struct Detection {
  int x, y, w, h;  // pixels
  float distance;  // the smallest EMD of its on-target pixels (see find())
  int64_t pixels;  // on-target pixels
  int64_t track_id;
};

// Labels a mask into objects; scratch is kept (reserved per size), so a frame allocates nothing
// once the scratch has reached its frame's needs.
class ObjectFinder {
 public:
  // Reserves the scratch for a width x height mask.
  void configure(int width, int height);
  // Objects of the mask, largest first (ties: top-left first); track_id 0. An object's distance is
  // the smallest of its words' minima: exact unless another object has on-target pixels in the same
  // 32-pixel row segment, which a merge_gap of 31 or more rules out.
  const std::vector<Detection>& find(const MaskWord* words, const ObjectParams& params);

 private:
  struct Run {
    int y, x0, x1;  // inclusive
    int parent;     // union-find over runs
  };
  struct Region {
    int x0, y0, x1, y1;  // inclusive
    float distance;
    int64_t pixels;
    int cx0, cx1, cy0, cy1;  // the grid cells it is listed in (the gap merge; empty: cx1 < cx0)
  };
  static constexpr int kCell = 32;  // pixels per side of the gap merge's grid cells (at least the gap)
  int find_root(std::vector<int>& parent, int i);
  int width_ = 0, height_ = 0;
  std::vector<Run> runs_;
  std::vector<int> run_parent_, run_region_;
  std::vector<int> region_parent_;  // the gap merge: the group a region joined (itself while it leads one)
  std::vector<Region> regions_;
  std::vector<std::vector<int>> grid_;  // per grid cell, the groups whose boxes reach it (scratch)
  std::vector<Detection> objects_;
};

struct TrackParams {
  int max_age = 5;       // frames a track coasts without a matching object before it is dropped
  double min_iou = 0.2;  // of an object with a track's predicted box to continue it
  double alpha = 0.6;    // position gain
  double beta = 0.3;     // velocity gain
};

// A track: its filtered box (after the frame's update, or the prediction while it coasts).
struct Track {
  int64_t id;
  double cx, cy, w, h;  // centre and size, pixels
  double vx, vy;        // pixels per frame
  int age;              // frames since it last had an object (0: matched this frame)
  int64_t hits;         // frames it had an object
};

class MotionTracker {
 public:
  // Gives each detection a track id (continuing a track or a new one) and updates the tracks.
  void update(std::vector<Detection>& detections, const TrackParams& params);
  const std::vector<Track>& tracks() const { return tracks_; }
  void reset() {
    tracks_.clear();
    next_id_ = 1;
  }
  // Scratch is kept across frames; reserve for this many tracks and detections.
  void reserve(size_t n);

 private:
  struct Pair {
    double iou;
    int track, detection;
  };
  std::vector<Track> tracks_;
  std::vector<Pair> pairs_;
  std::vector<char> track_taken_, det_taken_;
  int64_t next_id_ = 1;
};

// IoU of two boxes given by corners (x0, y0) inclusive to (x1, y1) exclusive.
double box_iou(double ax0, double ay0, double ax1, double ay1, double bx0, double by0, double bx1, double by1);

}  // namespace prism::emd
