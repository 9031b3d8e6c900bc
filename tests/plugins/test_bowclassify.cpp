// bowclassify on the CPU path with GstHarness: a small model trained in the test on synthetic scenes
// (horizontal stripes, vertical stripes, blobs), frames of each class in every input format, the
// interval (messages on due frames, the last result's meta on every frame, changed while playing),
// the overlay, a missing or damaged model refused with the property named, unsupported caps, a
// parse-launched pipeline and configs/bow-video.yaml through prism run.
#include <gtest/gtest.h>

#include <gst/base/gstbasetransform.h>
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
#include <vector>

#include "bow/model.h"
#include "bow_scenes.h"
#include "prism_run_util.h"
#include "prism_test.h"

// Skips with a message on stderr too, so that a skipped test is seen in ctest's output.
#define SKIP_LOUDLY(msg)                                  \
  do {                                                    \
    std::ostringstream why_;                              \
    why_ << msg;                                          \
    std::cerr << "*** SKIPPING: " << why_.str() << " ***\n"; \
    GTEST_SKIP() << why_.str();                           \
  } while (0)

namespace {

namespace bow = prism::bow;
constexpr int kW = 96, kH = 64;
constexpr GstClockTime kFrameDuration = GST_SECOND / 30;
const std::vector<std::string> kClasses = {"horizontal", "vertical", "blobs"};
const char* const kFormats[] = {"GRAY8", "RGB", "BGR", "RGBA", "BGRA", "RGBx", "BGRx", "NV12", "I420"};

cv::Mat scene(std::mt19937& rng, int kind) { return prism::test::bow_scene(rng, kind, kW, kH, 0.0); }

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
  static prism::test::TempDir* dir_;
  static std::string model_;
};
prism::test::TempDir* BowClassify::dir_ = nullptr;
std::string BowClassify::model_;

struct Outcome {
  std::vector<GstStructure*> messages;  // prism-bowclassify
  std::vector<GstStructure*> params;    // per output buffer: its "bowclassify" param, or null
  std::string error;
  GstFlowReturn flow = GST_FLOW_OK;       // the first push that was not OK
  std::vector<bool> top_left_changed;     // per frame: a pixel of the first plane's top-left quarter
  bool bottom_right_changed = false;      // a pixel of the first plane's bottom-right quarter
  bool any_changed = false;               // any byte of any plane
  bool other_planes_changed = false;      // a byte of a chroma plane (NV12, I420)
  std::vector<std::vector<uint8_t>> first_planes;  // per output frame: its first plane's pixels, row by row
  ~Outcome() {
    for (auto* s : messages) gst_structure_free(s);
    for (auto* s : params)
      if (s) gst_structure_free(s);
  }
};

void drain(GstBus* bus, Outcome& o) {
  while (GstMessage* m = gst_bus_pop(bus)) {
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) {
      GError* e = nullptr;
      gst_message_parse_error(m, &e, nullptr);
      o.error = e->message;
      g_clear_error(&e);
    } else if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ELEMENT &&
               gst_structure_has_name(gst_message_get_structure(m), "prism-bowclassify")) {
      o.messages.push_back(gst_structure_copy(gst_message_get_structure(m)));
    }
    gst_message_unref(m);
  }
}

std::string caps_string(const char* format) {
  return std::string("video/x-raw,format=") + format + ",width=" + std::to_string(kW) +
         ",height=" + std::to_string(kH) + ",framerate=30/1";
}

// The height of plane p of a mapped frame.
int plane_height(const GstVideoFrame& f, guint p) {
  gint comp[GST_VIDEO_MAX_COMPONENTS];
  gst_video_format_info_component(f.info.finfo, p, comp);
  return GST_VIDEO_FRAME_COMP_HEIGHT(&f, comp[0]);
}

