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

void draw_boxes_cpu(const std::vector<Box>& boxes, int width, int height, uint8_t* rgba, int64_t stride) {
  for (const Box& b : boxes)
    for (int y = std::max(0, b.y); y < std::min(height, b.y + b.h); ++y)
      for (int x = std::max(0, b.x); x < std::min(width, b.x + b.w); ++x)
        if (on_outline(b, x, y)) std::fill_n(rgba + y * stride + 4 * x, 4, uint8_t(255));
}

}  // namespace prism::emd
