#include "gstemdtracker.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "emd/tracker.h"
#include "gst/prism/gstprismmessage.h"
#include "tensor/tensor.h"

GST_DEBUG_CATEGORY_STATIC(gst_emd_tracker_debug);
#define GST_CAT_DEFAULT gst_emd_tracker_debug

namespace emd = prism::emd;
namespace tensor = prism::tensor;

#define INPUT_FORMATS "{ NV12, I420, GRAY8 }"
/* GstCudaMemory 1.22 cannot hold GRAY8. */
#define CUDA_INPUT_FORMATS "{ NV12, I420 }"
#define INPUT_DTYPES "{ u8, u16, f32 }"

#define GST_TYPE_EMD_GROUND (ground_kind_get_type())
static GType ground_kind_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {(gint)emd::GroundKind::AbsDiff, "|i - j| between bins", "abs-diff"},
      {(gint)emd::GroundKind::SquaredDiff, "(i - j)^2 between bins", "squared-diff"},
      {(gint)emd::GroundKind::Wavelengths, "|w_i - w_j| of the 'wavelengths' property", "wavelengths"},
      {(gint)emd::GroundKind::Matrix, "the n x n matrix in 'ground-distance-location'", "matrix"},
      {0, nullptr, nullptr}};
  if (g_once_init_enter(&type)) g_once_init_leave(&type, g_enum_register_static("GstEmdGroundDistance", values));
  return type;
}

#define GST_TYPE_EMD_NORMALIZATION (normalization_get_type())
static GType normalization_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {(gint)emd::Normalization::Flow, "total cost / flow moved (Rubner; the smaller mass)", "flow"},
      {(gint)emd::Normalization::LargerMass, "total cost / the larger mass (cv::EMD)", "larger-mass"},
      {0, nullptr, nullptr}};
  if (g_once_init_enter(&type)) g_once_init_leave(&type, g_enum_register_static("GstEmdNormalization", values));
  return type;
}

enum {
  PROP_0,
  PROP_TARGET,
  PROP_TARGET_LOCATION,
  PROP_TARGET_RECT,
  PROP_TARGET_FRAME,
  PROP_BINS,
  PROP_WINDOW,
  PROP_GROUND,
  PROP_WAVELENGTHS,
  PROP_GROUND_LOCATION,
  PROP_NORMALIZATION,
  PROP_CACHE_SIZE,
  PROP_DEDUP,
  PROP_THRESHOLD,
  PROP_MIN_AREA,
  PROP_MAX_AREA,
  PROP_MERGE_GAP,
  PROP_MAX_AGE,
  PROP_HEATMAP_MAX,
  PROP_OPACITY,
  PROP_DRAW_BOXES,
  PROP_LEGEND,
  PROP_ASYNC,
  PROP_FRAMES_SKIPPED,
  PROP_CAMERA,
  PROP_CAMERA_URI,
};

struct _GstEmdTracker {
  GstPrismCudaFilter parent;
  /* properties (object lock) */
  gchar *target_text, *target_location, *target_rect, *wavelengths, *ground_location;
  guint target_frame;
  gint bins, window;
  emd::GroundKind ground_kind;
  emd::Normalization normalization;
  gint64 cache_size;
  gboolean dedup;
  gfloat threshold, heatmap_max, opacity;
  gboolean draw_boxes, legend;
  gint64 min_area, max_area;
  gint merge_gap, max_age;
  /* streaming: the pipeline, configured per caps; on the GPU path its device memory is in our
   * context, so it is configured and reset with that context pushed */
  emd::Tracker *tracker;
  /* The base class's number of the first frame of the caps (async: the worker's first job after
   * new caps, as set_caps waits for the worker), so that messages count frames since the caps. */
  guint64 caps_frame;
};

