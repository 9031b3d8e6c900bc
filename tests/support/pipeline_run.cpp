#include "pipeline_run.h"

#include <gst/app/gstappsink.h>
#include <gst/video/video.h>

#include <cstring>
#include <utility>

namespace prism::test {
namespace {

std::string source_of(GstMessage* m) { return GST_MESSAGE_SRC(m) ? GST_OBJECT_NAME(GST_MESSAGE_SRC(m)) : "?"; }

// The text of an ERROR or WARNING message, and its debug text.
std::string message_text(GstMessage* m, std::string* debug_out) {
  GError* err = nullptr;
  gchar* debug = nullptr;
  if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR)
    gst_message_parse_error(m, &err, &debug);
  else
    gst_message_parse_warning(m, &err, &debug);
  std::string text = err ? err->message : "";
  if (debug_out) *debug_out = debug ? debug : "";
  g_clear_error(&err);
  g_free(debug);
  return text;
}

// Bytes per element of a tensor's dtype.
size_t dtype_size(const char* dtype) {
  const std::string d = dtype ? dtype : "";
  return d == "u8" ? 1 : d == "u16" ? 2 : 4;
}

Frame frame_of(GstSample* sample) {
  Frame f;
  GstBuffer* buffer = gst_sample_get_buffer(sample);
  GstCaps* caps = gst_sample_get_caps(sample);
  gchar* text = gst_caps_to_string(caps);
  f.caps = text;
  g_free(text);
  GstMemory* mem = gst_buffer_peek_memory(buffer, 0);
  f.cuda_memory =
      mem->allocator && mem->allocator->mem_type && std::string(mem->allocator->mem_type) == "gst.cuda.memory";
  const GstStructure* s = gst_caps_get_structure(caps, 0);
  GstVideoInfo info;
  size_t tensor_row = 0;  // packed bytes of a tensor row
  if (gst_structure_has_name(s, "other/x-prism-tensor")) {
    // Tensors are mapped as their storage plane, RGBA rows of 4-byte aligned tensor rows, like
    // Prism's elements do.
    int w = 0, h = 0, c = 0;
    gst_structure_get_int(s, "width", &w);
    gst_structure_get_int(s, "height", &h);
    gst_structure_get_int(s, "channels", &c);
    tensor_row = static_cast<size_t>(w) * c * dtype_size(gst_structure_get_string(s, "dtype"));
    f.width = w;
    f.height = h;
    if (!gst_video_info_set_format(&info, GST_VIDEO_FORMAT_RGBA, static_cast<guint>((tensor_row + 3) / 4),
                                   static_cast<guint>(h)))
      return f;
  } else {
    if (!gst_video_info_from_caps(&info, caps)) return f;
    f.format = gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(&info));
    f.width = GST_VIDEO_INFO_WIDTH(&info);
    f.height = GST_VIDEO_INFO_HEIGHT(&info);
    f.pixel_stride = GST_VIDEO_INFO_COMP_PSTRIDE(&info, 0);
  }
  GstVideoFrame vf;
  if (!gst_video_frame_map(&vf, &info, buffer, GST_MAP_READ)) return f;
  f.planes = static_cast<int>(GST_VIDEO_FRAME_N_PLANES(&vf));
  // Strides may be padded (GstVideoMeta, e.g. from cudadownload): copy the visible rows only.
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&vf); p++) {
    gint comp[GST_VIDEO_MAX_COMPONENTS];
    gst_video_format_info_component(vf.info.finfo, p, comp);
    const size_t row = tensor_row ? tensor_row
                                  : static_cast<size_t>(GST_VIDEO_FRAME_COMP_WIDTH(&vf, comp[0])) *
                                        GST_VIDEO_FRAME_COMP_PSTRIDE(&vf, comp[0]);
    for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(&vf, comp[0]); y++) {
      const auto* r = static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&vf, p)) +
                      static_cast<size_t>(y) * GST_VIDEO_FRAME_PLANE_STRIDE(&vf, p);
      f.bytes.insert(f.bytes.end(), r, r + row);
    }
  }
  gst_video_frame_unmap(&vf);
  return f;
}

}  // namespace

