// Helpers of the poissonblend element tests (test_poissonblend.cpp on the CPU path,
// test_poissonblend_gpu.cpp comparing the GPU path with it): test images, PNG writing, running
// poissonblend between appsrcs and an appsink (pipeline_run.h), comparing with cv::seamlessClone.
#pragma once

#include <gtest/gtest.h>

#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/photo.hpp>

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gst/prism/gstprismimagefile.h"
#include "pipeline_run.h"
#include "prism_test.h"

namespace prism::test::blend {

namespace fs = std::filesystem;
using prism::test::Frame;
using prism::test::run_launch;
using prism::test::RunOptions;
using prism::test::RunResult;
using prism::test::TempDir;

// ---- images ----------------------------------------------------------------------------------

// Smooth random colours (noise blurred), so that the solve sees realistic gradients.
inline cv::Mat random_image(int w, int h, int channels, uint64_t seed) {
  cv::RNG rng(seed);
  cv::Mat m(h, w, CV_8UC(channels));
  rng.fill(m, cv::RNG::UNIFORM, 0, 256);
  cv::GaussianBlur(m, m, cv::Size(0, 0), 2.0);
  cv::Mat noise(h, w, CV_8UC(channels));
  rng.fill(noise, cv::RNG::UNIFORM, 0, 24);
  return m + noise;
}

inline cv::Mat ellipse_mask(int w, int h, bool soft) {
  cv::Mat m = cv::Mat::zeros(h, w, CV_8UC1);
  cv::ellipse(m, cv::Point(w / 2, h / 2), cv::Size(w * 2 / 5, h * 2 / 5), 15, 0, 360, cv::Scalar(255), -1);
  if (soft) {
    cv::GaussianBlur(m, m, cv::Size(0, 0), 3.0);
    m.setTo(0, m < 8);  // keep a margin inside the mask's border
  }
  return m;
}

// A photo of ../shared/data/images, decoded (and scaled) by the plugin's loader, as BGR.
inline cv::Mat photo(const std::string& name, int w, int h) {
  const std::string path = prism::test::data_dir() + "/images/" + name;
  prism::ImageFile im;
  GError* err = nullptr;
  if (!prism::image_file_load(path.c_str(), GST_VIDEO_FORMAT_BGR, &im, &err, w, h)) {
    ADD_FAILURE() << err->message;
    g_clear_error(&err);
    return cv::Mat();
  }
  return cv::Mat(im.height, im.width, CV_8UC3, im.pixels.data()).clone();
}

// The element's result must be OpenCV's within max 1 on at most 0.1% of the values.
struct Diff {
  int max = 0;
  double frac = 0;
};

inline Diff compare(const cv::Mat& a, const cv::Mat& b) {
  Diff d;
  if (a.size() != b.size() || a.type() != b.type() || a.empty()) {
    d.max = 9999;
    return d;
  }
  cv::Mat diff;
  cv::absdiff(a, b, diff);
  double mx;
  cv::minMaxLoc(diff.reshape(1), nullptr, &mx);
  d.max = (int)mx;
  d.frac = (double)cv::countNonZero(diff.reshape(1)) / (double)diff.total() / diff.channels();
  return d;
}

#define EXPECT_CLOSE_TO_OPENCV(ours, ref, what)                                             \
  do {                                                                                      \
    Diff d_ = compare((ours), (ref));                                                       \
    EXPECT_LE(d_.max, 1) << what;                                                           \
    EXPECT_LE(d_.frac, 0.001) << what << ": " << 100 * d_.frac << "% of the values differ"; \
  } while (0)

// ---- files -------------------------------------------------------------------------------------

inline const char* gst_format_of(const cv::Mat& m) {
  return m.channels() == 1 ? "GRAY8" : m.channels() == 3 ? "BGR" : "BGRA";
}

// Writes a GRAY8, BGR or BGRA image as PNG with a small GStreamer pipeline (pngenc keeps the values).
inline void write_png(const cv::Mat& image, const std::string& path) {
  const std::string caps = std::string("video/x-raw,format=") + gst_format_of(image) +
                           ",width=" + std::to_string(image.cols) + ",height=" + std::to_string(image.rows) +
                           ",framerate=1/1";
  GstVideoInfo info;
  GstCaps* c = gst_caps_from_string(caps.c_str());
  gst_video_info_from_caps(&info, c);
  gst_caps_unref(c);
  RunOptions options;
  options.before_play = [&](GstElement* p) {
    GstElement* sink = gst_bin_get_by_name(GST_BIN(p), "sink");
    g_object_set(sink, "location", path.c_str(), nullptr);
    gst_object_unref(sink);
  };
  options.after_play = [&](GstElement* p) {
    GstBuffer* buf = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
    GstVideoFrame f;
    gst_video_frame_map(&f, &info, buf, GST_MAP_WRITE);
    for (int y = 0; y < image.rows; y++)
      memcpy((uint8_t*)GST_VIDEO_FRAME_PLANE_DATA(&f, 0) + y * GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0), image.ptr(y),
             image.cols * image.elemSize());
    gst_video_frame_unmap(&f);
    GST_BUFFER_PTS(buf) = 0;
    GST_BUFFER_DURATION(buf) = GST_SECOND;
    GstElement* src = gst_bin_get_by_name(GST_BIN(p), "src");
    gst_app_src_push_buffer(GST_APP_SRC(src), buf);
    gst_app_src_end_of_stream(GST_APP_SRC(src));
    gst_object_unref(src);
  };
  options.idle_timeout = 10 * GST_SECOND;
  const RunResult r =
      run_launch("appsrc name=src format=time caps=" + caps + " ! videoconvert ! pngenc ! filesink name=sink", options);
  EXPECT_TRUE(r.eos && r.error.empty()) << "writing " << path << ": " << r.error;
}

