// bowclassify test helpers (test_bowclassify.cpp on the CPU path, test_bowclassify_gpu.cpp comparing
// the GPU path with it): a small model trained once per run on synthetic scenes (horizontal stripes,
// vertical stripes, blobs), frames of a scene in any input format pushed through a GstHarness with
// the "prism-bowclassify" messages, the meta and the changed pixels collected.
#pragma once

#include <gtest/gtest.h>

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bow/model.h"
#include "bow_scenes.h"
#include "pipeline_run.h"
#include "prism_test.h"

// Skips with a message on stderr too, so that a skipped test is seen in ctest's output.
#define SKIP_LOUDLY(msg)                                     \
  do {                                                       \
    std::ostringstream why_;                                 \
    why_ << msg;                                             \
    std::cerr << "*** SKIPPING: " << why_.str() << " ***\n"; \
    GTEST_SKIP() << why_.str();                              \
  } while (0)

namespace prism::test::bowclassify {

namespace bow = prism::bow;
constexpr int kW = 96, kH = 64;
constexpr GstClockTime kFrameDuration = GST_SECOND / 30;
const std::vector<std::string> kClasses = {"horizontal", "vertical", "blobs"};
const char* const kFormats[] = {"GRAY8", "RGB", "BGR", "RGBA", "BGRA", "RGBx", "BGRx", "NV12", "I420"};

inline cv::Mat scene(std::mt19937& rng, int kind) { return prism::test::bow_scene(rng, kind, kW, kH, 0.0); }

class BowClassify : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gst_init(nullptr, nullptr);
    dir_ = new prism::test::TempDir();
    std::mt19937 rng(12345);
    std::vector<cv::Mat> images;
    std::vector<int> labels;
    for (int i = 0; i < 30; ++i) images.push_back(scene(rng, i % 3)), labels.push_back(i % 3);
    bow::TrainConfig c;
    c.k = 24;
    c.samples_per_image = 100;
    c.levels = 1;
    c.device = prism::gpu::Device::kCpu;
    model_ = (dir_->path() / "scenes.bow").string();
    bow::Model::train(images, labels, kClasses, c).save(model_);
  }
  static void TearDownTestSuite() { delete dir_; }
  static inline prism::test::TempDir* dir_ = nullptr;
  static inline std::string model_;
};

// The bus (error, "prism-bowclassify" messages) and what came out.
struct Outcome : prism::test::BusLog {
  Outcome() : BusLog("prism-bowclassify") {}
  std::vector<GstStructure*> params;               // per output buffer: its "bowclassify" param, or null
  GstFlowReturn flow = GST_FLOW_OK;                // the first push that was not OK
  std::vector<bool> top_left_changed;              // per frame: a pixel of the first plane's top-left quarter
  bool bottom_right_changed = false;               // a pixel of the first plane's bottom-right quarter
  bool any_changed = false;                        // any byte of any plane
  bool other_planes_changed = false;               // a byte of a chroma plane (NV12, I420)
  std::vector<std::vector<uint8_t>> first_planes;  // per output frame: its first plane's pixels, row by row
  ~Outcome() {
    for (auto* s : params)
      if (s) gst_structure_free(s);
  }
};

inline std::string caps_string(const char* format) {
  return std::string("video/x-raw,format=") + format + ",width=" + std::to_string(kW) +
         ",height=" + std::to_string(kH) + ",framerate=30/1";
}

// The height of plane p of a mapped frame.
inline int plane_height(const GstVideoFrame& f, guint p) {
  gint comp[GST_VIDEO_MAX_COMPONENTS];
  gst_video_format_info_component(f.info.finfo, p, comp);
  return GST_VIDEO_FRAME_COMP_HEIGHT(&f, comp[0]);
}

// A frame of `grey` in the format of `info`: R = G = B (and A) = grey for the RGB formats, Y = grey
// with neutral chroma for NV12/I420.
inline GstBuffer* frame_buffer(const cv::Mat& grey, const GstVideoInfo& info) {
  GstBuffer* b = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  GstVideoFrame f;
  gst_video_frame_map(&f, &info, b, GST_MAP_WRITE);
  auto* p0 = static_cast<uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&f, 0));
  const int s0 = GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0), ps = GST_VIDEO_FRAME_COMP_PSTRIDE(&f, 0);
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) std::memset(p0 + y * s0 + x * ps, grey.at<uchar>(y, x), ps);
  for (guint p = 1; p < GST_VIDEO_FRAME_N_PLANES(&f); ++p)
    std::memset(GST_VIDEO_FRAME_PLANE_DATA(&f, p), 128,
                size_t(GST_VIDEO_FRAME_PLANE_STRIDE(&f, p)) * plane_height(f, p));
  gst_video_frame_unmap(&f);
  return b;
}

