/* Small GstVideoInfo <-> kernels helpers shared by Prism's elements. */
#pragma once

#include <gst/video/video.h>

#include "colorconvert/colorconvert.h"

namespace prism {

/* The colour matrix and range of YUV caps (BT.601 unless the caps say BT.709 or BT.2020). */
inline colorconvert::Colorimetry colorimetry_of(const GstVideoInfo *info) {
  colorconvert::Colorimetry c;
  switch (info->colorimetry.matrix) {
    case GST_VIDEO_COLOR_MATRIX_BT709: c.matrix = colorconvert::YuvMatrix::BT709; break;
    case GST_VIDEO_COLOR_MATRIX_BT2020: c.matrix = colorconvert::YuvMatrix::BT2020; break;
    default: c.matrix = colorconvert::YuvMatrix::BT601; break;
  }
  c.full_range = info->colorimetry.range == GST_VIDEO_COLOR_RANGE_0_255;
  return c;
}

/* The colorconvert format of the caps' format; false when colorconvert has none. */
inline bool pixel_format_of(const GstVideoInfo *info, colorconvert::PixelFormat *f) {
  return colorconvert::format_from_name(gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(info)), f);
}

}  // namespace prism
