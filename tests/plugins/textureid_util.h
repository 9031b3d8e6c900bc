// textureid test helpers (test_textureid.cpp on the CPU path, test_textureid_gpu.cpp comparing the
// CUDA matcher with it): the gallery of ../shared/data photos enrolled once per run, frames of a
// photo pushed through a GstHarness with the "prism-textureid" messages and ROI meta collected, and
// the checks of an identified frame.
#pragma once

#include <gtest/gtest.h>

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gst/prism/gstprismimagefile.h"
#include "pipeline_run.h"
#include "prism_test.h"
#include "texture/features.h"
#include "texture/gallery.h"
#include "texture/index.h"

namespace fs = std::filesystem;
namespace texture = prism::texture;

namespace prism::test::textureid {

inline const char* const kEnrolled[] = {"box.png", "graf1.png", "baboon.jpg", "butterfly.jpg"};
inline const char* const kScene = "box_in_scene.png";  // 512x384, shows box.png

inline std::string image_path(const std::string& name) { return prism::test::data_dir() + "/images/" + name; }

// Skips (or fails under PRISM_REQUIRE_DATA=1) when a photo is missing.
#define NEED_IMAGES()                                                   \
  do {                                                                  \
    for (const char* n_ : kEnrolled) PRISM_NEED_FILE(image_path(n_));   \
    PRISM_NEED_FILE(image_path(kScene));                                \
    ASSERT_FALSE(gallery_dir().empty()) << "the gallery was not built"; \
  } while (0)

inline prism::ImageFile load(const std::string& name, GstVideoFormat format) {
  prism::ImageFile im;
  GError* err = nullptr;
  const std::string path = image_path(name);
  if (!prism::image_file_load(path.c_str(), format, &im, &err)) {
    ADD_FAILURE() << (err ? err->message : path);
    g_clear_error(&err);
  }
  return im;
}

// The test gallery, enrolled once per run in a temporary folder.
inline prism::test::TempDir* g_dir = nullptr;
inline std::string g_gallery;
inline const std::string& gallery_dir() { return g_gallery; }

inline void build_gallery() {
  for (const char* n : kEnrolled)
    if (!std::ifstream(image_path(n)).good()) return;
  g_dir = new prism::test::TempDir;
  const std::string dir = g_dir->file("gallery");
  texture::Gallery g = texture::Gallery::open(dir, /*create=*/true);
  for (const char* n : kEnrolled) {
    prism::ImageFile im;
    GError* err = nullptr;
    ASSERT_TRUE(prism::image_file_load_grey(image_path(n).c_str(), &im, &err)) << err->message;
    texture::GalleryEntry e;
    e.id = fs::path(n).stem().string();
    e.source = image_path(n);
    e.features = texture::extract_features(cv::Mat(im.height, im.width, CV_8UC1, im.pixels.data()));
    g.add(std::move(e));
  }
  g_gallery = dir;
}

// A frame in `info`'s layout from a packed single-plane image (the Y plane of NV12/I420, whose
// chroma planes are grey: 128).
inline GstBuffer* make_buffer(const prism::ImageFile& im, const GstVideoInfo& info, guint64 index) {
  GstBuffer* buf = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  GstVideoFrame f;
  EXPECT_TRUE(gst_video_frame_map(&f, &info, buf, GST_MAP_WRITE));
  const size_t row = size_t(im.width) * im.channels;
  for (int y = 0; y < im.height; ++y)
    std::memcpy((uint8_t*)GST_VIDEO_FRAME_PLANE_DATA(&f, 0) + y * GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0),
                im.pixels.data() + y * row, row);
  for (guint p = 1; p < GST_VIDEO_FRAME_N_PLANES(&f); ++p)
    for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(&f, p); ++y)
      std::memset((uint8_t*)GST_VIDEO_FRAME_PLANE_DATA(&f, p) + y * GST_VIDEO_FRAME_PLANE_STRIDE(&f, p), 128,
                  GST_VIDEO_FRAME_PLANE_STRIDE(&f, p));
  gst_video_frame_unmap(&f);
  GST_BUFFER_PTS(buf) = index * GST_SECOND / 30;
  GST_BUFFER_DURATION(buf) = GST_SECOND / 30;
  return buf;
}

struct Roi {
  std::string type;
  int x = 0, y = 0, w = 0, h = 0;
  GstStructure* param = nullptr;  // "textureid", owned
};

// The bus (the first error, "prism-textureid" messages in order) and what came out.
struct Outcome : prism::test::BusLog {
  Outcome() : BusLog("prism-textureid") {}
  std::vector<std::vector<Roi>> rois;  // per output buffer
  bool pixels_unchanged = true;        // every output buffer's bytes equal its input's
  bool memory_shared = true;           // ... and are the very same memory (no pixel copy)
  ~Outcome() {
    for (auto& v : rois)
      for (Roi& r : v)
        if (r.param) gst_structure_free(r.param);
  }
};