// ---- running the element -------------------------------------------------------------------------

struct Overlay {
  cv::Mat image;       // BGR (with mask) or BGRA (alpha = mask)
  std::string format;  // caps format; empty: BGR or BGRA from the channels
  int xpos = 0, ypos = 0;
  std::string mode;           // empty = default (normal)
  std::string mask_location;  // empty = alpha channel
  int zorder = -1;            // -1 = default
};

struct Result {
  std::vector<cv::Mat> frames;            // BGR/BGRA/... as given by the output caps (packed formats)
  std::vector<std::vector<uint8_t>> raw;  // every output frame, planes packed
  std::string error;                      // first ERROR message, "<element>: <message>" ("" when none)
  std::string error_debug;
  std::vector<std::string> warnings;  // WARNING messages
  bool eos = false;
};

inline GstBuffer* buffer_from_planes(const GstVideoInfo& info, const std::vector<const uint8_t*>& planes,
                                     const std::vector<size_t>& strides, int frame) {
  GstBuffer* buf = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  GstVideoFrame f;
  gst_video_frame_map(&f, &info, buf, GST_MAP_WRITE);
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&f); p++) {
    gint comp[GST_VIDEO_MAX_COMPONENTS];
    gst_video_format_info_component(f.info.finfo, p, comp);
    const int rb = GST_VIDEO_FRAME_COMP_WIDTH(&f, comp[0]) * GST_VIDEO_FRAME_COMP_PSTRIDE(&f, comp[0]);
    for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(&f, comp[0]); y++)
      memcpy((uint8_t*)GST_VIDEO_FRAME_PLANE_DATA(&f, p) + y * GST_VIDEO_FRAME_PLANE_STRIDE(&f, p),
             planes[p] + y * strides[p], rb);
  }
  gst_video_frame_unmap(&f);
  GST_BUFFER_PTS(buf) = gst_util_uint64_scale(frame, GST_SECOND, 30);
  GST_BUFFER_DURATION(buf) = gst_util_uint64_scale(frame + 1, GST_SECOND, 30) - GST_BUFFER_PTS(buf);
  return buf;
}

inline std::string caps_of(const std::string& format, int w, int h) {
  return "video/x-raw,format=" + format + ",width=" + std::to_string(w) + ",height=" + std::to_string(h) +
         ",framerate=30/1,pixel-aspect-ratio=1/1";
}

// A background given as raw planes (any format), or a cv::Mat for packed formats.
struct Background {
  std::string format;
  int width = 0, height = 0;
  std::vector<std::vector<uint8_t>> planes;  // packed rows
  std::vector<size_t> strides;

  static Background of(const cv::Mat& m, const std::string& format = "") {
    Background b;
    b.format = format.empty() ? gst_format_of(m) : format;
    b.width = m.cols;
    b.height = m.rows;
    b.planes.emplace_back(m.data, m.data + m.total() * m.elemSize());
    b.strides.push_back(m.cols * m.elemSize());
    return b;
  }
};

// How run_blend builds its pipeline: launch fragments between the appsrcs and poissonblend and
// between poissonblend and the appsink (e.g. "cudaupload !" and "cudadownload !").
struct Chains {
  std::string element = "poissonblend device=cpu";
  std::string background;  // after the background's appsrc, ending in "!" (or empty)
  std::string overlay;     // after each overlay's appsrc
  std::string output;      // after poissonblend
};

