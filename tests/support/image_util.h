// Host images with padded strides for the colorconvert tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "colorconvert/colorconvert.h"

namespace prism::test {

struct HostImage {
  colorconvert::Image view;
  std::vector<uint8_t> storage[3];
};

// Plane geometry: bytes per row (without padding) and rows.
inline void plane_geometry(colorconvert::PixelFormat f, int w, int h, int plane, int* row_bytes, int* rows) {
  using colorconvert::PixelFormat;
  const int cw = (w + 1) / 2, ch = (h + 1) / 2;
  *row_bytes = w;
  *rows = h;
  switch (f) {
    case PixelFormat::NV12:
      *row_bytes = plane == 0 ? w : 2 * cw;
      *rows = plane == 0 ? h : ch;
      break;
    case PixelFormat::I420:
      *row_bytes = plane == 0 ? w : cw;
      *rows = plane == 0 ? h : ch;
      break;
    case PixelFormat::RGBA:
    case PixelFormat::BGRA:
    case PixelFormat::RGBx:
    case PixelFormat::BGRx:
      *row_bytes = 4 * w;
      *rows = h;
      break;
    case PixelFormat::YUY2:
    case PixelFormat::UYVY:
      *row_bytes = 4 * cw;  // a pair per 4 bytes; an odd width's last pair is half used
      *rows = h;
      break;
    case PixelFormat::RGB:
    case PixelFormat::BGR:
      *row_bytes = 3 * w;
      *rows = h;
      break;
    case PixelFormat::GRAY8:
      *row_bytes = w;
      *rows = h;
      break;
  }
}

// An image whose rows are padded by `pad` bytes, filled with `fill`.
inline HostImage make_image(colorconvert::PixelFormat f, int w, int h, int pad = 7, uint8_t fill = 0xCD) {
  HostImage im;
  im.view.format = f;
  im.view.width = w;
  im.view.height = h;
  for (int p = 0; p < colorconvert::plane_count(f); ++p) {
    int rb, rows;
    plane_geometry(f, w, h, p, &rb, &rows);
    im.view.stride[p] = rb + pad;
    im.storage[p].assign(static_cast<size_t>(im.view.stride[p]) * rows, fill);
    im.view.plane[p] = im.storage[p].data();
  }
  return im;
}

inline void fill_random(HostImage& im, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(0, 255);
  for (auto& s : im.storage)
    for (auto& b : s) b = static_cast<uint8_t>(d(rng));
}

// Copies only the pixel bytes (not the padding) of every plane into one vector.
inline std::vector<uint8_t> pixels(const HostImage& im) {
  std::vector<uint8_t> out;
  for (int p = 0; p < colorconvert::plane_count(im.view.format); ++p) {
    int rb, rows;
    plane_geometry(im.view.format, im.view.width, im.view.height, p, &rb, &rows);
    for (int y = 0; y < rows; ++y) {
      const uint8_t* r = im.view.plane[p] + static_cast<size_t>(y) * im.view.stride[p];
      out.insert(out.end(), r, r + rb);
    }
  }
  return out;
}

}  // namespace prism::test
