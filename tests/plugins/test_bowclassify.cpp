// bowclassify on the CPU path with GstHarness: a small model trained in the test on synthetic scenes
// (horizontal stripes, vertical stripes, blobs), frames of each class in GRAY8, RGB and NV12, the
// interval (messages on due frames, the last result's meta on every frame), the overlay, and a
// missing or damaged model refused with the property named.
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
#include <random>
#include <string>
#include <vector>

#include "bow/model.h"
#include "prism_run_util.h"
#include "prism_test.h"

namespace {

namespace bow = prism::bow;
constexpr int kW = 96, kH = 64;
const std::vector<std::string> kClasses = {"horizontal", "vertical", "blobs"};

cv::Mat scene(std::mt19937& rng, int kind) {
  std::uniform_real_distribution<double> u(0, 1);
  cv::Mat img(kH, kW, CV_8UC1);
  const double f = 0.25 + 0.25 * u(rng), ph = 6.28 * u(rng);
  if (kind == 2) {
    cv::randu(img, 0, 256);
    cv::GaussianBlur(img, img, cv::Size(0, 0), 3.0);
    cv::normalize(img, img, 0, 255, cv::NORM_MINMAX);
  } else {
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x)
        img.at<uchar>(y, x) = cv::saturate_cast<uchar>(128 + 100 * std::sin(f * (kind == 0 ? y : x) + ph));
  }
  return img;
}

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
  bool top_changed = false, bottom_changed = false;  // rows above / below the middle
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

// A frame of `grey` in `format` (GRAY8, RGB or NV12 with neutral chroma).
GstBuffer* frame_buffer(const cv::Mat& grey, GstVideoInfo& info) {
  GstBuffer* b = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&info), nullptr);
  GstVideoFrame f;
  gst_video_frame_map(&f, &info, b, GST_MAP_WRITE);
  auto* p0 = static_cast<uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&f, 0));
  const int s0 = GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0);
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) {
      const uint8_t v = grey.at<uchar>(y, x);
      if (GST_VIDEO_INFO_FORMAT(&info) == GST_VIDEO_FORMAT_RGB) p0[y * s0 + 3 * x] = p0[y * s0 + 3 * x + 1] = p0[y * s0 + 3 * x + 2] = v;
      else p0[y * s0 + x] = v;
    }
  if (GST_VIDEO_INFO_FORMAT(&info) == GST_VIDEO_FORMAT_NV12)
    std::memset(GST_VIDEO_FRAME_PLANE_DATA(&f, 1), 128, size_t(GST_VIDEO_FRAME_PLANE_STRIDE(&f, 1)) * kH / 2);
  gst_video_frame_unmap(&f);
  return b;
}

void run(Outcome& o, const std::string& props, const char* format, const std::vector<cv::Mat>& frames) {
  GstHarness* h = gst_harness_new_parse(("bowclassify " + props).c_str());
  GstBus* bus = gst_bus_new();
  gst_element_set_bus(h->element, bus);
  const std::string caps = std::string("video/x-raw,format=") + format + ",width=" + std::to_string(kW) +
                           ",height=" + std::to_string(kH) + ",framerate=30/1";
  gst_harness_set_caps_str(h, caps.c_str(), caps.c_str());
  GstVideoInfo info;
  GstCaps* c = gst_caps_from_string(caps.c_str());
  gst_video_info_from_caps(&info, c);
  gst_caps_unref(c);
  for (const cv::Mat& g : frames) {
    GstBuffer* in = frame_buffer(g, info);
    GstBuffer* copy = gst_buffer_copy_deep(in);
    const GstFlowReturn ret = gst_harness_push(h, in);
    drain(bus, o);
    if (ret != GST_FLOW_OK) {
      if (o.error.empty()) o.error = gst_flow_get_name(ret);
      gst_buffer_unref(copy);
      break;
    }
    GstBuffer* out = gst_harness_pull(h);
    auto* roi = gst_buffer_get_video_region_of_interest_meta(out);
    GstStructure* p = roi ? gst_video_region_of_interest_meta_get_param(roi, "bowclassify") : nullptr;
    if (roi) {
      EXPECT_STREQ(g_quark_to_string(roi->roi_type), "scene");
      EXPECT_EQ(roi->w, guint(kW));
      EXPECT_EQ(roi->h, guint(kH));
    }
    o.params.push_back(p ? gst_structure_copy(p) : nullptr);
    GstMapInfo a, b;
    gst_buffer_map(copy, &a, GST_MAP_READ);
    gst_buffer_map(out, &b, GST_MAP_READ);
    const int bpp = std::string(format) == "RGB" ? 3 : 1, stride = GST_VIDEO_INFO_PLANE_STRIDE(&info, 0);
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW * bpp; ++x) {
        const size_t i = size_t(y) * stride + x;
        if (a.data[i] == b.data[i]) continue;
        if (y < kH / 2) o.top_changed = true;
        else o.bottom_changed = true;
      }
    gst_buffer_unmap(copy, &a);
    gst_buffer_unmap(out, &b);
    gst_buffer_unref(copy);
    gst_buffer_unref(out);
  }
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

