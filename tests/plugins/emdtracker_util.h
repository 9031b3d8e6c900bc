// emdtracker test helpers (CPU tests here, GPU tests in tests/gpu): a synthetic fixed-camera scene
// with a textured patch that moves, and a runner for pipelines of video or other/x-prism-tensor
// frames that collects the output frames, the ROI meta and the element messages.
#pragma once

#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

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
    for (int x = 0; x < W; ++x) img[static_cast<size_t>(y) * W + x] = static_cast<uint8_t>(90 + (x + y) / 8 % 40 + rng() % 3);
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
// Packed bytes of one row of the sample's caps (tensor: width x channels x element size; video: the
// first plane's visible bytes).
inline size_t packed_row_bytes(const GstStructure* s, const GstVideoInfo& storage) {
  if (gst_structure_has_name(s, "other/x-prism-tensor")) {
    int w = 0, c = 0;
    gst_structure_get_int(s, "width", &w);
    gst_structure_get_int(s, "channels", &c);
    const std::string dtype = gst_structure_get_string(s, "dtype");
    return static_cast<size_t>(w) * c * (dtype == "u8" ? 1 : dtype == "u16" ? 2 : 4);
  }
  return static_cast<size_t>(GST_VIDEO_INFO_WIDTH(&storage)) * GST_VIDEO_INFO_COMP_PSTRIDE(&storage, 0);
}

inline PipelineRun run_pipeline(const std::string& launch, int feed_w = 0, int feed_h = 0, int feed_frames = 0) {
  PipelineRun r;
  GError* err = nullptr;
  GstElement* p = gst_parse_launch(launch.c_str(), &err);
  if (!p || err) {
    r.error = std::string("launch: ") + (err ? err->message : "?");
    g_clear_error(&err);
    if (p) gst_object_unref(p);
    return r;
  }
  GstElement* src = gst_bin_get_by_name(GST_BIN(p), "src");
  GstElement* out = gst_bin_get_by_name(GST_BIN(p), "out");
  GstBus* bus = gst_element_get_bus(p);
  std::atomic<bool> failed{false};
  gst_bus_set_sync_handler(
      bus,
      [](GstBus*, GstMessage* m, gpointer flag) {
        if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) static_cast<std::atomic<bool>*>(flag)->store(true);
        return GST_BUS_PASS;
      },
      &failed, nullptr);
  gst_element_set_state(p, GST_STATE_PLAYING);
  if (src) {
    for (int f = 0; f < feed_frames; ++f) {
      const std::vector<uint8_t> img = scene_nv12(feed_w, feed_h, f);
      GstBuffer* b = gst_buffer_new_memdup(img.data(), img.size());
      GST_BUFFER_PTS(b) = f * GST_SECOND / 10;
      GST_BUFFER_DURATION(b) = GST_SECOND / 10;
      gst_app_src_push_buffer(GST_APP_SRC(src), b);
    }
    gst_app_src_end_of_stream(GST_APP_SRC(src));
  }
  for (int waited = 0; out;) {
    GstSample* s = gst_app_sink_try_pull_sample(GST_APP_SINK(out), GST_SECOND / 2);
    if (!s) {
      if (gst_app_sink_is_eos(GST_APP_SINK(out)) || failed.load() || ++waited > 120) break;
      continue;
    }
    GstBuffer* b = gst_sample_get_buffer(s);
    GstCaps* caps = gst_sample_get_caps(s);
    gchar* text = gst_caps_to_string(caps);
    r.caps = text;
    g_free(text);
    GstMemory* mem = gst_buffer_peek_memory(b, 0);
    if (mem->allocator && mem->allocator->mem_type && std::string(mem->allocator->mem_type) == "gst.cuda.memory")
      r.cuda_buffers++;
    // Tensor buffers are mapped as their storage plane, like Prism's elements do.
    GstStructure* st = gst_caps_get_structure(caps, 0);
    GstVideoInfo info;
    bool ok;
    if (gst_structure_has_name(st, "other/x-prism-tensor")) {
      int w = 0, h = 0, c = 0;
      gst_structure_get_int(st, "width", &w);
      gst_structure_get_int(st, "height", &h);
      gst_structure_get_int(st, "channels", &c);
      const std::string dtype = gst_structure_get_string(st, "dtype");
      const size_t row = (static_cast<size_t>(w) * c * (dtype == "u8" ? 1 : dtype == "u16" ? 2 : 4) + 3) / 4 * 4;
      ok = gst_video_info_set_format(&info, GST_VIDEO_FORMAT_RGBA, static_cast<guint>(row / 4), static_cast<guint>(h));
    } else {
      ok = gst_video_info_from_caps(&info, caps);
    }
    GstVideoFrame vf;
    if (ok && gst_video_frame_map(&vf, &info, b, GST_MAP_READ)) {
      const size_t row = packed_row_bytes(st, info);
      std::vector<uint8_t> bytes(row * GST_VIDEO_INFO_HEIGHT(&info));
      for (int y = 0; y < GST_VIDEO_INFO_HEIGHT(&info); ++y)
        std::memcpy(&bytes[y * row],
                    static_cast<uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&vf, 0)) + y * GST_VIDEO_FRAME_PLANE_STRIDE(&vf, 0),
                    row);
      r.frames.push_back(std::move(bytes));
      gst_video_frame_unmap(&vf);
    }
    std::vector<Detection> dets;
    gpointer state = nullptr;
    while (GstMeta* m = gst_buffer_iterate_meta_filtered(b, &state, GST_VIDEO_REGION_OF_INTEREST_META_API_TYPE)) {
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
    gst_sample_unref(s);
  }
  if (!out) {  // no appsink: wait for the end of the stream or an error
    if (GstMessage* m = gst_bus_timed_pop_filtered(bus, 60 * GST_SECOND,
                                                   (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR))) {
      if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) {
        GError* e = nullptr;
        gst_message_parse_error(m, &e, nullptr);
        r.error = e->message;
        g_clear_error(&e);
      }
      gst_message_unref(m);
    }
  }
  while (GstMessage* m = gst_bus_pop(bus)) {
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR && r.error.empty()) {
      GError* e = nullptr;
      gchar* dbg = nullptr;
      gst_message_parse_error(m, &e, &dbg);
      r.error = e->message;
      g_clear_error(&e);
      g_free(dbg);
    } else if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ELEMENT &&
               gst_structure_has_name(gst_message_get_structure(m), "prism-emdtracker")) {
      r.messages.push_back(gst_structure_copy(gst_message_get_structure(m)));
    }
    gst_message_unref(m);
  }
  gst_element_set_state(p, GST_STATE_NULL);
  gst_bus_set_sync_handler(bus, nullptr, nullptr, nullptr);
  gst_object_unref(bus);
  if (src) gst_object_unref(src);
  if (out) gst_object_unref(out);
  gst_object_unref(p);
  return r;
}

// appsrc (NV12 W x H) ! [upload] emdtracker PROPS ! [download] video/x-raw,format=RGBA ! appsink
inline void run_tracker(int W, int H, int frames, const std::string& props, TrackerRun& r, const std::string& upload = "",
                        const std::string& download = "") {
  r = run_pipeline("appsrc name=src format=time caps=video/x-raw,format=NV12,width=" + std::to_string(W) +
                       ",height=" + std::to_string(H) + ",framerate=10/1 ! " + upload + " emdtracker name=t " + props +
                       " ! " + download + " video/x-raw,format=RGBA ! appsink name=out sync=false",
                   W, H, frames);
}

}  // namespace prism::test::emdt
