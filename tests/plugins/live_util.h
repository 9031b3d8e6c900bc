// Live-source tests of the analysis elements' async mode (GstPrismCudaFilter): a launch line with a
// live source and `fakesink name=sink sync=true`, run to EOS through run_launch, with a pad probe on
// the sink that measures how late each frame reaches it and what result meta it carries.
#pragma once

#include <gst/base/gstbasesink.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline_run.h"

namespace prism::test::live {

// A result's meta on a frame that reached the sink.
struct MetaSeen {
  size_t at = 0;                 // the index of the frame carrying it
  guint64 source_frame = 0;      // its param's source-frame
  guint64 source_timestamp = 0;  // its param's source-timestamp
  bool has_source = false;       // both fields were there
};

struct LiveRun {
  prism::test::RunResult bus;
  std::vector<GstClockTime> pts;  // per frame at the sink
  GstClockTimeDiff max_late = 0;  // the latest frame: clock time at the sink - its render time
  std::vector<MetaSeen> meta;     // the `param` ROI params seen at the sink
  guint64 skipped = 0;            // the element's frames-skipped after EOS
};

struct ProbeState {
  std::mutex m;
  LiveRun* run = nullptr;
  std::string param;
};

// A frame's lateness at the sink's pad, before the sink waits: how far the clock is past the time
// the sink would render it (its running time plus the pipeline's latency). Lateness <= 0: on time.
inline GstPadProbeReturn probe(GstPad* pad, GstPadProbeInfo* info, gpointer data) {
  auto* st = static_cast<ProbeState*>(data);
  GstBuffer* buf = GST_PAD_PROBE_INFO_BUFFER(info);
  GstElement* sink = GST_ELEMENT(gst_pad_get_parent(pad));
  GstClock* clock = gst_element_get_clock(sink);
  GstEvent* seg_event = gst_pad_get_sticky_event(pad, GST_EVENT_SEGMENT, 0);
  std::lock_guard<std::mutex> lock(st->m);
  LiveRun& r = *st->run;
  if (clock && seg_event && GST_BUFFER_PTS_IS_VALID(buf)) {
    const GstSegment* seg = nullptr;
    gst_event_parse_segment(seg_event, &seg);
    const GstClockTime rt = gst_segment_to_running_time(seg, GST_FORMAT_TIME, GST_BUFFER_PTS(buf));
    const GstClockTime now = gst_clock_get_time(clock) - gst_element_get_base_time(sink);
    const GstClockTime latency = gst_base_sink_get_latency(GST_BASE_SINK(sink));
    r.max_late = std::max(r.max_late, GST_CLOCK_DIFF(rt + latency, now));
  }
  gpointer iter = nullptr;
  while (GstMeta* m = gst_buffer_iterate_meta_filtered(buf, &iter, GST_VIDEO_REGION_OF_INTEREST_META_API_TYPE)) {
    auto* roi = reinterpret_cast<GstVideoRegionOfInterestMeta*>(m);
    GstStructure* p = gst_video_region_of_interest_meta_get_param(roi, st->param.c_str());
    if (!p) continue;
    MetaSeen seen;
    seen.at = r.pts.size();
    seen.has_source = gst_structure_get_uint64(p, "source-frame", &seen.source_frame) &&
                      gst_structure_get_uint64(p, "source-timestamp", &seen.source_timestamp);
    r.meta.push_back(seen);
  }
  r.pts.push_back(GST_BUFFER_PTS(buf));
  if (seg_event) gst_event_unref(seg_event);
  if (clock) gst_object_unref(clock);
  gst_object_unref(sink);
  return GST_PAD_PROBE_OK;
}

// Runs `launch` (with `fakesink name=sink` and the analysis element named `element`) to EOS,
// keeping the bus's `message_name` messages and the `param` meta seen at the sink.
inline LiveRun run_live(const std::string& launch, const std::string& element, const std::string& message_name,
                        const std::string& param) {
  LiveRun r;
  ProbeState st;
  st.run = &r;
  st.param = param;
  GstElement* analysis = nullptr;
  prism::test::RunOptions options;
  options.appsink = "";
  options.message_name = message_name;
  options.idle_timeout = 30 * GST_SECOND;
  options.before_play = [&](GstElement* p) {
    GstElement* sink = gst_bin_get_by_name(GST_BIN(p), "sink");
    GstPad* pad = sink ? gst_element_get_static_pad(sink, "sink") : nullptr;
    if (pad) gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, probe, &st, nullptr);
    if (pad) gst_object_unref(pad);
    if (sink) gst_object_unref(sink);
    analysis = gst_bin_get_by_name(GST_BIN(p), element.c_str());
  };
  r.bus = prism::test::run_launch(launch, options);
  if (analysis) {
    g_object_get(analysis, "frames-skipped", &r.skipped, nullptr);
    gst_object_unref(analysis);
  }
  return r;
}

}  // namespace prism::test::live