// Runs appsrc backgrounds/overlays through poissonblend (device=cpu unless `chains` says otherwise)
// for `frames` frames. `extra` adds sources of its own (a launch fragment ending in
// "b.overlay_N"), `setup` runs on the element before PLAYING (pads requested for the Overlay list
// are overlay_0, overlay_1, ...).
inline Result run_blend(const Background& bg, const std::vector<Overlay>& overlays, int frames = 1,
                        const std::function<void(GstElement*)>& setup = {}, const std::string& extra = "",
                        const Chains& chains = Chains()) {
  std::string launch = chains.element + " name=b ! " + chains.output + " appsink name=out sync=false ";
  launch += "appsrc name=bg format=time caps=\"" + caps_of(bg.format, bg.width, bg.height) + "\" ! " +
            chains.background + " b.sink ";
  for (size_t i = 0; i < overlays.size(); i++) {
    const Overlay& o = overlays[i];
    const std::string fmt = o.format.empty() ? gst_format_of(o.image) : o.format;
    launch += "appsrc name=ov" + std::to_string(i) + " format=time caps=\"" + caps_of(fmt, o.image.cols, o.image.rows) +
              "\" ! " + chains.overlay + " b.overlay_" + std::to_string(i) + " ";
  }
  launch += extra;
  RunOptions options;
  options.before_play = [&](GstElement* pipeline) {
    GstElement* b = gst_bin_get_by_name(GST_BIN(pipeline), "b");
    for (size_t i = 0; i < overlays.size(); i++) {
      const Overlay& o = overlays[i];
      GstPad* pad = gst_element_get_static_pad(b, ("overlay_" + std::to_string(i)).c_str());
      EXPECT_NE(pad, nullptr);
      if (!pad) continue;
      g_object_set(pad, "xpos", o.xpos, "ypos", o.ypos, nullptr);
      if (!o.mode.empty()) gst_util_set_object_arg(G_OBJECT(pad), "mode", o.mode.c_str());
      if (!o.mask_location.empty()) g_object_set(pad, "mask-location", o.mask_location.c_str(), nullptr);
      if (o.zorder >= 0) g_object_set(pad, "zorder", (guint)o.zorder, nullptr);
      gst_object_unref(pad);
    }
    if (setup) setup(b);
    gst_object_unref(b);
  };
  // Feed everything (appsrc queues it), then collect.
  options.after_play = [&](GstElement* pipeline) {
    GstVideoInfo bg_info;
    GstCaps* bc = gst_caps_from_string(caps_of(bg.format, bg.width, bg.height).c_str());
    gst_video_info_from_caps(&bg_info, bc);
    gst_caps_unref(bc);
    GstElement* bgsrc = gst_bin_get_by_name(GST_BIN(pipeline), "bg");
    std::vector<const uint8_t*> bg_planes;
    for (auto& p : bg.planes) bg_planes.push_back(p.data());
    for (int i = 0; i < frames; i++)
      gst_app_src_push_buffer(GST_APP_SRC(bgsrc), buffer_from_planes(bg_info, bg_planes, bg.strides, i));
    gst_app_src_end_of_stream(GST_APP_SRC(bgsrc));
    gst_object_unref(bgsrc);
    for (size_t k = 0; k < overlays.size(); k++) {
      const Overlay& o = overlays[k];
      const std::string fmt = o.format.empty() ? gst_format_of(o.image) : o.format;
      GstVideoInfo info;
      GstCaps* c = gst_caps_from_string(caps_of(fmt, o.image.cols, o.image.rows).c_str());
      gst_video_info_from_caps(&info, c);
      gst_caps_unref(c);
      GstElement* src = gst_bin_get_by_name(GST_BIN(pipeline), ("ov" + std::to_string(k)).c_str());
      for (int i = 0; i < frames; i++)
        gst_app_src_push_buffer(GST_APP_SRC(src), buffer_from_planes(info, {o.image.data}, {o.image.step[0]}, i));
      gst_app_src_end_of_stream(GST_APP_SRC(src));
      gst_object_unref(src);
    }
  };
  RunResult run = run_launch(launch, options);
  Result r;
  if (!run.error.empty()) r.error = run.error_source + ": " + run.error;
  r.error_debug = run.error_debug;
  r.warnings = run.warnings;
  r.eos = run.eos;
  for (Frame& f : run.frames) {
    if (f.planes == 1) r.frames.push_back(cv::Mat(f.height, f.width, CV_8UC(f.pixel_stride), f.bytes.data()).clone());
    r.raw.push_back(std::move(f.bytes));
  }
  return r;
}

// OpenCV's answer for BGR images.
inline cv::Mat opencv_clone(const cv::Mat& overlay_bgr, const cv::Mat& background_bgr, const cv::Mat& mask, int x,
                            int y, int flags) {
  cv::Mat out;
  cv::seamlessClone(overlay_bgr, background_bgr, mask, cv::Point(x, y), out, flags);
  return out;
}

inline int cv_flag(const std::string& mode) {
  if (mode == "mixed") return cv::MIXED_CLONE;
  if (mode == "monochrome-transfer") return cv::MONOCHROME_TRANSFER;
  return cv::NORMAL_CLONE;
}

inline cv::Mat bgra_with_alpha(const cv::Mat& bgr, const cv::Mat& alpha) {
  cv::Mat out;
  std::vector<cv::Mat> ch;
  cv::split(bgr, ch);
  ch.push_back(alpha);
  cv::merge(ch, out);
  return out;
}

inline std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

}  // namespace prism::test::blend
