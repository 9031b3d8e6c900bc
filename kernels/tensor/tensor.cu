// CUDA path of to_signatures: one thread per value, consecutive threads on consecutive values of a
// row so the loads and the stores coalesce.
#include "common/gpu.h"
#include "tensor/tensor.h"

namespace prism::tensor {
namespace {

template <class T>
__global__ void to_float_kernel(const uint8_t* frame, int64_t row_bytes, int64_t row_values, int height, float* out) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int y = blockIdx.y;
  if (i >= row_values || y >= height) return;
  const T* row = reinterpret_cast<const T*>(frame + y * row_bytes);
  out[y * row_values + i] = static_cast<float>(row[i]);
}

}  // namespace

void to_signatures_cuda(const void* frame, const FrameLayout& l, float* out, cudaStream_t stream) {
  const int64_t row_values = int64_t(l.width) * l.channels;
  if (l.row_bytes % dtype_size(l.dtype) != 0)
    throw std::invalid_argument("tensor rows are not aligned to their element size");
  const dim3 block(256), grid(unsigned((row_values + 255) / 256), unsigned(l.height));
  const auto* p = static_cast<const uint8_t*>(frame);
  switch (l.dtype) {
    case DType::U8:
      to_float_kernel<uint8_t><<<grid, block, 0, stream>>>(p, l.row_bytes, row_values, l.height, out);
      break;
    case DType::U16:
      to_float_kernel<uint16_t><<<grid, block, 0, stream>>>(p, l.row_bytes, row_values, l.height, out);
      break;
    case DType::F32:
      to_float_kernel<float><<<grid, block, 0, stream>>>(p, l.row_bytes, row_values, l.height, out);
      break;
  }
  PRISM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace prism::tensor
