// The per-tile and per-pixel arithmetic of CLAHE (contrast-limited adaptive histogram equalisation,
// Zuiderveld, "Contrast Limited Adaptive Histogram Equalization", Graphics Gems IV, 1994), shared by
// the CPU path (normalise.cpp) and a CUDA kernel, so that both compute the same bits. It follows
// what OpenCV 4.6's cv::CLAHE computes on 8-bit images: the clip limit and its redistribution in
// integers, the LUT as round-half-even(float(cumulative count) x float(255 / tile area)), and the
// bilinear blend of the four nearest tiles' LUTs in float, in one fixed order of single roundings
// (no fused multiply-add: the host builds with -ffp-contract=off, the device uses _rn intrinsics).
#pragma once

#include <cstdint>

#include "common/hostdevice.h"
#include "common/rounding.h"

namespace prism::texture {

// Round half to even and saturate to 0..255 (cv::saturate_cast<uchar>(float) in the default
// rounding mode). The values here are never NaN.
PRISM_HD uint8_t clahe_round_u8(float v) {
#if defined(__CUDA_ARCH__)
  const int r = __float2int_rn(v);
#else
  const int r = int(__builtin_rintf(v));
#endif
  return uint8_t(r < 0 ? 0 : r > 255 ? 255 : r);
}

// The clip limit in pixels per grey level for a tile of `area` pixels: OpenCV's
// int(clip x area / 256), at least 1; 0 (no clipping) when `clip` is not positive.
PRISM_HD int clahe_clip_count(double clip, int area) {
  if (clip <= 0) return 0;
  const int c = int(clip * area / 256);
  return c < 1 ? 1 : c;
}

// OpenCV's LUT scale for a tile of `area` pixels: float(255) / float(area).
PRISM_HD float clahe_lut_scale(int area) { return div_rn(255.0f, float(area)); }
// The reciprocal of a tile side, as the blend uses it: float(1) / float(size).
PRISM_HD float clahe_inv_size(int size) { return div_rn(1.0f, float(size)); }

// A grid's tiles, clip count and scales for a width x height image. The histograms' image: when a
// side does not divide into the grid, OpenCV pads both sides by (tiles - side % tiles), so a side
// that did divide gains a whole extra row or column of tiles' worth.
struct ClaheGeometry {
  int tile_w, tile_h, clip_count;
  float lut_scale, inv_w, inv_h;
};
PRISM_HD ClaheGeometry clahe_geometry(int width, int height, double clip, int tiles_x, int tiles_y) {
  const bool pad = width % tiles_x != 0 || height % tiles_y != 0;
  const int ext_w = pad ? width + tiles_x - width % tiles_x : width;
  const int ext_h = pad ? height + tiles_y - height % tiles_y : height;
  const int tw = ext_w / tiles_x, th = ext_h / tiles_y;
  return {tw, th, clahe_clip_count(clip, tw * th), clahe_lut_scale(tw * th), clahe_inv_size(tw), clahe_inv_size(th)};
}

// One tile's histogram `hist` (256 counts, changed in place) clipped at `clip_count` with the
// excess spread over all levels (the remainder one level at a time, every 256/remainder-th level
// from 0), then its equalising LUT.
PRISM_HD void clahe_tile_lut(int* hist, int clip_count, float lut_scale, uint8_t* lut) {
  if (clip_count > 0) {
    int clipped = 0;
    for (int i = 0; i < 256; ++i)
      if (hist[i] > clip_count) {
        clipped += hist[i] - clip_count;
        hist[i] = clip_count;
      }
    const int batch = clipped / 256;
    int residual = clipped - batch * 256;
    for (int i = 0; i < 256; ++i) hist[i] += batch;
    if (residual != 0) {
      const int step = 256 / residual > 1 ? 256 / residual : 1;
      for (int i = 0; i < 256 && residual > 0; i += step, --residual) ++hist[i];
    }
  }
  int sum = 0;
  for (int i = 0; i < 256; ++i) {
    sum += hist[i];
    lut[i] = clahe_round_u8(mul_rn(float(sum), lut_scale));
  }
}

// Where a pixel coordinate `p` falls between tile centres along one axis of `tiles` tiles of
// `inv_size` = float(1 / tile size): the lower and upper tile (clamped to the grid) and the weight
// of the upper one.
struct ClaheAxis {
  int lo, hi;
  float w;
};
PRISM_HD ClaheAxis clahe_axis(int p, float inv_size, int tiles) {
  const float t = sub_rn(mul_rn(float(p), inv_size), 0.5f);
  int lo = int(t);
  if (float(lo) > t) --lo;  // floor
  ClaheAxis a{lo, lo + 1, sub_rn(t, float(lo))};
  if (a.lo < 0) a.lo = 0;
  if (a.hi > tiles - 1) a.hi = tiles - 1;
  return a;
}

// One output pixel: the four LUT values of its grey level in the tiles around it (top-left,
// top-right, bottom-left, bottom-right), blended as
// ((tl x (1-wx) + tr x wx) x (1-wy) + (bl x (1-wx) + br x wx) x wy), rounded.
PRISM_HD uint8_t clahe_blend(int tl, int tr, int bl, int br, float wx, float wy) {
  const float wx1 = sub_rn(1.0f, wx), wy1 = sub_rn(1.0f, wy);
  const float top = add_rn(mul_rn(float(tl), wx1), mul_rn(float(tr), wx));
  const float bottom = add_rn(mul_rn(float(bl), wx1), mul_rn(float(br), wx));
  return clahe_round_u8(add_rn(mul_rn(top, wy1), mul_rn(bottom, wy)));
}

}  // namespace prism::texture
