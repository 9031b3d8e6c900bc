#include "gst/prism/gstprismmessage.h"

#include <string>

GstStructure *gst_prism_frame_message_new(const gchar *element_kind, const GstSegment *segment, GstBuffer *buf,
                                          guint64 frame) {
  const GstClockTime ts = GST_BUFFER_PTS(buf);
  GstClockTime stream_time = GST_CLOCK_TIME_NONE, running_time = GST_CLOCK_TIME_NONE;
  if (segment->format == GST_FORMAT_TIME && GST_CLOCK_TIME_IS_VALID(ts)) {
    stream_time = gst_segment_to_stream_time(segment, GST_FORMAT_TIME, ts);
    running_time = gst_segment_to_running_time(segment, GST_FORMAT_TIME, ts);
  }
  const std::string name = std::string("prism-") + element_kind;
  return gst_structure_new(name.c_str(), "timestamp", G_TYPE_UINT64, (guint64)ts, "stream-time", G_TYPE_UINT64,
                           (guint64)stream_time, "running-time", G_TYPE_UINT64, (guint64)running_time, "duration",
                           G_TYPE_UINT64, (guint64)GST_BUFFER_DURATION(buf), "frame", G_TYPE_UINT64, frame, nullptr);
}

void gst_prism_structure_set_doubles(GstStructure *s, const gchar *field, const gdouble *values, guint n) {
  GValue array = G_VALUE_INIT;
  g_value_init(&array, GST_TYPE_ARRAY);
  for (guint i = 0; i < n; ++i) {
    GValue v = G_VALUE_INIT;
    g_value_init(&v, G_TYPE_DOUBLE);
    g_value_set_double(&v, values[i]);
    gst_value_array_append_and_take_value(&array, &v);
  }
  gst_structure_take_value(s, field, &array);
}

void gst_prism_post_frame_message(GstElement *element, GstStructure *s) {
  gst_element_post_message(element, gst_message_new_element(GST_OBJECT(element), s));
}
