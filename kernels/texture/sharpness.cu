// The CUDA path of texture/sharpness.h: the same per-pixel Laplacian (sharpness_pixel.h) as the CPU
// path, summed in 64-bit integers, so the result is the CPU's bit for bit whatever the order.
#include <stdexcept>

#include <cub/block/block_reduce.cuh>

#include "common/gpu.h"
#include "texture/sharpness.h"
#include "texture/sharpness_pixel.h"

namespace prism::texture {

namespace {

constexpr int kThreads = 256;
// Blocks stride over rows; enough of them to fill a large GPU, few enough that the atomics are rare.
constexpr int kMaxBlocks = 1024;

__global__ void laplacian_sums_kernel(const uint8_t* __restrict__ grey, size_t pitch, int width, int height,
                                      unsigned long long* sums) {
  long long sum = 0;
  unsigned long long squares = 0;
  for (int y = blockIdx.x; y < height; y += gridDim.x)
    for (int x = threadIdx.x; x < width; x += kThreads) {
      const int l = detail::laplacian_at(grey, pitch, width, height, x, y);
      sum += l;
      squares += unsigned(l * l);
    }
  __shared__ typename cub::BlockReduce<long long, kThreads>::TempStorage sum_storage;
  __shared__ typename cub::BlockReduce<unsigned long long, kThreads>::TempStorage squares_storage;
  sum = cub::BlockReduce<long long, kThreads>(sum_storage).Sum(sum);  // thread 0's is the block's
  squares = cub::BlockReduce<unsigned long long, kThreads>(squares_storage).Sum(squares);
  if (threadIdx.x != 0) return;
  // Integer additions commute: the total is the same in any order (the sum as two's complement).
  atomicAdd(&sums[0], static_cast<unsigned long long>(sum));
  atomicAdd(&sums[1], squares);
}

}  // namespace

CudaSharpness::CudaSharpness() : device_sums_(2), host_sums_(2) {}

LaplacianSums CudaSharpness::sums(const uint8_t* grey, size_t pitch, int width, int height, cudaStream_t stream) {
  detail::check_sharpness_image("CudaSharpness", grey, pitch, width, height);
  PRISM_CUDA_CHECK(cudaMemsetAsync(device_sums_.data(), 0, device_sums_.bytes(), stream));
  const int blocks = height < kMaxBlocks ? height : kMaxBlocks;
  laplacian_sums_kernel<<<blocks, kThreads, 0, stream>>>(grey, pitch, width, height, device_sums_.data());
  PRISM_CUDA_CHECK(cudaGetLastError());
  PRISM_CUDA_CHECK(
      cudaMemcpyAsync(host_sums_.data(), device_sums_.data(), device_sums_.bytes(), cudaMemcpyDeviceToHost, stream));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
  LaplacianSums s;
  s.sum = static_cast<int64_t>(host_sums_[0]);
  s.squares = host_sums_[1];
  s.count = int64_t(width) * height;
  return s;
}

}  // namespace prism::texture