// A frame of `grey` in the format of `info`: R = G = B (and A) = grey for the RGB formats, Y = grey
// with neutral chroma for NV12/I420.
GstBuffer* frame_buffer(const cv::Mat& grey, const GstVideoInfo& info) {
  GstBuffer* b = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  GstVideoFrame f;
  gst_video_frame_map(&f, &info, b, GST_MAP_WRITE);
  auto* p0 = static_cast<uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&f, 0));
  const int s0 = GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0), ps = GST_VIDEO_FRAME_COMP_PSTRIDE(&f, 0);
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) std::memset(p0 + y * s0 + x * ps, grey.at<uchar>(y, x), ps);
  for (guint p = 1; p < GST_VIDEO_FRAME_N_PLANES(&f); ++p)
    std::memset(GST_VIDEO_FRAME_PLANE_DATA(&f, p), 128, size_t(GST_VIDEO_FRAME_PLANE_STRIDE(&f, p)) * plane_height(f, p));
  gst_video_frame_unmap(&f);
  return b;
}

// Which pixels of `out` differ from `in`, by region.
void compare(const GstVideoInfo& info, GstBuffer* in, GstBuffer* out, Outcome& o) {
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
        if (p > 0) o.other_planes_changed = true;
        else if (y < kH / 2 && x < kW / 2) top_left = true;
        else if (y >= kH / 2 && x >= kW / 2) o.bottom_right_changed = true;
      }
  }
  o.top_left_changed.push_back(top_left);
  std::vector<uint8_t> first;
  const int row_bytes = kW * GST_VIDEO_FRAME_COMP_PSTRIDE(&b, 0);
  for (int y = 0; y < kH; ++y) {
    const auto* row = static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&b, 0)) + size_t(y) * GST_VIDEO_FRAME_PLANE_STRIDE(&b, 0);
    first.insert(first.end(), row, row + row_bytes);
  }
  o.first_planes.push_back(std::move(first));
  gst_video_frame_unmap(&a);
  gst_video_frame_unmap(&b);
}

// Pushes `frames` (PTS i/30 s) through "UPSTREAM bowclassify PROPS" in `format`; `before(i,
// element)` runs before frame i is pushed.
void run(Outcome& o, const std::string& props, const char* format, const std::vector<cv::Mat>& frames,
         const std::function<void(size_t, GstElement*)>& before = {}, const std::string& upstream = "") {
  GstHarness* h = gst_harness_new_parse((upstream + "bowclassify " + props).c_str());
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
    drain(bus, o);
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
  drain(bus, o);
  gst_object_unref(bus);
}

std::string str(const GstStructure* s, const char* f) {
  const char* v = s ? gst_structure_get_string(s, f) : nullptr;
  return v ? v : "<none>";
}
guint64 u64(const GstStructure* s, const char* f) {
  guint64 v = G_MAXUINT64;
  if (s) gst_structure_get_uint64(s, f, &v);
  return v;
}
int integer(const GstStructure* s, const char* f) {
  int v = -1;
  if (s) gst_structure_get_int(s, f, &v);
  return v;
}
double real(const GstStructure* s, const char* f) {
  double v = -1;
  if (s) gst_structure_get_double(s, f, &v);
  return v;
}
std::string text(const GstStructure* s) {
  if (!s) return "<null>";
  gchar* t = gst_structure_to_string(s);
  std::string r = t;
  g_free(t);
  return r;
}
std::vector<guint64> frames_of(const std::vector<GstStructure*>& messages) {
  std::vector<guint64> r;
  for (const GstStructure* m : messages) r.push_back(u64(m, "frame"));
  return r;
}