G_DEFINE_TYPE(GstEmdTracker, gst_emd_tracker, GST_TYPE_PRISM_CUDA_FILTER);
GST_ELEMENT_REGISTER_DEFINE(emdtracker, "emdtracker", GST_RANK_NONE, GST_TYPE_EMD_TRACKER);

static GstBaseTransformClass *filter_class_parent = nullptr;  // GstPrismCudaFilter's vmethods

/* ---- properties ---- */

static void set_property(GObject *object, guint id, const GValue *value, GParamSpec *pspec) {
  GstEmdTracker *self = GST_EMD_TRACKER(object);
  if (gst_prism_cuda_filter_async_set_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  if (gst_prism_cuda_filter_camera_set_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_TARGET:
      g_free(self->target_text);
      self->target_text = g_value_dup_string(value);
      break;
    case PROP_TARGET_LOCATION:
      g_free(self->target_location);
      self->target_location = g_value_dup_string(value);
      break;
    case PROP_TARGET_RECT:
      g_free(self->target_rect);
      self->target_rect = g_value_dup_string(value);
      break;
    case PROP_TARGET_FRAME: self->target_frame = g_value_get_uint(value); break;
    case PROP_BINS: self->bins = g_value_get_int(value); break;
    case PROP_WINDOW: self->window = g_value_get_int(value); break;
    case PROP_GROUND: self->ground_kind = (emd::GroundKind)g_value_get_enum(value); break;
    case PROP_WAVELENGTHS:
      g_free(self->wavelengths);
      self->wavelengths = g_value_dup_string(value);
      break;
    case PROP_GROUND_LOCATION:
      g_free(self->ground_location);
      self->ground_location = g_value_dup_string(value);
      break;
    case PROP_NORMALIZATION: self->normalization = (emd::Normalization)g_value_get_enum(value); break;
    case PROP_CACHE_SIZE: self->cache_size = g_value_get_int64(value); break;
    case PROP_DEDUP: self->dedup = g_value_get_boolean(value); break;
    case PROP_THRESHOLD: self->threshold = g_value_get_float(value); break;
    case PROP_MIN_AREA: self->min_area = g_value_get_int64(value); break;
    case PROP_MAX_AREA: self->max_area = g_value_get_int64(value); break;
    case PROP_MERGE_GAP: self->merge_gap = g_value_get_int(value); break;
    case PROP_MAX_AGE: self->max_age = g_value_get_int(value); break;
    case PROP_HEATMAP_MAX: self->heatmap_max = g_value_get_float(value); break;
    case PROP_OPACITY: self->opacity = g_value_get_float(value); break;
    case PROP_DRAW_BOXES: self->draw_boxes = g_value_get_boolean(value); break;
    case PROP_LEGEND: self->legend = g_value_get_boolean(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void get_property(GObject *object, guint id, GValue *value, GParamSpec *pspec) {
  GstEmdTracker *self = GST_EMD_TRACKER(object);
  if (gst_prism_cuda_filter_async_get_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  if (gst_prism_cuda_filter_camera_get_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_TARGET: g_value_set_string(value, self->target_text); break;
    case PROP_TARGET_LOCATION: g_value_set_string(value, self->target_location); break;
    case PROP_TARGET_RECT: g_value_set_string(value, self->target_rect); break;
    case PROP_TARGET_FRAME: g_value_set_uint(value, self->target_frame); break;
    case PROP_BINS: g_value_set_int(value, self->bins); break;
    case PROP_WINDOW: g_value_set_int(value, self->window); break;
    case PROP_GROUND: g_value_set_enum(value, (gint)self->ground_kind); break;
    case PROP_WAVELENGTHS: g_value_set_string(value, self->wavelengths); break;
    case PROP_GROUND_LOCATION: g_value_set_string(value, self->ground_location); break;
    case PROP_NORMALIZATION: g_value_set_enum(value, (gint)self->normalization); break;
    case PROP_CACHE_SIZE: g_value_set_int64(value, self->cache_size); break;
    case PROP_DEDUP: g_value_set_boolean(value, self->dedup); break;
    case PROP_THRESHOLD: g_value_set_float(value, self->threshold); break;
    case PROP_MIN_AREA: g_value_set_int64(value, self->min_area); break;
    case PROP_MAX_AREA: g_value_set_int64(value, self->max_area); break;
    case PROP_MERGE_GAP: g_value_set_int(value, self->merge_gap); break;
    case PROP_MAX_AGE: g_value_set_int(value, self->max_age); break;
    case PROP_HEATMAP_MAX: g_value_set_float(value, self->heatmap_max); break;
    case PROP_OPACITY: g_value_set_float(value, self->opacity); break;
    case PROP_DRAW_BOXES: g_value_set_boolean(value, self->draw_boxes); break;
    case PROP_LEGEND: g_value_set_boolean(value, self->legend); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

/* ---- caps: grey/YUV in, RGBA heat map of the same size out ---- */

/* Sink: video (spectralized here) or a tensor of 2..32 channels (the signatures themselves).
 * Src: the RGBA heat map (first) or the distance map as a 1-channel f32 tensor. Same size. */
static GstCaps *transform_structure(GstPrismCudaFilter *, GstPadDirection direction, const GstStructure *in) {
  GstStructure *video, *map;
  if (direction == GST_PAD_SINK) {
    video = gst_structure_from_string("video/x-raw, format=(string)RGBA", nullptr);
    map = gst_prism_tensor_structure_new("f32", 1, 1);
  } else {
    video = gst_structure_from_string("video/x-raw, format=(string)" INPUT_FORMATS, nullptr);
    map = gst_prism_tensor_structure_new(INPUT_DTYPES, 2, emd::kMaxBins);
  }
  gst_prism_structure_copy_geometry(video, in);
  gst_prism_structure_copy_geometry(map, in);
  return gst_caps_new_full(video, map, nullptr);
}

/* ---- errors ---- */

/* The one place exceptions become element errors; call it from a catch block. A setting's value
 * is a settings error, a learned target that is no signature a stream error, anything else (the
 * kernels, CUDA) a library error. */
static void post_error(GstEmdTracker *self) {
  try {
    throw;
  } catch (const emd::SettingError &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS, ("emdtracker: %s", e.what()), (nullptr));
  } catch (const emd::LearnedTargetError &e) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("emdtracker: %s", e.what()), (nullptr));
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("emdtracker: %s", e.what()), (nullptr));
  } catch (...) {
    GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("emdtracker: unknown error"), (nullptr));
  }
}

/* ---- per caps ---- */

/* The settings as the properties hold them now. */
static emd::TrackerConfig read_config(GstEmdTracker *self) {
  emd::TrackerConfig c;
  GST_OBJECT_LOCK(self);
  c.bins = self->bins;
  c.window = self->window;
  c.ground = self->ground_kind;
  c.wavelengths = self->wavelengths ? self->wavelengths : "";
  c.ground_location = self->ground_location ? self->ground_location : "";
  c.target = self->target_text ? self->target_text : "";
  c.target_location = self->target_location ? self->target_location : "";
  c.target_rect = self->target_rect ? self->target_rect : "";
  c.target_frame = self->target_frame;
  c.map.normalization = self->normalization;
  c.map.cache_capacity = self->cache_size;
  c.map.dedup = self->dedup;
  GST_OBJECT_UNLOCK(self);
  return c;
}

static gboolean set_info(GstPrismCudaFilter *filter, const GstVideoInfo *in, const GstVideoInfo *out) {
  GstEmdTracker *self = GST_EMD_TRACKER(filter);
  const GstPrismTensorInfo *tin = gst_prism_cuda_filter_in_tensor(filter);
  const GstPrismTensorInfo *tout = gst_prism_cuda_filter_out_tensor(filter);
  const GstVideoFormat f = GST_VIDEO_INFO_FORMAT(in);
  if (tin ? (tin->channels < 2 || tin->channels > emd::kMaxBins)
          : (f != GST_VIDEO_FORMAT_NV12 && f != GST_VIDEO_FORMAT_I420 && f != GST_VIDEO_FORMAT_GRAY8)) {
    GST_ELEMENT_ERROR(
        self, CORE, NEGOTIATION,
        ("emdtracker: pad 'sink' takes NV12, I420, GRAY8 or other/x-prism-tensor of 2 to %d channels", emd::kMaxBins),
        (nullptr));
    return FALSE;
  }
  const int W = tin ? tin->width : GST_VIDEO_INFO_WIDTH(in), H = tin ? tin->height : GST_VIDEO_INFO_HEIGHT(in);
  if (tout ? (tout->dtype != tensor::DType::F32 || tout->channels != 1 || tout->width != W || tout->height != H)
           : (GST_VIDEO_INFO_FORMAT(out) != GST_VIDEO_FORMAT_RGBA || GST_VIDEO_INFO_WIDTH(out) != W ||
              GST_VIDEO_INFO_HEIGHT(out) != H)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                      ("emdtracker: pad 'src' gives RGBA or a 1-channel f32 other/x-prism-tensor of the input's size"),
                      (nullptr));
    return FALSE;
  }
  emd::Tracker::Shape shape;
  shape.width = W;
  shape.height = H;
  shape.channels = tin ? tin->channels : 0;
  shape.distance_out = tout != nullptr;
  const emd::TrackerConfig config = read_config(self);
  /* On the GPU path the tracker's buffers are allocated here (the previous caps' freed), in our
   * context. */
  const gboolean pushed = gst_prism_cuda_filter_push_context(filter);
  if (gst_prism_cuda_filter_uses_cuda(filter) && !pushed) {
    GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("emdtracker: cannot push the CUDA context"), (nullptr));
    return FALSE;
  }
  gboolean ok = TRUE;
  try {
#if defined(PRISM_HAVE_CUDA)
    if (pushed)
      self->tracker->configure(config, shape, (cudaStream_t)gst_prism_cuda_filter_get_stream(filter));
    else
#endif
      self->tracker->configure(config, shape);
  } catch (...) {
    post_error(self);
    ok = FALSE;
  }
  if (pushed) gst_prism_cuda_filter_pop_context();
  return ok;
}

