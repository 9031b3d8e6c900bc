// emdtracker's GPU path: the same heat maps (boxes included), detections and track ids as the CPU
// path on the same frames; with nvh264dec upstream the frames stay in CUDA memory in and out.
#include <gtest/gtest.h>

#include <fstream>

#include "emdtracker_util.h"
#include "prism_test.h"

namespace prism {
namespace {

using namespace test::emdt;

class EmdTrackerGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
};

TEST_F(EmdTrackerGpu, SameHeatMapsAndDetectionsAsTheCpu) {
  PRISM_NEED_GPU();
  const int W = 320, H = 240, frames = 8;
  const std::string props = "target-rect=52,72,24,24 threshold=0.5 min-area=200 ";
  for (const std::string cache : {"", "cache-size=0", "dedup=false"}) {
    TrackerRun cpu, gpu;
    run_tracker(W, H, frames, "device=cpu " + props + cache, cpu);
    run_tracker(W, H, frames, "device=cuda " + props + cache, gpu, "cudaupload !", "cudadownload !");
    ASSERT_EQ(cpu.error, "");
    ASSERT_EQ(gpu.error, "") << cache;
    ASSERT_EQ(gpu.frames.size(), cpu.frames.size());
    for (size_t f = 0; f < cpu.frames.size(); ++f) {
      size_t differ = 0;
      for (size_t i = 0; i < cpu.frames[f].size(); ++i) differ += cpu.frames[f][i] != gpu.frames[f][i];
      EXPECT_EQ(differ, 0u) << cache << " frame " << f;
      ASSERT_EQ(gpu.meta[f].size(), cpu.meta[f].size()) << cache << " frame " << f;
      for (size_t k = 0; k < cpu.meta[f].size(); ++k) {
        EXPECT_EQ(gpu.meta[f][k].track, cpu.meta[f][k].track);
        EXPECT_EQ(gpu.meta[f][k].box.x, cpu.meta[f][k].box.x);
        EXPECT_EQ(gpu.meta[f][k].box.w, cpu.meta[f][k].box.w);
        EXPECT_FLOAT_EQ((float)gpu.meta[f][k].distance, (float)cpu.meta[f][k].distance);
      }
    }
    ASSERT_EQ(gpu.messages.size(), cpu.messages.size());
    for (size_t f = 0; f < cpu.messages.size(); ++f) {
      const GstStructure* a = gst_value_get_structure(gst_structure_get_value(cpu.messages[f], "stats"));
      const GstStructure* b = gst_value_get_structure(gst_structure_get_value(gpu.messages[f], "stats"));
      for (const char* field : {"solved", "duplicates", "cache-hits"}) {
        gint64 x = -1, y = -2;
        gst_structure_get_int64(a, field, &x);
        gst_structure_get_int64(b, field, &y);
        EXPECT_EQ(x, y) << cache << " frame " << f << " " << field;
      }
    }
  }
}

GstPadProbeReturn count_cuda(GstPad* pad, GstPadProbeInfo*, gpointer data) {
  auto* n = static_cast<std::pair<int, int>*>(data);
  GstCaps* caps = gst_pad_get_current_caps(pad);
  n->first++;
  if (caps && gst_caps_features_contains(gst_caps_get_features(caps, 0), "memory:CUDAMemory")) n->second++;
  if (caps) gst_caps_unref(caps);
  return GST_PAD_PROBE_OK;
}

TEST_F(EmdTrackerGpu, NvdecFramesStayInCudaMemory) {
  PRISM_NEED_GPU();
  const std::string video = test::data_dir() + "/video/vtest.mp4";
  PRISM_NEED_FILE(video);
  const std::string launch = "filesrc location=" + video +
                             " ! qtdemux ! h264parse ! nvh264dec ! identity eos-after=41 ! emdtracker name=t "
                             "device=cuda target-rect=634,262,28,50 target-frame=30 threshold=1.0 min-area=96 ! "
                             "cudadownload ! fakesink";
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(launch.c_str(), &err);
  ASSERT_EQ(err, nullptr) << err->message;
  GstElement* t = gst_bin_get_by_name(GST_BIN(p), "t");
  std::pair<int, int> in{0, 0}, out{0, 0};
  GstPad* sink = gst_element_get_static_pad(t, "sink");
  GstPad* src = gst_element_get_static_pad(t, "src");
  gst_pad_add_probe(sink, GST_PAD_PROBE_TYPE_BUFFER, count_cuda, &in, nullptr);
  gst_pad_add_probe(src, GST_PAD_PROBE_TYPE_BUFFER, count_cuda, &out, nullptr);
  gst_element_set_state(p, GST_STATE_PLAYING);
  GstBus* bus = gst_element_get_bus(p);
  int messages = 0, with_detections = 0;
  std::string error;
  for (;;) {
    GstMessage* m = gst_bus_timed_pop(bus, 60 * GST_SECOND);
    if (!m) break;
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_EOS) {
      gst_message_unref(m);
      break;
    }
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) {
      GError* e = nullptr;
      gst_message_parse_error(m, &e, nullptr);
      error = e->message;
      g_clear_error(&e);
      gst_message_unref(m);
      break;
    }
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ELEMENT && gst_structure_has_name(gst_message_get_structure(m), "emdtracker")) {
      ++messages;
      const GValue* d = gst_structure_get_value(gst_message_get_structure(m), "detections");
      if (d && gst_value_list_get_size(d) > 0) ++with_detections;
    }
    gst_message_unref(m);
  }
  gst_element_set_state(p, GST_STATE_NULL);
  EXPECT_EQ(error, "");
  // identity's eos-after lets a few frames more through behind nvh264dec: count what came
  EXPECT_GE(in.first, 40);
  EXPECT_EQ(messages, in.first) << "one message per frame";
  EXPECT_GT(with_detections, 0) << "no detection after the target was learned at frame 30";
  EXPECT_EQ(in.second, in.first) << "input left CUDA memory";
  EXPECT_EQ(out.second, out.first) << "output left CUDA memory";
  gst_object_unref(sink);
  gst_object_unref(src);
  gst_object_unref(t);
  gst_object_unref(bus);
  gst_object_unref(p);
}

}  // namespace
}  // namespace prism
