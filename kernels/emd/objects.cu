// CUDA path of the on-target mask (objects.h): one warp per 32-pixel row word, its bits by a
// ballot and its smallest on-target distance by a shuffle reduction.
#include "common/gpu.h"
#include "emd/objects.h"

namespace prism::emd {
namespace {

__global__ void mask_kernel(const float* d, int width, int height, float threshold, MaskWord* words, int wpr) {
  const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (y >= height) return;  // whole warps: blockDim.x is 32
  const float v = x < width ? d[static_cast<int64_t>(y) * width + x] : NAN;
  const bool on = on_target(v, threshold);
  const unsigned bits = __ballot_sync(0xffffffffu, on);
  float m = on ? v : INFINITY;
  for (int s = 16; s > 0; s >>= 1) m = fminf(m, __shfl_xor_sync(0xffffffffu, m, s));
  if (threadIdx.x == 0) words[static_cast<int64_t>(y) * wpr + blockIdx.x] = MaskWord{bits, m};
}

}  // namespace

void make_mask_cuda(const float* d, int width, int height, float threshold, MaskWord* words, cudaStream_t stream) {
  const int wpr = mask_words_per_row(width);
  mask_kernel<<<dim3(wpr, (height + 7) / 8), dim3(32, 8), 0, stream>>>(d, width, height, threshold, words, wpr);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace prism::emd