BusLog& BusLog::operator=(BusLog&& o) noexcept {
  std::swap(error, o.error);
  std::swap(error_source, o.error_source);
  std::swap(error_debug, o.error_debug);
  std::swap(warnings, o.warnings);
  std::swap(eos, o.eos);
  std::swap(messages, o.messages);
  std::swap(message_name, o.message_name);
  return *this;
}

BusLog::~BusLog() {
  for (GstStructure* s : messages) gst_structure_free(s);
}

void BusLog::record(GstMessage* m) {
  switch (GST_MESSAGE_TYPE(m)) {
    case GST_MESSAGE_ERROR:
      if (error.empty()) {
        error = message_text(m, &error_debug);
        error_source = source_of(m);
      }
      break;
    case GST_MESSAGE_WARNING: warnings.push_back(source_of(m) + ": " + message_text(m, nullptr)); break;
    case GST_MESSAGE_EOS: eos = true; break;
    case GST_MESSAGE_ELEMENT: {
      const GstStructure* s = gst_message_get_structure(m);
      if (s && (message_name.empty() || gst_structure_has_name(s, message_name.c_str())))
        messages.push_back(gst_structure_copy(s));
      break;
    }
    default: break;
  }
}

void BusLog::drain(GstBus* bus) {
  while (GstMessage* m = gst_bus_pop(bus)) {
    record(m);
    gst_message_unref(m);
  }
}

RunResult run_to_end(GstElement* pipeline, const RunOptions& options) {
  RunResult r;
  r.message_name = options.message_name;
  GstElement* sink =
      options.appsink.empty() ? nullptr : gst_bin_get_by_name(GST_BIN(pipeline), options.appsink.c_str());
  GstBus* bus = gst_element_get_bus(pipeline);
  if (options.before_play) options.before_play(pipeline);
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  if (options.after_play) options.after_play(pipeline);
  const GstClockTime poll = 50 * GST_MSECOND;
  gint64 idle_since = g_get_monotonic_time();
  auto done = [&] { return !r.error.empty() || (!sink && r.eos); };
  while (!done()) {
    bool progress = false;
    if (sink) {
      if (GstSample* s = gst_app_sink_try_pull_sample(GST_APP_SINK(sink), poll)) {
        r.frames.push_back(frame_of(s));
        if (options.on_sample) options.on_sample(s);
        gst_sample_unref(s);
        progress = true;
      } else if (gst_app_sink_is_eos(GST_APP_SINK(sink))) {
        r.eos = true;
        break;
      }
    }
    while (GstMessage* m = sink ? gst_bus_pop(bus) : gst_bus_timed_pop(bus, poll)) {
      r.record(m);
      gst_message_unref(m);
      progress = true;
      if (done()) break;
    }
    if (progress) {
      idle_since = g_get_monotonic_time();
    } else if (g_get_monotonic_time() - idle_since > static_cast<gint64>(options.idle_timeout / GST_USECOND)) {
      r.timed_out = true;
      break;
    }
  }
  r.drain(bus);  // the rest too: setting the pipeline to NULL flushes the bus
  gst_object_unref(bus);
  if (sink) gst_object_unref(sink);
  return r;
}

RunResult run_launch(const std::string& launch, const RunOptions& options) {
  GError* err = nullptr;
  GstElement* pipeline = gst_parse_launch(launch.c_str(), &err);
  if (!pipeline || err) {
    RunResult r;
    r.error = err ? err->message : "parse failed";
    r.error_source = "launch";
    g_clear_error(&err);
    if (pipeline) gst_object_unref(pipeline);
    return r;
  }
  RunResult r = run_to_end(pipeline, options);
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(pipeline);
  return r;
}

}  // namespace prism::test