/* The base's stop() has joined the async worker (async=true runs process() on the tracker) and
 * releases the context after this. */
static gboolean stop(GstPrismCudaFilter *filter) {
  GstEmdTracker *self = GST_EMD_TRACKER(filter);
  const gboolean pushed = gst_prism_cuda_filter_push_context(filter);
  self->tracker->reset();
  if (pushed) gst_prism_cuda_filter_pop_context();
  return TRUE;
}

/* ---- per frame ---- */

static GstFlowReturn process(GstPrismCudaFilter *filter, const GstPrismFrame *in, const GstPrismFrame *out) {
  GstEmdTracker *self = GST_EMD_TRACKER(filter);
  emd::Tracker &t = *self->tracker;
  emd::Tracker::FrameParams params;
  GST_OBJECT_LOCK(self);
  params.threshold = self->threshold;
  params.heatmap_max = self->heatmap_max;
  params.opacity = self->opacity;
  params.legend = self->legend;
  GST_OBJECT_UNLOCK(self);
  emd::Tracker::Input input;
  input.data = in->data[0];
  input.stride = in->stride[0];
  if (t.shape().channels > 0)
    input.layout = gst_prism_tensor_layout(gst_prism_cuda_filter_in_tensor(filter), in->stride[0]);
  const emd::Tracker::Output output{out->data[0], out->stride[0]};
  const bool known = t.target_known();
  try {
#if defined(PRISM_HAVE_CUDA)
    if (in->device)
      t.process_cuda(input, output, params);
    else
#endif
      t.process_cpu(input, output, params);
  } catch (...) {
    post_error(self);
    return GST_FLOW_ERROR;
  }
  if (!known && t.target_known())
    GST_INFO_OBJECT(self, "target learned from frame %" G_GUINT64_FORMAT, (guint64)t.frame());
  return GST_FLOW_OK;
}

