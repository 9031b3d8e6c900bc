#include "gstenvisrc.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "envi/envi.h"
#include "gst/prism/gstprismtensor.h"

GST_DEBUG_CATEGORY_STATIC(gst_envi_src_debug);
#define GST_CAT_DEFAULT gst_envi_src_debug

namespace envi = prism::envi;
namespace tensor = prism::tensor;

enum { PROP_0, PROP_LOCATION, PROP_START_INDEX, PROP_STOP_INDEX, PROP_LOOP, PROP_FRAMERATE };

struct _GstEnviSrc {
  GstPushSrc parent;
  /* properties (object lock) */
  gchar *location;
  gint start_index, stop_index;
  gboolean loop;
  gint fps_n, fps_d;
  /* streaming */
  gint index;
  guint64 frame;
  gboolean have_info;
  GstPrismTensorInfo info;
};

G_DEFINE_TYPE(GstEnviSrc, gst_envi_src, GST_TYPE_PUSH_SRC);
GST_ELEMENT_REGISTER_DEFINE(envisrc, "envisrc", GST_RANK_NONE, GST_TYPE_ENVI_SRC);

static GstStaticPadTemplate src_template =
    GST_STATIC_PAD_TEMPLATE("src", GST_PAD_SRC, GST_PAD_ALWAYS,
                            GST_STATIC_CAPS(GST_PRISM_TENSOR_MEDIA_TYPE
                                            ", dtype=(string){ u8, u16, f32 }, channels=(int)[ 1, 1024 ], "
                                            "width=(int)[ 1, 32768 ], height=(int)[ 1, 32768 ], "
                                            "framerate=(fraction)[ 0/1, 2147483647/1 ], layout=(string)interleaved"));

/* The location for an index: the pattern's one %d / %0Nd directive replaced ("%%" is a '%').
 * Throws std::invalid_argument naming the property for any other directive or more than one. */
static std::string format_location(const std::string &pattern, gint index, bool *is_sequence) {
  std::string out;
  int directives = 0;
  for (size_t i = 0; i < pattern.size(); i++) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '%') {
      out += '%';
      i++;
      continue;
    }
    size_t j = i + 1;
    int width = 0;
    bool zero = j < pattern.size() && pattern[j] == '0';
    while (j < pattern.size() && g_ascii_isdigit(pattern[j])) width = width * 10 + (pattern[j++] - '0');
    if (j >= pattern.size() || pattern[j] != 'd' || width > 16)
      throw std::invalid_argument("property 'location': '" + pattern + "': only one %d or %0Nd directive is allowed");
    if (++directives > 1)
      throw std::invalid_argument("property 'location': '" + pattern + "': more than one %d directive");
    std::string num = std::to_string(index);
    while ((int)num.size() < width) num.insert(num.begin(), zero ? '0' : ' ');
    out += num;
    i = j;
  }
  *is_sequence = directives == 1;
  return out;
}