TEST_F(BowClassify, IsRegisteredWithDocumentedProperties) {
  GstElement* e = gst_element_factory_make("bowclassify", nullptr);
  ASSERT_NE(e, nullptr) << "bowclassify not found; GST_PLUGIN_PATH=" << g_getenv("GST_PLUGIN_PATH");
  GstElementFactory* factory = gst_element_get_factory(e);
  EXPECT_STREQ(gst_element_factory_get_metadata(factory, GST_ELEMENT_METADATA_KLASS), "Filter/Analyzer/Video");
  EXPECT_NE(std::string(gst_element_factory_get_metadata(factory, GST_ELEMENT_METADATA_DESCRIPTION))
                .find("bag-of-visual-words"),
            std::string::npos);
  for (const char* name : {"model", "interval", "overlay", "device"}) {
    GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), name);
    ASSERT_NE(ps, nullptr) << name;
    EXPECT_GT(strlen(g_param_spec_get_blurb(ps)), 30u) << name;
  }
  // interval and overlay may change while playing; the model is read at start.
  for (const char* name : {"interval", "overlay"})
    EXPECT_TRUE(g_object_class_find_property(G_OBJECT_GET_CLASS(e), name)->flags & GST_PARAM_MUTABLE_PLAYING) << name;
  gchar* model = nullptr;
  guint interval = 0;
  gboolean overlay = TRUE;
  g_object_get(e, "model", &model, "interval", &interval, "overlay", &overlay, nullptr);
  EXPECT_EQ(model, nullptr);
  EXPECT_EQ(interval, 30u);
  EXPECT_FALSE(overlay);
  g_free(model);
  gst_object_unref(e);
}

TEST_F(BowClassify, LabelsEachSceneInEveryFormat) {
  std::mt19937 rng(std::random_device{}());
  for (const char* format : kFormats) {
    for (int kind = 0; kind < 3; ++kind) {
      SCOPED_TRACE(std::string(format) + " " + kClasses[kind]);
      Outcome o;
      run(o, "device=cpu interval=1 model=\"" + model_ + "\"", format, {scene(rng, kind), scene(rng, kind)});
      ASSERT_EQ(o.error, "");
      ASSERT_EQ(o.messages.size(), 2u);
      ASSERT_EQ(o.params.size(), 2u);
      for (guint64 i = 0; i < 2; ++i) {
        const GstStructure* m = o.messages[i];
        const GstStructure* p = o.params[i];
        EXPECT_EQ(u64(m, "frame"), i) << text(m);
        EXPECT_EQ(u64(m, "timestamp"), i * kFrameDuration) << text(m);
        EXPECT_EQ(u64(m, "running-time"), i * kFrameDuration) << text(m);
        EXPECT_EQ(str(m, "label"), kClasses[kind]) << text(m);
        EXPECT_EQ(integer(m, "class-index"), kind) << text(m);
        EXPECT_GT(real(m, "confidence"), 1.0 / 3) << text(m);
        EXPECT_LE(real(m, "confidence"), 1.0) << text(m);
        EXPECT_GE(real(m, "latency-ms"), 0.0) << text(m);
        // the meta holds the same result
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(str(p, "label"), kClasses[kind]) << text(p);
        EXPECT_EQ(integer(p, "class-index"), kind) << text(p);
        EXPECT_EQ(real(p, "confidence"), real(m, "confidence")) << text(p);
        EXPECT_EQ(u64(p, "frame"), i) << text(p);
      }
      EXPECT_FALSE(o.any_changed) << "overlay is off: pixels must pass untouched";
    }
  }
}

TEST_F(BowClassify, IntervalPostsOnDueFramesAndCarriesTheResult) {
  std::mt19937 rng(std::random_device{}());
  std::vector<cv::Mat> frames;
  for (int i = 0; i < 7; ++i) frames.push_back(scene(rng, i < 3 ? 0 : 1));  // the scene changes at frame 3
  Outcome o;
  run(o, "device=cpu interval=3 model=\"" + model_ + "\"", "GRAY8", frames);
  ASSERT_EQ(o.error, "");
  EXPECT_EQ(frames_of(o.messages), (std::vector<guint64>{0, 3, 6}));
  ASSERT_EQ(o.messages.size(), 3u);
  EXPECT_EQ(str(o.messages[0], "label"), "horizontal");
  EXPECT_EQ(str(o.messages[1], "label"), "vertical");
  EXPECT_EQ(str(o.messages[2], "label"), "vertical");
  ASSERT_EQ(o.params.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    SCOPED_TRACE("frame " + std::to_string(i));
    ASSERT_NE(o.params[i], nullptr) << "every frame carries the last result";
    const GstStructure* from = o.messages[i / 3];
    EXPECT_EQ(u64(o.params[i], "frame"), guint64(i / 3 * 3));
    EXPECT_EQ(str(o.params[i], "label"), str(from, "label"));
    EXPECT_EQ(integer(o.params[i], "class-index"), integer(from, "class-index"));
    EXPECT_EQ(real(o.params[i], "confidence"), real(from, "confidence"));
  }
  EXPECT_FALSE(o.any_changed);
}

