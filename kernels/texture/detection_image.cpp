#include "texture/detection_image.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <string>

#include "texture/detection_pixel.h"

namespace prism::texture {

namespace {

// OpenCV 4.6's computeResizeAreaTab for one channel (imgproc/src/resize.cpp), its entries grouped
// by destination index: the same double arithmetic, so the same taps and float weights.
void area_table(int ssize, int dsize, double scale, std::vector<int32_t>& begin, std::vector<AreaTap>& taps) {
  begin.assign(size_t(dsize) + 1, 0);
  taps.clear();
  taps.reserve(size_t(ssize) * 2);
  for (int dx = 0; dx < dsize; ++dx) {
    begin[dx] = int32_t(taps.size());
    const double fsx1 = dx * scale;
    const double fsx2 = fsx1 + scale;
    const double cell = std::min(scale, ssize - fsx1);
    int sx1 = int(std::ceil(fsx1)), sx2 = int(std::floor(fsx2));
    sx2 = std::min(sx2, ssize - 1);
    sx1 = std::min(sx1, sx2);
    if (sx1 - fsx1 > 1e-3) taps.push_back({sx1 - 1, float((sx1 - fsx1) / cell)});
    for (int sx = sx1; sx < sx2; ++sx) taps.push_back({sx, float(1.0 / cell)});
    if (fsx2 - sx2 > 1e-3) taps.push_back({sx2, float(std::min(std::min(fsx2 - sx2, 1.), cell) / cell)});
  }
  begin[dsize] = int32_t(taps.size());
}

}  // namespace

cv::Size detection_size(int width, int height, int max_side, double* scale) {
  *scale = 1.0;
  const int side = std::max(width, height);
  if (max_side <= 0 || side <= max_side) return {width, height};
  *scale = double(side) / max_side;
  // At least one pixel a side: 2049x1 shrank to 1024x0, an OpenCV assertion on an upload. So
  // thin an image has no SIFT features, and is refused or not identified as any featureless one is.
  return {std::max(1, int(width / *scale + 0.5)), std::max(1, int(height / *scale + 0.5))};
}

AreaPlan make_area_plan(int src_width, int src_height, int dst_width, int dst_height) {
  if (dst_width < 1 || dst_height < 1 || dst_width > src_width || dst_height > src_height)
    throw std::invalid_argument("area resize: " + std::to_string(src_width) + "x" + std::to_string(src_height) +
                                " to " + std::to_string(dst_width) + "x" + std::to_string(dst_height) +
                                " is not a shrink");
  AreaPlan p;
  p.src_width = src_width;
  p.src_height = src_height;
  p.dst_width = dst_width;
  p.dst_height = dst_height;
  // hal::resize: the scales are the inverses of cv::resize's dst / src, in double.
  const double scale_x = 1. / (double(dst_width) / src_width), scale_y = 1. / (double(dst_height) / src_height);
  const int iscale_x = int(std::lrint(scale_x)), iscale_y = int(std::lrint(scale_y));
  if (std::abs(scale_x - iscale_x) < DBL_EPSILON && std::abs(scale_y - iscale_y) < DBL_EPSILON) {
    p.block_x = iscale_x;
    p.block_y = iscale_y;
    p.block_scale = 1.f / (iscale_x * iscale_y);
    return p;
  }
  area_table(src_width, dst_width, scale_x, p.x_begin, p.x_taps);
  area_table(src_height, dst_height, scale_y, p.y_begin, p.y_taps);
  return p;
}

void area_resize(const AreaPlan& plan, const uint8_t* src, size_t src_pitch, uint8_t* dst, size_t dst_pitch) {
  const detail::AreaView v{plan.block_x,        plan.block_y,       plan.block_scale,  plan.x_begin.data(),
                           plan.y_begin.data(), plan.x_taps.data(), plan.y_taps.data()};
  for (int dy = 0; dy < plan.dst_height; ++dy) {
    uint8_t* row = dst + size_t(dy) * dst_pitch;
    for (int dx = 0; dx < plan.dst_width; ++dx) row[dx] = detail::area_pixel(v, src, src_pitch, dx, dy);
  }
}

void grey_from_rgba(const uint8_t* rgba, size_t rgba_pitch, int width, int height, uint8_t* grey, size_t grey_pitch) {
  for (int y = 0; y < height; ++y) {
    const uint8_t* s = rgba + size_t(y) * rgba_pitch;
    uint8_t* d = grey + size_t(y) * grey_pitch;
    for (int x = 0; x < width; ++x) d[x] = detail::grey_of_rgba(s + 4 * x);
  }
}

}  // namespace prism::texture