/* Box outlines on the finished output frame, as the base class hands it to finish(): device
 * pointers of our CUDA memory (one small kernel on the element's stream, context pushed) or host
 * pointers holding the final pixels (the CPU path, or a staged output already downloaded). Throws. */
static void draw_boxes(GstEmdTracker *self, const std::vector<emd::Detection> &dets, const GstPrismFrame *out) {
  emd::Tracker &t = *self->tracker;
#if defined(PRISM_HAVE_CUDA)
  if (out->device) {
    t.draw_boxes_cuda(dets, out->data[0], out->stride[0]);
    return;
  }
#endif
  t.draw_boxes_cpu(dets, out->data[0], out->stride[0]);
}

/* GstPrismCudaFilter's finish hook, after process() and the stream sync: detections, tracks,
 * boxes, meta and the frame's message. */
static GstFlowReturn finish(GstPrismCudaFilter *filter, GstBuffer *outbuf, const GstPrismFrame *out) {
  GstEmdTracker *self = GST_EMD_TRACKER(filter);
  emd::Tracker &t = *self->tracker;
  emd::ObjectParams objects;
  emd::TrackParams tracks;
  GST_OBJECT_LOCK(self);
  objects.min_area = self->min_area;
  objects.max_area = self->max_area;
  objects.merge_gap = self->merge_gap;
  tracks.max_age = self->max_age;
  const bool draw = self->draw_boxes;
  GST_OBJECT_UNLOCK(self);
  const emd::Tracker::Result *result = nullptr;
  try {
    result = &t.end_frame(objects, tracks);
    if (draw && !t.shape().distance_out && !result->detections.empty()) draw_boxes(self, result->detections, out);
  } catch (...) {
    post_error(self);
    return GST_FLOW_ERROR;
  }
  const emd::Tracker::Result &r = *result;
  GstStructure *stats = nullptr;
  if (r.solved)
    stats = gst_structure_new("stats", "solved", G_TYPE_INT64, (gint64)r.stats.solved, "duplicates", G_TYPE_INT64,
                              (gint64)r.stats.duplicates, "cache-hits", G_TYPE_INT64, (gint64)r.stats.cache_hits,
                              "hit-rate", G_TYPE_DOUBLE, r.stats.hit_rate(), "dedup-ratio", G_TYPE_DOUBLE,
                              r.stats.dedup_ratio(), "pivots", G_TYPE_INT64, (gint64)r.stats.pivots, "cache-flushed",
                              G_TYPE_BOOLEAN, r.stats.flushed, nullptr);
  GValue list = G_VALUE_INIT;
  g_value_init(&list, GST_TYPE_LIST);
  for (const emd::Detection &d : r.detections) {
    GstVideoRegionOfInterestMeta *m =
        gst_buffer_add_video_region_of_interest_meta(outbuf, "emd-target", d.x, d.y, d.w, d.h);
    m->id = (gint)d.track_id;
    gst_video_region_of_interest_meta_add_param(
        m, gst_structure_new("emd", "distance", G_TYPE_DOUBLE, (double)d.distance, "track-id", G_TYPE_INT64,
                             (gint64)d.track_id, "pixels", G_TYPE_INT64, (gint64)d.pixels, nullptr));
    GValue v = G_VALUE_INIT;
    g_value_init(&v, GST_TYPE_STRUCTURE);
    GstStructure *s =
        gst_structure_new("detection", "x", G_TYPE_INT, d.x, "y", G_TYPE_INT, d.y, "width", G_TYPE_INT, d.w, "height",
                          G_TYPE_INT, d.h, "distance", G_TYPE_DOUBLE, (double)d.distance, "track-id", G_TYPE_INT64,
                          (gint64)d.track_id, "pixels", G_TYPE_INT64, (gint64)d.pixels, nullptr);
    gst_value_set_structure(&v, s);
    gst_structure_free(s);
    gst_value_list_append_and_take_value(&list, &v);
  }
  /* the tracks: their filtered (or, while they coast, predicted) boxes */
  GValue track_list = G_VALUE_INIT;
  g_value_init(&track_list, GST_TYPE_LIST);
  for (const emd::Track &k : r.tracks) {
    GValue v = G_VALUE_INIT;
    g_value_init(&v, GST_TYPE_STRUCTURE);
    const int x0 = (int)std::lround(k.cx - k.w / 2), y0 = (int)std::lround(k.cy - k.h / 2);
    GstStructure *s =
        gst_structure_new("track", "track-id", G_TYPE_INT64, (gint64)k.id, "x", G_TYPE_INT, x0, "y", G_TYPE_INT, y0,
                          "width", G_TYPE_INT, (int)std::lround(k.cx + k.w / 2) - x0, "height", G_TYPE_INT,
                          (int)std::lround(k.cy + k.h / 2) - y0, "vx", G_TYPE_DOUBLE, k.vx, "vy", G_TYPE_DOUBLE, k.vy,
                          "age", G_TYPE_INT, k.age, "hits", G_TYPE_INT64, (gint64)k.hits, nullptr);
    gst_value_set_structure(&v, s);
    gst_structure_free(s);
    gst_value_list_append_and_take_value(&track_list, &v);
  }
  /* In async mode the tracker counts the frames it analysed; the message counts every frame. */
  if (r.frame == 0) self->caps_frame = gst_prism_cuda_filter_frame_number(filter);
  const guint64 frame =
      gst_prism_cuda_filter_is_async(filter) ? gst_prism_cuda_filter_frame_number(filter) - self->caps_frame : r.frame;
  GstStructure *msg =
      gst_prism_frame_message_new("emdtracker", gst_prism_cuda_filter_frame_segment(filter), outbuf, frame);
  gst_structure_set(msg, "target-known", G_TYPE_BOOLEAN, t.target_known(), nullptr);
  gst_structure_take_value(msg, "detections", &list);
  gst_structure_take_value(msg, "tracks", &track_list);
  if (stats) {
    gst_structure_set(msg, "stats", GST_TYPE_STRUCTURE, stats, nullptr);
    gst_structure_free(stats);
  }
  gst_prism_cuda_filter_post_frame_message(filter, msg);
  return GST_FLOW_OK;
}

