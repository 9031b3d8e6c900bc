// From a per-pixel EMD map to what emdtracker shows: a false-colour heat map for viewing and box
// outlines, with a CPU and a CUDA path (the same per-pixel functions). The detections themselves
// (objects and tracks) are objects.h's.
#pragma once
#include <cstdint>
#include <vector>

#include "common/hostdevice.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::emd {

// The heat map's legend, in its bottom-left corner on a darkened panel: the colour ramp from
// distance 0 (left) to max_distance (right), a white tick at the threshold, and the three values
// above it in a 3x5 pixel font drawn at twice that size. Laid out once per frame on the host
// (legend_layout); drawn per pixel by both paths (legend_pixel), so they stay equal.
struct LegendLabel {
  int x = 0, y = 0;   // top-left of the first glyph
  char text[8] = {};  // digits, '.', '-', '+', 'e'; NUL-terminated unless 8 long
};
struct Legend {
  bool on = false;
  int panel_x0 = 0, panel_y0 = 0, panel_x1 = 0, panel_y1 = 0;  // [x0, x1) x [y0, y1)
  int bar_x0 = 0, bar_y0 = 0, bar_x1 = 0, bar_y1 = 0;
  int tick_x = -1;  // the threshold's column; -1: beyond the ramp
  float max_distance = 0.f;
  LegendLabel labels[3];
  int label_count = 0;
};
// The legend of a width x height heat map; off for frames under 160 x 60 pixels.
Legend legend_layout(int width, int height, float max_distance, float threshold);

struct HeatmapParams {
  float max_distance;  // distances from 0 (red) to this (blue) and beyond
  float opacity;       // of the colour over the grey frame, 0..1
  Legend legend{};     // drawn when legend.on
};

// Colour of a distance: a blue-cyan-green-yellow-red ramp (0 = red, max = blue); infinite or NaN
// (nothing to match) is black.
PRISM_HD void heat_colour(float d, float max_distance, uint8_t rgb[3]) {
  if (!(d == d) || d > 3.0e38f) {
    rgb[0] = rgb[1] = rgb[2] = 0;
    return;
  }
  float t = max_distance > 0.f ? 1.f - d / max_distance : 1.f;  // 1 = close to the target
  t = t < 0.f ? 0.f : (t > 1.f ? 1.f : t);
  const float x = 4.f * t;  // 0 blue, 1 cyan, 2 green, 3 yellow, 4 red
  float r, g, b;
  if (x < 1.f) {
    r = 0.f;
    g = x;
    b = 1.f;
  } else if (x < 2.f) {
    r = 0.f;
    g = 1.f;
    b = 2.f - x;
  } else if (x < 3.f) {
    r = x - 2.f;
    g = 1.f;
    b = 0.f;
  } else {
    r = 1.f;
    g = 4.f - x;
    b = 0.f;
  }
  rgb[0] = static_cast<uint8_t>(r * 255.f + 0.5f);
  rgb[1] = static_cast<uint8_t>(g * 255.f + 0.5f);
  rgb[2] = static_cast<uint8_t>(b * 255.f + 0.5f);
}

// RGBA pixel: heat colour blended over the grey value.
PRISM_HD void heat_pixel(float d, uint8_t grey, const HeatmapParams& p, uint8_t* rgba) {
  uint8_t c[3];
  heat_colour(d, p.max_distance, c);
  const float a = p.opacity;
  for (int k = 0; k < 3; ++k) rgba[k] = static_cast<uint8_t>(a * c[k] + (1.f - a) * grey + 0.5f);
  rgba[3] = 255;
}

// A glyph of the legend's font: 5 rows of 3 bits, the top row in bits 14..12, the left column the
// highest bit of its row; 0 for a character the font lacks.
PRISM_HD uint16_t legend_glyph(char c) {
  switch (c) {
    case '0': return 0x7B6F;  // 111 101 101 101 111
    case '1': return 0x2C97;  // 010 110 010 010 111
    case '2': return 0x73E7;  // 111 001 111 100 111
    case '3': return 0x73CF;  // 111 001 111 001 111
    case '4': return 0x5BC9;  // 101 101 111 001 001
    case '5': return 0x79CF;  // 111 100 111 001 111
    case '6': return 0x79EF;  // 111 100 111 101 111
    case '7': return 0x7249;  // 111 001 001 001 001
    case '8': return 0x7BEF;  // 111 101 111 101 111
    case '9': return 0x7BCF;  // 111 101 111 001 111
    case '.': return 0x0002;  // 000 000 000 000 010
    case '-': return 0x01C0;  // 000 000 111 000 000
    case '+': return 0x05D0;  // 000 010 111 010 000
    case 'e': return 0x7BE7;  // 111 101 111 100 111
    default: return 0;
  }
}

