#include "common/copy_rows.h"

#include <stdexcept>

#include "common/gpu.h"

namespace prism::gpu {
namespace {

constexpr int kThreads = 512;

// Grid-stride over the 16-byte pieces of the rows: consecutive threads read consecutive pieces of a
// row, so each warp's loads are 512 contiguous bytes, as PCIe reads them best.
__global__ void copy_rows_kernel(uint4* dst, size_t dst_pitch16, const uint4* __restrict__ src, size_t src_pitch16,
                                 size_t width16, size_t rows, size_t fill_rows, uint4 fill) {
  const size_t copied = rows * width16, total = (rows + fill_rows) * width16;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t r = i / width16, c = i % width16;
    dst[r * dst_pitch16 + c] = i < copied ? src[r * src_pitch16 + c] : fill;
  }
}

}  // namespace

void copy_rows_async(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                     size_t fill_rows, uint8_t fill, int blocks, cudaStream_t stream) {
  if ((width | dst_pitch | src_pitch | reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % 16 != 0)
    throw std::invalid_argument("copy_rows_async: the pointers, pitches and width must be multiples of 16 bytes");
  if (width > dst_pitch || (rows > 1 && width > src_pitch))
    throw std::invalid_argument("copy_rows_async: a row is wider than its pitch");
  if (blocks < 1) throw std::invalid_argument("copy_rows_async: needs at least one block");
  if (width == 0 || rows + fill_rows == 0) return;
  const uint32_t f = 0x01010101u * fill;
  copy_rows_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<uint4*>(dst), dst_pitch / 16,
                                                    static_cast<const uint4*>(src), src_pitch / 16, width / 16, rows,
                                                    fill_rows, make_uint4(f, f, f, f));
  PRISM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace prism::gpu
