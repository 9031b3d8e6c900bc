/* The grey image of a mapped system-memory video frame, for the elements whose algorithms read grey
 * (textureid, bowclassify): the Y plane itself for GRAY8/NV12/I420 (no copy), else OpenCV's
 * RGB(A)/BGR(A) to grey into `scratch` (kept by the element: no per-frame allocation). An empty Mat
 * for any other format. */
#pragma once

#include <gst/video/video.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

namespace prism {

#define PRISM_GREY_FORMATS "{ GRAY8, RGBA, BGRA, BGRx, RGBx, RGB, BGR, NV12, I420 }"

/* `data`, `stride`: the first plane of a host frame laid out as `info` (GstPrismFrame's data[0],
 * stride[0] as GstPrismCudaFilter maps it). */
inline cv::Mat frame_grey(const GstVideoInfo *info, void *data, size_t stride, cv::Mat &scratch) {
  const int w = GST_VIDEO_INFO_WIDTH(info), h = GST_VIDEO_INFO_HEIGHT(info);
  int code = -1, type = CV_8UC4;
  switch (GST_VIDEO_INFO_FORMAT(info)) {
    case GST_VIDEO_FORMAT_GRAY8:
    case GST_VIDEO_FORMAT_NV12:
    case GST_VIDEO_FORMAT_I420: return cv::Mat(h, w, CV_8UC1, data, stride);
    case GST_VIDEO_FORMAT_RGBA:
    case GST_VIDEO_FORMAT_RGBx: code = cv::COLOR_RGBA2GRAY; break;
    case GST_VIDEO_FORMAT_BGRA:
    case GST_VIDEO_FORMAT_BGRx: code = cv::COLOR_BGRA2GRAY; break;
    case GST_VIDEO_FORMAT_RGB: code = cv::COLOR_RGB2GRAY, type = CV_8UC3; break;
    case GST_VIDEO_FORMAT_BGR: code = cv::COLOR_BGR2GRAY, type = CV_8UC3; break;
    default: return cv::Mat();
  }
  cv::cvtColor(cv::Mat(h, w, type, data, stride), scratch, code);
  return scratch;
}

}  // namespace prism
