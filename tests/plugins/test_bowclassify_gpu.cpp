// bowclassify's GPU path (device=cuda; frames in system or CUDA memory) against the CPU path
// (test_bowclassify.cpp): the same labels, and the same label box drawn in place.
#include <gtest/gtest.h>

#include <gst/gst.h>

#include <random>
#include <string>
#include <vector>

#include "bowclassify_util.h"
#include "prism_test.h"

namespace {

using namespace prism::test::bowclassify;

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
  for (size_t i = 0; i < cpu.messages.size(); ++i) {
    EXPECT_EQ(str(gpu.messages[i], "label"), str(cpu.messages[i], "label")) << i;
    const auto scores = scores_of(gpu.messages[i]);  // the same fields as the CPU path's
    ASSERT_EQ(scores.size(), kClasses.size()) << text(gpu.messages[i]);
    for (size_t c = 0; c < scores.size(); ++c) EXPECT_EQ(scores[c].first, kClasses[c]);
  }
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
    run(
        gpu, "device=cuda interval=2 overlay=true model=\"" + model_ + "\" ! cudadownload", format, frames,
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
    for (size_t i = 0; i < frames.size(); ++i)
      EXPECT_EQ(gpu.first_planes[i], cpu.first_planes[i]) << format << " frame " << i;
    EXPECT_TRUE(gpu.top_left_changed[0]) << format;
    EXPECT_FALSE(gpu.bottom_right_changed) << format;
    EXPECT_FALSE(gpu.other_planes_changed) << format;
  }
}

}  // namespace
