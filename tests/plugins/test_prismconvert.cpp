// prismconvert element tests with GstHarness and real pipelines, on the CPU path (CI) and, where
// a GPU exists, the GPU path. Output is compared with videoconvert / videoscale.
#include <gtest/gtest.h>

#include <fstream>

#include "harness_util.h"
#include "pipeline_run.h"
#include "prism_test.h"

using prism::test::compare;
using prism::test::Diff;
using prism::test::run_element;

namespace {

std::string caps(const char* fmt, int w, int h, bool par = true) {
  return std::string("video/x-raw,format=") + fmt + ",width=" + std::to_string(w) + ",height=" + std::to_string(h) +
         ",framerate=30/1" + (par ? ",pixel-aspect-ratio=1/1" : "");
}

// A real photo (../shared/data/images/fruits.jpg, decoded and scaled by GStreamer) as packed RGB
// bytes; a videotestsrc pattern when the data is missing.
std::vector<uint8_t> photo_rgb(int w, int h) {
  const std::string path = prism::test::data_dir() + "/images/fruits.jpg";
  const std::string src = std::ifstream(path).good()
                              ? "filesrc location=\"" + path + "\" ! jpegdec ! videoconvert ! videoscale"
                              : std::string("videotestsrc num-buffers=1 pattern=pinwheel ! videoscale");
  prism::test::RunOptions options;
  options.appsink = "sink";
  options.idle_timeout = 20 * GST_SECOND;
  prism::test::RunResult r =
      prism::test::run_launch(src + " ! video/x-raw,format=RGB,width=" + std::to_string(w) +
                                  ",height=" + std::to_string(h) + ",pixel-aspect-ratio=1/1 ! appsink name=sink",
                              options);
  return r.frames.empty() ? std::vector<uint8_t>() : std::move(r.frames[0].bytes);
}

// The photo in format `fmt`, made by videoconvert (so YUV inputs are realistic).
std::vector<uint8_t> photo_in(const char* fmt, int w, int h) {
  return run_element("videoconvert", caps("RGB", w, h), caps(fmt, w, h), photo_rgb(w, h));
}

class Prismconvert : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
};

}  // namespace

TEST_F(Prismconvert, IsRegisteredWithDocumentedProperties) {
  GstElementFactory* f = gst_element_factory_find("prismconvert");
  ASSERT_NE(f, nullptr) << "prismconvert not found; GST_PLUGIN_PATH=" << g_getenv("GST_PLUGIN_PATH");
  GstElement* e = gst_element_factory_create(f, nullptr);
  for (const char* name : {"device", "cuda-device-id"}) {
    GParamSpec* ps = g_object_class_find_property(G_OBJECT_GET_CLASS(e), name);
    ASSERT_NE(ps, nullptr) << name;
    EXPECT_GT(strlen(g_param_spec_get_blurb(ps)), 20u) << name;
  }
  gst_object_unref(e);
  gst_object_unref(f);
}

struct ConvertCase {
  const char* in;
  const char* out;
  int max;  // documented tolerance against videoconvert
  double mean;
};

// Colour conversion against videoconvert, same size. Tolerances are the documented ones
// (README "prismconvert"); differences come from chroma siting and videoconvert's orc paths.
// Nothing of prismconvert changes while playing: its settings (device, cuda-device-id) are read at
// start, and what it converts to is the caps'.
TEST_F(Prismconvert, PropertiesSayWhatMayChangeWhilePlaying) {
  using V = std::vector<std::string>;
  GstElement* e = gst_element_factory_make("prismconvert", nullptr);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(prism::test::own_properties_with(e, GST_PARAM_MUTABLE_PLAYING), V{});
  EXPECT_EQ(prism::test::own_properties_with(e, GST_PARAM_CONTROLLABLE), V{});
  EXPECT_EQ(prism::test::own_properties_with(e, GST_PARAM_MUTABLE_READY), (V{"cuda-device-id", "device"}));
  gst_object_unref(e);
}

TEST_F(Prismconvert, ConvertsLikeVideoconvert) {
  const ConvertCase cases[] = {
      {"BGR", "I420", 2, 0.6}, {"RGBA", "NV12", 2, 0.6}, {"I420", "RGBA", 8, 2.2}, {"NV12", "BGRx", 64, 2.2},
      {"I420", "BGR", 8, 2.2}, {"RGBA", "GRAY8", 0, 0},  {"GRAY8", "RGBA", 0, 0},  {"I420", "NV12", 0, 0},
      {"BGR", "RGBA", 0, 0},   {"NV12", "GRAY8", 0, 0},
  };
  for (auto [w, h] : {std::pair{320, 240}, std::pair{161, 97}}) {
    for (const auto& c : cases) {
      std::vector<uint8_t> in = photo_in(c.in, w, h);
      ASSERT_FALSE(in.empty());
      auto ours = run_element("prismconvert device=cpu", caps(c.in, w, h), caps(c.out, w, h), in);
      auto ref = run_element("videoconvert", caps(c.in, w, h), caps(c.out, w, h), in);
      Diff d = compare(ours, ref);
      std::cout << c.in << "->" << c.out << " " << w << "x" << h << ": max " << d.max << " mean " << d.mean
                << " >1: " << 100 * d.frac_over_1 << "%\n";
      EXPECT_LE(d.max, c.max) << c.in << "->" << c.out << " " << w << "x" << h;
      EXPECT_LE(d.mean, c.mean) << c.in << "->" << c.out;
    }
  }
}

