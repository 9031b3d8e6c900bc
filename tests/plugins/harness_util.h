// GstHarness helpers for element tests.
#pragma once

#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace prism::test {

// The names of the properties of `object` (an element or a pad) that Prism's own classes install
// and whose flags have `flag` (GST_PARAM_MUTABLE_PLAYING, GST_PARAM_CONTROLLABLE), sorted; the
// properties of GStreamer's base classes (GstAggregator's latency, GstBaseSrc's num-buffers, ...)
// are left out.
inline std::vector<std::string> own_properties_with(gpointer object, guint flag) {
  std::vector<std::string> names;
  guint n = 0;
  GParamSpec** all = g_object_class_list_properties(G_OBJECT_GET_CLASS(object), &n);
  for (guint i = 0; i < n; ++i) {
    const std::string owner = g_type_name(all[i]->owner_type);
    const bool ours = all[i]->owner_type == G_OBJECT_TYPE(object) || owner.rfind("GstPrism", 0) == 0 ||
                      owner.rfind("GstPoissonBlend", 0) == 0;
    if (ours && (all[i]->flags & flag)) names.push_back(all[i]->name);
  }
  g_free(all);
  std::sort(names.begin(), names.end());
  return names;
}

// Runs one buffer through `description` (a gst-launch bin description, e.g. "prismconvert") with
// the given caps and returns the output frame's pixels, packed (no padding), or an empty vector.
inline std::vector<uint8_t> run_element(const std::string& description, const std::string& in_caps,
                                        const std::string& out_caps, const std::vector<uint8_t>& in_packed,
                                        std::string* negotiated = nullptr) {
  GstHarness* h = gst_harness_new_parse(description.c_str());
  gst_harness_set_caps_str(h, in_caps.c_str(), out_caps.c_str());
  GstVideoInfo in_info;
  GstCaps* ic = gst_caps_from_string(in_caps.c_str());
  gst_video_info_from_caps(&in_info, ic);
  gst_caps_unref(ic);
  GstBuffer* buf = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&in_info), nullptr);
  // in_packed is plane after plane, rows without padding: place it at the GstVideoInfo layout.
  GstVideoFrame f;
  gst_video_frame_map(&f, &in_info, buf, GST_MAP_WRITE);
  size_t off = 0;
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&f); p++) {
    gint comp[GST_VIDEO_MAX_COMPONENTS];
    gst_video_format_info_component(f.info.finfo, p, comp);
    int rb = GST_VIDEO_FRAME_COMP_WIDTH(&f, comp[0]) * GST_VIDEO_FRAME_COMP_PSTRIDE(&f, comp[0]);
    for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(&f, comp[0]); y++, off += rb)
      std::memcpy((uint8_t*)GST_VIDEO_FRAME_PLANE_DATA(&f, p) + y * GST_VIDEO_FRAME_PLANE_STRIDE(&f, p),
                  in_packed.data() + off, rb);
  }
  gst_video_frame_unmap(&f);
  GST_BUFFER_PTS(buf) = 0;
  GST_BUFFER_DURATION(buf) = GST_SECOND / 30;
  std::vector<uint8_t> out;
  if (gst_harness_push(h, buf) == GST_FLOW_OK) {
    GstBuffer* ob = gst_harness_pull(h);
    GstCaps* oc = gst_pad_get_current_caps(h->sinkpad);
    GstVideoInfo out_info;
    gst_video_info_from_caps(&out_info, oc);
    if (negotiated) {
      gchar* s = gst_caps_to_string(oc);
      *negotiated = s;
      g_free(s);
    }
    gst_caps_unref(oc);
    GstVideoFrame of;
    if (gst_video_frame_map(&of, &out_info, ob, GST_MAP_READ)) {
      for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES(&of); p++) {
        gint comp[GST_VIDEO_MAX_COMPONENTS];
        gst_video_format_info_component(of.info.finfo, p, comp);
        int rb = GST_VIDEO_FRAME_COMP_WIDTH(&of, comp[0]) * GST_VIDEO_FRAME_COMP_PSTRIDE(&of, comp[0]);
        for (int y = 0; y < GST_VIDEO_FRAME_COMP_HEIGHT(&of, comp[0]); y++) {
          const uint8_t* r =
              (const uint8_t*)GST_VIDEO_FRAME_PLANE_DATA(&of, p) + y * GST_VIDEO_FRAME_PLANE_STRIDE(&of, p);
          out.insert(out.end(), r, r + rb);
        }
      }
      gst_video_frame_unmap(&of);
    }
    gst_buffer_unref(ob);
  }
  gst_harness_teardown(h);
  return out;
}

struct Diff {
  int max = 0;
  double mean = 0;
  double frac_over_1 = 0;
};

inline Diff compare(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  Diff d;
  if (a.size() != b.size() || a.empty()) {
    d.max = 9999;
    return d;
  }
  double sum = 0;
  size_t over = 0;
  for (size_t i = 0; i < a.size(); i++) {
    int v = std::abs(int(a[i]) - int(b[i]));
    d.max = std::max(d.max, v);
    sum += v;
    over += v > 1;
  }
  d.mean = sum / a.size();
  d.frac_over_1 = double(over) / a.size();
  return d;
}

}  // namespace prism::test
