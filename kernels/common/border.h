// Image borders shared by the kernels' CPU and CUDA paths.
#pragma once
#include "common/hostdevice.h"

namespace prism {

// OpenCV's BORDER_REFLECT_101 (borderInterpolate: ... 2 1 | 0 1 2 ... n-1 | n-2 ...), folding as
// often as a coordinate far outside a tiny image needs.
PRISM_HD int reflect101(int p, int len) {
  if (len == 1) return 0;
  while (p < 0 || p >= len) p = p < 0 ? -p : 2 * len - 2 - p;
  return p;
}

}  // namespace prism
