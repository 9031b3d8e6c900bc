#include "gstbowclassify.h"

#include <gst/video/video.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "bow/model.h"
#include "gstprismcuda.h" /* GST_TYPE_PRISM_DEVICE: the same auto/cuda/cpu enum as the other elements */
#include "gstprismgrey.h"

GST_DEBUG_CATEGORY_STATIC(gst_bow_classify_debug);
#define GST_CAT_DEFAULT gst_bow_classify_debug

namespace bow = prism::bow;

enum { PROP_0, PROP_MODEL, PROP_INTERVAL, PROP_OVERLAY, PROP_DEVICE };

constexpr guint kDefaultInterval = 30;

/* Made at start(), gone at stop(). */
struct State {
  bow::Model model;
  GstVideoInfo info;
  bool have_info = false;
  guint64 frame = 0;
  bool have_result = false;
  guint64 result_frame = 0;
  bow::Prediction result;
  cv::Mat grey;  // RGB-ish frames converted here (reused)
};

struct _GstBowClassify {
  GstBaseTransform parent;
  /* properties (object lock) */
  gchar *model;
  guint interval;
  gboolean overlay;
  GstPrismDevice device;
  State *state;
};

G_DEFINE_TYPE(GstBowClassify, gst_bow_classify, GST_TYPE_BASE_TRANSFORM);
GST_ELEMENT_REGISTER_DEFINE(bowclassify, "bowclassify", GST_RANK_NONE, GST_TYPE_BOW_CLASSIFY);

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE(
    "sink", GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS(GST_VIDEO_CAPS_MAKE(PRISM_GREY_FORMATS)));
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS(GST_VIDEO_CAPS_MAKE(PRISM_GREY_FORMATS)));

static void set_property(GObject *object, guint id, const GValue *value, GParamSpec *pspec) {
  GstBowClassify *self = GST_BOW_CLASSIFY(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_MODEL: g_free(self->model); self->model = g_value_dup_string(value); break;
    case PROP_INTERVAL: self->interval = g_value_get_uint(value); break;
    case PROP_OVERLAY: self->overlay = g_value_get_boolean(value); break;
    case PROP_DEVICE: self->device = (GstPrismDevice)g_value_get_enum(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void get_property(GObject *object, guint id, GValue *value, GParamSpec *pspec) {
  GstBowClassify *self = GST_BOW_CLASSIFY(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_MODEL: g_value_set_string(value, self->model); break;
    case PROP_INTERVAL: g_value_set_uint(value, self->interval); break;
    case PROP_OVERLAY: g_value_set_boolean(value, self->overlay); break;
    case PROP_DEVICE: g_value_set_enum(value, self->device); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

/* The model is read once, before any data flows. */
static gboolean start(GstBaseTransform *trans) {
  GstBowClassify *self = GST_BOW_CLASSIFY(trans);
  GST_OBJECT_LOCK(self);
  const std::string path = self->model ? self->model : "";
  const GstPrismDevice device = self->device;
  GST_OBJECT_UNLOCK(self);
  if (path.empty()) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                      ("bowclassify: property 'model' is not set (a file made by 'prism bow train')"), (nullptr));
    return FALSE;
  }
  auto st = std::make_unique<State>();
  try {
    st->model = bow::Model::load(path);
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, OPEN_READ, ("bowclassify: property 'model': %s", e.what()), (nullptr));
    return FALSE;
  }
  try {
    st->model.set_device(device == GST_PRISM_DEVICE_CUDA  ? prism::gpu::Device::kCuda
                         : device == GST_PRISM_DEVICE_CPU ? prism::gpu::Device::kCpu
                                                          : prism::gpu::Device::kAuto);
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("bowclassify: property 'device': %s", e.what()), (nullptr));
    return FALSE;
  }
  GST_INFO_OBJECT(self, "model %s: %zu classes, k = %d, histograms on %s", path.c_str(),
                  st->model.class_names().size(), st->model.config().k, st->model.device_description().c_str());
  delete self->state;
  self->state = st.release();
  return TRUE;
}

static gboolean stop(GstBaseTransform *trans) {
  GstBowClassify *self = GST_BOW_CLASSIFY(trans);
  delete self->state;
  self->state = nullptr;
  return TRUE;
}

static gboolean set_caps(GstBaseTransform *trans, GstCaps *incaps, GstCaps *) {
  GstBowClassify *self = GST_BOW_CLASSIFY(trans);
  if (!self->state) return FALSE;
  if (!gst_video_info_from_caps(&self->state->info, incaps)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("bowclassify: cannot parse caps %" GST_PTR_FORMAT, incaps), (nullptr));
    return FALSE;
  }
  self->state->have_info = true;
  return TRUE;
}