static gboolean start(GstBaseTransform *trans) {
  GstEmdTracker *self = GST_EMD_TRACKER(trans);
  /* Check the properties before any data flows, so a bad one fails at the state change. */
  try {
    emd::check_config(read_config(self), -1);
  } catch (...) {
    post_error(self);
    return FALSE;
  }
  return filter_class_parent->start(trans);
}

static void finalize(GObject *object) {
  GstEmdTracker *self = GST_EMD_TRACKER(object);
  g_free(self->target_text);
  g_free(self->target_location);
  g_free(self->target_rect);
  g_free(self->wavelengths);
  g_free(self->ground_location);
  delete self->tracker; /* reset in stop(): no device memory left */
  G_OBJECT_CLASS(gst_emd_tracker_parent_class)->finalize(object);
}

static void gst_emd_tracker_class_init(GstEmdTrackerClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);
  GstPrismCudaFilterClass *filter_class = GST_PRISM_CUDA_FILTER_CLASS(klass);
  filter_class_parent = GST_BASE_TRANSFORM_CLASS(gst_emd_tracker_parent_class);

  gobject_class->finalize = finalize;
  /* device/cuda-device-id stay with the base class's handlers (GObject dispatches by owner). */
  const GParamFlags rw = (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  /* Read per frame: may change while playing. Numbers are controllable too (GstController values
   * are synced at each frame's stream time by GstPrismCudaFilter). */
  const GParamFlags playing = (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING);
  const GParamFlags controllable = (GParamFlags)(playing | GST_PARAM_CONTROLLABLE);
  GObjectClass *oc = gobject_class;
  auto install = [&](guint id, GParamSpec *p) { g_object_class_install_property(oc, id, p); };
  oc->set_property = set_property;
  oc->get_property = get_property;
  install(PROP_TARGET, g_param_spec_string("target", "Target signature",
                                           "The target's signature: 'bins' numbers (commas or spaces)", nullptr, rw));
  install(PROP_TARGET_LOCATION, g_param_spec_string("target-location", "Target file",
                                                    "A text file with the target's signature", nullptr, rw));
  install(PROP_TARGET_RECT,
          g_param_spec_string("target-rect", "Target rectangle",
                              "x,y,width,height: learn the target as the mean signature of this rectangle of "
                              "frame 'target-frame'",
                              nullptr, rw));
  install(PROP_TARGET_FRAME, g_param_spec_uint("target-frame", "Target frame",
                                               "Frame (from 0) whose target-rect is learned", 0, G_MAXUINT, 0, rw));
  install(PROP_BINS, g_param_spec_int(
                         "bins", "Bins",
                         "Signature bins of video input (grey-level histogram bins); tensor input brings its channels",
                         2, emd::kMaxBins, 11, rw));
  install(PROP_WINDOW, g_param_spec_int("window", "Window", "Odd window size of the per-pixel histogram (video input)",
                                        1, 31, 11, rw));
  install(PROP_GROUND, g_param_spec_enum("ground-distance", "Ground distance", "Cost between bins", GST_TYPE_EMD_GROUND,
                                         (gint)emd::GroundKind::AbsDiff, rw));
  install(PROP_WAVELENGTHS,
          g_param_spec_string("wavelengths", "Wavelengths", "Band centre wavelengths for ground-distance=wavelengths",
                              nullptr, rw));
  install(PROP_GROUND_LOCATION, g_param_spec_string("ground-distance-location", "Ground distance file",
                                                    "n lines of n numbers for ground-distance=matrix", nullptr, rw));
  install(PROP_NORMALIZATION, g_param_spec_enum("normalization", "Normalization",
                                                "How the total cost becomes a distance when the masses differ",
                                                GST_TYPE_EMD_NORMALIZATION, (gint)emd::Normalization::Flow, rw));
  install(PROP_CACHE_SIZE, g_param_spec_int64("cache-size", "Cache size",
                                              "Signatures kept from earlier frames (0: none); emptied when full", 0,
                                              G_MAXINT64 / 1024, emd::EmdMapConfig{}.cache_capacity, rw));
  install(PROP_DEDUP, g_param_spec_boolean("dedup", "Deduplicate",
                                           "Solve each distinct signature of a frame once (and cache)", TRUE, rw));
  install(PROP_THRESHOLD,
          g_param_spec_float("threshold", "Threshold", "Detection: pixels at this EMD or less are on target", 0.f,
                             G_MAXFLOAT, 1.f, controllable));
  install(PROP_MIN_AREA, g_param_spec_int64("min-area", "Minimum area",
                                            "Detection: fewest on-target pixels of an object", 1, G_MAXINT64, 64, rw));
  install(PROP_MAX_AREA, g_param_spec_int64("max-area", "Maximum area", "Detection: most on-target pixels of an object",
                                            1, G_MAXINT64, G_MAXINT64, rw));
  install(PROP_MERGE_GAP, g_param_spec_int("merge-gap", "Merge gap",
                                           "Detection: regions whose boxes are at most this many pixels apart "
                                           "(horizontally and vertically) are one object",
                                           0, 4096, emd::ObjectParams{}.merge_gap, rw));
  install(PROP_MAX_AGE,
          g_param_spec_int("max-age", "Maximum age",
                           "Tracking: frames a track is kept without a matching object (its id is kept meanwhile)", 0,
                           10000, emd::TrackParams{}.max_age, rw));
  install(PROP_HEATMAP_MAX,
          g_param_spec_float("heatmap-max", "Heat map range", "Distance shown as blue (0: 3 x threshold)", 0.f,
                             G_MAXFLOAT, 0.f, controllable));
  install(PROP_OPACITY,
          g_param_spec_float("opacity", "Opacity",
                             "Heat map colour over the grey frame (video input; over black for tensor input)", 0.f, 1.f,
                             0.6f, controllable));
  install(PROP_DRAW_BOXES,
          g_param_spec_boolean("draw-boxes", "Draw boxes", "Outline the detections on the heat map", TRUE, playing));
  install(PROP_LEGEND, g_param_spec_boolean("legend", "Legend",
                                            "Draw the heat map's legend in its bottom-left corner (the colour ramp "
                                            "from distance 0 to heatmap-max, the threshold marked; frames of "
                                            "160x60 or more)",
                                            TRUE, playing));
  /* Tracking needs every frame: off by default, available for a live source on a slow CPU. */
  gst_prism_cuda_filter_class_install_async(oc, PROP_ASYNC, PROP_FRAMES_SKIPPED, FALSE);
  gst_prism_cuda_filter_class_install_camera(oc, PROP_CAMERA, PROP_CAMERA_URI);

  gst_element_class_set_static_metadata(
      element_class, "Prism EMD tracker", "Filter/Analyzer/Video/Hardware",
      "Per-pixel Earth Mover's Distance of multispectral signatures (other/x-prism-tensor, or window "
      "grey-level histograms of video) to a target signature (exact transportation simplex with a "
      "frame-to-frame cache); a heat map or the float distance map, and tracked detections as "
      "region-of-interest meta and element messages. GPU (CUDA memory) or CPU.",
      "Prism developers");
  GstCaps *sink = gst_prism_cuda_template_caps(INPUT_FORMATS, CUDA_INPUT_FORMATS);
  gst_caps_append(sink, gst_prism_tensor_template_caps(INPUT_DTYPES, 2, emd::kMaxBins));
  GstCaps *src = gst_prism_cuda_template_caps("RGBA", "RGBA");
  gst_caps_append(src, gst_prism_tensor_template_caps("f32", 1, 1));
  gst_prism_cuda_filter_class_add_pad_templates_full(element_class, sink, src);
  gst_caps_unref(sink);
  gst_caps_unref(src);
  filter_class->transform_structure = transform_structure;
  filter_class->set_info = set_info;
  filter_class->process = process;
  filter_class->finish = finish;
  trans_class->start = GST_DEBUG_FUNCPTR(start);
  filter_class->stop = stop;
  trans_class->passthrough_on_same_caps = FALSE;
  GST_DEBUG_CATEGORY_INIT(gst_emd_tracker_debug, "emdtracker", 0, "Prism EMD tracker");
}

static void gst_emd_tracker_init(GstEmdTracker *self) {
  self->bins = 11;
  self->window = 11;
  self->ground_kind = emd::GroundKind::AbsDiff;
  self->normalization = emd::Normalization::Flow;
  self->cache_size = emd::EmdMapConfig{}.cache_capacity;
  self->dedup = TRUE;
  self->threshold = 1.f;
  self->min_area = 64;
  self->max_area = G_MAXINT64;
  self->merge_gap = emd::ObjectParams{}.merge_gap;
  self->max_age = emd::TrackParams{}.max_age;
  self->heatmap_max = 0.f;
  self->opacity = 0.6f;
  self->draw_boxes = TRUE;
  self->legend = TRUE;
  self->tracker = new emd::Tracker();
}