// Which pixels of `out` differ from `in`, by region.
inline void compare(const GstVideoInfo& info, GstBuffer* in, GstBuffer* out, Outcome& o) {
  GstVideoFrame a, b;
  gst_video_frame_map(&a, &info, in, GST_MAP_READ);
  gst_video_frame_map(&b, &info, out, GST_MAP_READ);
  bool top_left = false;
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&a); ++p) {
    const int stride = GST_VIDEO_FRAME_PLANE_STRIDE(&a, p), ps = GST_VIDEO_FRAME_COMP_PSTRIDE(&a, 0);
    const int row_bytes = p == 0 ? kW * ps : stride;
    for (int y = 0; y < plane_height(a, p); ++y)
      for (int i = 0; i < row_bytes; ++i) {
        const size_t at = size_t(y) * stride + i;
        if (static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&a, p))[at] ==
            static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&b, p))[at])
          continue;
        o.any_changed = true;
        const int x = i / ps;
        if (p > 0)
          o.other_planes_changed = true;
        else if (y < kH / 2 && x < kW / 2)
          top_left = true;
        else if (y >= kH / 2 && x >= kW / 2)
          o.bottom_right_changed = true;
      }
  }
  o.top_left_changed.push_back(top_left);
  std::vector<uint8_t> first;
  const int row_bytes = kW * GST_VIDEO_FRAME_COMP_PSTRIDE(&b, 0);
  for (int y = 0; y < kH; ++y) {
    const auto* row = static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&b, 0)) +
                      size_t(y) * GST_VIDEO_FRAME_PLANE_STRIDE(&b, 0);
    first.insert(first.end(), row, row + row_bytes);
  }
  o.first_planes.push_back(std::move(first));
  gst_video_frame_unmap(&a);
  gst_video_frame_unmap(&b);
}

// Pushes `frames` (PTS i/30 s) through "UPSTREAM bowclassify PROPS" in `format`; `before(i,
// element)` runs before frame i is pushed.
inline void run(Outcome& o, const std::string& props, const char* format, const std::vector<cv::Mat>& frames,
                const std::function<void(size_t, GstElement*)>& before = {}, const std::string& upstream = "") {
  // async=false: each frame carries its own result (the async mode is tested on its own).
  GstHarness* h = gst_harness_new_parse((upstream + "bowclassify async=false " + props).c_str());
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  const std::string caps = caps_string(format);
  gst_harness_set_caps_str(h, caps.c_str(), caps.c_str());
  GstVideoInfo info;
  GstCaps* c = gst_caps_from_string(caps.c_str());
  gst_video_info_from_caps(&info, c);
  gst_caps_unref(c);
  GstElement* element = gst_harness_find_element(h, "bowclassify");  // h->element is the parsed bin
  for (size_t i = 0; i < frames.size(); ++i) {
    if (before) before(i, element);
    GstBuffer* in = frame_buffer(frames[i], info);
    GST_BUFFER_PTS(in) = i * kFrameDuration;
    GST_BUFFER_DURATION(in) = kFrameDuration;
    GstBuffer* copy = gst_buffer_copy_deep(in);
    const GstFlowReturn ret = gst_harness_push(h, in);
    o.drain(bus);
    if (ret != GST_FLOW_OK) {
      o.flow = ret;
      if (o.error.empty()) o.error = gst_flow_get_name(ret);
      gst_buffer_unref(copy);
      break;
    }
    GstBuffer* out = gst_harness_pull(h);
    auto* roi = gst_buffer_get_video_region_of_interest_meta(out);
    GstStructure* p = roi ? gst_video_region_of_interest_meta_get_param(roi, "bowclassify") : nullptr;
    if (roi) {
      EXPECT_STREQ(g_quark_to_string(roi->roi_type), "scene");
      EXPECT_EQ(roi->x, 0u);
      EXPECT_EQ(roi->y, 0u);
      EXPECT_EQ(roi->w, guint(kW));
      EXPECT_EQ(roi->h, guint(kH));
    }
    o.params.push_back(p ? gst_structure_copy(p) : nullptr);
    compare(info, copy, out, o);
    gst_buffer_unref(copy);
    gst_buffer_unref(out);
  }
  gst_object_unref(element);
  gst_harness_teardown(h);
  o.drain(bus);
  gst_object_unref(bus);
}

inline std::string str(const GstStructure* s, const char* f) {
  const char* v = s ? gst_structure_get_string(s, f) : nullptr;
  return v ? v : "<none>";
}
inline guint64 u64(const GstStructure* s, const char* f) {
  guint64 v = G_MAXUINT64;
  if (s) gst_structure_get_uint64(s, f, &v);
  return v;
}
inline int integer(const GstStructure* s, const char* f) {
  int v = -1;
  if (s) gst_structure_get_int(s, f, &v);
  return v;
}
inline double real(const GstStructure* s, const char* f) {
  double v = -1;
  if (s) gst_structure_get_double(s, f, &v);
  return v;
}
inline std::string text(const GstStructure* s) {
  if (!s) return "<null>";
  gchar* t = gst_structure_to_string(s);
  std::string r = t;
  g_free(t);
  return r;
}
// The `scores` field (label, score) in order; empty when absent or not an array of structures.
inline std::vector<std::pair<std::string, double>> scores_of(const GstStructure* s) {
  std::vector<std::pair<std::string, double>> out;
  const GValue* a = s ? gst_structure_get_value(s, "scores") : nullptr;
  if (!a || !GST_VALUE_HOLDS_ARRAY(a)) return out;
  for (guint i = 0; i < gst_value_array_get_size(a); ++i) {
    const GValue* v = gst_value_array_get_value(a, i);
    if (!GST_VALUE_HOLDS_STRUCTURE(v)) return {};
    const GstStructure* c = gst_value_get_structure(v);
    out.emplace_back(str(c, "label"), real(c, "score"));
  }
  return out;
}

inline std::vector<guint64> frames_of(const std::vector<GstStructure*>& messages) {
  std::vector<guint64> r;
  for (const GstStructure* m : messages) r.push_back(u64(m, "frame"));
  return r;
}

}  // namespace prism::test::bowclassify
