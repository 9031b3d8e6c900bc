// Float arithmetic rounded once per operation on both paths. The CPU path and OpenCV round each
// product and sum separately (as each intermediate Mat is stored); nvcc would otherwise contract
// a * b + c into one FMA and change the last bit, so the CUDA path says each rounding explicitly.
// One set for every per-pixel header (poisson_pixel.h, detection_pixel.h, normalise_pixel.h).
#pragma once

#include "common/hostdevice.h"

namespace prism {

PRISM_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
PRISM_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
PRISM_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
// a / b rounded once (CUDA's default division is IEEE too; said here so that no flag changes it).
PRISM_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace prism