static void set_property(GObject *object, guint id, const GValue *value, GParamSpec *pspec) {
  GstEnviSrc *self = GST_ENVI_SRC(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_LOCATION:
      g_free(self->location);
      self->location = g_value_dup_string(value);
      break;
    case PROP_START_INDEX: self->start_index = g_value_get_int(value); break;
    case PROP_STOP_INDEX: self->stop_index = g_value_get_int(value); break;
    case PROP_LOOP: self->loop = g_value_get_boolean(value); break;
    case PROP_FRAMERATE:
      self->fps_n = gst_value_get_fraction_numerator(value);
      self->fps_d = gst_value_get_fraction_denominator(value);
      break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void get_property(GObject *object, guint id, GValue *value, GParamSpec *pspec) {
  GstEnviSrc *self = GST_ENVI_SRC(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_LOCATION: g_value_set_string(value, self->location); break;
    case PROP_START_INDEX: g_value_set_int(value, self->start_index); break;
    case PROP_STOP_INDEX: g_value_set_int(value, self->stop_index); break;
    case PROP_LOOP: g_value_set_boolean(value, self->loop); break;
    case PROP_FRAMERATE: gst_value_set_fraction(value, self->fps_n, self->fps_d); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

/* The first cube's header fixes the caps: read at start, so a missing or malformed first file
 * fails the state change and negotiation offers exactly what will flow. */
static gboolean start(GstBaseSrc *src) {
  GstEnviSrc *self = GST_ENVI_SRC(src);
  GST_OBJECT_LOCK(self);
  const std::string location = self->location ? self->location : "";
  self->index = self->start_index;
  const gint stop_index = self->stop_index;
  const gint fps_n = self->fps_n, fps_d = self->fps_d;
  GST_OBJECT_UNLOCK(self);
  self->frame = 0;
  self->have_info = FALSE;
  if (location.empty()) {
    GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("envisrc: property 'location' is not set"), (nullptr));
    return FALSE;
  }
  std::string path;
  bool seq = false;
  try {
    path = format_location(location, self->index, &seq);
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS, ("envisrc: %s", e.what()), (nullptr));
    return FALSE;
  }
  /* A sequence that ends before it starts would be an empty stream with caps read from a cube it
   * never sends. */
  if (seq && stop_index >= 0 && stop_index < self->index) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                      ("envisrc: property 'stop-index' (%d) is before 'start-index' (%d)", stop_index, self->index),
                      (nullptr));
    return FALSE;
  }
  if (!g_file_test(path.c_str(), G_FILE_TEST_EXISTS)) {
    GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("envisrc: %s: no such file (property 'location')", path.c_str()),
                      (nullptr));
    return FALSE;
  }
  try {
    const envi::Header h = envi::read_header(path);
    gst_prism_tensor_info_init(&self->info, envi::dtype_of(h.data_type), h.bands, h.samples, h.lines, fps_n, fps_d);
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, READ, ("envisrc: %s (property 'location')", e.what()), (nullptr));
    return FALSE;
  }
  self->have_info = TRUE;
  return TRUE;
}

