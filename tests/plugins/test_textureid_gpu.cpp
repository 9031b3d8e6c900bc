// textureid's CUDA matcher (device=cuda) against the CPU path (test_textureid.cpp) on the test
// gallery: the same identification, inliers within a small margin.
#include <gtest/gtest.h>

#include <string>

#include "pipeline_run.h"
#include "prism_test.h"
#include "textureid_util.h"

using namespace prism::test::textureid;

// On the GPU machine (PRISM_REQUIRE_GPU=1) the element's CUDA matcher gives the CPU path's answer.
TEST_F(TextureId, DeviceCudaAgreesWithTheCpu) {
  NEED_IMAGES();
  PRISM_NEED_GPU();
  const prism::ImageFile scene = load(kScene, GST_VIDEO_FORMAT_GRAY8);
  Outcome cpu, gpu;
  run_harness(cpu, element("interval=1"), caps_of("GRAY8", scene), {&scene});
  run_harness(gpu, "textureid gallery=\"" + gallery_dir() + "\" device=cuda interval=1", caps_of("GRAY8", scene),
              {&scene});
  ASSERT_EQ(gpu.error, "");
  ASSERT_EQ(gpu.messages.size(), 1u);
  ASSERT_EQ(cpu.messages.size(), 1u);
  expect_identified(gpu, 0, 0, "box", "search", scene.width, scene.height);
  const int ci = integer(cpu.messages[0], "inliers"), gi = integer(gpu.messages[0], "inliers");
  EXPECT_NEAR(gi, ci, 2 + ci / 50);
}

// The GstCudaContext of textureid device=cuda is its neighbours' (cudaupload and cudadownload): one
// context per pipeline, shared through the GstContext mechanism like the other elements'.
TEST_F(TextureId, SharesTheCudaContextOfItsNeighbours) {
  NEED_IMAGES();
  PRISM_NEED_GPU();
  for (const char* f : {"cudaupload", "cudadownload"}) {
    GstElementFactory* factory = gst_element_factory_find(f);
    if (!factory) {
      if (g_getenv("PRISM_REQUIRE_GPU")) FAIL() << f << " (GStreamer's nvcodec plugin) is missing";
      GTEST_SKIP() << f << " (GStreamer's nvcodec plugin) is not installed";
    }
    gst_object_unref(factory);
  }
  const std::string launch =
      "videotestsrc num-buffers=2 ! video/x-raw,format=NV12,width=64,height=64 ! "
      "cudaupload name=up ! cudadownload ! video/x-raw,format=NV12 ! textureid name=t "
      "device=cuda interval=1 gallery=\"" +
      gallery_dir() + "\" ! fakesink";
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(launch.c_str(), &err);
  ASSERT_NE(p, nullptr) << (err ? err->message : "");
  const prism::test::RunResult r = prism::test::run_to_end(p);  // leaves p PLAYING: its contexts stay
  EXPECT_EQ(r.error, "");
  EXPECT_TRUE(r.eos);
  auto context_of = [&](const char* name) -> gpointer {
    GstElement* e = gst_bin_get_by_name(GST_BIN(p), name);
    GstContext* c = gst_element_get_context(e, "gst.cuda.context");
    gst_object_unref(e);
    if (!c) return nullptr;
    const GValue* v = gst_structure_get_value(gst_context_get_structure(c), "gst.cuda.context");
    gpointer object = v && G_VALUE_HOLDS_OBJECT(v) ? g_value_get_object(v) : nullptr;
    gst_context_unref(c);  // the pipeline still holds the context: the pointer stays comparable
    return object;
  };
  const gpointer ours = context_of("t");
  EXPECT_NE(ours, nullptr);
  EXPECT_EQ(context_of("up"), ours);
  gst_element_set_state(p, GST_STATE_NULL);
  gst_object_unref(p);
}
