// CUDA path of detection_image.h: one thread per destination pixel, running the CPU path's
// per-pixel code (detection_pixel.h).
#include <stdexcept>
#include <utility>

#include "common/gpu.h"
#include "texture/detection_image.h"
#include "texture/detection_pixel.h"

namespace prism::texture {

namespace {

__global__ void area_kernel(const detail::AreaView v, const uint8_t* src, size_t src_pitch, uint8_t* dst,
                            size_t dst_pitch, int width, int height) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height) return;
  dst[size_t(y) * dst_pitch + x] = detail::area_pixel(v, src, src_pitch, x, y);
}

__global__ void grey_kernel(const uint8_t* rgba, size_t rgba_pitch, uint8_t* grey, size_t grey_pitch, int width,
                            int height) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height) return;
  grey[size_t(y) * grey_pitch + x] = detail::grey_of_rgba(rgba + size_t(y) * rgba_pitch + 4 * size_t(x));
}

dim3 grid_for(int width, int height, dim3 block) {
  return dim3((width + block.x - 1) / block.x, (height + block.y - 1) / block.y);
}

}  // namespace

void CudaAreaResize::prepare(int src_width, int src_height, int dst_width, int dst_height) {
  if (plan_.src_width == src_width && plan_.src_height == src_height && plan_.dst_width == dst_width &&
      plan_.dst_height == dst_height)
    return;
  plan_ = {};
  AreaPlan p = make_area_plan(src_width, src_height, dst_width, dst_height);
  x_begin_ = gpu::device_copy(p.x_begin.data(), p.x_begin.size());
  y_begin_ = gpu::device_copy(p.y_begin.data(), p.y_begin.size());
  x_taps_ = gpu::device_copy(p.x_taps.data(), p.x_taps.size());
  y_taps_ = gpu::device_copy(p.y_taps.data(), p.y_taps.size());
  plan_ = std::move(p);  // last: a failed upload leaves no plan behind
}

void CudaAreaResize::run(const uint8_t* src, size_t src_pitch, uint8_t* dst, size_t dst_pitch,
                         cudaStream_t stream) const {
  if (plan_.dst_width <= 0) throw std::logic_error("CudaAreaResize::run before prepare");
  const detail::AreaView v{plan_.block_x,   plan_.block_y,  plan_.block_scale, x_begin_.data(),
                           y_begin_.data(), x_taps_.data(), y_taps_.data()};
  const dim3 block(32, 8);
  area_kernel<<<grid_for(plan_.dst_width, plan_.dst_height, block), block, 0, stream>>>(
      v, src, src_pitch, dst, dst_pitch, plan_.dst_width, plan_.dst_height);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

void grey_from_rgba_cuda(const uint8_t* rgba, size_t rgba_pitch, int width, int height, uint8_t* grey,
                         size_t grey_pitch, cudaStream_t stream) {
  const dim3 block(32, 8);
  grey_kernel<<<grid_for(width, height, block), block, 0, stream>>>(rgba, rgba_pitch, grey, grey_pitch, width, height);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace prism::texture
