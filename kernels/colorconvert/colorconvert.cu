// CUDA path of colorconvert: one thread per 2x2 destination block, running the same per-pixel
// code as the CPU path. The plan travels by value as a kernel parameter (no device allocation).
#include "colorconvert/colorconvert.h"
#include "colorconvert/colorconvert_pixel.h"
#include "common/gpu.h"

namespace prism::colorconvert {
namespace {

__global__ void convert_kernel(const Plan plan, const Image src, const Image dst) {
  const int bx = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  const int by = 2 * (blockIdx.y * blockDim.y + threadIdx.y);
  if (bx >= dst.width || by >= dst.height) return;
  detail::convert_block(plan, src, dst, bx, by);
}

}  // namespace

void convert_cuda(const Plan& plan, const Image& src, const Image& dst, cudaStream_t stream) {
  const dim3 block(32, 8);
  const dim3 grid(((dst.width + 1) / 2 + block.x - 1) / block.x, ((dst.height + 1) / 2 + block.y - 1) / block.y);
  convert_kernel<<<grid, block, 0, stream>>>(plan, src, dst);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace prism::colorconvert
