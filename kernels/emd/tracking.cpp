#include "emd/tracking.h"

#include <opencv2/core.hpp>

#include <algorithm>
#include <cmath>

namespace prism::emd {

void render_heatmap_cpu(const float* d, const uint8_t* grey, int64_t grey_stride, int width, int height,
                        const HeatmapParams& p, uint8_t* rgba, int64_t rgba_stride) {
  cv::parallel_for_(cv::Range(0, height), [&](const cv::Range& r) {
    for (int y = r.start; y < r.end; ++y)
      for (int x = 0; x < width; ++x)
        heat_pixel(d[static_cast<int64_t>(y) * width + x], grey ? grey[y * grey_stride + x] : uint8_t(0), p,
                   rgba + y * rgba_stride + 4 * x);
  });
}

void reduce_grid_cpu(const float* d, int width, int height, float threshold, GridCell* grid) {
  const int gw = grid_width(width), gh = grid_height(height);
  for (int gy = 0; gy < gh; ++gy)
    for (int gx = 0; gx < gw; ++gx) {
      GridCell c{0, INFINITY};
      for (int y = gy * kGridCell; y < std::min(height, (gy + 1) * kGridCell); ++y)
        for (int x = gx * kGridCell; x < std::min(width, (gx + 1) * kGridCell); ++x) {
          const float v = d[static_cast<int64_t>(y) * width + x];
          if (v <= threshold) ++c.hits;
          c.min_distance = std::min(c.min_distance, v);
        }
      grid[gy * gw + gx] = c;
    }
}

void draw_boxes_cpu(const std::vector<Box>& boxes, int width, int height, uint8_t* rgba, int64_t stride) {
  for (const Box& b : boxes)
    for (int y = std::max(0, b.y); y < std::min(height, b.y + b.h); ++y)
      for (int x = std::max(0, b.x); x < std::min(width, b.x + b.w); ++x)
        if (on_outline(b, x, y)) std::fill_n(rgba + y * stride + 4 * x, 4, uint8_t(255));
}

static double iou(const Detection& a, const Detection& b) {
  const int x0 = std::max(a.x, b.x), y0 = std::max(a.y, b.y);
  const int x1 = std::min(a.x + a.w, b.x + b.w), y1 = std::min(a.y + a.h, b.y + b.h);
  if (x1 <= x0 || y1 <= y0) return 0.0;
  const double inter = double(x1 - x0) * (y1 - y0);
  return inter / (double(a.w) * a.h + double(b.w) * b.h - inter);
}

std::vector<Detection> DetectionTracker::update(const GridCell* grid, int width, int height, int64_t min_pixels) {
  const int gw = grid_width(width), gh = grid_height(height);
  auto cell_pixels = [&](int gx, int gy) {
    return (std::min(width, (gx + 1) * kGridCell) - gx * kGridCell) *
           (std::min(height, (gy + 1) * kGridCell) - gy * kGridCell);
  };
  std::vector<int>& label = label_;
  std::vector<int>& stack = stack_;
  label.assign(static_cast<size_t>(gw) * gh, -1);
  std::vector<Detection> found;
  for (int start = 0; start < gw * gh; ++start) {
    const int sx = start % gw, sy = start / gw;
    if (label[start] >= 0 || 2 * grid[start].hits < cell_pixels(sx, sy)) continue;
    Detection det{sx, sy, sx, sy, INFINITY, 0, 0};  // x, y, x1, y1 in cells while growing
    label[start] = static_cast<int>(found.size());
    stack.assign(1, start);
    while (!stack.empty()) {
      const int c = stack.back();
      stack.pop_back();
      const int cx = c % gw, cy = c / gw;
      det.x = std::min(det.x, cx);
      det.y = std::min(det.y, cy);
      det.w = std::max(det.w, cx);
      det.h = std::max(det.h, cy);
      det.distance = std::min(det.distance, grid[c].min_distance);
      det.pixels += grid[c].hits;
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
          const int nx = cx + dx, ny = cy + dy;
          if (nx < 0 || ny < 0 || nx >= gw || ny >= gh) continue;
          const int nc = ny * gw + nx;
          if (label[nc] >= 0 || 2 * grid[nc].hits < cell_pixels(nx, ny)) continue;
          label[nc] = label[start];
          stack.push_back(nc);
        }
    }
    // cells -> pixels
    const int x1 = std::min(width, (det.w + 1) * kGridCell), y1 = std::min(height, (det.h + 1) * kGridCell);
    det.x *= kGridCell;
    det.y *= kGridCell;
    det.w = x1 - det.x;
    det.h = y1 - det.y;
    found.push_back(det);
  }
  found.erase(std::remove_if(found.begin(), found.end(), [&](const Detection& d) { return d.pixels < min_pixels; }),
              found.end());
  std::stable_sort(found.begin(), found.end(),
                   [](const Detection& a, const Detection& b) { return a.pixels > b.pixels; });
  std::vector<bool> taken(previous_.size(), false);
  for (Detection& d : found) {
    int best = -1;
    double best_iou = 0.2;
    for (size_t k = 0; k < previous_.size(); ++k)
      if (!taken[k] && iou(d, previous_[k]) >= best_iou) {
        best_iou = iou(d, previous_[k]);
        best = static_cast<int>(k);
      }
    if (best >= 0) {
      taken[best] = true;
      d.track_id = previous_[best].track_id;
    } else {
      d.track_id = next_id_++;
    }
  }
  previous_ = found;
  return found;
}

}  // namespace prism::emd
