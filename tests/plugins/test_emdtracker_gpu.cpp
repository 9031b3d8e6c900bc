// emdtracker's GPU path: the same heat maps (boxes included), detections and track ids as the CPU
// path on the same frames; with nvh264dec upstream the frames stay in CUDA memory in and out.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "emdtracker_util.h"
#include "envi/envi.h"
#include "gst/prism/gstprismcuda.h"
#include "prism_test.h"

namespace prism {
namespace {

using namespace test::emdt;
using test::run_launch;
using test::RunOptions;
using test::RunResult;

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
  std::pair<int, int> in{0, 0}, out{0, 0};
  RunOptions options;
  options.message_name = "prism-emdtracker";
  options.before_play = [&](GstElement* p) {
    GstElement* t = gst_bin_get_by_name(GST_BIN(p), "t");
    GstPad* sink = gst_element_get_static_pad(t, "sink");
    GstPad* src = gst_element_get_static_pad(t, "src");
    gst_pad_add_probe(sink, GST_PAD_PROBE_TYPE_BUFFER, count_cuda, &in, nullptr);
    gst_pad_add_probe(src, GST_PAD_PROBE_TYPE_BUFFER, count_cuda, &out, nullptr);
    gst_object_unref(sink);
    gst_object_unref(src);
    gst_object_unref(t);
  };
  const RunResult r = run_launch(launch, options);
  int messages = 0, with_detections = 0;
  for (const GstStructure* m : r.messages) {
    ++messages;
    const GValue* d = gst_structure_get_value(m, "detections");
    if (d && gst_value_list_get_size(d) > 0) ++with_detections;
  }
  EXPECT_EQ(r.error, "");
  // identity's eos-after lets a few frames more through behind nvh264dec: count what came
  EXPECT_GE(in.first, 40);
  EXPECT_EQ(messages, in.first) << "one message per frame";
  EXPECT_GT(with_detections, 0) << "no detection after the target was learned at frame 30";
  EXPECT_EQ(in.second, in.first) << "input left CUDA memory";
  EXPECT_EQ(out.second, out.first) << "output left CUDA memory";
}

// What prism run does for many cameras (GstPrismCudaContextSharer): the need-context of
// nvh264dec and emdtracker answered with one blocking-sync context. Both run in it, and the
// detections are those of the same pipeline with GstCudaContext's own context.
TEST_F(EmdTrackerGpu, OneSharedContextServesTheDecoderAndTheTrackerWithTheSameDetections) {
  PRISM_NEED_GPU();
  const std::string video = test::data_dir() + "/video/vtest.mp4";
  PRISM_NEED_FILE(video);
  const std::string launch = "filesrc location=" + video +
                             " ! qtdemux ! h264parse ! nvh264dec name=d ! identity eos-after=41 ! emdtracker name=t "
                             "device=cuda target-rect=634,262,28,50 target-frame=30 threshold=1.0 min-area=96 ! "
                             "fakesink";
  auto detections = [](const RunResult& r) {
    std::vector<std::string> out;
    for (const GstStructure* m : r.messages) {
      const GValue* d = gst_structure_get_value(m, "detections");
      gchar* text = d ? gst_value_serialize(d) : g_strdup("none");
      out.emplace_back(text);
      g_free(text);
    }
    return out;
  };
  RunOptions own;
  own.message_name = "prism-emdtracker";
  const RunResult reference = run_launch(launch, own);
  ASSERT_EQ(reference.error, "");

  GstPrismCudaContextSharer* sharer = gst_prism_cuda_context_sharer_new();
  GstElement *decoder = nullptr, *tracker = nullptr;
  RunOptions options = own;
  options.before_play = [&](GstElement* p) {
    decoder = gst_bin_get_by_name(GST_BIN(p), "d");
    tracker = gst_bin_get_by_name(GST_BIN(p), "t");
    GstBus* bus = gst_element_get_bus(p);
    gst_prism_cuda_context_sharer_watch(sharer, bus);
    gst_object_unref(bus);
  };
  const RunResult r = run_launch(launch, options);
  EXPECT_EQ(r.error, "");
  EXPECT_GE(gst_prism_cuda_context_sharer_answered(sharer), 1u);
  GstCudaContext* cuda = gst_prism_cuda_context_sharer_get(sharer, 0);
  ASSERT_NE(cuda, nullptr);
  ASSERT_TRUE(decoder && tracker);
  auto context_of = [](GstElement* e) {
    GstContext* c = gst_element_get_context(e, "gst.cuda.context");
    GstCudaContext* got = nullptr;
    if (c) gst_structure_get(gst_context_get_structure(c), "gst.cuda.context", GST_TYPE_CUDA_CONTEXT, &got, nullptr);
    if (c) gst_context_unref(c);
    if (got) gst_object_unref(got);  // compared as pointers; the context keeps it
    return got;
  };
  EXPECT_EQ(context_of(decoder), cuda) << "nvh264dec made its own context";
  EXPECT_EQ(context_of(tracker), cuda) << "emdtracker made its own context";
  const auto expected = detections(reference), got = detections(r);
  EXPECT_GE(got.size(), 40u);
  EXPECT_EQ(got, expected);
  gst_object_unref(decoder);
  gst_object_unref(tracker);
  gst_object_unref(cuda);
  gst_prism_cuda_context_sharer_free(sharer);
}

// other/x-prism-tensor in CUDA memory end to end: cudaupload -> spectralize -> emdtracker -> float
// distance map, every link forced to memory:CUDAMemory by caps filters (negotiation fails
// otherwise), against the CPU path on the same frames.
TEST_F(EmdTrackerGpu, SpectralizedTensorsStayInCudaMemoryAndMatchTheCpu) {
  PRISM_NEED_GPU();
  const std::string src =
      "appsrc name=src format=time caps=video/x-raw,format=NV12,width=320,height=240,framerate=10/1 ! ";
  const std::string tracker = "emdtracker target-rect=52,72,24,24 threshold=0.5 min-area=200";
  for (const std::string dtype : {"f32", "u16"}) {
    const test::emdt::PipelineRun cpu =
        test::emdt::run_pipeline(src + "spectralize device=cpu ! other/x-prism-tensor,dtype=" + dtype + " ! " +
                                     tracker + " device=cpu ! other/x-prism-tensor ! appsink name=out sync=false",
                                 320, 240, 6);
    const test::emdt::PipelineRun gpu = test::emdt::run_pipeline(
        src +
            "cudaupload ! video/x-raw(memory:CUDAMemory) ! spectralize device=cuda ! "
            "other/x-prism-tensor(memory:CUDAMemory),dtype=" +
            dtype + " ! " + tracker +
            " device=cuda ! other/x-prism-tensor(memory:CUDAMemory) ! appsink name=out sync=false",
        320, 240, 6);
    ASSERT_EQ(cpu.error, "");
    ASSERT_EQ(gpu.error, "") << dtype;
    ASSERT_EQ(gpu.frames.size(), 6u);
    ASSERT_EQ(cpu.frames.size(), 6u);
    EXPECT_EQ(gpu.cuda_buffers, 6) << "the distance maps left CUDA memory";
    for (size_t f = 0; f < 6; ++f) {
      EXPECT_EQ(gpu.frames[f], cpu.frames[f]) << dtype << " frame " << f;  // the same solver in double: same floats
      ASSERT_EQ(gpu.meta[f].size(), cpu.meta[f].size()) << dtype << " frame " << f;
      for (size_t k = 0; k < cpu.meta[f].size(); ++k) EXPECT_EQ(gpu.meta[f][k].track, cpu.meta[f][k].track);
    }
  }
}

// envisrc (system memory) into the GPU tracker: uploaded once per frame, same distances and tracks
// as the CPU path over a short sequence of random cubes with a moving planted signature.
TEST_F(EmdTrackerGpu, EnviCubesOnTheGpuMatchTheCpu) {
  PRISM_NEED_GPU();
  test::TempDir dir;
  std::mt19937 rng(std::random_device{}());
  envi::Header h;
  h.samples = 200;
  h.lines = 120;
  h.bands = 12;
  h.data_type = 4;
  h.interleave = envi::Interleave::BIL;
  for (int f = 0; f < 4; ++f) {
    std::vector<float> v(size_t(h.samples) * h.lines * h.bands);
    for (int y = 0; y < h.lines; ++y)
      for (int x = 0; x < h.samples; ++x)
        for (int b = 0; b < h.bands; ++b) {
          const bool object = x >= 20 + 10 * f && x < 60 + 10 * f && y >= 40 && y < 80;
          // object: a peak in band 3 like the target; background: a peak in band 9 (EMD about 5)
          v[(size_t(y) * h.samples + x) * h.bands + b] =
              float(b == (object ? 3 : 9) ? 45 : 1) + float(rng() % 3) + float(rng() % 1000) / 1000.f;
        }
    char name[32];
    std::snprintf(name, sizeof name, "cube_%02d.hdr", f);
    envi::write_cube(dir.file(name), h, v.data());
  }
  const std::string head = "envisrc location=" + dir.file("cube_%02d.hdr") +
                           " ! emdtracker target=\"2 2 2 50 2 2 2 2 2 2 2 2\" threshold=2 min-area=100 ";
  const test::emdt::PipelineRun cpu =
      test::emdt::run_pipeline(head + "device=cpu ! other/x-prism-tensor ! appsink name=out sync=false");
  const test::emdt::PipelineRun gpu = test::emdt::run_pipeline(
      head + "device=cuda ! other/x-prism-tensor(memory:CUDAMemory) ! appsink name=out sync=false");
  ASSERT_EQ(cpu.error, "");
  ASSERT_EQ(gpu.error, "");
  ASSERT_EQ(cpu.frames.size(), 4u);
  ASSERT_EQ(gpu.frames.size(), 4u);
  EXPECT_EQ(gpu.cuda_buffers, 4);
  for (size_t f = 0; f < 4; ++f) {
    EXPECT_EQ(gpu.frames[f], cpu.frames[f]) << "frame " << f;
    ASSERT_EQ(cpu.meta[f].size(), 1u) << "frame " << f;
    ASSERT_EQ(gpu.meta[f].size(), 1u) << "frame " << f;
    EXPECT_EQ(gpu.meta[f][0].box.x, cpu.meta[f][0].box.x);
    EXPECT_EQ(gpu.meta[f][0].track, cpu.meta[0][0].track);
  }
}

}  // namespace
}  // namespace prism