TEST_F(BowClassify, IntervalZeroIsEveryFrameAndIntervalCanChangeWhilePlaying) {
  std::mt19937 rng(std::random_device{}());
  std::vector<cv::Mat> frames;
  for (int i = 0; i < 6; ++i) frames.push_back(scene(rng, i % 3));
  {
    Outcome o;
    run(o, "device=cpu interval=0 model=\"" + model_ + "\"", "GRAY8", frames);
    ASSERT_EQ(o.error, "");
    EXPECT_EQ(frames_of(o.messages), (std::vector<guint64>{0, 1, 2, 3, 4, 5}));
    for (size_t i = 0; i < o.messages.size(); ++i) EXPECT_EQ(str(o.messages[i], "label"), kClasses[i % 3]) << i;
  }
  {
    Outcome o;
    run(o, "device=cpu interval=100 model=\"" + model_ + "\"", "GRAY8", frames, [](size_t i, GstElement* e) {
      if (i == 3) g_object_set(e, "interval", 2u, nullptr);
    });
    ASSERT_EQ(o.error, "");
    EXPECT_EQ(frames_of(o.messages), (std::vector<guint64>{0, 3, 5}));
    ASSERT_EQ(o.params.size(), 6u);
    const guint64 from[] = {0, 0, 0, 3, 3, 5};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(u64(o.params[i], "frame"), from[i]) << i;
  }
}

TEST_F(BowClassify, OverlayWritesTheLabelInTheTopLeftCornerOnly) {
  std::mt19937 rng(std::random_device{}());
  for (const char* format : {"GRAY8", "RGB", "BGRx", "NV12", "I420"}) {
    SCOPED_TRACE(format);
    Outcome o;
    // interval 2: frame 1 is not classified but still shows the latest label
    run(o, "device=cpu interval=2 overlay=true model=\"" + model_ + "\"", format, {scene(rng, 2), scene(rng, 2)});
    ASSERT_EQ(o.error, "");
    EXPECT_EQ(o.messages.size(), 1u);
    EXPECT_EQ(o.top_left_changed, (std::vector<bool>{true, true}));
    EXPECT_FALSE(o.bottom_right_changed);
    EXPECT_FALSE(o.other_planes_changed) << "the label goes on the Y plane only";
  }
  // overlay may be switched on while playing
  Outcome o;
  run(o, "device=cpu interval=1 model=\"" + model_ + "\"", "RGB", {scene(rng, 0), scene(rng, 0)},
      [](size_t i, GstElement* e) {
        if (i == 1) g_object_set(e, "overlay", TRUE, nullptr);
      });
  ASSERT_EQ(o.error, "");
  EXPECT_EQ(o.top_left_changed, (std::vector<bool>{false, true}));
}

// Sets "bowclassify PROPS" to PAUSED: whether it started, and the error's text when not.
bool starts(const std::string& props, std::string& error) {
  GError* err = nullptr;
  GstElement* e = gst_parse_bin_from_description(("bowclassify " + props).c_str(), FALSE, &err);
  if (!e) {
    error = err ? err->message : "parse failed";
    g_clear_error(&err);
    return false;
  }
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(e, bus);
  const bool ok = gst_element_set_state(e, GST_STATE_PAUSED) != GST_STATE_CHANGE_FAILURE;
  Outcome o;
  drain(bus, o);
  error = o.error;
  gst_element_set_state(e, GST_STATE_NULL);
  gst_element_set_bus(e, nullptr);
  gst_object_unref(bus);
  gst_object_unref(e);
  return ok;
}