inline std::vector<Roi> rois_of(GstBuffer* b) {
  std::vector<Roi> out;
  gpointer state = nullptr;
  while (GstMeta* m = gst_buffer_iterate_meta_filtered(b, &state, GST_VIDEO_REGION_OF_INTEREST_META_API_TYPE)) {
    auto* roi = reinterpret_cast<GstVideoRegionOfInterestMeta*>(m);
    Roi r{g_quark_to_string(roi->roi_type), (int)roi->x, (int)roi->y, (int)roi->w, (int)roi->h, nullptr};
    if (GstStructure* p = gst_video_region_of_interest_meta_get_param(roi, "textureid"))
      r.param = gst_structure_copy(p);
    out.push_back(r);
  }
  return out;
}

// Pushes `frames` through `description` (a bin description with textureid) with input caps
// `caps`; `out_caps` are the harness sink's (empty: the same as `caps`); `setup` (optional) sees
// the harness's element (the bin) before the first push.
inline void run_harness(Outcome& o, const std::string& description, const std::string& caps,
                        const std::vector<const prism::ImageFile*>& frames, const std::string& out_caps = "",
                        const std::function<void(GstElement*)>& setup = {}) {
  GstHarness* h = gst_harness_new_parse(description.c_str());
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  gst_harness_set_caps_str(h, caps.c_str(), (out_caps.empty() ? caps : out_caps).c_str());
  if (setup) setup(h->element);
  GstVideoInfo info;
  GstCaps* c = gst_caps_from_string(caps.c_str());
  EXPECT_TRUE(gst_video_info_from_caps(&info, c));
  gst_caps_unref(c);
  const bool same_caps = out_caps.empty();
  for (size_t i = 0; i < frames.size(); ++i) {
    GstBuffer* in = make_buffer(*frames[i], info, i);
    gst_buffer_ref(in);  // kept to compare: the element sees a shared (not writable) buffer
    const GstFlowReturn ret = gst_harness_push(h, in);
    o.drain(bus);
    if (ret != GST_FLOW_OK) {
      if (o.error.empty()) o.error = std::string("push: ") + gst_flow_get_name(ret);
      gst_buffer_unref(in);
      break;
    }
    GstBuffer* out = gst_harness_pull(h);
    o.rois.push_back(rois_of(out));
    if (same_caps) {
      GstMapInfo a, b;
      gst_buffer_map(in, &a, GST_MAP_READ);
      gst_buffer_map(out, &b, GST_MAP_READ);
      o.pixels_unchanged &= a.size == b.size && std::memcmp(a.data, b.data, a.size) == 0;
      o.memory_shared &= a.data == b.data;
      gst_buffer_unmap(in, &a);
      gst_buffer_unmap(out, &b);
    }
    gst_buffer_unref(in);
    gst_buffer_unref(out);
  }
  gst_harness_teardown(h);
  o.drain(bus);
  gst_object_unref(bus);
}

// Sets `element` (made from `description`) to PAUSED: FALSE and the error's text when it fails.
inline bool starts(const std::string& description, std::string& error) {
  GError* err = nullptr;
  GstElement* e = gst_parse_bin_from_description(description.c_str(), FALSE, &err);
  if (!e) {
    error = err ? err->message : "parse failed";
    g_clear_error(&err);
    return false;
  }
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(e, bus);
  const bool ok = gst_element_set_state(e, GST_STATE_PAUSED) != GST_STATE_CHANGE_FAILURE;
  Outcome o;
  o.drain(bus);
  error = o.error;
  gst_element_set_state(e, GST_STATE_NULL);
  gst_element_set_bus(e, nullptr);
  gst_object_unref(bus);
  gst_object_unref(e);
  return ok;
}

inline std::string caps_of(const char* format, const prism::ImageFile& im) {
  return std::string("video/x-raw,format=") + format + ",width=" + std::to_string(im.width) +
         ",height=" + std::to_string(im.height) + ",framerate=30/1";
}

inline std::string str(const GstStructure* s, const char* field) {
  const char* v = gst_structure_get_string(s, field);
  return v ? v : "<none>";
}

inline int integer(const GstStructure* s, const char* field) {
  int v = -1;
  EXPECT_TRUE(gst_structure_get_int(s, field, &v)) << field;
  return v;
}