TEST_F(BowClassify, IsRegisteredWithDocumentedProperties) {
  GstElement* e = gst_element_factory_make("bowclassify", nullptr);
  ASSERT_NE(e, nullptr) << "bowclassify not found; GST_PLUGIN_PATH=" << g_getenv("GST_PLUGIN_PATH");
  for (const char* name : {"model", "interval", "overlay", "device"}) {
    GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), name);
    ASSERT_NE(ps, nullptr) << name;
    EXPECT_GT(strlen(g_param_spec_get_blurb(ps)), 30u) << name;
  }
  guint interval = 0;
  gboolean overlay = TRUE;
  g_object_get(e, "interval", &interval, "overlay", &overlay, nullptr);
  EXPECT_EQ(interval, 30u);
  EXPECT_FALSE(overlay);
  gst_object_unref(e);
}

TEST_F(BowClassify, LabelsEachSceneInEveryFormat) {
  std::mt19937 rng(std::random_device{}());
  for (const char* format : {"GRAY8", "RGB", "NV12"}) {
    for (int kind = 0; kind < 3; ++kind) {
      Outcome o;
      run(o, "device=cpu interval=1 model=\"" + model_ + "\"", format, {scene(rng, kind), scene(rng, kind)});
      ASSERT_EQ(o.error, "") << format;
      ASSERT_EQ(o.messages.size(), 2u) << format;
      for (const GstStructure* m : o.messages) {
        EXPECT_EQ(str(m, "label"), kClasses[kind]) << format << " " << gst_structure_to_string(m);
        double confidence = 0, latency = -1;
        EXPECT_TRUE(gst_structure_get_double(m, "confidence", &confidence));
        EXPECT_TRUE(gst_structure_get_double(m, "latency-ms", &latency));
        EXPECT_GT(confidence, 1.0 / 3);
        EXPECT_GE(latency, 0.0);
      }
      ASSERT_EQ(o.params.size(), 2u);
      EXPECT_EQ(str(o.params[1], "label"), kClasses[kind]);
      EXPECT_FALSE(o.top_changed || o.bottom_changed) << "overlay is off: pixels must pass untouched";
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
  ASSERT_EQ(o.messages.size(), 3u);
  const guint64 due[] = {0, 3, 6};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(u64(o.messages[i], "frame"), due[i]);
  EXPECT_EQ(str(o.messages[0], "label"), "horizontal");
  EXPECT_EQ(str(o.messages[1], "label"), "vertical");
  ASSERT_EQ(o.params.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    ASSERT_NE(o.params[i], nullptr) << i;
    EXPECT_EQ(u64(o.params[i], "frame"), guint64(i / 3 * 3)) << "frame " << i << " carries the last result";
  }
  EXPECT_EQ(str(o.params[2], "label"), "horizontal");
  EXPECT_EQ(str(o.params[4], "label"), "vertical");
}

TEST_F(BowClassify, OverlayWritesTheLabelAtTheTopOnly) {
  std::mt19937 rng(std::random_device{}());
  for (const char* format : {"GRAY8", "RGB"}) {
    Outcome o;
    run(o, "device=cpu overlay=true model=\"" + model_ + "\"", format, {scene(rng, 2)});
    ASSERT_EQ(o.error, "");
    EXPECT_TRUE(o.top_changed) << format;
    EXPECT_FALSE(o.bottom_changed) << format;
  }
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
  const std::string bad = (dir.path() / "bad.bow").string();
  { std::ofstream(bad) << "PRISMBOW and then nothing sensible"; }
  std::string error;
  for (const std::string& path : {(dir.path() / "missing.bow").string(), bad}) {
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
  GstCaps* caps = gst_caps_from_string("video/x-raw,format=GRAY16_LE,width=8,height=8,framerate=30/1");
  GstPad* sink = gst_element_get_static_pad(h->element, "sink");
  EXPECT_FALSE(gst_pad_query_accept_caps(sink, caps));
  gst_object_unref(sink);
  gst_caps_unref(caps);
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

// configs/bow-video.yaml through `prism run` on the real video, with the test's model.
TEST_F(BowClassify, BowVideoConfigLabelsTheVideo) {
  const std::string video = prism::test::data_dir() + "/video/vtest.mp4";
  PRISM_NEED_FILE(video);
  const std::string exe = prism::test::prism_executable();
  if (exe.empty()) GTEST_SKIP() << "no prism binary (" << PRISM_EXE << " or on PATH)";
  const std::string config = prism::test::source_config("bow-video.yaml");
  if (!std::filesystem::exists(config)) GTEST_SKIP() << "no " << config << " (set PRISM_SOURCE_DIR)";
  for (const char* f : {"qtdemux", "h264parse", "openh264dec"}) {
    GstElementFactory* factory = gst_element_factory_find(f);
    if (!factory) GTEST_SKIP() << f << " is not installed";
    gst_object_unref(factory);
  }
  const std::string cmd = "GST_DEBUG=bowclassify:5 GST_DEBUG_NO_COLOR=1 '" + exe + "' run '" + config +
                          "' --set frames=30 --set interval=10 --set device=cpu --set video='" + video +
                          "' --set model='" + model_ + "'";
  std::string output;
  EXPECT_EQ(prism::test::run_command(cmd, output), 0) << cmd << "\n" << output;
  for (const char* frame : {"frame 0: label '", "frame 10: label '", "frame 20: label '"})
    EXPECT_NE(output.find(frame), std::string::npos) << frame << "\n" << output;
  // A model that does not exist: a runtime error naming the property.
  EXPECT_NE(prism::test::run_command(cmd + " --set model=/nonexistent.bow", output), 0);
  EXPECT_NE(output.find("property 'model'"), std::string::npos) << output;
}

}  // namespace
