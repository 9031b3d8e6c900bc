#include "gstbowclassify.h"

#include <gst/video/video.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "bow/model.h"
#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#include <gst/cuda/gstcudamemory.h>
#endif
#include "gst/prism/gstprismcuda.h" /* device properties, the shared GstCudaContext, CUDA frame mapping */
#include "gst/prism/gstprismgrey.h"
#include "gst/prism/gstprismmessage.h"

GST_DEBUG_CATEGORY_STATIC(gst_bow_classify_debug);
#define GST_CAT_DEFAULT gst_bow_classify_debug

namespace bow = prism::bow;

enum { PROP_0, PROP_MODEL, PROP_INTERVAL, PROP_OVERLAY, PROP_DEVICE, PROP_DEVICE_ID };

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
  cv::Mat grey;       // RGB-ish frames converted here (reused)
  cv::Mat label_tile;  // the label box drawn for a frame in GPU memory (reused)
};

struct _GstBowClassify {
  GstBaseTransform parent;
  /* properties (object lock) */
  gchar *model;
  guint interval;
  gboolean overlay;
  GstPrismCuda cuda; /* device, cuda-device-id; the context the model's GPU buffers live in */
  State *state;
};

G_DEFINE_TYPE(GstBowClassify, gst_bow_classify, GST_TYPE_BASE_TRANSFORM);
GST_ELEMENT_REGISTER_DEFINE(bowclassify, "bowclassify", GST_RANK_NONE, GST_TYPE_BOW_CLASSIFY);

/* In GPU memory the Y plane of NV12/I420 is the grey image the model reads, in place. */
#define CUDA_FORMATS "{ NV12, I420 }"