inline double real(const GstStructure* s, const char* field) {
  double v = -1;
  EXPECT_TRUE(gst_structure_get_double(s, field, &v)) << field << " in " << gst_structure_to_string(s);
  return v;
}
inline bool boolean(const GstStructure* s, const char* field) {
  gboolean v = FALSE;
  EXPECT_TRUE(gst_structure_get_boolean(s, field, &v)) << field;
  return v;
}

inline guint64 frame_of(const GstStructure* s) {
  guint64 v = G_MAXUINT64;
  EXPECT_TRUE(gst_structure_get_uint64(s, "frame", &v));
  return v;
}

// The numbers of an array field (textureid's homography and quad); empty when absent.
inline std::vector<double> doubles_of(const GstStructure* s, const char* field) {
  std::vector<double> out;
  const GValue* a = gst_structure_get_value(s, field);
  if (!a || !GST_VALUE_HOLDS_ARRAY(a)) return out;
  for (guint i = 0; i < gst_value_array_get_size(a); ++i) {
    const GValue* v = gst_value_array_get_value(a, i);
    EXPECT_TRUE(G_VALUE_HOLDS_DOUBLE(v)) << field << "[" << i << "]";
    out.push_back(G_VALUE_HOLDS_DOUBLE(v) ? g_value_get_double(v) : NAN);
  }
  return out;
}

// The message and the meta of a frame identified as `id`.
inline void expect_identified(const Outcome& o, size_t message, size_t buffer, const std::string& id, const char* mode,
                              int width, int height) {
  ASSERT_GT(o.messages.size(), message);
  const GstStructure* m = o.messages[message];
  EXPECT_TRUE(boolean(m, "identified")) << gst_structure_to_string(m);
  EXPECT_EQ(str(m, "id"), id);
  EXPECT_EQ(str(m, "mode"), mode);
  const int inliers = integer(m, "inliers");
  EXPECT_GE(inliers, texture::SearchParams{}.min_inliers);
  EXPECT_GE(integer(m, "matches"), inliers);
  const double score = real(m, "score");  // the significance the decision is made on
  EXPECT_GE(score, texture::SearchParams{}.min_significance);
  // The binomial tail at kChanceInlier, less where the homography squeezes the query (chance_inlier),
  // and, for a search, less log10 of the candidates verified.
  const double chance = texture::chance_significance(inliers, integer(m, "matches"));
  EXPECT_LE(score, chance + 1e-9);
  double latency = 0;
  EXPECT_TRUE(gst_structure_get_double(m, "latency-ms", &latency));
  EXPECT_GT(latency, 0.0);
  guint64 pts = 0;
  EXPECT_TRUE(gst_structure_get_uint64(m, "timestamp", &pts));
  ASSERT_GT(o.rois.size(), buffer);
  ASSERT_EQ(o.rois[buffer].size(), 1u);
  const Roi& r = o.rois[buffer][0];
  EXPECT_EQ(r.type, "texture");
  // The inliers' box lies in the frame and is a real part of it (the box is ~1/4 of the scene).
  EXPECT_GE(r.x, 0);
  EXPECT_GE(r.y, 0);
  EXPECT_LE(r.x + r.w, width);
  EXPECT_LE(r.y + r.h, height);
  EXPECT_GT(r.w, 40);
  EXPECT_GT(r.h, 40);
  ASSERT_NE(r.param, nullptr) << "no 'textureid' param";
  EXPECT_EQ(str(r.param, "id"), id);
  EXPECT_TRUE(boolean(r.param, "identified"));
  EXPECT_EQ(integer(r.param, "inliers"), inliers);
  EXPECT_EQ(real(r.param, "score"), score);
  EXPECT_EQ(integer(r.param, "matches"), integer(m, "matches"));
  EXPECT_TRUE(gst_structure_has_field(r.param, "latency-ms"));
  // where the gallery image lies (test_textureid.cpp checks the values): in the message and the meta
  EXPECT_EQ(doubles_of(m, "homography").size(), 9u) << gst_structure_to_string(m);
  EXPECT_EQ(doubles_of(m, "quad").size(), 8u) << gst_structure_to_string(m);
  EXPECT_EQ(doubles_of(r.param, "homography"), doubles_of(m, "homography"));
  EXPECT_EQ(doubles_of(r.param, "quad"), doubles_of(m, "quad"));
}

class TextureId : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gst_init(nullptr, nullptr);
    build_gallery();
  }
  static void TearDownTestSuite() {
    delete g_dir;
    g_dir = nullptr;
    g_gallery.clear();
  }
  // async=false: each frame carries its own result (the async mode is tested on its own).
  std::string element(const std::string& props = "") const {
    return "textureid gallery=\"" + gallery_dir() + "\" device=cpu async=false " + props;
  }
  prism::test::TempDir dir;
};

}  // namespace prism::test::textureid
