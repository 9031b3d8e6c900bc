// Per-pixel code shared by the CPU path and the CUDA kernel. Integer arithmetic only, so both
// paths produce identical bytes.
#pragma once

#include "colorconvert/colorconvert.h"
#include "common/hostdevice.h"

namespace prism::colorconvert::detail {

PRISM_HD int clamp_u8(int v) { return v < 0 ? 0 : (v > 255 ? 255 : v); }

// Byte layout of a packed RGB format: bytes per pixel, the offsets of R, G and B, and of the fourth
// byte (-1: none), which is alpha or padding (read as 255, written as 255).
struct PackedRgb {
  int bytes, r, g, b, a;
  bool alpha;
};
PRISM_HD PackedRgb packed_rgb(PixelFormat f) {
  switch (f) {
    case PixelFormat::RGBA: return {4, 0, 1, 2, 3, true};
    case PixelFormat::BGRA: return {4, 2, 1, 0, 3, true};
    case PixelFormat::RGBx: return {4, 0, 1, 2, 3, false};
    case PixelFormat::BGRx: return {4, 2, 1, 0, 3, false};
    case PixelFormat::RGB: return {3, 0, 1, 2, -1, false};
    default: return {3, 2, 1, 0, -1, false};  // BGR
  }
}

// Source components at integer pixel (x, y): R,G,B,A for RGB formats, Y,U,V,255 for YUV
// formats and GRAY8 (U = V = 128). 4:2:0 chroma is replicated over its 2x2 block, 4:2:2 chroma over
// its pixel pair.
PRISM_HD void fetch(const Image& im, int x, int y, int c[4]) {
  const uint8_t* row = im.plane[0] + static_cast<int64_t>(y) * im.stride[0];
  switch (im.format) {
    case PixelFormat::NV12: {
      const uint8_t* uv = im.plane[1] + static_cast<int64_t>(y >> 1) * im.stride[1] + (x >> 1) * 2;
      c[0] = row[x];
      c[1] = uv[0];
      c[2] = uv[1];
      c[3] = 255;
      break;
    }
    case PixelFormat::I420: {
      c[0] = row[x];
      c[1] = im.plane[1][static_cast<int64_t>(y >> 1) * im.stride[1] + (x >> 1)];
      c[2] = im.plane[2][static_cast<int64_t>(y >> 1) * im.stride[2] + (x >> 1)];
      c[3] = 255;
      break;
    }
    case PixelFormat::YUY2:
    case PixelFormat::UYVY: {
      const uint8_t* p = row + 4 * (x >> 1);  // Y0 U Y1 V, or U Y0 V Y1
      const int yuy2 = im.format == PixelFormat::YUY2;
      c[0] = p[yuy2 ? 2 * (x & 1) : 1 + 2 * (x & 1)];
      c[1] = p[yuy2 ? 1 : 0];
      c[2] = p[yuy2 ? 3 : 2];
      c[3] = 255;
      break;
    }
    case PixelFormat::RGBA:
    case PixelFormat::BGRA:
    case PixelFormat::RGBx:
    case PixelFormat::BGRx:
    case PixelFormat::RGB:
    case PixelFormat::BGR: {
      const PackedRgb k = packed_rgb(im.format);
      const uint8_t* p = row + k.bytes * x;
      c[0] = p[k.r];
      c[1] = p[k.g];
      c[2] = p[k.b];
      c[3] = k.alpha ? p[k.a] : 255;
      break;
    }
    case PixelFormat::GRAY8:
      c[0] = row[x];
      c[1] = 128;
      c[2] = 128;
      c[3] = 255;
      break;
  }
}

PRISM_HD int64_t floor_div(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// Source position (16.16) of destination pixel centre i on an axis of src_len -> dst_len.
PRISM_HD int64_t source_centre(int i, int src_len, int dst_len) {
  return (static_cast<int64_t>(2 * i + 1) * src_len * 65536) / (2 * static_cast<int64_t>(dst_len)) - 32768;
}

// Tent-filtered source components at destination pixel (dx, dy).
PRISM_HD void sample(const Plan& p, const Image& src, int dx, int dy, int out[4]) {
  if (!p.scaled) {
    fetch(src, dx, dy, out);
    return;
  }
  const int64_t cx = source_centre(dx, p.src_width, p.dst_width);
  const int64_t cy = source_centre(dy, p.src_height, p.dst_height);
  const int64_t x0 = floor_div(cx - p.radius_x, 65536) + 1, x1 = floor_div(cx + p.radius_x, 65536);
  const int64_t y0 = floor_div(cy - p.radius_y, 65536) + 1, y1 = floor_div(cy + p.radius_y, 65536);
  int64_t acc[4] = {0, 0, 0, 0};
  int64_t total = 0;
  for (int64_t yi = y0; yi <= y1; ++yi) {
    int64_t dy_ = yi * 65536 - cy;
    if (dy_ < 0) dy_ = -dy_;
    if (dy_ >= p.radius_y) continue;
    const int64_t wy = (p.radius_y - dy_) >> p.weight_shift_y;
    if (wy == 0) continue;
    const int sy = static_cast<int>(yi < 0 ? 0 : (yi >= p.src_height ? p.src_height - 1 : yi));
    int64_t row[4] = {0, 0, 0, 0};
    int64_t row_total = 0;
    for (int64_t xi = x0; xi <= x1; ++xi) {
      int64_t dx_ = xi * 65536 - cx;
      if (dx_ < 0) dx_ = -dx_;
      if (dx_ >= p.radius_x) continue;
      const int64_t wx = (p.radius_x - dx_) >> p.weight_shift_x;
      if (wx == 0) continue;
      const int sx = static_cast<int>(xi < 0 ? 0 : (xi >= p.src_width ? p.src_width - 1 : xi));
      int c[4] = {0, 0, 0, 0};
      fetch(src, sx, sy, c);
      for (int k = 0; k < 4; ++k) row[k] += wx * c[k];
      row_total += wx;
    }
    for (int k = 0; k < 4; ++k) acc[k] += wy * row[k];
    total += wy * row_total;
  }
  for (int k = 0; k < 4; ++k) out[k] = static_cast<int>((acc[k] + total / 2) / total);
}

PRISM_HD void apply_matrix(const Plan& p, int c[4]) {
  if (p.identity_matrix) return;
  int r[3];
  for (int i = 0; i < 3; ++i)
    r[i] = clamp_u8((p.matrix[i][0] * c[0] + p.matrix[i][1] * c[1] + p.matrix[i][2] * c[2] + p.matrix[i][3]) >> 8);
  c[0] = r[0];
  c[1] = r[1];
  c[2] = r[2];
}

// Writes the 2x2 destination block whose top-left pixel is (bx, by).
PRISM_HD void convert_block(const Plan& p, const Image& src, const Image& dst, int bx, int by) {
  int u_sum = 0, v_sum = 0, n = 0;
  for (int j = 0; j < 2; ++j) {
    const int y = by + j;
    if (y >= dst.height) break;
    uint8_t* row = dst.plane[0] + static_cast<int64_t>(y) * dst.stride[0];
    int pair_u = 0, pair_v = 0, pair_n = 0;  // 4:2:2: this row's pair
    for (int i = 0; i < 2; ++i) {
      const int x = bx + i;
      if (x >= dst.width) break;
      int c[4] = {0, 0, 0, 0};
      sample(p, src, x, y, c);
      apply_matrix(p, c);
      switch (dst.format) {
        case PixelFormat::NV12:
        case PixelFormat::I420:
          row[x] = static_cast<uint8_t>(c[0]);
          u_sum += c[1];
          v_sum += c[2];
          ++n;
          break;
        case PixelFormat::YUY2:
        case PixelFormat::UYVY:
          row[4 * (x >> 1) + (dst.format == PixelFormat::YUY2 ? 2 * (x & 1) : 1 + 2 * (x & 1))] =
              static_cast<uint8_t>(c[0]);
          pair_u += c[1];
          pair_v += c[2];
          ++pair_n;
          break;
        case PixelFormat::RGBA:
        case PixelFormat::BGRA:
        case PixelFormat::RGBx:
        case PixelFormat::BGRx:
        case PixelFormat::RGB:
        case PixelFormat::BGR: {
          const PackedRgb k = packed_rgb(dst.format);
          uint8_t* q = row + k.bytes * x;
          q[k.r] = static_cast<uint8_t>(c[0]);
          q[k.g] = static_cast<uint8_t>(c[1]);
          q[k.b] = static_cast<uint8_t>(c[2]);
          if (k.a >= 0) q[k.a] = static_cast<uint8_t>(k.alpha ? c[3] : 255);
          break;
        }
        case PixelFormat::GRAY8: row[x] = static_cast<uint8_t>(c[0]); break;
      }
    }
    if (pair_n > 0) {  // 4:2:2: the pair's chroma, rounded as 4:2:0's
      uint8_t* q = row + 4 * (bx >> 1);
      const int yuy2 = dst.format == PixelFormat::YUY2;
      q[yuy2 ? 1 : 0] = static_cast<uint8_t>((pair_u + pair_n / 2) / pair_n);
      q[yuy2 ? 3 : 2] = static_cast<uint8_t>((pair_v + pair_n / 2) / pair_n);
      if (pair_n == 1) q[yuy2 ? 2 : 3] = q[yuy2 ? 0 : 1];  // an odd width's last pair: Y1 repeats Y0
    }
  }
  if (n == 0) return;
  const int cx = bx >> 1, cy = by >> 1;
  const uint8_t u = static_cast<uint8_t>((u_sum + n / 2) / n);
  const uint8_t v = static_cast<uint8_t>((v_sum + n / 2) / n);
  if (dst.format == PixelFormat::NV12) {
    uint8_t* q = dst.plane[1] + static_cast<int64_t>(cy) * dst.stride[1] + 2 * cx;
    q[0] = u;
    q[1] = v;
  } else if (dst.format == PixelFormat::I420) {
    dst.plane[1][static_cast<int64_t>(cy) * dst.stride[1] + cx] = u;
    dst.plane[2][static_cast<int64_t>(cy) * dst.stride[2] + cx] = v;
  }
}

}  // namespace prism::colorconvert::detail
