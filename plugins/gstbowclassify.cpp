#include "gstbowclassify.h"

#include <gst/video/video.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bow/model.h"
#include "common/gpu.h"
#include "gst/prism/gstprismcudamemory.h" /* GstPrismContextScope: the model's GPU buffers live in our context */
#include "gst/prism/gstprismgrey.h"
#include "gst/prism/gstprismmessage.h"

GST_DEBUG_CATEGORY_STATIC(gst_bow_classify_debug);
#define GST_CAT_DEFAULT gst_bow_classify_debug

namespace bow = prism::bow;

enum { PROP_0, PROP_MODEL, PROP_INTERVAL, PROP_OVERLAY, PROP_ASYNC, PROP_FRAMES_SKIPPED, PROP_CAMERA, PROP_CAMERA_URI };

constexpr guint kDefaultInterval = 30;

/* Made at start(), gone at stop(). */
struct State {
  bow::Model model;
  bool have_result = false;
  guint64 result_frame = 0;
  bow::Prediction result;
  cv::Mat grey;        // RGB-ish frames converted here (reused)
  cv::Mat label_tile;  // the label box drawn for a frame in GPU memory (reused)
  /* The frame in flight, latched by map_flags_ip for process_ip and finish. */
  guint64 current = 0;
  bool due = false, overlay = false;
  std::chrono::steady_clock::time_point t0;
};

struct _GstBowClassify {
  GstPrismCudaFilter parent; /* device, cuda-device-id, the context the model's GPU buffers live in */
  /* properties (object lock) */
  gchar *model;
  guint interval;
  gboolean overlay;
  State *state;
};

G_DEFINE_TYPE(GstBowClassify, gst_bow_classify, GST_TYPE_PRISM_CUDA_FILTER);
GST_ELEMENT_REGISTER_DEFINE(bowclassify, "bowclassify", GST_RANK_NONE, GST_TYPE_BOW_CLASSIFY);

/* In GPU memory the Y plane of NV12/I420 is the grey image the model reads, in place. */
#define CUDA_FORMATS "{ NV12, I420 }"