TEST_F(BowClassify, MissingOrDamagedModelsAreRefusedNamingTheProperty) {
  prism::test::TempDir dir;
  std::mt19937 rng(7);
  std::string garbage(4096, '\0');
  for (char& c : garbage) c = char(rng());
  std::ifstream real_model(model_, std::ios::binary);
  const std::string whole((std::istreambuf_iterator<char>(real_model)), std::istreambuf_iterator<char>());
  ASSERT_GT(whole.size(), 100u);
  const std::string paths[] = {
      dir.file("missing.bow"),
      dir.write("garbage.bow", garbage),
      dir.write("magic-only.bow", "PRISMBOW and then nothing sensible"),
      dir.write("truncated.bow", whole.substr(0, whole.size() / 2)),
  };
  std::string error;
  for (const std::string& path : paths) {
    EXPECT_FALSE(starts("model=\"" + path + "\"", error)) << path;
    EXPECT_NE(error.find("property 'model'"), std::string::npos) << error;
    EXPECT_NE(error.find(path), std::string::npos) << error;
  }
  EXPECT_FALSE(starts("", error));
  EXPECT_NE(error.find("property 'model' is not set"), std::string::npos) << error;
  EXPECT_TRUE(starts("model=\"" + model_ + "\"", error)) << error;
}

TEST_F(BowClassify, RefusesFormatsItCannotRead) {
  GstHarness* h = gst_harness_new_parse(("bowclassify model=\"" + model_ + "\"").c_str());
  GstPad* sink = gst_element_get_static_pad(h->element, "sink");
  for (const char* format : kFormats) {
    GstCaps* caps = gst_caps_from_string(caps_string(format).c_str());
    EXPECT_TRUE(gst_pad_query_accept_caps(sink, caps)) << format;
    gst_caps_unref(caps);
  }
  GstCaps* caps = gst_caps_from_string("video/x-raw,format=GRAY16_LE,width=8,height=8,framerate=30/1");
  EXPECT_FALSE(gst_pad_query_accept_caps(sink, caps));
  gst_caps_unref(caps);
  gst_object_unref(sink);
  // A GRAY16_LE stream does not negotiate: its buffers are refused.
  gst_harness_set_src_caps_str(h, "video/x-raw,format=GRAY16_LE,width=8,height=8,framerate=30/1");
  EXPECT_EQ(gst_harness_push(h, gst_buffer_new_allocate(nullptr, 8 * 8 * 2, nullptr)), GST_FLOW_NOT_NEGOTIATED);
  gst_harness_teardown(h);
}

// device=cuda: the GPU histogram path gives the same labels as the CPU.
TEST_F(BowClassify, DeviceCudaLabelsAsTheCpu) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  std::vector<cv::Mat> frames;
  for (int i = 0; i < 9; ++i) frames.push_back(scene(rng, i % 3));
  Outcome cpu, gpu;
  run(cpu, "device=cpu interval=1 model=\"" + model_ + "\"", "GRAY8", frames);
  run(gpu, "device=cuda interval=1 model=\"" + model_ + "\"", "GRAY8", frames);
  ASSERT_EQ(gpu.error, "");
  ASSERT_EQ(gpu.messages.size(), cpu.messages.size());
  for (size_t i = 0; i < cpu.messages.size(); ++i) EXPECT_EQ(str(gpu.messages[i], "label"), str(cpu.messages[i], "label")) << i;
}

