// textureid's GPU path (device=cuda: the CUDA SIFT and matcher) against the CPU path
// (test_textureid.cpp: cv::SIFT) on the test gallery, enrolled with cv::SIFT: the same
// identification, inliers within the two extractors' tolerance; frames in CUDA memory (cudaupload)
// identified exactly as the same frames in system memory, NV12, I420 and RGBA, at 640x480 and at
// 1920x1080 (shrunk on the device), read where they lie; the CUDA context shared with the neighbours.
#include <gtest/gtest.h>

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "cuda_pipeline_util.h"
#include "pipeline_run.h"
#include "prism_test.h"
#include "texture/sharpness.h"
#include "textureid_util.h"

using namespace prism::test::textureid;

// On the GPU machine (PRISM_REQUIRE_GPU=1) the element's GPU path (CUDA SIFT on a gallery enrolled
// with cv::SIFT, CUDA matcher) identifies what the CPU path identifies. The two SIFTs are
// interchangeable within sift.h's tolerance, not equal: the inliers may differ by a few.
TEST_F(TextureId, DeviceCudaAgreesWithTheCpu) {
  NEED_IMAGES();
  PRISM_NEED_GPU();
  const prism::ImageFile scene = load(kScene, GST_VIDEO_FORMAT_GRAY8);
  Outcome cpu, gpu;
  run_harness(cpu, element("interval=1"), caps_of("GRAY8", scene), {&scene});
  run_harness(gpu, "textureid gallery=\"" + gallery_dir() + "\" device=cuda async=false interval=1",
              caps_of("GRAY8", scene), {&scene});
  ASSERT_EQ(gpu.error, "");
  ASSERT_EQ(gpu.messages.size(), 1u);
  ASSERT_EQ(cpu.messages.size(), 1u);
  expect_identified(gpu, 0, 0, "box", "search", scene.width, scene.height);
  const int ci = integer(cpu.messages[0], "inliers"), gi = integer(gpu.messages[0], "inliers");
  EXPECT_NEAR(gi, ci, 5 + ci / 5);
  // the same place for box.png: the quads' corners within a few pixels (the SIFTs differ slightly)
  const std::vector<double> cq = doubles_of(cpu.messages[0], "quad"), gq = doubles_of(gpu.messages[0], "quad");
  ASSERT_EQ(cq.size(), 8u);
  ASSERT_EQ(gq.size(), 8u);
  for (int i = 0; i < 4; ++i)
    EXPECT_LT(std::hypot(gq[2 * i] - cq[2 * i], gq[2 * i + 1] - cq[2 * i + 1]), 4.0) << "corner " << i;
}

// `scene` scaled to fit `size` (INTER_LINEAR), centred on mid grey: a frame of a camera that sees
// the box scene whole.
static prism::ImageFile frame_of(const prism::ImageFile& scene, cv::Size size) {
  const int type = CV_8UC(scene.channels);
  const cv::Mat src(scene.height, scene.width, type, const_cast<uint8_t*>(scene.pixels.data()));
  const double s = std::min(double(size.width) / scene.width, double(size.height) / scene.height);
  cv::Mat scaled;
  cv::resize(src, scaled, cv::Size(int(scene.width * s + 0.5), int(scene.height * s + 0.5)), 0, 0, cv::INTER_LINEAR);
  cv::Mat canvas(size, type, cv::Scalar(128, 128, 128, 255));
  scaled.copyTo(
      canvas(cv::Rect((size.width - scaled.cols) / 2, (size.height - scaled.rows) / 2, scaled.cols, scaled.rows)));
  prism::ImageFile out;
  out.width = size.width;
  out.height = size.height;
  out.channels = scene.channels;
  out.pixels.assign(canvas.data, canvas.data + canvas.total() * canvas.elemSize());
  return out;
}

