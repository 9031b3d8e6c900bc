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

struct HeatmapParams {
  float max_distance;  // distances from 0 (red) to this (blue) and beyond
  float opacity;       // of the colour over the grey frame, 0..1
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
// boxes: device array of count boxes.
void draw_boxes_cuda(const Box* boxes, int count, int width, int height, uint8_t* rgba, int64_t rgba_stride,
                     cudaStream_t stream);
#endif

}  // namespace prism::emd
