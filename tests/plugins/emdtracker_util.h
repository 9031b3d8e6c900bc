// emdtracker test helpers (test_emdtracker.cpp, test_tensor.cpp, test_emdtracker_gpu.cpp): a
// synthetic fixed-camera scene with a textured patch that moves, and a runner for pipelines of video
// or other/x-prism-tensor frames (pipeline_run.h) that collects the output frames, the ROI meta and
// the element messages.
#pragma once

#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "pipeline_run.h"

namespace prism::test::emdt {

struct Rect {
  int x, y, w, h;
};

inline double iou(const Rect& a, const Rect& b) {
  const int x0 = std::max(a.x, b.x), y0 = std::max(a.y, b.y);
  const int x1 = std::min(a.x + a.w, b.x + b.w), y1 = std::min(a.y + a.h, b.y + b.h);
  if (x1 <= x0 || y1 <= y0) return 0;
  const double i = double(x1 - x0) * (y1 - y0);
  return i / (double(a.w) * a.h + double(b.w) * b.h - i);
}

// Frame f (NV12, W x H): a smooth grey gradient with mild fixed noise, and a 48x48 checkerboard
// of 3x3 squares (levels 30 and 220) at patch_at(f). Chroma is neutral.
constexpr int kPatch = 48;
inline Rect patch_at(int f) { return Rect{40 + 6 * f, 60 + 3 * f, kPatch, kPatch}; }

inline std::vector<uint8_t> scene_nv12(int W, int H, int f) {
  std::vector<uint8_t> img(static_cast<size_t>(W) * H * 3 / 2, 128);
  std::mt19937 rng(7);  // the same noise every frame: a fixed camera
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      img[static_cast<size_t>(y) * W + x] = static_cast<uint8_t>(90 + (x + y) / 8 % 40 + rng() % 3);
  const Rect p = patch_at(f);
  for (int y = p.y; y < p.y + p.h && y < H; ++y)
    for (int x = p.x; x < p.x + p.w && x < W; ++x)
      img[static_cast<size_t>(y) * W + x] = (((x - p.x) / 3 + (y - p.y) / 3) % 2) ? 220 : 30;
  return img;
}

struct Detection {
  Rect box;
  double distance;
  int64_t track;
};

// What a pipeline gave: every output frame's values packed (tensor rows without padding, video
// planes without stride), the ROI meta, the "prism-emdtracker" messages, the memory kind, the first error.
struct PipelineRun {
  std::string error;  // first error message (empty: none)
  std::string caps;   // caps of the last sample
  std::vector<std::vector<uint8_t>> frames;
  std::vector<std::vector<Detection>> meta;  // per output buffer, from GstVideoRegionOfInterestMeta
  std::vector<GstStructure*> messages;       // "prism-emdtracker" element messages (owned)
  int cuda_buffers = 0;                      // output buffers whose memory is GstCudaMemory

  PipelineRun() = default;
  PipelineRun(const PipelineRun&) = delete;
  PipelineRun& operator=(const PipelineRun&) = delete;
  PipelineRun(PipelineRun&& o) noexcept { *this = std::move(o); }
  PipelineRun& operator=(PipelineRun&& o) noexcept {
    std::swap(error, o.error);
    std::swap(caps, o.caps);
    std::swap(frames, o.frames);
    std::swap(meta, o.meta);
    std::swap(messages, o.messages);
    std::swap(cuda_buffers, o.cuda_buffers);
    return *this;
  }
  ~PipelineRun() {
    for (GstStructure* s : messages) gst_structure_free(s);
  }
  // Frame f as floats (a 1-channel f32 distance map, or an f32 tensor).
  std::vector<float> floats(size_t f) const {
    std::vector<float> v(frames[f].size() / sizeof(float));
    std::memcpy(v.data(), frames[f].data(), v.size() * sizeof(float));
    return v;
  }
};
using TrackerRun = PipelineRun;

// Runs a gst-launch description ending in `appsink name=out` (or in any sink: then it waits for
// EOS or an error), feeding `appsrc name=src`, when there is one, with scene_nv12 frames.
// `before_play` runs on the pipeline before it plays (control bindings, ...).
inline PipelineRun run_pipeline(const std::string& launch, int feed_w = 0, int feed_h = 0, int feed_frames = 0,
                                const std::function<void(GstElement*)>& before_play = {}) {
  PipelineRun r;
  RunOptions options;
  options.before_play = before_play;
  options.message_name = "prism-emdtracker";
  options.after_play = [&](GstElement* p) {
    GstElement* src = gst_bin_get_by_name(GST_BIN(p), "src");
    if (!src) return;
    for (int f = 0; f < feed_frames; ++f) {
      const std::vector<uint8_t> img = scene_nv12(feed_w, feed_h, f);
      GstBuffer* b = gst_buffer_new_memdup(img.data(), img.size());
      GST_BUFFER_PTS(b) = f * GST_SECOND / 10;
      GST_BUFFER_DURATION(b) = GST_SECOND / 10;
      gst_app_src_push_buffer(GST_APP_SRC(src), b);
    }
    gst_app_src_end_of_stream(GST_APP_SRC(src));
    gst_object_unref(src);
  };
  options.on_sample = [&](GstSample* s) {
    std::vector<Detection> dets;
    gpointer state = nullptr;
    while (GstMeta* m = gst_buffer_iterate_meta_filtered(gst_sample_get_buffer(s), &state,
                                                         GST_VIDEO_REGION_OF_INTEREST_META_API_TYPE)) {
      auto* roi = reinterpret_cast<GstVideoRegionOfInterestMeta*>(m);
      Detection d{{(int)roi->x, (int)roi->y, (int)roi->w, (int)roi->h}, -1, -1};
      if (GstStructure* ps = gst_video_region_of_interest_meta_get_param(roi, "emd")) {
        gst_structure_get_double(ps, "distance", &d.distance);
        gint64 t = -1;
        gst_structure_get_int64(ps, "track-id", &t);
        d.track = t;
      }
      dets.push_back(d);
    }
    r.meta.push_back(std::move(dets));
  };
  RunResult run = run_launch(launch, options);
  r.error = run.error;
  for (Frame& f : run.frames) {
    r.caps = f.caps;
    r.cuda_buffers += f.cuda_memory;
    if (!f.bytes.empty()) r.frames.push_back(std::move(f.bytes));
  }
  std::swap(r.messages, run.messages);
  return r;
}

// appsrc (NV12 W x H) ! [upload] emdtracker PROPS ! [download] video/x-raw,format=RGBA ! appsink
inline void run_tracker(int W, int H, int frames, const std::string& props, TrackerRun& r,
                        const std::string& upload = "", const std::string& download = "",
                        const std::function<void(GstElement*)>& before_play = {}) {
  r = run_pipeline("appsrc name=src format=time caps=video/x-raw,format=NV12,width=" + std::to_string(W) +
                       ",height=" + std::to_string(H) + ",framerate=10/1 ! " + upload + " emdtracker name=t " + props +
                       " ! " + download + " video/x-raw,format=RGBA ! appsink name=out sync=false",
                   W, H, frames, before_play);
}

}  // namespace prism::test::emdt
