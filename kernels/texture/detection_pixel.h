// Per-pixel code of detection_image.h shared by its CPU loops and its CUDA kernels: both run this
// source, each float product and sum rounded on its own (no FMA contraction: __fmul_rn/__fadd_rn on
// the device, -ffp-contract=off on the host), so the two paths agree bit for bit.
// Not a public header: kernels/texture/detection_image.h is.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/grey.h"
#include "common/hostdevice.h"
#include "common/rounding.h"
#include "texture/detection_image.h"

namespace prism::texture::detail {

// An AreaPlan's tables where the pixel code reads them (host or device pointers).
struct AreaView {
  int block_x, block_y;
  float block_scale;
  const int32_t *x_begin, *y_begin;
  const AreaTap *x_taps, *y_taps;
};

// saturate_cast<uchar>(float): cvRound (to nearest, ties to even), then clamped.
PRISM_HD uint8_t saturate_u8(float v) {
  const int i = int(rintf(v));
  return uint8_t(i < 0 ? 0 : (i > 255 ? 255 : i));
}

// Destination pixel (dx, dy) of cv::resize(INTER_AREA) of 8-bit grey `src`.
PRISM_HD uint8_t area_pixel(const AreaView& v, const uint8_t* src, size_t pitch, int dx, int dy) {
  if (v.block_x > 0) {  // resizeAreaFast_: an integer sum per block
    const uint8_t* s = src + size_t(dy) * v.block_y * pitch + size_t(dx) * v.block_x;
    int sum = 0;
    for (int y = 0; y < v.block_y; ++y, s += pitch)
      for (int x = 0; x < v.block_x; ++x) sum += s[x];
    if (v.block_x == 2 && v.block_y == 2) return uint8_t((sum + 2) >> 2);  // ResizeAreaFastVec
    return saturate_u8(mul_rn(float(sum), v.block_scale));
  }
  // ResizeArea_Invoker: each source row's weighted sum, then the rows' weighted sum, in order.
  const int x0 = v.x_begin[dx], x1 = v.x_begin[dx + 1];
  const int y0 = v.y_begin[dy], y1 = v.y_begin[dy + 1];
  float sum = 0;
  for (int j = y0; j < y1; ++j) {
    const uint8_t* row = src + size_t(v.y_taps[j].src) * pitch;
    float buf = 0;
    for (int k = x0; k < x1; ++k) buf = add_rn(buf, mul_rn(float(row[v.x_taps[k].src]), v.x_taps[k].weight));
    const float t = mul_rn(v.y_taps[j].weight, buf);
    sum = j == y0 ? t : add_rn(sum, t);
  }
  return saturate_u8(sum);
}

// cv::cvtColor(COLOR_RGBA2GRAY) of one 8-bit pixel: BGR2GRAY's fixed point with R and B swapped.
PRISM_HD uint8_t grey_of_rgba(const uint8_t* p) { return grey_bgr(p[2], p[1], p[0]); }

}  // namespace prism::texture::detail