// Frames in GPU memory (cudaupload ! video/x-raw(memory:CUDAMemory) ! bowclassify ! cudadownload):
// the Y plane is read in place on the GPU, and the labels and the drawn label box are the CPU path's.
TEST_F(BowClassify, CudaMemoryFramesAreLabelledAndDrawnInPlace) {
  PRISM_NEED_GPU();
  for (const char* f : {"cudaupload", "cudadownload"}) {
    GstElementFactory* factory = gst_element_factory_find(f);
    if (!factory) {
      if (g_getenv("PRISM_REQUIRE_GPU")) FAIL() << f << " (GStreamer's nvcodec plugin) is missing";
      SKIP_LOUDLY(f << " (GStreamer's nvcodec plugin) is not installed");
    }
    gst_object_unref(factory);
  }
  std::mt19937 rng(std::random_device{}());
  std::vector<cv::Mat> frames;
  for (int i = 0; i < 6; ++i) frames.push_back(scene(rng, i % 3));
  for (const char* format : {"NV12", "I420"}) {
    Outcome cpu, gpu;
    run(cpu, "device=cpu interval=2 overlay=true model=\"" + model_ + "\"", format, frames);
    std::string sink_caps;
    run(gpu, "device=cuda interval=2 overlay=true model=\"" + model_ + "\" ! cudadownload", format, frames,
        [&](size_t i, GstElement* e) {
          if (i != 1) return;
          GstPad* pad = gst_element_get_static_pad(e, "sink");
          if (GstCaps* c = gst_pad_get_current_caps(pad)) {
            gchar* t = gst_caps_to_string(c);
            sink_caps = t;
            g_free(t);
            gst_caps_unref(c);
          }
          gst_object_unref(pad);
        },
        "cudaupload ! video/x-raw(memory:CUDAMemory) ! ");
    ASSERT_EQ(gpu.error, "") << format;
    EXPECT_NE(sink_caps.find("memory:CUDAMemory"), std::string::npos) << format << ": " << sink_caps;
    ASSERT_EQ(gpu.messages.size(), cpu.messages.size()) << format;
    for (size_t i = 0; i < cpu.messages.size(); ++i)
      EXPECT_EQ(str(gpu.messages[i], "label"), str(cpu.messages[i], "label")) << format << " " << i;
    ASSERT_EQ(gpu.first_planes.size(), frames.size()) << format;
    for (size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(gpu.first_planes[i], cpu.first_planes[i]) << format << " frame " << i;
    EXPECT_TRUE(gpu.top_left_changed[0]) << format;
    EXPECT_FALSE(gpu.bottom_right_changed) << format;
    EXPECT_FALSE(gpu.other_planes_changed) << format;
  }
}

// GstPrismCudaFilter's in-place shape on the CPU path, through bowclassify: in place and never
// passthrough although both pads carry the same caps; a shared input buffer gets a writable
// shallow copy that shares its pixels (a read map copies nothing) and takes the meta, while the
// caller's buffer keeps none; a write map (overlay) copies the shared pixels instead of writing
// into the caller's buffer.
TEST_F(BowClassify, InPlaceOnTheBaseClassSharesPixelsUntilWritten) {
  GstElement* e = gst_element_factory_make("bowclassify", nullptr);
  ASSERT_NE(e, nullptr);
  gst_util_set_object_arg(G_OBJECT(e), "device", "cpu");
  g_object_set(e, "interval", 1u, "model", model_.c_str(), nullptr);
  GstHarness* h = gst_harness_new_with_element(e, "sink", "src");
  EXPECT_TRUE(g_type_is_a(G_OBJECT_TYPE(e), g_type_from_name("GstPrismCudaFilter")));
  EXPECT_NE(g_object_class_find_property(G_OBJECT_GET_CLASS(e), "cuda-device-id"), nullptr);
  const std::string caps = caps_string("GRAY8");
  gst_harness_set_caps_str(h, caps.c_str(), caps.c_str());
  GstVideoInfo info;
  gst_video_info_set_format(&info, GST_VIDEO_FORMAT_GRAY8, kW, kH);
  std::mt19937 rng(3);
  for (const bool overlay : {false, true}) {
    SCOPED_TRACE(overlay ? "overlay" : "read only");
    g_object_set(e, "overlay", gboolean(overlay), nullptr);
    GstBuffer* in = frame_buffer(scene(rng, 0), info);
    GstBuffer* before = gst_buffer_copy_deep(in);
    gst_buffer_ref(in);  // shared: the element must not write into it
    ASSERT_EQ(gst_harness_push(h, in), GST_FLOW_OK);
    GstBuffer* out = gst_harness_pull(h);
    ASSERT_NE(out, nullptr);
    EXPECT_TRUE(gst_base_transform_is_in_place(GST_BASE_TRANSFORM(e)));
    EXPECT_FALSE(gst_base_transform_is_passthrough(GST_BASE_TRANSFORM(e)));
    EXPECT_NE(gst_buffer_get_video_region_of_interest_meta(out), nullptr);
    EXPECT_EQ(gst_buffer_get_video_region_of_interest_meta(in), nullptr) << "the caller's buffer was changed";
    GstMapInfo a, b, c;
    ASSERT_TRUE(gst_buffer_map(in, &a, GST_MAP_READ));
    ASSERT_TRUE(gst_buffer_map(out, &b, GST_MAP_READ));
    ASSERT_TRUE(gst_buffer_map(before, &c, GST_MAP_READ));
    EXPECT_EQ(std::memcmp(a.data, c.data, c.size), 0) << "the caller's pixels were changed";
    EXPECT_EQ(a.data == b.data, !overlay) << "pixels shared when only read, copied when written";
    EXPECT_EQ(std::memcmp(b.data, c.data, c.size) != 0, overlay);
    gst_buffer_unmap(in, &a);
    gst_buffer_unmap(out, &b);
    gst_buffer_unmap(before, &c);
    for (GstBuffer* buf : {in, out, before}) gst_buffer_unref(buf);
  }
  gst_harness_teardown(h);
  gst_object_unref(e);
}

// device=cpu never offers memory:CUDAMemory (so cudaupload upstream keeps system memory).
TEST_F(BowClassify, CpuPathOffersNoCudaMemoryCaps) {
  GstElement* e = gst_element_factory_make("bowclassify", nullptr);
  ASSERT_NE(e, nullptr);
  g_object_set(e, "device", 2 /* cpu */, nullptr);
  GstPad* pad = gst_element_get_static_pad(e, "sink");
  GstCaps* caps = gst_pad_query_caps(pad, nullptr);
  ASSERT_FALSE(gst_caps_is_empty(caps));
  for (guint i = 0; i < gst_caps_get_size(caps); ++i) {
    GstCapsFeatures* f = gst_caps_get_features(caps, i);
    EXPECT_FALSE(f && !gst_caps_features_is_any(f) && gst_caps_features_contains(f, "memory:CUDAMemory")) << i;
  }
  gst_caps_unref(caps);
  gst_object_unref(pad);
  gst_object_unref(e);
}

// appsrc (GRAY8 vertical stripes) ! videoconvert ! bowclassify ! fakesink, launched from a string.
TEST_F(BowClassify, ParseLaunchedPipelineReachesEosWithMessages) {
  for (const char* f : {"appsrc", "videoconvert", "fakesink"}) {
    GstElementFactory* factory = gst_element_factory_find(f);
    if (!factory) SKIP_LOUDLY(f << " is not installed");
    gst_object_unref(factory);
  }
  const std::string launch = "appsrc name=src format=time caps=\"" + caps_string("GRAY8") +
                             "\" ! videoconvert ! video/x-raw,format=BGRx ! bowclassify device=cpu interval=3 "
                             "model=\"" + model_ + "\" ! fakesink";
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(launch.c_str(), &err);
  ASSERT_NE(p, nullptr) << (err ? err->message : "");
  ASSERT_EQ(err, nullptr) << err->message;
  GstElement* src = gst_bin_get_by_name(GST_BIN(p), "src");
  GstVideoInfo info;
  gst_video_info_set_format(&info, GST_VIDEO_FORMAT_GRAY8, kW, kH);
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 7; ++i) {
    GstBuffer* b = frame_buffer(scene(rng, 1), info);
    GST_BUFFER_PTS(b) = i * kFrameDuration;
    GST_BUFFER_DURATION(b) = kFrameDuration;
    GstFlowReturn ret = GST_FLOW_ERROR;
    g_signal_emit_by_name(src, "push-buffer", b, &ret);  // the signal does not take the buffer
    gst_buffer_unref(b);
    ASSERT_EQ(ret, GST_FLOW_OK);
  }
  GstFlowReturn ret = GST_FLOW_ERROR;
  g_signal_emit_by_name(src, "end-of-stream", &ret);
  gst_object_unref(src);
  GstBus* bus = gst_element_get_bus(p);
  gst_element_set_state(p, GST_STATE_PLAYING);
  Outcome o;
  bool eos = false;
  while (GstMessage* m = gst_bus_timed_pop_filtered(
             bus, 60 * GST_SECOND, (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_ELEMENT))) {
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_EOS) {
      eos = true;
      gst_message_unref(m);
      break;
    }
    const bool error = GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR;
    if (error) {
      GError* e = nullptr;
      gst_message_parse_error(m, &e, nullptr);
      o.error = e->message;
      g_clear_error(&e);
    } else if (gst_structure_has_name(gst_message_get_structure(m), "prism-bowclassify")) {
      o.messages.push_back(gst_structure_copy(gst_message_get_structure(m)));
    }
    gst_message_unref(m);
    if (error) break;
  }
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(p);
  EXPECT_TRUE(eos) << o.error;
  EXPECT_EQ(frames_of(o.messages), (std::vector<guint64>{0, 3, 6}));
  for (const GstStructure* m : o.messages) {
    EXPECT_EQ(str(m, "label"), "vertical") << text(m);
    EXPECT_EQ(u64(m, "timestamp"), u64(m, "frame") * kFrameDuration) << text(m);
  }
}

