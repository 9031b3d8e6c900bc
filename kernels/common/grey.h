// OpenCV's fixed-point BGR -> grey (cvtColor COLOR_BGR2GRAY on 8-bit data, bit for bit): the
// coefficients 0.114, 0.587, 0.299 scaled by 2^15 and rounded. Shared by poisson's
// MONOCHROME_TRANSFER and the image loader's grey masks, on the CPU and in CUDA kernels.
#pragma once

#include <cstdint>

#include "common/hostdevice.h"

namespace prism {

PRISM_HD uint8_t grey_bgr(int b, int g, int r) {
  return static_cast<uint8_t>((b * 3735 + g * 19235 + r * 9798 + 16384) >> 15);
}

}  // namespace prism