static void set_property(GObject *object, guint id, const GValue *value, GParamSpec *pspec) {
  GstBowClassify *self = GST_BOW_CLASSIFY(object);
  if (gst_prism_cuda_set_property(&self->cuda, object, value, pspec)) return;
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_MODEL: g_free(self->model); self->model = g_value_dup_string(value); break;
    case PROP_INTERVAL: self->interval = g_value_get_uint(value); break;
    case PROP_OVERLAY: self->overlay = g_value_get_boolean(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void get_property(GObject *object, guint id, GValue *value, GParamSpec *pspec) {
  GstBowClassify *self = GST_BOW_CLASSIFY(object);
  if (gst_prism_cuda_get_property(&self->cuda, object, value, pspec)) return;
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_MODEL: g_value_set_string(value, self->model); break;
    case PROP_INTERVAL: g_value_set_uint(value, self->interval); break;
    case PROP_OVERLAY: g_value_set_boolean(value, self->overlay); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

/* The model's GPU buffers are made, used and freed in the element's GstCudaContext, so that frames
 * in memory:CUDAMemory of that context (shared with nvh264dec, cudaupload...) are read in place. */
struct ContextScope {
#if defined(PRISM_HAVE_CUDA)
  explicit ContextScope(GstPrismCuda *cuda) : pushed(cuda->use_cuda && gst_prism_cuda_push(cuda)) {}
  ~ContextScope() {
    if (pushed) gst_prism_cuda_pop();
  }
  const bool pushed;
#else
  explicit ContextScope(GstPrismCuda *) {}
#endif
};

/* The model is read once, before any data flows. */
static gboolean start(GstBaseTransform *trans) {
  GstBowClassify *self = GST_BOW_CLASSIFY(trans);
  GST_OBJECT_LOCK(self);
  const std::string path = self->model ? self->model : "";
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
  if (!gst_prism_cuda_start(&self->cuda, GST_ELEMENT(self))) return FALSE; /* device=cuda without a GPU: posted */
  try {
    ContextScope scope(&self->cuda);
    st->model.set_device(self->cuda.use_cuda ? prism::gpu::Device::kCuda : prism::gpu::Device::kCpu);
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("bowclassify: property 'device': %s", e.what()), (nullptr));
    gst_prism_cuda_stop(&self->cuda);
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
  {
    ContextScope scope(&self->cuda);
    delete self->state;
    self->state = nullptr;
  }
  gst_prism_cuda_stop(&self->cuda);
  return TRUE;
}

/* In place: the other pad carries the same caps, without memory:CUDAMemory on the CPU path. */
static GstCaps *transform_caps(GstBaseTransform *trans, GstPadDirection, GstCaps *caps, GstCaps *filter) {
  GstBowClassify *self = GST_BOW_CLASSIFY(trans);
  GstCaps *out = gst_prism_cuda_allowed_caps(&self->cuda, gst_caps_copy(caps));
  if (filter) {
    GstCaps *both = gst_caps_intersect_full(filter, out, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(out);
    out = both;
  }
  return out;
}

static gboolean set_caps(GstBaseTransform *trans, GstCaps *incaps, GstCaps *) {
  GstBowClassify *self = GST_BOW_CLASSIFY(trans);
  if (!self->state) return FALSE;
  if (!gst_video_info_from_caps(&self->state->info, incaps)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("bowclassify: cannot parse caps %" GST_PTR_FORMAT, incaps), (nullptr));
    return FALSE;
  }
  const gboolean cuda_caps = gst_prism_caps_are_cuda(incaps);
  if (cuda_caps && !self->cuda.use_cuda) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("bowclassify: memory:CUDAMemory caps on the CPU path (device=cpu or no GPU)"),
                      ("%" GST_PTR_FORMAT, incaps));
    return FALSE;
  }
  if (!gst_prism_cuda_check_i420_height(GST_ELEMENT(self), &self->state->info, cuda_caps, "sink")) return FALSE;
  self->state->have_info = true;
  return TRUE;
}

static void set_context(GstElement *element, GstContext *context) {
  gst_prism_cuda_set_context(&GST_BOW_CLASSIFY(element)->cuda, element, context);
  GST_ELEMENT_CLASS(gst_bow_classify_parent_class)->set_context(element, context);
}

static gboolean query(GstBaseTransform *trans, GstPadDirection direction, GstQuery *q) {
  if (GST_QUERY_TYPE(q) == GST_QUERY_CONTEXT &&
      gst_prism_cuda_handle_context_query(&GST_BOW_CLASSIFY(trans)->cuda, GST_ELEMENT(trans), q))
    return TRUE;
  return GST_BASE_TRANSFORM_CLASS(gst_bow_classify_parent_class)->query(trans, direction, q);
}

/* The label box in the top-left corner: white text on black, drawn into `box`, a tile of the frame's
 * first plane (grey/Y or packed pixels) at (0, 0) sized by label_box(). */
static cv::Size label_box(const std::string &text, int width, int height) {
  int base = 0;
  const cv::Size size = cv::getTextSize(text, cv::FONT_HERSHEY_SIMPLEX, 0.6, 1, &base);
  return cv::Size(std::min(size.width + 12, width), std::min(size.height + base + 12, height));
}
static void draw_label(cv::Mat box, const std::string &text) {
  int base = 0;
  const cv::Size size = cv::getTextSize(text, cv::FONT_HERSHEY_SIMPLEX, 0.6, 1, &base);
  box.setTo(cv::Scalar::all(0));
  cv::putText(box, text, cv::Point(6, size.height + 6), cv::FONT_HERSHEY_SIMPLEX, 0.6, cv::Scalar::all(255), 1, cv::LINE_AA);
}

/* OpenCV type of the first plane: one byte per pixel for the planar formats, else packed. */
static int first_plane_type(GstVideoFormat fmt) {
  if (fmt == GST_VIDEO_FORMAT_GRAY8 || fmt == GST_VIDEO_FORMAT_NV12 || fmt == GST_VIDEO_FORMAT_I420) return CV_8UC1;
  return fmt == GST_VIDEO_FORMAT_RGB || fmt == GST_VIDEO_FORMAT_BGR ? CV_8UC3 : CV_8UC4;
}

/* GstCudaMemory of our own context: readable in place by the model's kernels. (Another context's
 * memory is mapped to the host instead: GstCudaMemory downloads it.) */
static bool in_our_cuda_memory(GstBowClassify *self, GstBuffer *buf) {
#if defined(PRISM_HAVE_CUDA)
  GstMemory *mem = gst_buffer_n_memory(buf) ? gst_buffer_peek_memory(buf, 0) : nullptr;
  return self->cuda.use_cuda && mem && gst_is_cuda_memory(mem) && GST_CUDA_MEMORY_CAST(mem)->context == self->cuda.context;
#else
  (void)self, (void)buf;
  return false;
#endif
}

/* Classifies a frame in GPU memory (its Y plane read in place) and draws the label there: the box is
 * drawn on the host and uploaded, the only bytes that cross. */
static bool process_device(GstBowClassify *self, GstBuffer *buf, bool due, bool overlay, std::string *error) {
#if defined(PRISM_HAVE_CUDA)
  State &st = *self->state;
  ContextScope scope(&self->cuda);
  GstVideoFrame vf;
  GstPrismFrame pf;
  if (!scope.pushed ||
      !gst_prism_cuda_map_frame(&vf, &st.info, buf, overlay ? GST_MAP_READWRITE : GST_MAP_READ, &pf)) {
    *error = "cannot map the CUDA frame";
    return false;
  }
  const int W = GST_VIDEO_INFO_WIDTH(&st.info), H = GST_VIDEO_INFO_HEIGHT(&st.info);
  bool ok = true;
  try {
    if (due) st.result = st.model.classify_histogram(st.model.histogram_device(pf.data[0], size_t(pf.stride[0]), W, H));
    if (overlay) {
      const std::string text = st.model.class_names()[st.result.label] + cv::format(" %.2f", st.result.confidence);
      cv::Mat &box = st.label_tile;
      box.create(label_box(text, W, H), CV_8UC1);
      draw_label(box, text);
      // On the element's stream, synchronised before the buffer moves on (1.22 memory carries no
      // stream; a pageable cudaMemcpy2D may return before the bytes land).
      cudaError_t err = cudaMemcpy2DAsync(pf.data[0], size_t(pf.stride[0]), box.data, box.step, box.cols, box.rows,
                                          cudaMemcpyHostToDevice, self->cuda.stream);
      if (err == cudaSuccess) err = cudaStreamSynchronize(self->cuda.stream);
      if (err != cudaSuccess) throw std::runtime_error(std::string("label upload: ") + cudaGetErrorString(err));
    }
  } catch (const std::exception &e) {
    *error = e.what();
    ok = false;
  }
  gst_video_frame_unmap(&vf);
  return ok;
#else
  (void)self, (void)buf, (void)due, (void)overlay;
  *error = "memory:CUDAMemory in a build without CUDA";
  return false;
#endif
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
  const int W = GST_VIDEO_INFO_WIDTH(&st.info), H = GST_VIDEO_INFO_HEIGHT(&st.info);

  double latency = 0;
  const auto t0 = std::chrono::steady_clock::now();
  if (in_our_cuda_memory(self, buf)) {
    std::string error;
    if (!process_device(self, buf, due, overlay, &error)) {
      GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("bowclassify: frame %" G_GUINT64_FORMAT " (GPU memory): %s", frame,
                                                error.c_str()), (nullptr));
      return GST_FLOW_ERROR;
    }
  } else {
    GstVideoFrame vf;
    if (!gst_video_frame_map(&vf, &st.info, buf, overlay ? GST_MAP_READWRITE : GST_MAP_READ)) {
      GST_ELEMENT_ERROR(self, RESOURCE, READ, ("bowclassify: cannot map frame %" G_GUINT64_FORMAT, frame), (nullptr));
      return GST_FLOW_ERROR;
    }
    if (due) {
      try {
        ContextScope scope(&self->cuda);
        st.result = st.model.classify(prism::frame_grey(vf, st.grey));
      } catch (const std::exception &e) {
        gst_video_frame_unmap(&vf);
        GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("bowclassify: frame %" G_GUINT64_FORMAT ": %s", frame, e.what()),
                          (nullptr));
        return GST_FLOW_ERROR;
      }
    }
    if (overlay) {
      const std::string text = st.model.class_names()[st.result.label] + cv::format(" %.2f", st.result.confidence);
      cv::Mat first(H, W, first_plane_type(GST_VIDEO_FRAME_FORMAT(&vf)), GST_VIDEO_FRAME_PLANE_DATA(&vf, 0),
                    size_t(GST_VIDEO_FRAME_PLANE_STRIDE(&vf, 0)));
      draw_label(first(cv::Rect(cv::Point(0, 0), label_box(text, W, H))), text);
    }
    gst_video_frame_unmap(&vf);
  }
  if (due) {
    latency = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    st.have_result = true;
    st.result_frame = frame;
  }
  const std::string &label = st.model.class_names()[st.result.label];

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
    GstStructure *s = gst_prism_frame_message_new("bowclassify", &trans->segment, buf, frame);
    gst_structure_set(s, "latency-ms", G_TYPE_DOUBLE, latency, nullptr);
    fields(s);
    gst_prism_post_frame_message(GST_ELEMENT(trans), s);
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
  gst_prism_cuda_install_properties(gobject_class, PROP_DEVICE, PROP_DEVICE_ID);
  gst_element_class_set_static_metadata(
      element_class, "Prism bag-of-words scene classification", "Filter/Analyzer/Video",
      "Labels the scene of video frames every N frames with a bag-of-visual-words model (filter bank, dictionary, "
      "pyramid histogram, SVM or k-NN): region-of-interest meta, 'prism-bowclassify' element messages, optional "
      "text overlay",
      "Prism developers");
  /* NV12/I420 in memory:CUDAMemory (read in place on the GPU path), every grey-readable format in
   * system memory. */
  GstCaps *caps = gst_prism_cuda_template_caps(PRISM_GREY_FORMATS, CUDA_FORMATS);
  gst_element_class_add_pad_template(element_class, gst_pad_template_new("sink", GST_PAD_SINK, GST_PAD_ALWAYS, caps));
  gst_element_class_add_pad_template(element_class, gst_pad_template_new("src", GST_PAD_SRC, GST_PAD_ALWAYS, caps));
  gst_caps_unref(caps);
  element_class->set_context = GST_DEBUG_FUNCPTR(set_context);
  trans_class->query = GST_DEBUG_FUNCPTR(query);
  trans_class->transform_caps = GST_DEBUG_FUNCPTR(transform_caps);
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
  gst_prism_cuda_init(&self->cuda);
  gst_base_transform_set_in_place(GST_BASE_TRANSFORM(self), TRUE);
  gst_base_transform_set_passthrough(GST_BASE_TRANSFORM(self), FALSE);
}