// Whether (x, y) is a lit pixel of `l` (glyphs 6 x 10 pixels, 8 apart).
PRISM_HD bool legend_label_pixel(const LegendLabel& l, int x, int y) {
  const int dx = x - l.x, dy = y - l.y;
  if (dx < 0 || dy < 0 || dy >= 10) return false;
  const int i = dx / 8, col = (dx % 8) / 2, row = dy / 2;
  if (i >= 8 || col >= 3 || l.text[i] == 0) return false;
  for (int k = 0; k < i; ++k)
    if (l.text[k] == 0) return false;
  return (legend_glyph(l.text[i]) >> ((4 - row) * 3 + (2 - col))) & 1;
}

// Draws the legend's pixel (x, y) over the heat map's `rgba` there, if it is the legend's. Integer
// arithmetic except the ramp's colours, which are heat_colour's as in the map itself.
PRISM_HD void legend_pixel(const Legend& L, int x, int y, uint8_t* rgba) {
  if (!L.on || x < L.panel_x0 || x >= L.panel_x1 || y < L.panel_y0 || y >= L.panel_y1) return;
  const bool tick = L.tick_x >= 0 && (x == L.tick_x || x == L.tick_x + 1) && y >= L.bar_y0 - 3 && y < L.bar_y1;
  bool white = tick;
  for (int k = 0; k < L.label_count && !white; ++k) white = legend_label_pixel(L.labels[k], x, y);
  if (white) {
    rgba[0] = rgba[1] = rgba[2] = 255;
  } else if (x >= L.bar_x0 && x < L.bar_x1 && y >= L.bar_y0 && y < L.bar_y1) {
    const int n = L.bar_x1 - L.bar_x0;
    heat_colour(L.max_distance * float(x - L.bar_x0) / float(n > 1 ? n - 1 : 1), L.max_distance, rgba);
  } else {
    for (int k = 0; k < 3; ++k) rgba[k] = uint8_t((rgba[k] * 3 + 5) / 10);  // the panel: 30% of the map
  }
  rgba[3] = 255;
}

// Views of frames: distances [height][width] contiguous; grey with its stride (null: black, for
// input that has no picture of its own, such as a multispectral cube); rgba with its stride.
void render_heatmap_cpu(const float* distances, const uint8_t* grey, int64_t grey_stride, int width, int height,
                        const HeatmapParams& p, uint8_t* rgba, int64_t rgba_stride);
#if defined(PRISM_HAVE_CUDA)
void render_heatmap_cuda(const float* distances, const uint8_t* grey, int64_t grey_stride, int width, int height,
                         const HeatmapParams& p, uint8_t* rgba, int64_t rgba_stride, cudaStream_t stream);
#endif

// White 2-pixel outlines of boxes (x, y, w, h in pixels, clipped) on an RGBA frame.
struct Box {
  int x, y, w, h;
};
PRISM_HD bool on_outline(const Box& b, int x, int y) {
  if (x < b.x || y < b.y || x >= b.x + b.w || y >= b.y + b.h) return false;
  return x < b.x + 2 || y < b.y + 2 || x >= b.x + b.w - 2 || y >= b.y + b.h - 2;
}
void draw_boxes_cpu(const std::vector<Box>& boxes, int width, int height, uint8_t* rgba, int64_t rgba_stride);
#if defined(PRISM_HAVE_CUDA)
// boxes: device array of count boxes, none wider than max_width nor taller than max_height (the
// grid covers that much of each box, not the frame).
void draw_boxes_cuda(const Box* boxes, int count, int max_width, int max_height, int width, int height, uint8_t* rgba,
                     int64_t rgba_stride, cudaStream_t stream);
#endif

}  // namespace prism::emd