static void set_property(GObject *object, guint id, const GValue *value, GParamSpec *pspec) {
  GstBowClassify *self = GST_BOW_CLASSIFY(object);
  if (gst_prism_cuda_filter_async_set_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  if (gst_prism_cuda_filter_camera_set_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_MODEL:
      g_free(self->model);
      self->model = g_value_dup_string(value);
      break;
    case PROP_INTERVAL: self->interval = g_value_get_uint(value); break;
    case PROP_OVERLAY: self->overlay = g_value_get_boolean(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void get_property(GObject *object, guint id, GValue *value, GParamSpec *pspec) {
  GstBowClassify *self = GST_BOW_CLASSIFY(object);
  if (gst_prism_cuda_filter_async_get_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  if (gst_prism_cuda_filter_camera_get_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_MODEL: g_value_set_string(value, self->model); break;
    case PROP_INTERVAL: g_value_set_uint(value, self->interval); break;
    case PROP_OVERLAY: g_value_set_boolean(value, self->overlay); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

static GstPrismCuda *cuda_of(GstBowClassify *self) {
  return gst_prism_cuda_filter_get_cuda(GST_PRISM_CUDA_FILTER(self));
}

/* The model is read once, before any data flows; its GPU buffers are made, used and freed in the
 * element's GstCudaContext, so that frames in memory:CUDAMemory of that context (shared with
 * nvh264dec, cudaupload...) are read in place. */
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
  /* The base class chooses the path (device=cuda without a GPU: posted). */
  if (!GST_BASE_TRANSFORM_CLASS(gst_bow_classify_parent_class)->start(trans)) return FALSE;
  GstPrismCuda *cuda = cuda_of(self);
  try {
    prism::GstPrismContextScope scope(cuda);
    st->model.set_device(cuda->use_cuda ? prism::gpu::Device::kCuda : prism::gpu::Device::kCpu);
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("bowclassify: property 'device': %s", e.what()), (nullptr));
    {
      prism::GstPrismContextScope scope(cuda);
      st.reset();
    }
    GST_BASE_TRANSFORM_CLASS(gst_bow_classify_parent_class)->stop(trans);
    return FALSE;
  }
  GST_OBJECT_LOCK(self);
  const gboolean overlay = self->overlay;
  GST_OBJECT_UNLOCK(self);
  if (overlay && gst_prism_cuda_filter_is_async(GST_PRISM_CUDA_FILTER(self)))
    GST_ELEMENT_WARNING(self, RESOURCE, SETTINGS,
                        ("bowclassify: property 'overlay' draws the label only with async=false"), (nullptr));
  GST_INFO_OBJECT(self, "model %s: %zu classes, k = %d, histograms on %s", path.c_str(), st->model.class_names().size(),
                  st->model.config().k, st->model.device_description().c_str());
  delete self->state;
  self->state = st.release();
  return TRUE;
}

/* The base's stop() has joined the async worker (it runs process_ip on the state) and releases the
 * context the state is freed in after this. */
static gboolean stop(GstPrismCudaFilter *filter) {
  GstBowClassify *self = GST_BOW_CLASSIFY(filter);
  prism::GstPrismContextScope scope(cuda_of(self));
  delete self->state;
  self->state = nullptr;
  return TRUE;
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
  cv::putText(box, text, cv::Point(6, size.height + 6), cv::FONT_HERSHEY_SIMPLEX, 0.6, cv::Scalar::all(255), 1,
              cv::LINE_AA);
}

/* OpenCV type of the first plane: one byte per pixel for the planar formats, else packed. */
static int first_plane_type(GstVideoFormat fmt) {
  if (fmt == GST_VIDEO_FORMAT_GRAY8 || fmt == GST_VIDEO_FORMAT_NV12 || fmt == GST_VIDEO_FORMAT_I420) return CV_8UC1;
  return fmt == GST_VIDEO_FORMAT_RGB || fmt == GST_VIDEO_FORMAT_BGR ? CV_8UC3 : CV_8UC4;
}

/* The label text of the current result. */
static std::string label_text(const State &st) {
  return st.model.class_names()[st.result.label] + cv::format(" %.2f", st.result.confidence);
}

/* Per frame, before the base class maps it: the frame's number and settings. The frame is mapped
 * for writing only when the label is drawn (a read map of shared memory copies nothing); in async
 * mode the frame has left already, so it is never drawn. */
static GstMapFlags map_flags_ip(GstPrismCudaFilter *filter, GstBuffer *) {
  GstBowClassify *self = GST_BOW_CLASSIFY(filter);
  State &st = *self->state;
  GST_OBJECT_LOCK(self);
  const guint interval = self->interval;
  st.overlay = self->overlay && !gst_prism_cuda_filter_is_async(filter);
  GST_OBJECT_UNLOCK(self);
  st.current = gst_prism_cuda_filter_frame_number(filter);
  st.due = !st.have_result || interval == 0 || st.current - st.result_frame >= interval;
  return st.overlay ? GST_MAP_READWRITE : GST_MAP_READ;
}

/* Classifies a frame in GPU memory of our context (its Y plane read in place) and draws the label
 * there: the box is drawn on the host and uploaded on the element's stream (the base class
 * synchronises it before the buffer moves on), the only bytes that cross. Throws. */
static void process_device(GstBowClassify *self, const GstPrismFrame *frame) {
#if defined(PRISM_HAVE_CUDA)
  State &st = *self->state;
  const GstVideoInfo *info = gst_prism_cuda_filter_in_info(GST_PRISM_CUDA_FILTER(self));
  const int W = GST_VIDEO_INFO_WIDTH(info), H = GST_VIDEO_INFO_HEIGHT(info);
  if (st.due)
    st.result = st.model.classify_histogram(st.model.histogram_device(frame->data[0], size_t(frame->stride[0]), W, H));
  if (st.overlay) {
    const std::string text = label_text(st);
    cv::Mat &box = st.label_tile;
    box.create(label_box(text, W, H), CV_8UC1);
    draw_label(box, text);
    /* A pageable source: the bytes are staged before the call returns, so the tile may be reused. */
    PRISM_CUDA_CHECK(cudaMemcpy2DAsync(frame->data[0], size_t(frame->stride[0]), box.data, box.step, box.cols, box.rows,
                                       cudaMemcpyHostToDevice,
                                       (cudaStream_t)gst_prism_cuda_filter_get_stream(GST_PRISM_CUDA_FILTER(self))));
  }
#else
  (void)self, (void)frame;
  throw std::logic_error("a device frame in a build without CUDA");
#endif
}

/* A frame on the host: system memory, or another context's GPU memory (GstCudaMemory copies it).
 * Throws. */
static void process_host(GstBowClassify *self, const GstPrismFrame *frame) {
  State &st = *self->state;
  const GstVideoInfo *info = gst_prism_cuda_filter_in_info(GST_PRISM_CUDA_FILTER(self));
  const int W = GST_VIDEO_INFO_WIDTH(info), H = GST_VIDEO_INFO_HEIGHT(info);
  if (st.due) st.result = st.model.classify(prism::frame_grey(info, frame->data[0], size_t(frame->stride[0]), st.grey));
  if (st.overlay) {
    const std::string text = label_text(st);
    cv::Mat first(H, W, first_plane_type(GST_VIDEO_INFO_FORMAT(info)), frame->data[0], size_t(frame->stride[0]));
    draw_label(first(cv::Rect(cv::Point(0, 0), label_box(text, W, H))), text);
  }
}

/* The classification (when due) and the label. On the GPU path the base class has pushed the
 * context: the model's kernels run in it for host frames too. */
static GstFlowReturn process_ip(GstPrismCudaFilter *filter, GstBuffer *, const GstPrismFrame *frame) {
  GstBowClassify *self = GST_BOW_CLASSIFY(filter);
  State &st = *self->state;
  st.t0 = std::chrono::steady_clock::now();
  try {
    if (frame->device)
      process_device(self, frame);
    else
      process_host(self, frame);
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(
        self, LIBRARY, FAILED,
        ("bowclassify: frame %" G_GUINT64_FORMAT "%s: %s", st.current, frame->device ? " (GPU memory)" : "", e.what()),
        (nullptr));
    return GST_FLOW_ERROR;
  }
  return GST_FLOW_OK;
}

/* `scores`: every class's score in the model's class order, what the decision is made on
 * (bow::Prediction::scores), as a GstValueArray of structures "class" with `label` and `score`. */
static void set_scores(GstStructure *s, const std::vector<std::string> &names, const std::vector<double> &scores) {
  GValue array = G_VALUE_INIT;
  g_value_init(&array, GST_TYPE_ARRAY);
  for (size_t c = 0; c < names.size() && c < scores.size(); ++c) {
    GValue v = G_VALUE_INIT;
    g_value_init(&v, GST_TYPE_STRUCTURE);
    g_value_take_boxed(&v, gst_structure_new("class", "label", G_TYPE_STRING, names[c].c_str(), "score", G_TYPE_DOUBLE,
                                             scores[c], nullptr));
    gst_value_array_append_and_take_value(&array, &v);
  }
  gst_structure_take_value(s, "scores", &array);
}

/* After the stream sync (the label is in the picture): the result as meta on every frame, and as
 * a message on the frames that were classified, with the time it took. */
static GstFlowReturn finish(GstPrismCudaFilter *filter, GstBuffer *buf, const GstPrismFrame *) {
  GstBowClassify *self = GST_BOW_CLASSIFY(filter);
  State &st = *self->state;
  const GstVideoInfo *info = gst_prism_cuda_filter_in_info(filter);
  const int W = GST_VIDEO_INFO_WIDTH(info), H = GST_VIDEO_INFO_HEIGHT(info);
  double latency = 0;
  if (st.due) {
    latency = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - st.t0).count();
    st.have_result = true;
    st.result_frame = st.current;
  }
  const std::string &label = st.model.class_names()[st.result.label];

  auto fields = [&](GstStructure *s) {
    gst_structure_set(s, "label", G_TYPE_STRING, label.c_str(), "class-index", G_TYPE_INT, st.result.label,
                      "confidence", G_TYPE_DOUBLE, st.result.confidence, nullptr);
    set_scores(s, st.model.class_names(), st.result.scores);
  };
  GstVideoRegionOfInterestMeta *m = gst_buffer_add_video_region_of_interest_meta(buf, "scene", 0, 0, W, H);
  GstStructure *param = gst_structure_new("bowclassify", "frame", G_TYPE_UINT64, st.result_frame, nullptr);
  fields(param);
  gst_video_region_of_interest_meta_add_param(m, param);
  if (st.due) {
    GST_DEBUG_OBJECT(self, "frame %" G_GUINT64_FORMAT ": label '%s' (confidence %.2f), %.1f ms", st.current,
                     label.c_str(), st.result.confidence, latency);
    GstStructure *s =
        gst_prism_frame_message_new("bowclassify", gst_prism_cuda_filter_frame_segment(filter), buf, st.current);
    gst_structure_set(s, "latency-ms", G_TYPE_DOUBLE, latency, nullptr);
    fields(s);
    gst_prism_cuda_filter_post_frame_message(filter, s);
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
  GstPrismCudaFilterClass *filter_class = GST_PRISM_CUDA_FILTER_CLASS(klass);
  gobject_class->set_property = set_property;
  gobject_class->get_property = get_property;
  gobject_class->finalize = finalize;
  const GParamFlags ready = GParamFlags(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  const GParamFlags playing = GParamFlags(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING);
  g_object_class_install_property(
      gobject_class, PROP_MODEL,
      g_param_spec_string("model", "Model",
                          "The model file made by 'prism bow train' (required; read when the element starts)", nullptr,
                          ready));
  g_object_class_install_property(
      gobject_class, PROP_INTERVAL,
      g_param_spec_uint(
          "interval", "Interval",
          "Classify every N frames from frame 0 (0: every frame); the frames between carry the last result", 0,
          G_MAXUINT, kDefaultInterval, playing));
  g_object_class_install_property(
      gobject_class, PROP_OVERLAY,
      g_param_spec_boolean("overlay", "Overlay",
                           "Write the latest label and confidence into the picture's top-left corner", FALSE, playing));
  /* About 2 s per classification on 2 CPU cores: a live source must not wait for it. */
  gst_prism_cuda_filter_class_install_async(gobject_class, PROP_ASYNC, PROP_FRAMES_SKIPPED, TRUE);
  gst_prism_cuda_filter_class_install_camera(gobject_class, PROP_CAMERA, PROP_CAMERA_URI);
  gst_element_class_set_static_metadata(
      element_class, "Prism bag-of-words scene classification", "Filter/Analyzer/Video",
      "Labels the scene of video frames every N frames with a bag-of-visual-words model (filter bank, dictionary, "
      "pyramid histogram, SVM or k-NN): region-of-interest meta, 'prism-bowclassify' element messages, optional "
      "text overlay",
      "Prism developers");
  /* NV12/I420 in memory:CUDAMemory (read in place on the GPU path), every grey-readable format in
   * system memory. */
  gst_prism_cuda_filter_class_add_pad_templates(element_class, PRISM_GREY_FORMATS, CUDA_FORMATS);
  trans_class->start = GST_DEBUG_FUNCPTR(start);
  filter_class->stop = stop;
  filter_class->process_ip = process_ip;
  filter_class->map_flags_ip = map_flags_ip;
  filter_class->finish = finish;
  /* System memory is classified from the host (the RGB formats are made grey there) and the label
   * drawn there: no staging through the device. */
  filter_class->ip_host_frames = TRUE;
  GST_DEBUG_CATEGORY_INIT(gst_bow_classify_debug, "bowclassify", 0, "Prism bag-of-words scene classification");
}

static void gst_bow_classify_init(GstBowClassify *self) {
  self->interval = kDefaultInterval;
  self->overlay = FALSE;
}
