// End-to-end poissonblend pipeline figure: runs a gst-launch description containing
// `poissonblend name=b` with a request pad b.overlay_0, moves that overlay with a GstController
// (linear xpos/ypos ramps over `seconds` of stream time), counts the frames leaving b and reports
// frames per second of wall time (sync=false sinks: as fast as the pipeline goes).
//   bench_poissonblend_pipeline LABEL PIPELINE X0 X1 Y0 Y1 SECONDS
#include <gst/controller/controller.h>
#include <gst/gst.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

static GstPadProbeReturn count_buffer(GstPad*, GstPadProbeInfo*, gpointer user_data) {
  ++*static_cast<guint64*>(user_data);
  return GST_PAD_PROBE_OK;
}

static void ramp(GstObject* pad, const char* prop, double from, double to, double seconds) {
  GstControlSource* cs = gst_interpolation_control_source_new();
  g_object_set(cs, "mode", GST_INTERPOLATION_MODE_LINEAR, nullptr);
  // Direct binding in absolute mode: the control values are the property's values.
  gst_object_add_control_binding(pad, gst_direct_control_binding_new_absolute(pad, prop, cs));
  auto* tv = GST_TIMED_VALUE_CONTROL_SOURCE(cs);
  gst_timed_value_control_source_set(tv, 0, from);
  gst_timed_value_control_source_set(tv, static_cast<GstClockTime>(seconds * GST_SECOND), to);
  gst_object_unref(cs);
}

int main(int argc, char** argv) {
  gst_init(&argc, &argv);
  if (argc < 8) {
    std::fprintf(stderr, "usage: %s LABEL PIPELINE X0 X1 Y0 Y1 SECONDS\n", argv[0]);
    return 2;
  }
  GError* err = nullptr;
  GstElement* pipe = gst_parse_launch(argv[2], &err);
  if (!pipe || err) {
    std::fprintf(stderr, "bad pipeline: %s\n", err ? err->message : "?");
    return 2;
  }
  GstElement* blend = gst_bin_get_by_name(GST_BIN(pipe), "b");
  GstPad* overlay = blend ? gst_element_get_static_pad(blend, "overlay_0") : nullptr;
  if (!overlay) {
    std::fprintf(stderr, "pipeline needs poissonblend name=b linked to b.overlay_0\n");
    return 2;
  }
  const double seconds = std::atof(argv[7]);
  ramp(GST_OBJECT(overlay), "xpos", std::atof(argv[3]), std::atof(argv[4]), seconds);
  ramp(GST_OBJECT(overlay), "ypos", std::atof(argv[5]), std::atof(argv[6]), seconds);
  guint64 frames = 0;
  GstPad* src = gst_element_get_static_pad(blend, "src");
  gst_pad_add_probe(src, GST_PAD_PROBE_TYPE_BUFFER, count_buffer, &frames, nullptr);
  gst_element_set_state(pipe, GST_STATE_PAUSED);
  gst_element_get_state(pipe, nullptr, nullptr, GST_CLOCK_TIME_NONE);  // preroll outside the timing
  const guint64 preroll = frames;
  const auto t0 = std::chrono::steady_clock::now();
  gst_element_set_state(pipe, GST_STATE_PLAYING);
  GstBus* bus = gst_element_get_bus(pipe);
  GstMessage* msg = gst_bus_timed_pop_filtered(bus, GST_CLOCK_TIME_NONE,
                                               static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int rc = 0;
  if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
    GError* e = nullptr;
    gchar* dbg = nullptr;
    gst_message_parse_error(msg, &e, &dbg);
    std::fprintf(stderr, "%s: error from %s: %s (%s)\n", argv[1], GST_OBJECT_NAME(msg->src), e->message,
                 dbg ? dbg : "");
    rc = 1;
  }
  std::printf("| %s | %llu frames | %.2f s | %.1f fps |\n", argv[1], static_cast<unsigned long long>(frames), wall,
              (frames - preroll) / wall);
  gst_message_unref(msg);
  gst_element_set_state(pipe, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(src);
  gst_object_unref(overlay);
  gst_object_unref(blend);
  gst_object_unref(pipe);
  return rc;
}
