// The GPU-resident pipeline tests' helpers (test_prismconvert_gpu.cpp, test_poissonblend_gpu.cpp):
// pad probes that check every buffer is GstCudaMemory never copied to the host, the CUDA context an
// element uses, and frames collected from "appsink name=sink" (pipeline_run.h).
#pragma once

#include <gtest/gtest.h>

#include <gst/gst.h>
#include <gst/video/video.h>
#ifndef GST_USE_UNSTABLE_API  // prism_gst defines it for its users
#define GST_USE_UNSTABLE_API
#endif
#include <gst/cuda/gstcudacontext.h>
#include <gst/cuda/gstcudamemory.h>

#include <atomic>
#include <string>
#include <vector>

#include "pipeline_run.h"
#include "prism_test.h"

namespace prism::test::cuda_pipeline {

struct PadCheck {
  std::string where;
  std::atomic<int> buffers{0};
  std::atomic<int> not_cuda{0};         // a buffer whose memory is not GstCudaMemory
  std::atomic<int> touched_on_host{0};  // GstCudaMemory that was mapped for the CPU
  std::atomic<int> caps_not_cuda{0};
};

inline GstPadProbeReturn check_buffer(GstPad* pad, GstPadProbeInfo* info, gpointer data) {
  auto* c = static_cast<PadCheck*>(data);
  GstBuffer* buf = GST_PAD_PROBE_INFO_BUFFER(info);
  c->buffers++;
  for (guint i = 0; i < gst_buffer_n_memory(buf); i++) {
    GstMemory* mem = gst_buffer_peek_memory(buf, i);
    if (!gst_is_cuda_memory(mem)) {
      c->not_cuda++;
      continue;
    }
    // Set by GST_MAP_CUDA writes and cleared by the first host map (which downloads the frame):
    // still set here means no host copy of this frame has been made so far.
    if (!GST_MEMORY_FLAG_IS_SET(mem, GST_CUDA_MEMORY_TRANSFER_NEED_DOWNLOAD)) c->touched_on_host++;
  }
  GstCaps* caps = gst_pad_get_current_caps(pad);
  if (!caps || !gst_caps_features_contains(gst_caps_get_features(caps, 0), GST_CAPS_FEATURE_MEMORY_CUDA_MEMORY))
    c->caps_not_cuda++;
  if (caps) gst_caps_unref(caps);
  return GST_PAD_PROBE_OK;
}

struct Frames {
  std::vector<std::vector<uint8_t>> data;
  std::string error;
};

inline Frames frames_of(prism::test::RunResult&& r) {
  Frames out;
  if (!r.error.empty()) out.error = r.error_source + ": " + r.error + " | " + r.error_debug;
  for (prism::test::Frame& f : r.frames) out.data.push_back(std::move(f.bytes));
  return out;
}

inline prism::test::RunOptions sink_options() {
  prism::test::RunOptions o;
  o.appsink = "sink";
  o.idle_timeout = 30 * GST_SECOND;
  return o;
}

// Runs `pipeline` (which must end in "appsink name=sink") to EOS and collects every frame's bytes;
// the pipeline stays PLAYING.
inline Frames collect(GstElement* pipeline) { return frames_of(prism::test::run_to_end(pipeline, sink_options())); }

// The same for a launch line, set to NULL afterwards.
inline Frames run(const std::string& desc) { return frames_of(prism::test::run_launch(desc, sink_options())); }

inline GstCudaContext* cuda_context_of(GstElement* e) {
  GstContext* ctx = gst_element_get_context(e, GST_CUDA_CONTEXT_TYPE);
  if (!ctx) return nullptr;
  GstCudaContext* cuda = nullptr;
  gst_structure_get(gst_context_get_structure(ctx), GST_CUDA_CONTEXT_TYPE, GST_TYPE_CUDA_CONTEXT, &cuda, nullptr);
  gst_context_unref(ctx);
  if (cuda) gst_object_unref(cuda);  // compare pointers only; the pipeline still holds it
  return cuda;
}

class GpuPipeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
  std::string video() { return prism::test::data_dir() + "/video/vtest.mp4"; }
};

}  // namespace prism::test::cuda_pipeline