// Frames in GPU memory (cudaupload ! video/x-raw(memory:CUDAMemory) ! textureid ! cudadownload)
// give exactly the identification of the same frames in system memory on the GPU path (both run the
// CUDA SIFT; the device grey and shrink equal the host's cv::cvtColor and cv::resize bit for bit):
// the same id, inliers, matches, score, box and sharpness (min-sharpness=1: measured on the device,
// equal to texture::sharpness of the frame's grey on the host), for NV12, I420 and RGBA at 640x480
// and at 1920x1080 (shrunk to 1024x576 on the device). Every buffer leaving textureid is
// GstCudaMemory of CUDA caps never mapped on the host.
TEST_F(TextureId, CudaMemoryIdentifiesAsSystemMemory) {
  NEED_IMAGES();
  PRISM_NEED_GPU();
  for (const char* f : {"cudaupload", "cudadownload"}) {
    GstElementFactory* factory = gst_element_factory_find(f);
    if (!factory) {
      if (g_getenv("PRISM_REQUIRE_GPU")) FAIL() << f << " (GStreamer's nvcodec plugin) is missing";
      std::cerr << "*** SKIPPING: " << f << " (GStreamer's nvcodec plugin) is not installed ***\n";
      GTEST_SKIP() << f << " is not installed";
    }
    gst_object_unref(factory);
  }
  const prism::ImageFile grey = load(kScene, GST_VIDEO_FORMAT_GRAY8), rgba = load(kScene, GST_VIDEO_FORMAT_RGBA);
  const std::string props = " gallery=\"" + gallery_dir() + "\" device=cuda async=false interval=1 min-sharpness=1";
  for (const cv::Size size : {cv::Size(640, 480), cv::Size(1920, 1080)}) {
    for (const char* format : {"NV12", "I420", "RGBA"}) {
      const std::string what =
          std::string(format) + " " + std::to_string(size.width) + "x" + std::to_string(size.height);
      const prism::ImageFile frame = frame_of(std::string(format) == "RGBA" ? rgba : grey, size);
      const std::vector<const prism::ImageFile*> frames{&frame, &frame};
      const std::string caps = caps_of(format, frame);
      // the CPU's sharpness of the grey the element reads: the Y plane (the grey frame) or RGBA made grey
      const cv::Mat pixels(frame.height, frame.width, CV_8UC(frame.channels),
                           const_cast<uint8_t*>(frame.pixels.data()));
      cv::Mat frame_grey = pixels;
      if (frame.channels == 4) cv::cvtColor(pixels, frame_grey, cv::COLOR_RGBA2GRAY);
      const double cpu_sharpness = texture::sharpness(frame_grey);
      Outcome host, device;
      run_harness(host, "textureid" + props, caps, frames);
      prism::test::cuda_pipeline::PadCheck check;
      run_harness(device, "cudaupload ! video/x-raw(memory:CUDAMemory) ! textureid name=t" + props + " ! cudadownload",
                  caps, frames, "", [&](GstElement* bin) {
                    GstElement* t = gst_bin_get_by_name(GST_BIN(bin), "t");
                    ASSERT_NE(t, nullptr);
                    GstPad* pad = gst_element_get_static_pad(t, "src");
                    gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, prism::test::cuda_pipeline::check_buffer, &check,
                                      nullptr);
                    gst_object_unref(pad);
                    gst_object_unref(t);
                  });
      ASSERT_EQ(host.error, "") << what;
      ASSERT_EQ(device.error, "") << what;
      ASSERT_EQ(host.messages.size(), frames.size()) << what;
      ASSERT_EQ(device.messages.size(), frames.size()) << what;
      expect_identified(host, 0, 0, "box", "search", size.width, size.height);
      for (size_t i = 0; i < frames.size(); ++i) {
        const GstStructure *h = host.messages[i], *d = device.messages[i];
        EXPECT_EQ(str(d, "id"), str(h, "id")) << what;
        EXPECT_EQ(boolean(d, "identified"), boolean(h, "identified")) << what;
        for (const char* field : {"inliers", "matches", "x", "y", "width", "height"})
          EXPECT_EQ(integer(d, field), integer(h, field)) << what << " " << field;
        EXPECT_EQ(real(d, "score"), real(h, "score")) << what;
        EXPECT_EQ(real(d, "sharpness"), real(h, "sharpness")) << what;
        EXPECT_EQ(real(d, "sharpness"), cpu_sharpness) << what;
      }
      EXPECT_EQ(check.buffers.load(), int(frames.size())) << what;
      EXPECT_EQ(check.not_cuda.load(), 0) << what;
      EXPECT_EQ(check.caps_not_cuda.load(), 0) << what;
      EXPECT_EQ(check.touched_on_host.load(), 0) << what;
      EXPECT_TRUE(device.pixels_unchanged) << what;
    }
  }
}

// The async mode on frames in GPU memory: the worker reads frame 0 through its own buffer holding
// the frame's GstCudaMemory while the frame itself has gone on (cudadownload maps it on the host)
// and the harness has dropped it; the result equals the synchronous one on the same frame (id,
// inliers, matches, score, box, sharpness from the device grey), and its meta rides on a later
// frame, naming frame 0. Later frames are pushed once frame 0's message is on the bus. The meta is
// read on textureid's src pad: cudadownload (a plain GstBaseTransform in GStreamer 1.22) drops the
// ROI meta, whose API carries the video tags, as it copies a frame to system memory.
static GstPadProbeReturn record_rois(GstPad*, GstPadProbeInfo* info, gpointer rois) {
  if (GstBuffer* b = GST_PAD_PROBE_INFO_BUFFER(info))
    static_cast<std::vector<std::vector<Roi>>*>(rois)->push_back(rois_of(b));
  return GST_PAD_PROBE_OK;
}

