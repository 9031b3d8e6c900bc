#include "emd/tracking.h"

#include <opencv2/core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <utility>

namespace prism::emd {

void render_heatmap_cpu(const float* d, const uint8_t* grey, int64_t grey_stride, int width, int height,
                        const HeatmapParams& p, uint8_t* rgba, int64_t rgba_stride) {
  cv::parallel_for_(cv::Range(0, height), [&](const cv::Range& r) {
    for (int y = r.start; y < r.end; ++y)
      for (int x = 0; x < width; ++x) {
        uint8_t* px = rgba + y * rgba_stride + 4 * x;
        heat_pixel(d[static_cast<int64_t>(y) * width + x], grey ? grey[y * grey_stride + x] : uint8_t(0), p, px);
        legend_pixel(p.legend, x, y, px);
      }
  });
}

Legend legend_layout(int width, int height, float max_distance, float threshold) {
  Legend L;
  if (width < 160 || height < 60 || !(max_distance > 0.f) || !std::isfinite(max_distance)) return L;
  constexpr int kMargin = 6, kPad = 4, kBarHeight = 10, kGlyphHeight = 10, kGap = 4;
  const int bar_w = std::min(256, width - 2 * kMargin - 2 * kPad);
  L.on = true;
  L.max_distance = max_distance;
  L.panel_x0 = kMargin;
  L.panel_x1 = kMargin + 2 * kPad + bar_w;
  L.panel_y1 = height - kMargin;
  L.panel_y0 = L.panel_y1 - (kPad + kGlyphHeight + kGap + kBarHeight + kPad);
  L.bar_x0 = L.panel_x0 + kPad;
  L.bar_x1 = L.bar_x0 + bar_w;
  L.bar_y1 = L.panel_y1 - kPad;
  L.bar_y0 = L.bar_y1 - kBarHeight;
  const int label_y = L.bar_y0 - kGap - kGlyphHeight;
  auto label = [&](float v, int x, int align) {  // align: 0 left at x, 1 centred on x, 2 right at x
    LegendLabel l;
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", double(v));
    // Distances are not negative: 8 characters at most ("1.23e-05"); l.text is zeroed.
    std::memcpy(l.text, text, std::min(std::strlen(text), sizeof l.text));
    const int n = int(strnlen(l.text, sizeof l.text)), w = n * 8 - 2;
    l.x = align == 0 ? x : align == 1 ? x - w / 2 : x - w;
    l.x = std::clamp(l.x, L.bar_x0, L.bar_x1 - w);
    l.y = label_y;
    return std::make_pair(l, w);
  };
  const auto [zero, zw] = label(0.f, L.bar_x0, 0);
  const auto [top, tw] = label(max_distance, L.bar_x1, 2);
  L.labels[L.label_count++] = zero;
  L.labels[L.label_count++] = top;
  if (threshold >= 0.f && threshold <= max_distance) {
    L.tick_x = L.bar_x0 + int(std::lround(double(threshold) / max_distance * (bar_w - 1)));
    L.tick_x = std::min(L.tick_x, L.bar_x1 - 2);
    const auto [t, w] = label(threshold, L.tick_x + 1, 1);
    // Shown only where it leaves 6 pixels to the others.
    if (t.x >= zero.x + zw + 6 && t.x + w + 6 <= top.x) L.labels[L.label_count++] = t;
  }
  return L;
}

void draw_boxes_cpu(const std::vector<Box>& boxes, int width, int height, uint8_t* rgba, int64_t stride) {
  for (const Box& b : boxes)
    for (int y = std::max(0, b.y); y < std::min(height, b.y + b.h); ++y)
      for (int x = std::max(0, b.x); x < std::min(width, b.x + b.w); ++x)
        if (on_outline(b, x, y)) std::fill_n(rgba + y * stride + 4 * x, 4, uint8_t(255));
}

}  // namespace prism::emd
