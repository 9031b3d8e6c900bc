// The image SIFT runs on (texture/features.h): 8-bit grey, shrunk when its longer side exceeds
// FeatureParams::max_side. Computed the way OpenCV 4.6 computes it on the host, so that a frame in GPU
// memory yields the very features the same frame yields on the host (the textureid element reads
// both kinds), on the CPU and in CUDA from the same per-pixel code (detection_pixel.h):
// - grey of RGBA: cv::cvtColor(COLOR_RGBA2GRAY)'s fixed point (common/grey.h);
// - the shrink: cv::resize(INTER_AREA) of an 8-bit single-channel image, bit for bit. OpenCV 4.6
//   (imgproc/src/resize.cpp, hal::resize) takes one of two paths: at integer ratios
//   (resizeAreaFast_) the integer sum of each block, (sum + 2) >> 2 at 2x2 and
//   round(float(sum) x float(1 / area)) otherwise; at other ratios (computeResizeAreaTab,
//   ResizeArea_Invoker) per-axis tables of source pixels and float weights, each destination pixel
//   summed in float row by row (a row: pixel x weight added in source order; the rows: weight x row
//   sum added in source order, each product and sum rounded on its own), rounded to nearest even.
//   Our tables are computed by the same double arithmetic (scale = 1 / (dst / src)); the sums run per
//   destination pixel rather than per row, in the same order, so they round the same.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include <opencv2/core.hpp>

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "common/device_array.h"
#endif

namespace prism::texture {

// The size a width x height image is shrunk to before SIFT (itself when max_side <= 0 or no side
// exceeds it); *scale = original / detection coordinates.
cv::Size detection_size(int width, int height, int max_side, double* scale);

// One source pixel of a destination pixel along one axis, and its weight.
struct AreaTap {
  int32_t src = 0;
  float weight = 0;
};

// cv::resize(INTER_AREA)'s decisions for one shrink of an 8-bit grey image, made once per size.
struct AreaPlan {
  int src_width = 0, src_height = 0, dst_width = 0, dst_height = 0;
  // Integer ratios (OpenCV's resizeAreaFast_): the block size; 0 on the general path.
  int block_x = 0, block_y = 0;
  float block_scale = 0;  // float(1 / (block_x x block_y)), as OpenCV rounds it
  // The general path: destination column dx sums x_taps[x_begin[dx] .. x_begin[dx + 1]), row dy
  // y_taps[y_begin[dy] .. y_begin[dy + 1]).
  std::vector<int32_t> x_begin, y_begin;
  std::vector<AreaTap> x_taps, y_taps;
};

// Throws std::invalid_argument unless 1 <= dst <= src on both axes (a shrink).
AreaPlan make_area_plan(int src_width, int src_height, int dst_width, int dst_height);

// The CPU path: `src` is plan.src_width x plan.src_height, `dst` plan.dst_width x plan.dst_height.
void area_resize(const AreaPlan& plan, const uint8_t* src, size_t src_pitch, uint8_t* dst, size_t dst_pitch);

// cv::cvtColor(COLOR_RGBA2GRAY) of 8-bit RGBA (or RGBx) pixels, on the CPU.
void grey_from_rgba(const uint8_t* rgba, size_t rgba_pitch, int width, int height, uint8_t* grey, size_t grey_pitch);

#if defined(PRISM_HAVE_CUDA)
// The CUDA path of area_resize: the plan's tables on the device, kept while the size stays.
class CudaAreaResize {
 public:
  // Makes and uploads the plan for these sizes unless it is the current one (synchronous: once per
  // size, not per frame). Throws as make_area_plan.
  void prepare(int src_width, int src_height, int dst_width, int dst_height);
  // Enqueues the shrink on `stream` (device pointers; the prepared sizes).
  void run(const uint8_t* src, size_t src_pitch, uint8_t* dst, size_t dst_pitch, cudaStream_t stream) const;
  const AreaPlan& plan() const { return plan_; }

 private:
  AreaPlan plan_;
  gpu::DeviceArray<int32_t> x_begin_, y_begin_;
  gpu::DeviceArray<AreaTap> x_taps_, y_taps_;
};

// grey_from_rgba on the device, enqueued on `stream`.
void grey_from_rgba_cuda(const uint8_t* rgba, size_t rgba_pitch, int width, int height, uint8_t* grey,
                         size_t grey_pitch, cudaStream_t stream);
#endif

}  // namespace prism::texture