TEST_F(TextureId, AsyncReadsCudaFramesInTheWorker) {
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
  const prism::ImageFile grey = load(kScene, GST_VIDEO_FORMAT_GRAY8), rgba = load(kScene, GST_VIDEO_FORMAT_RGBA);
  const std::string props = " gallery=\"" + gallery_dir() + "\" device=cuda interval=0 min-sharpness=1";
  for (const char* format : {"NV12", "RGBA"}) {
    const prism::ImageFile frame = frame_of(std::string(format) == "RGBA" ? rgba : grey, cv::Size(640, 480));
    const std::string caps = caps_of(format, frame);
    const std::string chain = "cudaupload ! video/x-raw(memory:CUDAMemory) ! textureid name=t";
    Outcome sync;
    run_harness(sync, chain + props + " async=false ! cudadownload", caps, {&frame});
    ASSERT_EQ(sync.error, "") << format;
    ASSERT_EQ(sync.messages.size(), 1u) << format;

    GstHarness* h = gst_harness_new_parse((chain + props + " async=true ! cudadownload").c_str());
    GstBus* bus = gst_bus_new();
    gst_element_set_bus(h->element, bus);
    gst_harness_set_caps_str(h, caps.c_str(), caps.c_str());
    GstVideoInfo info;
    GstCaps* c = gst_caps_from_string(caps.c_str());
    ASSERT_TRUE(gst_video_info_from_caps(&info, c));
    gst_caps_unref(c);
    Outcome async;
    {  // the harness pushes from this thread: the probe runs here, before gst_harness_push returns
      GstElement* t = gst_bin_get_by_name(GST_BIN(h->element), "t");
      ASSERT_NE(t, nullptr);
      GstPad* pad = gst_element_get_static_pad(t, "src");
      gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, record_rois, &async.rois, nullptr);
      gst_object_unref(pad);
      gst_object_unref(t);
    }
    ASSERT_EQ(gst_harness_push(h, make_buffer(frame, info, 0)), GST_FLOW_OK) << format;
    GstBuffer* out0 = gst_harness_pull(h);
    ASSERT_NE(out0, nullptr);
    ASSERT_EQ(async.rois.size(), 1u) << format;
    gst_buffer_unref(out0);  // frame 0 is gone; the worker still reads its memory
    for (int i = 0; i < 600 && async.messages.empty() && async.error.empty(); ++i) {
      g_usleep(50 * 1000);
      async.drain(bus);
    }
    ASSERT_EQ(async.error, "") << format;
    ASSERT_EQ(async.messages.size(), 1u) << format << ": no result within 30 s";
    // The worker may still be finishing (stream sync) as the message arrives: frames go on until one
    // carries the result (the next frame pushed after it).
    for (guint64 i = 1; i <= 20 && (async.rois.size() < 2 || async.rois.back().empty()); ++i) {
      if (i > 1) g_usleep(100 * 1000);
      ASSERT_EQ(gst_harness_push(h, make_buffer(frame, info, i)), GST_FLOW_OK) << format;
      GstBuffer* out = gst_harness_pull(h);
      ASSERT_NE(out, nullptr);
      ASSERT_EQ(async.rois.size(), size_t(i) + 1) << format;
      gst_buffer_unref(out);
    }
    gst_harness_teardown(h);
    async.drain(bus);
    gst_object_unref(bus);

    const GstStructure *s = sync.messages[0], *a = async.messages[0];
    EXPECT_EQ(frame_of(a), 0u) << format;
    EXPECT_EQ(str(a, "id"), str(s, "id")) << format;
    EXPECT_TRUE(boolean(a, "identified")) << format;
    for (const char* field : {"inliers", "matches", "x", "y", "width", "height"})
      EXPECT_EQ(integer(a, field), integer(s, field)) << format << " " << field;
    EXPECT_EQ(real(a, "score"), real(s, "score")) << format;
    EXPECT_EQ(real(a, "sharpness"), real(s, "sharpness")) << format;
    EXPECT_TRUE(gst_structure_has_field(a, "skipped")) << format;
    EXPECT_TRUE(async.rois[0].empty()) << format << ": frame 0 left before its result";
    ASSERT_EQ(async.rois.back().size(), 1u) << format << ": no frame carried the result";
    const Roi& r = async.rois.back()[0];
    EXPECT_EQ(r.x, integer(s, "x")) << format;
    EXPECT_EQ(r.w, integer(s, "width")) << format;
    ASSERT_NE(r.param, nullptr);
    guint64 source = G_MAXUINT64;
    EXPECT_TRUE(gst_structure_get_uint64(r.param, "source-frame", &source));
    EXPECT_EQ(source, 0u) << format;
  }
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
