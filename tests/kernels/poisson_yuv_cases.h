// YUV 4:2:0 backgrounds for the tests of poisson/yuv_clone.h (CPU and GPU).
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>
#include <vector>

#include "colorconvert/colorconvert.h"
#include "poisson/yuv_clone.h"

namespace prism::test {

namespace cc = prism::colorconvert;

// A 4:2:0 frame (NV12 or I420) in one host buffer, rows padded beyond the width, converted from a
// BGR image.
struct YuvFrame {
  std::vector<uint8_t> bytes;
  cc::Image image;
  YuvFrame(cc::PixelFormat format, const cv::Mat& bgr, const cc::Colorimetry& cm) {
    const int w = bgr.cols, h = bgr.rows, pad = 12;
    image.format = format;
    image.width = w;
    image.height = h;
    const bool nv12 = format == cc::PixelFormat::NV12;
    const int planes = nv12 ? 2 : 3;
    size_t offsets[3] = {0, 0, 0}, size = 0;
    for (int p = 0; p < planes; ++p) {
      image.stride[p] = (p == 0 || nv12 ? w : (w + 1) / 2) + pad;
      offsets[p] = size;
      size += static_cast<size_t>(image.stride[p]) * (p == 0 ? h : (h + 1) / 2);
    }
    bytes.assign(size, 0);
    for (int p = 0; p < planes; ++p) image.plane[p] = bytes.data() + offsets[p];
    cc::Image src;
    src.format = cc::PixelFormat::BGR;
    src.width = w;
    src.height = h;
    src.plane[0] = bgr.data;
    src.stride[0] = static_cast<int>(bgr.step);
    cc::convert_cpu(cc::make_plan(cc::PixelFormat::BGR, cm, w, h, format, cm, w, h), src, image);
  }
  // The same image over another buffer of the same layout (a device copy).
  cc::Image rebased(uint8_t* base) const {
    cc::Image im = image;
    for (auto& plane : im.plane)
      if (plane) plane = base + (plane - bytes.data());
    return im;
  }
};

}  // namespace prism::test