/* The label in the top-left corner: white on a dark box, on the grey/Y plane or the packed pixels. */
static void draw_label(GstVideoFrame &f, const std::string &text) {
  const GstVideoFormat fmt = GST_VIDEO_FRAME_FORMAT(&f);
  const bool planar_grey = fmt == GST_VIDEO_FORMAT_GRAY8 || fmt == GST_VIDEO_FORMAT_NV12 || fmt == GST_VIDEO_FORMAT_I420;
  const int type = planar_grey ? CV_8UC1 : (fmt == GST_VIDEO_FORMAT_RGB || fmt == GST_VIDEO_FORMAT_BGR ? CV_8UC3 : CV_8UC4);
  cv::Mat m(GST_VIDEO_FRAME_HEIGHT(&f), GST_VIDEO_FRAME_WIDTH(&f), type, GST_VIDEO_FRAME_PLANE_DATA(&f, 0),
            (size_t)GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0));
  int base = 0;
  const cv::Size size = cv::getTextSize(text, cv::FONT_HERSHEY_SIMPLEX, 0.6, 1, &base);
  const cv::Rect box = cv::Rect(0, 0, size.width + 12, size.height + base + 12) & cv::Rect(0, 0, m.cols, m.rows);
  m(box).setTo(cv::Scalar::all(0));
  cv::putText(m, text, cv::Point(6, size.height + 6), cv::FONT_HERSHEY_SIMPLEX, 0.6, cv::Scalar::all(255), 1, cv::LINE_AA);
}

static GstFlowReturn transform_ip(GstBaseTransform *trans, GstBuffer *buf) {
  GstBowClassify *self = GST_BOW_CLASSIFY(trans);
  if (!self->state || !self->state->have_info) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("bowclassify: a buffer arrived before caps"), (nullptr));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  State &st = *self->state;
  const guint64 frame = st.frame++;
  GST_OBJECT_LOCK(self);
  const guint interval = self->interval;
  const bool overlay = self->overlay;
  GST_OBJECT_UNLOCK(self);
  const bool due = !st.have_result || interval == 0 || frame - st.result_frame >= interval;

  GstVideoFrame vf;
  if (!gst_video_frame_map(&vf, &st.info, buf, overlay ? GST_MAP_READWRITE : GST_MAP_READ)) {
    GST_ELEMENT_ERROR(self, RESOURCE, READ, ("bowclassify: cannot map frame %" G_GUINT64_FORMAT, frame), (nullptr));
    return GST_FLOW_ERROR;
  }
  double latency = 0;
  if (due) {
    try {
      const auto t0 = std::chrono::steady_clock::now();
      st.result = st.model.classify(prism::frame_grey(vf, st.grey));
      latency = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    } catch (const std::exception &e) {
      gst_video_frame_unmap(&vf);
      GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("bowclassify: frame %" G_GUINT64_FORMAT ": %s", frame, e.what()),
                        (nullptr));
      return GST_FLOW_ERROR;
    }
    st.have_result = true;
    st.result_frame = frame;
  }
  const std::string &label = st.model.class_names()[st.result.label];
  if (overlay) draw_label(vf, label + cv::format(" %.2f", st.result.confidence));
  const int W = GST_VIDEO_FRAME_WIDTH(&vf), H = GST_VIDEO_FRAME_HEIGHT(&vf);
  gst_video_frame_unmap(&vf);

  auto fields = [&](GstStructure *s) {
    gst_structure_set(s, "label", G_TYPE_STRING, label.c_str(), "class-index", G_TYPE_INT, st.result.label,
                      "confidence", G_TYPE_DOUBLE, st.result.confidence, nullptr);
  };
  GstVideoRegionOfInterestMeta *m = gst_buffer_add_video_region_of_interest_meta(buf, "scene", 0, 0, W, H);
  GstStructure *param = gst_structure_new("bowclassify", "frame", G_TYPE_UINT64, st.result_frame, nullptr);
  fields(param);
  gst_video_region_of_interest_meta_add_param(m, param);
  if (due) {
    GST_DEBUG_OBJECT(self, "frame %" G_GUINT64_FORMAT ": label '%s' (confidence %.2f), %.1f ms", frame, label.c_str(),
                     st.result.confidence, latency);
    const GstClockTime pts = GST_BUFFER_PTS(buf);
    GstStructure *s = gst_structure_new("prism-bowclassify", "frame", G_TYPE_UINT64, frame, "pts", G_TYPE_UINT64, pts,
                                        "running-time", G_TYPE_UINT64,
                                        gst_segment_to_running_time(&trans->segment, GST_FORMAT_TIME, pts),
                                        "latency-ms", G_TYPE_DOUBLE, latency, nullptr);
    fields(s);
    gst_element_post_message(GST_ELEMENT(trans), gst_message_new_element(GST_OBJECT(trans), s));
  }
  return GST_FLOW_OK;
}