static GstCaps *get_caps(GstBaseSrc *src, GstCaps *filter) {
  GstEnviSrc *self = GST_ENVI_SRC(src);
  GstCaps *caps = self->have_info ? gst_prism_tensor_info_to_caps(&self->info)
                                  : gst_pad_get_pad_template_caps(GST_BASE_SRC_PAD(src));
  if (filter) {
    GstCaps *tmp = gst_caps_intersect_full(filter, caps, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(caps);
    caps = tmp;
  }
  return caps;
}

static GstFlowReturn create(GstPushSrc *push, GstBuffer **out) {
  GstEnviSrc *self = GST_ENVI_SRC(push);
  GST_OBJECT_LOCK(self);
  const std::string location = self->location ? self->location : "";
  const gint start_index = self->start_index, stop_index = self->stop_index;
  const gboolean loop = self->loop;
  const gint fps_n = self->fps_n, fps_d = self->fps_d;
  GST_OBJECT_UNLOCK(self);

  std::string path;
  envi::Cube cube;
  try {
    bool sequence = false;
    path = format_location(location, self->index, &sequence);  // checked in start(), unless changed since
    const bool past_end = sequence ? (stop_index >= 0 && self->index > stop_index) : self->index != start_index;
    if (past_end || !g_file_test(path.c_str(), G_FILE_TEST_EXISTS)) {
      if (!loop || self->index == start_index) return GST_FLOW_EOS;
      self->index = start_index;
      path = format_location(location, self->index, &sequence);
    }
    cube = envi::read_cube(path);
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, READ, ("envisrc: %s (property 'location')", e.what()), (nullptr));
    return GST_FLOW_ERROR;
  }
  const envi::Header &h = cube.header;
  GstPrismTensorInfo info;
  gst_prism_tensor_info_init(&info, cube.dtype, h.bands, h.samples, h.lines, fps_n, fps_d);
  if (info.width != self->info.width || info.height != self->info.height || info.channels != self->info.channels ||
      info.dtype != self->info.dtype) {
    GST_ELEMENT_ERROR(self, STREAM, FORMAT,
                      ("envisrc: %s is %dx%d with %d bands of %s; the sequence started with %dx%d, %d bands of %s",
                       path.c_str(), info.width, info.height, info.channels, tensor::dtype_name(info.dtype),
                       self->info.width, self->info.height, self->info.channels, tensor::dtype_name(self->info.dtype)),
                      (nullptr));
    return GST_FLOW_ERROR;
  }

  const gsize packed = (gsize)info.width * info.channels * tensor::dtype_size(info.dtype);
  GstBuffer *buf = gst_buffer_new_allocate(nullptr, info.row_bytes * info.height, nullptr);
  GstMapInfo map;
  if (!gst_buffer_map(buf, &map, GST_MAP_WRITE)) {
    gst_buffer_unref(buf);
    GST_ELEMENT_ERROR(self, RESOURCE, FAILED, ("envisrc: cannot map a new buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }
  for (gint y = 0; y < info.height; y++) {
    memcpy(map.data + y * info.row_bytes, cube.bip.data() + y * packed, packed);
    memset(map.data + y * info.row_bytes + packed, 0, info.row_bytes - packed);
  }
  gst_buffer_unmap(buf, &map);
  if (fps_n > 0) {
    GST_BUFFER_PTS(buf) = gst_util_uint64_scale(self->frame, GST_SECOND * fps_d, fps_n);
    GST_BUFFER_DURATION(buf) = gst_util_uint64_scale(self->frame + 1, GST_SECOND * fps_d, fps_n) - GST_BUFFER_PTS(buf);
  }
  GST_BUFFER_OFFSET(buf) = self->frame;
  self->frame++;
  self->index++;
  *out = buf;
  return GST_FLOW_OK;
}

static void finalize(GObject *object) {
  g_free(GST_ENVI_SRC(object)->location);
  G_OBJECT_CLASS(gst_envi_src_parent_class)->finalize(object);
}

static void gst_envi_src_class_init(GstEnviSrcClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  oc->set_property = set_property;
  oc->get_property = get_property;
  oc->finalize = finalize;
  const GParamFlags rw = (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  /* Read by create() for each cube: may change while playing. location (checked at start, and the
   * caps come from its first cube) and framerate (in the caps) may not. */
  const GParamFlags playing = (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING);
  g_object_class_install_property(
      oc, PROP_LOCATION,
      g_param_spec_string("location", "Location",
                          "ENVI header (.hdr) to read, or a numbered sequence with one %d / %0Nd (like multifilesrc)",
                          nullptr, rw));
  g_object_class_install_property(
      oc, PROP_START_INDEX,
      g_param_spec_int("start-index", "Start index", "First index of a sequence", 0, G_MAXINT, 0, playing));
  g_object_class_install_property(
      oc, PROP_STOP_INDEX,
      g_param_spec_int("stop-index", "Stop index", "Last index of a sequence (-1: until a file is missing)", -1,
                       G_MAXINT, -1, playing));
  g_object_class_install_property(
      oc, PROP_LOOP, g_param_spec_boolean("loop", "Loop", "Start again after the last cube", FALSE, playing));
  g_object_class_install_property(oc, PROP_FRAMERATE,
                                  gst_param_spec_fraction("framerate", "Frame rate", "Frames per second of the output",
                                                          0, 1, G_MAXINT, 1, 30, 1, rw));
  gst_element_class_set_static_metadata(element_class, "Prism ENVI source", "Source/File",
                                        "Reads ENVI hyperspectral cubes (BSQ/BIL/BIP; u8, i16, u16, i32, u32, f32, "
                                        "f64) as other/x-prism-tensor frames",
                                        "Prism developers");
  gst_element_class_add_static_pad_template(element_class, &src_template);
  GST_BASE_SRC_CLASS(klass)->start = GST_DEBUG_FUNCPTR(start);
  GST_BASE_SRC_CLASS(klass)->get_caps = GST_DEBUG_FUNCPTR(get_caps);
  GST_PUSH_SRC_CLASS(klass)->create = GST_DEBUG_FUNCPTR(create);
  GST_DEBUG_CATEGORY_INIT(gst_envi_src_debug, "envisrc", 0, "Prism ENVI source");
}

static void gst_envi_src_init(GstEnviSrc *self) {
  self->stop_index = -1;
  self->fps_n = 30;
  self->fps_d = 1;
  gst_base_src_set_format(GST_BASE_SRC(self), GST_FORMAT_TIME);
}
