// Per-pixel code of sharpness.h shared by its CPU loop and its CUDA kernel: both run this source.
// Not a public header: kernels/texture/sharpness.h is.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/border.h"
#include "common/hostdevice.h"

namespace prism::texture::detail {

// Throws std::invalid_argument, naming `who`, for what neither path measures: no pixels, a null
// image, a pitch under the width (sharpness.cpp).
void check_sharpness_image(const char* who, const uint8_t* grey, size_t pitch, int width, int height);

// cv::Laplacian's ksize-1 kernel (0 1 0 / 1 -4 1 / 0 1 0) on a pixel and its four neighbours.
PRISM_HD int laplacian(int centre, int up, int down, int left, int right) {
  return up + down + left + right - 4 * centre;
}

// The Laplacian at (x, y) of an 8-bit image, `pitch` bytes per row, neighbours outside the image
// mirrored as cv::Laplacian's default border does (BORDER_REFLECT_101; a side of one pixel is its
// own neighbour).
PRISM_HD int laplacian_at(const uint8_t* grey, size_t pitch, int width, int height, int x, int y) {
  const uint8_t* row = grey + size_t(y) * pitch;
  return laplacian(row[x], grey[size_t(reflect101(y - 1, height)) * pitch + x],
                   grey[size_t(reflect101(y + 1, height)) * pitch + x], row[reflect101(x - 1, width)],
                   row[reflect101(x + 1, width)]);
}

}  // namespace prism::texture::detail