static void finalize(GObject *object) {
  GstBowClassify *self = GST_BOW_CLASSIFY(object);
  g_free(self->model);
  delete self->state;
  G_OBJECT_CLASS(gst_bow_classify_parent_class)->finalize(object);
}

static void gst_bow_classify_class_init(GstBowClassifyClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);
  gobject_class->set_property = set_property;
  gobject_class->get_property = get_property;
  gobject_class->finalize = finalize;
  const GParamFlags ready = GParamFlags(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  const GParamFlags playing = GParamFlags(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING);
  g_object_class_install_property(
      gobject_class, PROP_MODEL,
      g_param_spec_string("model", "Model", "The model file made by 'prism bow train' (required; read when the element starts)",
                          nullptr, ready));
  g_object_class_install_property(
      gobject_class, PROP_INTERVAL,
      g_param_spec_uint("interval", "Interval",
                        "Classify every N frames from frame 0 (0: every frame); the frames between carry the last result",
                        0, G_MAXUINT, kDefaultInterval, playing));
  g_object_class_install_property(
      gobject_class, PROP_OVERLAY,
      g_param_spec_boolean("overlay", "Overlay",
                           "Write the latest label and confidence into the picture's top-left corner", FALSE, playing));
  g_object_class_install_property(
      gobject_class, PROP_DEVICE,
      g_param_spec_enum("device", "Device",
                        "Where the filter bank and words run: auto (the GPU when there is one), cuda (fail to start "
                        "without one) or cpu",
                        GST_TYPE_PRISM_DEVICE, GST_PRISM_DEVICE_AUTO, ready));
  gst_element_class_set_static_metadata(
      element_class, "Prism bag-of-words scene classification", "Filter/Analyzer/Video",
      "Labels the scene of video frames every N frames with a bag-of-visual-words model (filter bank, dictionary, "
      "pyramid histogram, SVM or k-NN): region-of-interest meta, 'prism-bowclassify' element messages, optional "
      "text overlay",
      "Prism developers");
  gst_element_class_add_static_pad_template(element_class, &sink_template);
  gst_element_class_add_static_pad_template(element_class, &src_template);
  trans_class->start = GST_DEBUG_FUNCPTR(start);
  trans_class->stop = GST_DEBUG_FUNCPTR(stop);
  trans_class->set_caps = GST_DEBUG_FUNCPTR(set_caps);
  trans_class->transform_ip = GST_DEBUG_FUNCPTR(transform_ip);
  trans_class->passthrough_on_same_caps = FALSE;
  trans_class->transform_ip_on_passthrough = FALSE;
  GST_DEBUG_CATEGORY_INIT(gst_bow_classify_debug, "bowclassify", 0, "Prism bag-of-words scene classification");
}

static void gst_bow_classify_init(GstBowClassify *self) {
  self->interval = kDefaultInterval;
  self->overlay = FALSE;
  self->device = GST_PRISM_DEVICE_AUTO;
  gst_base_transform_set_in_place(GST_BASE_TRANSFORM(self), TRUE);
  gst_base_transform_set_passthrough(GST_BASE_TRANSFORM(self), FALSE);
}
