// Per-pixel parts of the seamless clone shared by the CPU path and the CUDA kernels, so both
// evaluate the same float expressions in the same order as OpenCV 4.6 (seamless_cloning_impl.cpp).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/hostdevice.h"
#include "common/rounding.h"
#include "poisson/seamless_clone.h"

namespace prism::poisson::detail {

// The solve's geometry for one job: box size W x H (including the 1-pixel Dirichlet frame), its
// top-left corner in the overlay (sx, sy) and in the background (dx, dy).
struct Geometry {
  int W, H;
  int sx, sy;
  int dx, dy;
};

// Mask value at overlay pixel (x, y), with the mask's outermost frame read as 0 (OpenCV zeroes it).
PRISM_HD int mask_at(const MaskView& m, int x, int y) {
  if (x <= 0 || y <= 0 || x >= m.width - 1 || y >= m.height - 1) return 0;
  return m.data[y * m.stride + static_cast<int64_t>(x) * m.step];
}

// Channel offset within a pixel of OpenCV's BGR channel c (0 = B, 1 = G, 2 = R).
PRISM_HD int channel_offset(const PackedImage& im, int c) { return c == 0 ? im.b : (c == 1 ? im.g : im.r); }

// Background ROI value, channel c, at box pixel (x, y).
PRISM_HD float bg_at(const PackedImage& bg, const Geometry& g, int x, int y, int c) {
  return bg.data[(g.dy + y) * bg.stride + static_cast<int64_t>(g.dx + x) * bg.channels + channel_offset(bg, c)];
}

// Masked patch value (overlay where the mask is non-zero, else 0). For MONOCHROME_TRANSFER the
// patch's grey (cvtColor BGR2GRAY's fixed point) on every channel.
PRISM_HD float patch_at(const PackedImage& ov, const MaskView& m, const Geometry& g, int x, int y, int c,
                        CloneMode mode) {
  const int ox = g.sx + x, oy = g.sy + y;
  if (mask_at(m, ox, oy) == 0) return 0.f;
  const uint8_t* p = ov.data + oy * ov.stride + static_cast<int64_t>(ox) * ov.channels;
  if (mode == CloneMode::MonochromeTransfer) return grey_bgr(p[ov.b], p[ov.g], p[ov.r]);
  return p[channel_offset(ov, c)];
}

// The guidance field's x and y components at box pixel (x, y) for channel c (step 5), given the
// eroded mask value e there. Only called with x < W-1 and y < H-1 for the component it needs; the
// other component is computed too because MIXED compares them.
struct Field {
  float x, y;
};
PRISM_HD Field field_at(const PackedImage& bg, const PackedImage& ov, const MaskView& m, const Geometry& g, int x,
                        int y, int c, int e, CloneMode mode) {
  const float m_w = mul_rn(static_cast<float>(e), 1.0f / 255.0f);
  const float m_inv = mul_rn(static_cast<float>(255 - e), 1.0f / 255.0f);
  // Forward differences; at the last column/row OpenCV reflects (value irrelevant to the RHS).
  const int x1 = x + 1 < g.W ? x + 1 : x - 1, y1 = y + 1 < g.H ? y + 1 : y - 1;
  const float d0 = bg_at(bg, g, x, y, c);
  const float dgx = bg_at(bg, g, x1, y, c) - d0, dgy = bg_at(bg, g, x, y1, c) - d0;
  const float p0 = patch_at(ov, m, g, x, y, c, mode);
  const float pgx = patch_at(ov, m, g, x1, y, c, mode) - p0, pgy = patch_at(ov, m, g, x, y1, c, mode) - p0;
  float fx, fy;
  if (mode == CloneMode::Mixed && !(fabsf(pgx - pgy) > fabsf(dgx - dgy))) {
    fx = mul_rn(dgx, m_w);
    fy = mul_rn(dgy, m_w);
  } else {
    fx = mul_rn(pgx, m_w);
    fy = mul_rn(pgy, m_w);
  }
  return {add_rn(mul_rn(dgx, m_inv), fx), add_rn(mul_rn(dgy, m_inv), fy)};
}

// Background sum over the frame neighbours of interior pixel (x, y): OpenCV's Laplacian of the ROI
// with its interior zeroed (exact in float: a sum of at most four bytes).
PRISM_HD float frame_neighbours(const PackedImage& bg, const Geometry& g, int x, int y, int c) {
  float s = 0.f;
  if (x == 1) s += bg_at(bg, g, 0, y, c);
  if (x == g.W - 2) s += bg_at(bg, g, g.W - 1, y, c);
  if (y == 1) s += bg_at(bg, g, x, 0, c);
  if (y == g.H - 2) s += bg_at(bg, g, x, g.H - 1, c);
  return s;
}

// Step 6 at interior box pixel (x, y), channel c: backward-difference divergence of the field minus
// the frame's contribution. `eroded(x, y)` gives the 7x7-eroded mask at box pixel (x, y).
template <class Eroded>
PRISM_HD float rhs_at(const PackedImage& bg, const PackedImage& ov, const MaskView& m, const Geometry& g, int x, int y,
                      int c, CloneMode mode, const Eroded& eroded) {
  const Field f = field_at(bg, ov, m, g, x, y, c, eroded(x, y), mode);
  const Field left = field_at(bg, ov, m, g, x - 1, y, c, eroded(x - 1, y), mode);
  const Field up = field_at(bg, ov, m, g, x, y - 1, c, eroded(x, y - 1), mode);
  const float lap = add_rn(f.x - left.x, f.y - up.y);
  return lap - frame_neighbours(bg, g, x, y, c);
}

// Step 4 at box pixel (x, y): 7x7 minimum of the mask with zeros outside the box.
PRISM_HD int eroded_at(const MaskView& m, const Geometry& g, int x, int y) {
  if (x < 3 || y < 3 || x > g.W - 4 || y > g.H - 4) return 0;
  int v = 255;
  for (int j = -3; j <= 3; ++j)
    for (int i = -3; i <= 3; ++i) {
      const int a = mask_at(m, g.sx + x + i, g.sy + y + j);
      v = a < v ? a : v;
    }
  return v;
}

// Eigenvalue denominators: filter[i] = 2.0f * (float)cos(pi/(n+1) * (i+1)), as OpenCV's
// initVariables (the division uses (fx[i] + fy[j]) - 4 in float).
inline void dst_filter(int n, float* out) {
  const double scale = 3.14159265358979323846 / (n + 1);
  for (int i = 0; i < n; ++i) out[i] = 2.0f * static_cast<float>(std::cos(scale * (i + 1)));
}

// Step 8: clamp and truncate (float on the CPU path as OpenCV; double on the CUDA path).
template <class T>
PRISM_HD uint8_t to_u8_truncate(T v) {
  if (v < T(0)) return 0;
  if (v > T(255)) return 255;
  return static_cast<uint8_t>(v);
}

}  // namespace prism::poisson::detail