// configs/bow-video.yaml through `prism run` on the real video, with the test's model.
TEST_F(BowClassify, BowVideoConfigLabelsTheVideo) {
  const std::string video = prism::test::data_dir() + "/video/vtest.mp4";
  PRISM_NEED_FILE(video);
  const std::string exe = prism::test::prism_executable();
  if (exe.empty()) SKIP_LOUDLY("no prism binary (" << PRISM_EXE << " or on PATH)");
  const std::string config = prism::test::source_config("bow-video.yaml");
  if (!std::filesystem::exists(config)) SKIP_LOUDLY("no " << config << " (set PRISM_SOURCE_DIR)");
  for (const char* f : {"qtdemux", "h264parse", "openh264dec", "identity", "videoconvert"}) {
    GstElementFactory* factory = gst_element_factory_find(f);
    if (!factory) SKIP_LOUDLY(f << " is not installed");
    gst_object_unref(factory);
  }
  // The results are in the element's debug log (prism run does not print element messages).
  const std::string cmd = "GST_DEBUG=bowclassify:5 GST_DEBUG_NO_COLOR=1 '" + exe + "' run '" + config +
                          "' --set frames=30 --set interval=10 --set device=cpu --set video='" + video +
                          "' --set model='" + model_ + "'";
  std::string output;
  EXPECT_EQ(prism::test::run_command(cmd, output), 0) << cmd << "\n" << output;
  for (const char* frame : {"frame 0: label '", "frame 10: label '", "frame 20: label '"})
    EXPECT_NE(output.find(frame), std::string::npos) << frame << "\n" << output;
  EXPECT_EQ(output.find("frame 5: label '"), std::string::npos) << output;
  // A model that does not exist: a runtime error naming the property and the file.
  EXPECT_NE(prism::test::run_command(cmd + " --set model=/nonexistent.bow", output), 0);
  EXPECT_NE(output.find("property 'model'"), std::string::npos) << output;
  EXPECT_NE(output.find("/nonexistent.bow"), std::string::npos) << output;
}

}  // namespace
