// CUDA path of the heat map and the box outlines (tracking.h): one thread per pixel.
#include "common/gpu.h"
#include "emd/tracking.h"

namespace prism::emd {
namespace {

__global__ void heatmap_kernel(const float* d, const uint8_t* grey, int64_t grey_stride, int width, int height,
                               HeatmapParams p, uint8_t* rgba, int64_t rgba_stride) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height) return;
  uint8_t* px = rgba + y * rgba_stride + 4 * x;
  heat_pixel(d[static_cast<int64_t>(y) * width + x], grey ? grey[y * grey_stride + x] : uint8_t(0), p, px);
  legend_pixel(p.legend, x, y, px);
}

// One thread per pixel of the boxes' bounding rectangles: box k's rectangle is blockIdx.z.
__global__ void boxes_kernel(const Box* boxes, int width, int height, uint8_t* rgba, int64_t stride) {
  const Box b = boxes[blockIdx.z];
  const int x = b.x + blockIdx.x * blockDim.x + threadIdx.x, y = b.y + blockIdx.y * blockDim.y + threadIdx.y;
  if (x < 0 || y < 0 || x >= width || y >= height || !on_outline(b, x, y)) return;
  *reinterpret_cast<uchar4*>(rgba + y * stride + 4 * x) = make_uchar4(255, 255, 255, 255);
}

}  // namespace

void draw_boxes_cuda(const Box* boxes, int count, int max_width, int max_height, int width, int height, uint8_t* rgba,
                     int64_t stride, cudaStream_t stream) {
  if (count <= 0 || max_width <= 0 || max_height <= 0) return;
  // grid over the largest box; threads outside a smaller box return at once
  boxes_kernel<<<dim3((max_width + 31) / 32, (max_height + 7) / 8, count), dim3(32, 8), 0, stream>>>(
      boxes, width, height, rgba, stride);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

void render_heatmap_cuda(const float* d, const uint8_t* grey, int64_t grey_stride, int width, int height,
                         const HeatmapParams& p, uint8_t* rgba, int64_t rgba_stride, cudaStream_t stream) {
  heatmap_kernel<<<dim3((width + 31) / 32, (height + 7) / 8), dim3(32, 8), 0, stream>>>(d, grey, grey_stride, width,
                                                                                        height, p, rgba, rgba_stride);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace prism::emd