TEST_F(Prismconvert, ScalesLikeVideoscale) {
  struct {
    int sw, sh, dw, dh;
  } sizes[] = {{320, 240, 640, 480}, {320, 240, 160, 120}, {320, 240, 211, 97}};
  for (auto s : sizes) {
    std::vector<uint8_t> in = photo_in("RGBA", s.sw, s.sh);
    auto ours = run_element("prismconvert device=cpu", caps("RGBA", s.sw, s.sh), caps("RGBA", s.dw, s.dh, false), in);
    // Output PAR left free: videoscale would otherwise add borders to keep the aspect ratio.
    auto ref = run_element("videoscale", caps("RGBA", s.sw, s.sh), caps("RGBA", s.dw, s.dh, false), in);
    Diff d = compare(ours, ref);
    std::cout << "scale " << s.sw << "x" << s.sh << "->" << s.dw << "x" << s.dh << ": max " << d.max << " mean "
              << d.mean << " >1: " << 100 * d.frac_over_1 << "%\n";
    // Sharp edges differ most (videoscale's edge taps); a wrong mapping or channel order gives
    // max > 100 and means of tens.
    EXPECT_LE(d.max, 64);
    EXPECT_LE(d.mean, 1.0);
  }
}

// Downstream fixes only the width: the height follows the display aspect ratio.
TEST_F(Prismconvert, FixatesSizeKeepingAspectRatio) {
  std::string negotiated;
  auto out = run_element("prismconvert device=cpu", caps("I420", 320, 240), "video/x-raw,format=RGBA,width=640",
                         photo_in("I420", 320, 240), &negotiated);
  EXPECT_EQ(out.size(), 640u * 480 * 4) << negotiated;
  EXPECT_NE(negotiated.find("height=(int)480"), std::string::npos) << negotiated;
}

TEST_F(Prismconvert, SameCapsIsPassthrough) {
  GstHarness* h = gst_harness_new_parse("prismconvert device=cpu");
  gst_harness_set_caps_str(h, caps("NV12", 64, 48).c_str(), caps("NV12", 64, 48).c_str());
  GstBuffer* b = gst_harness_create_buffer(h, 64 * 48 * 3 / 2);
  GstBuffer* ref = gst_buffer_ref(b);
  ASSERT_EQ(gst_harness_push(h, b), GST_FLOW_OK);
  GstBuffer* o = gst_harness_pull(h);
  EXPECT_EQ(o, ref);
  gst_buffer_unref(o);
  gst_buffer_unref(ref);
  gst_harness_teardown(h);
}

// Region-of-interest meta survives and is rescaled with the frame.
TEST_F(Prismconvert, RescalesRegionOfInterestMeta) {
  GstHarness* h = gst_harness_new_parse("prismconvert device=cpu");
  gst_harness_set_caps_str(h, caps("RGBA", 100, 50).c_str(), caps("RGBA", 200, 150).c_str());
  GstBuffer* b = gst_buffer_new_allocate(nullptr, 100 * 50 * 4, nullptr);
  gst_buffer_memset(b, 0, 0x40, 100 * 50 * 4);
  GstVideoRegionOfInterestMeta* m = gst_buffer_add_video_region_of_interest_meta(b, "person", 10, 10, 20, 10);
  gst_video_region_of_interest_meta_add_param(m, gst_structure_new("detection", "score", G_TYPE_DOUBLE, 0.5, nullptr));
  ASSERT_EQ(gst_harness_push(h, b), GST_FLOW_OK);
  GstBuffer* o = gst_harness_pull(h);
  GstVideoRegionOfInterestMeta* om = gst_buffer_get_video_region_of_interest_meta(o);
  ASSERT_NE(om, nullptr);
  EXPECT_EQ(om->x, 20u);
  EXPECT_EQ(om->y, 30u);
  EXPECT_EQ(om->w, 40u);
  EXPECT_EQ(om->h, 30u);
  EXPECT_NE(gst_video_region_of_interest_meta_get_param(om, "detection"), nullptr);
  gst_buffer_unref(o);
  gst_harness_teardown(h);
}

namespace {
// Runs a pipeline to EOS; returns the error message or "" on success.
std::string run_pipeline(const std::string& desc) {
  const prism::test::RunResult r = prism::test::run_launch(desc);
  if (!r.error.empty()) return r.error + " | " + r.error_debug;
  return r.eos ? "" : "timeout";
}
}  // namespace

TEST_F(Prismconvert, RunsInPipelineWithAutoDevice) {
  EXPECT_EQ(run_pipeline("videotestsrc num-buffers=10 ! video/x-raw,format=I420,width=320,height=240 ! "
                         "prismconvert ! video/x-raw,format=BGRx,width=160,height=120 ! prismconvert ! "
                         "video/x-raw,format=NV12 ! fakesink"),
            "");
}

TEST_F(Prismconvert, DeviceCudaWithoutGpuIsAClearError) {
  std::string why;
  std::string r = run_pipeline("videotestsrc num-buffers=3 ! prismconvert device=cuda ! fakesink");
  if (prism::gpu::available(&why)) {
    EXPECT_EQ(r, "");
  } else {
    EXPECT_NE(r.find("device=cuda but no usable CUDA GPU"), std::string::npos) << r;
  }
}
