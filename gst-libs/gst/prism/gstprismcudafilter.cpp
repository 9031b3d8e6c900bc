#include "gst/prism/gstprismcudafilter.h"

#include <cstring>
#include <new>

#include "gst/prism/gstprismasyncworker.h"
#include "gst/prism/gstprismcudamemory.h"
#include "gst/prism/gstprismframe.h"
#include "gst/prism/gstprismmessage.h"
#include "gst/prism/gstprismtensor.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

GST_DEBUG_CATEGORY_STATIC(gst_prism_cuda_filter_debug);
#define GST_CAT_DEFAULT gst_prism_cuda_filter_debug

enum { PROP_0, PROP_DEVICE, PROP_CUDA_DEVICE_ID };

typedef struct {
  GstPrismCuda cuda;              /* device, cuda-device-id, path, context, stream */
  GstVideoInfo in_info, out_info; /* for tensor caps: the storage plane (gstprismtensor.h) */
  gboolean in_cuda_caps, out_cuda_caps;
  gboolean in_is_tensor, out_is_tensor;
  GstPrismTensorInfo in_tensor, out_tensor;
  gint in_width, in_height, out_width, out_height; /* pixels, video or tensor */
#if defined(PRISM_HAVE_CUDA)
  /* Device copies, on the GPU path, of frames that are not GstCudaMemory of our context (packed
   * like the caps' GstVideoInfo): reserved by set_caps for system-memory caps, on first use for
   * another context's memory under CUDA caps. In place, staging_in serves both ways. C++ members
   * of the GObject private struct: constructed in instance init, destroyed in finalize. */
  prism::GstPrismDeviceArray<guint8> staging_in, staging_out;
#endif
  gint async_prop;                    /* the `async` property (object lock); -1: not set, the subclass's default */
  gboolean async_on;                  /* latched at start */
  prism::GstPrismAsyncWorker *worker; /* async_on: made at start, gone at stop */
  guint64 frames;                     /* frames that reached the element since start (streaming thread) */
  /* The frame being processed, for process/process_ip/finish: set by the thread that runs them. */
  guint64 frame_number;
  const GstSegment *frame_segment;
  guint64 skipped_at_stop;    /* frames-skipped after the worker is gone (object lock) */
  gchar *camera, *camera_uri; /* the `camera` and `camera-uri` properties (object lock); may be null */
} GstPrismCudaFilterPrivate;

G_DEFINE_ABSTRACT_TYPE_WITH_CODE(GstPrismCudaFilter, gst_prism_cuda_filter, GST_TYPE_BASE_TRANSFORM,
                                 G_ADD_PRIVATE(GstPrismCudaFilter)
                                     GST_DEBUG_CATEGORY_INIT(gst_prism_cuda_filter_debug, "prismcudafilter", 0,
                                                             "Prism CUDA filter base"));

#define PRIV(self) \
  ((GstPrismCudaFilterPrivate *)gst_prism_cuda_filter_get_instance_private(GST_PRISM_CUDA_FILTER(self)))

/* ---- properties ---- */

static void set_property(GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec) {
  if (!gst_prism_cuda_set_property(&PRIV(object)->cuda, object, value, pspec))
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
}

static void get_property(GObject *object, guint prop_id, GValue *value, GParamSpec *pspec) {
  if (!gst_prism_cuda_get_property(&PRIV(object)->cuda, object, value, pspec))
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
}

/* ---- context sharing ---- */

static void set_context(GstElement *element, GstContext *context) {
  gst_prism_cuda_set_context(&PRIV(element)->cuda, element, context);
  GST_ELEMENT_CLASS(gst_prism_cuda_filter_parent_class)->set_context(element, context);
}

static gboolean query(GstBaseTransform *trans, GstPadDirection direction, GstQuery *q) {
  if (gst_prism_cuda_handle_context_query(&PRIV(trans)->cuda, GST_ELEMENT(trans), q)) return TRUE;
  return GST_BASE_TRANSFORM_CLASS(gst_prism_cuda_filter_parent_class)->query(trans, direction, q);
}

/* ---- start / stop: choose the path ---- */

static void async_start(GstPrismCudaFilter *self);
static void stamp_camera(GstPrismCudaFilter *self, GstBuffer *buf);
static void async_quit(GstPrismCudaFilter *self);
static void async_free(GstPrismCudaFilter *self);
static void async_drain(GstPrismCudaFilter *self, gboolean drop);

static gboolean start(GstBaseTransform *trans) {
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
  if (!gst_prism_cuda_start(&priv->cuda, GST_ELEMENT(trans))) return FALSE;
  priv->frames = 0;
  async_start(GST_PRISM_CUDA_FILTER(trans));
  return TRUE;
}

/* The worker is joined before the subclass's stop frees what process/process_ip/finish use:
 * change_state has joined it on PAUSED->READY, but stop() is also reached without that state change
 * (a pad deactivated on its own, a start that fails half way). The context goes last. */
static gboolean stop(GstBaseTransform *trans) {
  GstPrismCudaFilter *self = GST_PRISM_CUDA_FILTER(trans);
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(trans);
  async_quit(self);
  const gboolean ok = klass->stop ? klass->stop(self) : TRUE;
  async_free(self);
#if defined(PRISM_HAVE_CUDA)
  priv->staging_in.reset();
  priv->staging_out.reset();
#endif
  gst_prism_cuda_stop(&priv->cuda);
  return ok;
}

/* ---- caps: the subclass maps structures; here we add memory features ---- */

static GstCaps *default_transform_structure(GstPrismCudaFilter *self, GstPadDirection direction,
                                            const GstStructure *s) {
  (void)self;
  (void)direction;
  return gst_caps_new_full(gst_structure_copy(s), nullptr);
}

static GstCaps *transform_caps(GstBaseTransform *trans, GstPadDirection direction, GstCaps *caps, GstCaps *filter) {
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(trans);
  if (klass->process_ip) { /* in place: the same caps, minus CUDA memory on the CPU path */
    GstCaps *same = gst_prism_cuda_allowed_caps(&priv->cuda, gst_caps_copy(caps));
    if (filter) {
      GstCaps *tmp = gst_caps_intersect_full(filter, same, GST_CAPS_INTERSECT_FIRST);
      gst_caps_unref(same);
      same = tmp;
    }
    return same;
  }
  /* Until start() has chosen the path, offer both memory kinds unless device=cpu. */
  gboolean cuda_ok = gst_prism_cuda_allows_cuda_caps(&priv->cuda);

  GstCaps *ret = gst_caps_new_empty();
  for (guint i = 0; i < gst_caps_get_size(caps); i++) {
    GstCapsFeatures *f = gst_caps_get_features(caps, i);
    gboolean in_cuda = f && !gst_caps_features_is_any(f) && gst_caps_features_contains(f, GST_PRISM_CUDA_FEATURE);
    if (in_cuda && !cuda_ok) continue;
    GstCaps *mapped =
        klass->transform_structure(GST_PRISM_CUDA_FILTER(trans), direction, gst_caps_get_structure(caps, i));
    GstCaps *both = gst_caps_new_empty();
    for (guint j = 0; j < gst_caps_get_size(mapped); j++) {
      const GstStructure *ms = gst_caps_get_structure(mapped, j);
      /* Output keeps the input's memory kind first, so a chain of CUDA elements stays in CUDA
       * memory and a system-memory pipeline stays on the host unless downstream asks for CUDA.
       * Input prefers CUDA memory on the GPU path, so an uploader upstream (cudaupload answers
       * system memory first) uploads instead of passing host frames through. */
      const gboolean cuda_first = in_cuda || (cuda_ok && direction == GST_PAD_SRC);
      GstCapsFeatures *first =
          cuda_first ? gst_caps_features_new(GST_PRISM_CUDA_FEATURE, nullptr) : gst_caps_features_new_empty();
      gst_caps_append_structure_full(both, gst_structure_copy(ms), first);
      if (cuda_first)
        gst_caps_append_structure_full(both, gst_structure_copy(ms), gst_caps_features_new_empty());
      else if (cuda_ok)
        gst_caps_append_structure_full(both, gst_structure_copy(ms),
                                       gst_caps_features_new(GST_PRISM_CUDA_FEATURE, nullptr));
    }
    gst_caps_unref(mapped);
    ret = gst_caps_merge(ret, both);
  }
  if (filter) { /* our order first: the filter (a peer's query) may list system memory first */
    GstCaps *tmp = gst_caps_intersect_full(ret, filter, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(ret);
    ret = tmp;
  }
  GST_DEBUG_OBJECT(trans, "transformed %" GST_PTR_FORMAT " into %" GST_PTR_FORMAT, caps, ret);
  return ret;
}

static gboolean set_caps(GstBaseTransform *trans, GstCaps *incaps, GstCaps *outcaps) {
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(trans);
  const gboolean in_place = klass->process_ip != nullptr;
  /* The worker may be using the plans set_info replaces, and its results are of the old caps. */
  async_drain(GST_PRISM_CUDA_FILTER(trans), TRUE);
  /* passthrough_on_same_caps has just made an in-place element (same caps by definition)
   * passthrough: it must see every buffer, writable. */
  if (in_place) gst_base_transform_set_passthrough(trans, FALSE);
  if (!gst_prism_info_from_caps(&priv->in_info, incaps) || !gst_prism_info_from_caps(&priv->out_info, outcaps)) {
    GST_ELEMENT_ERROR(trans, CORE, NEGOTIATION, ("invalid caps"),
                      ("in %" GST_PTR_FORMAT " out %" GST_PTR_FORMAT, incaps, outcaps));
    return FALSE;
  }
  priv->in_is_tensor = gst_prism_tensor_info_from_caps(&priv->in_tensor, incaps);
  priv->out_is_tensor = gst_prism_tensor_info_from_caps(&priv->out_tensor, outcaps);
  priv->in_width = priv->in_is_tensor ? priv->in_tensor.width : GST_VIDEO_INFO_WIDTH(&priv->in_info);
  priv->in_height = priv->in_is_tensor ? priv->in_tensor.height : GST_VIDEO_INFO_HEIGHT(&priv->in_info);
  priv->out_width = priv->out_is_tensor ? priv->out_tensor.width : GST_VIDEO_INFO_WIDTH(&priv->out_info);
  priv->out_height = priv->out_is_tensor ? priv->out_tensor.height : GST_VIDEO_INFO_HEIGHT(&priv->out_info);
  priv->in_cuda_caps = gst_prism_caps_are_cuda(incaps);
  priv->out_cuda_caps = gst_prism_caps_are_cuda(outcaps);
  if ((priv->in_cuda_caps || priv->out_cuda_caps) && !priv->cuda.use_cuda) {
    GST_ELEMENT_ERROR(trans, CORE, NEGOTIATION, ("memory:CUDAMemory caps on the CPU path"),
                      ("in %" GST_PTR_FORMAT " out %" GST_PTR_FORMAT, incaps, outcaps));
    return FALSE;
  }
  /* GStreamer 1.22's GstCudaMemory overlaps I420's U and V planes for odd heights: refuse. */
  if (!gst_prism_cuda_check_i420_height(GST_ELEMENT(trans), &priv->in_info, priv->in_cuda_caps, "sink") ||
      !gst_prism_cuda_check_i420_height(GST_ELEMENT(trans), &priv->out_info, priv->out_cuda_caps, "src"))
    return FALSE;
#if defined(PRISM_HAVE_CUDA)
  priv->staging_in.reset();
  priv->staging_out.reset();
  if (priv->cuda.use_cuda) {
    const gboolean stage_in = !priv->in_cuda_caps && !(in_place && klass->ip_host_frames);
    const gboolean stage_out = !in_place && !priv->out_cuda_caps;
    try {
      const prism::GstPrismContextAlloc alloc(priv->cuda.context);
      if (stage_in) priv->staging_in.reserve(GST_VIDEO_INFO_SIZE(&priv->in_info), alloc);
      if (stage_out) priv->staging_out.reserve(GST_VIDEO_INFO_SIZE(&priv->out_info), alloc);
    } catch (const prism::gpu::CudaError &e) {
      GST_ELEMENT_ERROR(trans, RESOURCE, NO_SPACE_LEFT, ("cannot allocate GPU staging memory"), ("%s", e.what()));
      return FALSE;
    }
  }
#endif
  if (klass->set_info && !klass->set_info(GST_PRISM_CUDA_FILTER(trans), &priv->in_info, &priv->out_info)) return FALSE;
  return TRUE;
}

/* ---- allocation ---- */

static gboolean propose_allocation(GstBaseTransform *trans, GstQuery *decide_query, GstQuery *q) {
  if (!GST_BASE_TRANSFORM_CLASS(gst_prism_cuda_filter_parent_class)->propose_allocation(trans, decide_query, q))
    return FALSE;
  if (!decide_query) return TRUE; /* passthrough */
  return gst_prism_cuda_propose_allocation(&PRIV(trans)->cuda, q);
}

static gboolean decide_allocation(GstBaseTransform *trans, GstQuery *q) {
  if (!gst_prism_cuda_decide_allocation(&PRIV(trans)->cuda, GST_ELEMENT(trans), q)) return FALSE;
  return GST_BASE_TRANSFORM_CLASS(gst_prism_cuda_filter_parent_class)->decide_allocation(trans, q);
}

/* ---- meta: keep what describes content, rescale what describes positions ---- */

/* Adds to `to` a copy of `m`, its box scaled from iw x ih to ow x oh, with every param; `source`
 * (may be null) is set into each param (the async mode's source-frame and source-timestamp). */
static void copy_roi(GstBuffer *to, const GstVideoRegionOfInterestMeta *m, gint iw, gint ih, gint ow, gint oh,
                     const GstStructure *source) {
  GstVideoRegionOfInterestMeta *n = gst_buffer_add_video_region_of_interest_meta_id(
      to, m->roi_type, (guint)gst_util_uint64_scale_int(m->x, ow, iw), (guint)gst_util_uint64_scale_int(m->y, oh, ih),
      (guint)gst_util_uint64_scale_int(m->w, ow, iw), (guint)gst_util_uint64_scale_int(m->h, oh, ih));
  n->id = m->id;
  n->parent_id = m->parent_id;
  for (GList *l = m->params; l; l = l->next) {
    GstStructure *p = gst_structure_copy((const GstStructure *)l->data);
    if (source) gst_structure_set_value(p, "source-frame", gst_structure_get_value(source, "source-frame"));
    if (source) gst_structure_set_value(p, "source-timestamp", gst_structure_get_value(source, "source-timestamp"));
    gst_video_region_of_interest_meta_add_param(n, p);
  }
}

static gboolean transform_meta(GstBaseTransform *trans, GstBuffer *outbuf, GstMeta *meta, GstBuffer *inbuf) {
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
  const GstMetaInfo *info = meta->info;
  if (gst_meta_api_type_has_tag(info->api, g_quark_from_string(GST_META_TAG_MEMORY_STR)) ||
      gst_meta_api_type_has_tag(info->api, g_quark_from_string(GST_META_TAG_VIDEO_COLORSPACE_STR)))
    return FALSE;
  const gint iw = priv->in_width, ih = priv->in_height, ow = priv->out_width, oh = priv->out_height;
  const gboolean resized = iw != ow || ih != oh;
  if (info->api == GST_VIDEO_REGION_OF_INTEREST_META_API_TYPE && iw > 0 && ih > 0) {
    /* GStreamer's own scale transform drops the params (detections' scores, track ids). */
    copy_roi(outbuf, (const GstVideoRegionOfInterestMeta *)meta, iw, ih, ow, oh, nullptr);
    return FALSE;
  }
  if (resized && !priv->in_is_tensor && !priv->out_is_tensor &&
      gst_meta_api_type_has_tag(info->api, g_quark_from_string(GST_META_TAG_VIDEO_SIZE_STR))) {
    if (info->transform_func) {
      GstVideoMetaTransform scale = {&priv->in_info, &priv->out_info};
      info->transform_func(outbuf, meta, inbuf, gst_video_meta_transform_scale_get_quark(), &scale);
    }
    return FALSE; /* rescaled above (or dropped when it cannot be) */
  }
  return TRUE;
}

/* ---- frames ---- */

static GstMapFlags ip_map_flags(GstPrismCudaFilter *self, GstBuffer *buf) {
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(self);
  return klass->map_flags_ip ? klass->map_flags_ip(self, buf) : GST_MAP_READWRITE;
}

static GstFlowReturn transform_cpu(GstPrismCudaFilter *self, GstBuffer *inbuf, GstBuffer *outbuf) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(self);
  prism::GstPrismFrameMap in, out;
  GstPrismFrame fin{}, fout{};
  if (!in.map_host(&priv->in_info, inbuf, GST_MAP_READ, &fin)) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the input buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }
  if (!out.map_host(&priv->out_info, outbuf, GST_MAP_WRITE, &fout)) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the output buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }
  GstFlowReturn ret = klass->process(self, &fin, &fout);
  if (ret == GST_FLOW_OK && klass->finish) ret = klass->finish(self, outbuf, &fout);
  return ret;
}

static GstFlowReturn transform_ip_cpu(GstPrismCudaFilter *self, GstBuffer *buf) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(self);
  prism::GstPrismFrameMap map;
  GstPrismFrame frame{};
  if (!map.map_host(&priv->in_info, buf, ip_map_flags(self, buf), &frame)) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }
  GstFlowReturn ret = klass->process_ip(self, buf, &frame);
  if (ret == GST_FLOW_OK && klass->finish) ret = klass->finish(self, buf, &frame);
  return ret;
}

#if defined(PRISM_HAVE_CUDA)
static void post_cuda_error(GstPrismCudaFilter *self, cudaError_t err) {
  GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("CUDA error"), ("%s", cudaGetErrorString(err)));
}

/* The device frame of `buf` on the GPU path, after the rule of gst_prism_cuda_buffer_is_ours:
 * GstCudaMemory of our context is mapped in place (GST_MAP_CUDA); anything else is mapped on the
 * host and given `staging` as its device copy (reserved here when set_caps did not: another
 * context's memory under CUDA caps), uploaded on the stream when `upload`. *staged tells which.
 * Posts the error. */
static gboolean map_device_frame(GstPrismCudaFilter *self, GstBuffer *buf, const GstVideoInfo *info, GstMapFlags flags,
                                 prism::GstPrismDeviceArray<guint8> &staging, gboolean upload,
                                 prism::GstPrismFrameMap &map, GstPrismFrame *dev, gboolean *staged) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  *staged = !gst_prism_cuda_buffer_is_ours(&priv->cuda, buf);
  if (!*staged) {
    if (map.map_device(info, buf, flags, dev)) return TRUE;
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map a buffer"), ("CUDA memory"));
    return FALSE;
  }
  if (!map.map_host(info, buf, flags)) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map a buffer"), (nullptr));
    return FALSE;
  }
  try {
    staging.reserve(GST_VIDEO_INFO_SIZE(info), prism::GstPrismContextAlloc(priv->cuda.context));
  } catch (const prism::gpu::CudaError &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, NO_SPACE_LEFT, ("cannot allocate GPU staging memory"), ("%s", e.what()));
    return FALSE;
  }
  gst_prism_frame_from_staging(staging.data(), info, dev);
  cudaError_t err = cudaSuccess;
  if (upload && (err = gst_prism_cuda_copy_planes(map.frame(), dev, TRUE, priv->cuda.stream)) != cudaSuccess) {
    post_cuda_error(self, err);
    return FALSE;
  }
  return TRUE;
}

/* After process/process_ip on the GPU path: a staged frame is downloaded into its host map (when
 * `download`), the stream synchronised (1.22 memory carries no stream: our work on a buffer ends
 * before the buffer leaves the element), then `finish` sees the frame as the buffer holds it and
 * the stream is synchronised again for what finish enqueued. `processed` is the frame process
 * wrote (device pointers, or host pointers with ip_host_frames). */
/* After process/process_ip: the staged output downloaded, the stream synchronised (1.22 memory
 * carries no stream), then finish. `host_frame`: the frame went to process_ip on the host, so
 * nothing of the frame's is queued on the stream and no sync is needed (a subclass's own GPU work
 * on host frames ends before process_ip returns, its results being on the host). */
static GstFlowReturn complete_cuda(GstPrismCudaFilter *self, GstBuffer *outbuf, prism::GstPrismFrameMap &map,
                                   const GstPrismFrame *processed, gboolean staged, gboolean download,
                                   gboolean host_frame) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(self);
  cudaStream_t stream = priv->cuda.stream;
  cudaError_t err = cudaSuccess;
  if (staged && download) err = gst_prism_cuda_copy_planes(map.frame(), processed, FALSE, stream);
  if (err == cudaSuccess && !host_frame) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) {
    post_cuda_error(self, err);
    return GST_FLOW_ERROR;
  }
  if (!klass->finish) return GST_FLOW_OK;
  GstPrismFrame host{};
  if (staged) gst_prism_frame_from_host(map.frame(), &host);
  /* finish synchronises what it queues itself (header): no second sync per frame here. */
  return klass->finish(self, outbuf, staged ? &host : processed);
}

static GstFlowReturn transform_cuda(GstPrismCudaFilter *self, GstBuffer *inbuf, GstBuffer *outbuf) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(self);
  prism::GstPrismContextScope scope(&priv->cuda);
  if (!scope.pushed()) {
    GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("cannot push the CUDA context"), (nullptr));
    return GST_FLOW_ERROR;
  }
  /* Declared after the scope: unmapped before the context is popped. */
  prism::GstPrismFrameMap in, out;
  GstPrismFrame fin{}, fout{};
  gboolean in_staged, out_staged;
  if (!map_device_frame(self, inbuf, &priv->in_info, GST_MAP_READ, priv->staging_in, TRUE, in, &fin, &in_staged) ||
      !map_device_frame(self, outbuf, &priv->out_info, GST_MAP_WRITE, priv->staging_out, FALSE, out, &fout,
                        &out_staged))
    return GST_FLOW_ERROR;
  GstFlowReturn ret = klass->process(self, &fin, &fout);
  if (ret != GST_FLOW_OK) return ret;
  return complete_cuda(self, outbuf, out, &fout, out_staged, TRUE, FALSE);
}

static GstFlowReturn transform_ip_cuda(GstPrismCudaFilter *self, GstBuffer *buf) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(self);
  prism::GstPrismContextScope scope(&priv->cuda);
  if (!scope.pushed()) {
    GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("cannot push the CUDA context"), (nullptr));
    return GST_FLOW_ERROR;
  }
  const GstMapFlags flags = ip_map_flags(self, buf);
  prism::GstPrismFrameMap map;
  GstPrismFrame frame{};
  gboolean staged = FALSE, host_frame = FALSE;
  if (klass->ip_host_frames && !(priv->in_cuda_caps && gst_prism_cuda_buffer_is_ours(&priv->cuda, buf))) {
    host_frame = TRUE;
    if (!map.map_host(&priv->in_info, buf, flags, &frame)) {
      GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the buffer"), (nullptr));
      return GST_FLOW_ERROR;
    }
  } else if (!map_device_frame(self, buf, &priv->in_info, flags, priv->staging_in, TRUE, map, &frame, &staged)) {
    return GST_FLOW_ERROR;
  }
  GstFlowReturn ret = klass->process_ip(self, buf, &frame);
  if (ret != GST_FLOW_OK) return ret;
  return complete_cuda(self, buf, map, &frame, staged, (flags & GST_MAP_WRITE) != 0, host_frame);
}
#endif

/* One frame, processed where the caller runs (the streaming thread, or the async worker). */
static GstFlowReturn run_copy(GstPrismCudaFilter *self, GstBuffer *inbuf, GstBuffer *outbuf) {
#if defined(PRISM_HAVE_CUDA)
  if (PRIV(self)->cuda.use_cuda) return transform_cuda(self, inbuf, outbuf);
#endif
  return transform_cpu(self, inbuf, outbuf);
}

static GstFlowReturn run_ip(GstPrismCudaFilter *self, GstBuffer *buf) {
#if defined(PRISM_HAVE_CUDA)
  if (PRIV(self)->cuda.use_cuda) return transform_ip_cuda(self, buf);
#endif
  return transform_ip_cpu(self, buf);
}

/* ---- the async mode (header: "The asynchronous mode"; the worker: gstprismasyncworker.h) ---- */

/* `async` as set, else the subclass's default (its pspec; FALSE for elements without one). Not
 * resolved in instance init: the class there is still the base class's. Object lock held. */
static gboolean async_value(GstPrismCudaFilter *self) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  if (priv->async_prop >= 0) return priv->async_prop;
  GParamSpec *async = g_object_class_find_property(G_OBJECT_GET_CLASS(self), "async");
  return async && G_IS_PARAM_SPEC_BOOLEAN(async) && G_PARAM_SPEC_BOOLEAN(async)->default_value;
}

/* One job on the worker's thread: the frame processed as the synchronous path does. */
static GstFlowReturn async_run(GstPrismCudaFilter *self, const prism::GstPrismAsyncWorker::Job &job) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  priv->frame_number = job.frame;
  priv->frame_segment = &job.segment;
  const GstFlowReturn ret = job.out ? run_copy(self, job.in, job.out) : run_ip(self, job.in);
  stamp_camera(self, job.out ? job.out : job.in); /* the meta moved onto a later frame keep it */
  priv->frame_segment = nullptr;
  return ret;
}

static void async_start(GstPrismCudaFilter *self) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  GST_OBJECT_LOCK(self);
  priv->async_on = async_value(self);
  GST_OBJECT_UNLOCK(self);
  priv->skipped_at_stop = 0;
  if (!priv->async_on || priv->worker) return;
  priv->worker = new prism::GstPrismAsyncWorker();
  priv->worker->start([self](const prism::GstPrismAsyncWorker::Job &job) { return async_run(self, job); });
}

/* Joins the worker: the analysis running ends first (there is no way to cut one short), a job not
 * yet started is dropped, and so are the results not delivered. Frames that still come (the
 * streaming thread runs until the pads are deactivated) are counted as skipped. */
static void async_quit(GstPrismCudaFilter *self) {
  prism::GstPrismAsyncWorker *w = PRIV(self)->worker;
  if (w) w->stop();
}

/* In stop(), when no streaming thread can use the worker any more. */
static void async_free(GstPrismCudaFilter *self) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  prism::GstPrismAsyncWorker *w = priv->worker;
  if (!w) return;
  w->stop();
  GST_OBJECT_LOCK(self);
  priv->worker = nullptr;
  priv->skipped_at_stop = w->skipped();
  GST_OBJECT_UNLOCK(self);
  delete w;
}

/* Waits for the analysis running, if any; `drop`: its meta and the newest picture are dropped. */
static void async_drain(GstPrismCudaFilter *self, gboolean drop) {
  prism::GstPrismAsyncWorker *w = PRIV(self)->worker;
  if (w) w->drain(drop);
}

/* Moves the ROI meta of the finished job `from` onto `to`, the frame being pushed. */
static void async_move_results(GstPrismCudaFilter *self, GstBuffer *from, guint64 frame, GstBuffer *to) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  GstStructure *source = gst_structure_new("source", "source-frame", G_TYPE_UINT64, frame, "source-timestamp",
                                           G_TYPE_UINT64, (guint64)GST_BUFFER_PTS(from), nullptr);
  gpointer iter = nullptr;
  GstMeta *meta;
  while ((meta = gst_buffer_iterate_meta_filtered(from, &iter, GST_VIDEO_REGION_OF_INTEREST_META_API_TYPE)))
    copy_roi(to, (const GstVideoRegionOfInterestMeta *)meta, priv->out_width, priv->out_height, priv->out_width,
             priv->out_height, source);
  gst_structure_free(source);
}

static gboolean remove_roi_meta(GstBuffer *, GstMeta **meta, gpointer) {
  if ((*meta)->info->api == GST_VIDEO_REGION_OF_INTEREST_META_API_TYPE) *meta = nullptr;
  return TRUE;
}

/* The worker's buffers for frame `in`: in place, a shallow copy (the frame's memory, shared and
 * read; its meta but the ROI meta, so that those on it afterwards are the analysis's); copy mode,
 * the input itself and an output buffer in system memory (staged on the GPU path as any). */
static void async_job_buffers(GstPrismCudaFilter *self, GstBuffer *in, gboolean copy, GstBuffer **job_in,
                              GstBuffer **job_out) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  if (copy) {
    *job_in = gst_buffer_ref(in);
    *job_out = gst_buffer_new_allocate(nullptr, GST_VIDEO_INFO_SIZE(&priv->out_info), nullptr);
    gst_buffer_copy_into(*job_out, in, GST_BUFFER_COPY_TIMESTAMPS, 0, -1);
  } else {
    *job_in = gst_buffer_copy(in);
    gst_buffer_foreach_meta(*job_in, remove_roi_meta, nullptr);
    *job_out = nullptr;
  }
}

/* The streaming thread's part, per frame: the frame becomes the worker's job or is skipped; the
 * results finished since the last frame go on this one (copy mode: with the newest picture). */
static GstFlowReturn async_submit(GstPrismCudaFilter *self, GstBuffer *in, GstBuffer *out, guint64 frame) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  const gboolean copy = out != nullptr;
  prism::GstPrismAsyncWorker::Delivery d = priv->worker->submit(
      frame, GST_BASE_TRANSFORM(self)->segment, copy,
      [&](GstBuffer **job_in, GstBuffer **job_out) { async_job_buffers(self, in, copy, job_in, job_out); });
  if (d.ret != GST_FLOW_OK) return d.ret;
  GstBuffer *done = d.done, *picture = d.picture;
  const guint64 done_frame = d.done_frame;
  GstFlowReturn ret = GST_FLOW_OK;
  if (copy) {
    GstVideoFrame src, dst;
    if (!picture) { /* stopping: nothing was analysed */
      ret = GST_FLOW_FLUSHING;
    } else if (gst_video_frame_map(&src, &priv->out_info, picture, GST_MAP_READ)) {
      if (gst_video_frame_map(&dst, &priv->out_info, out, GST_MAP_WRITE)) {
        if (!gst_video_frame_copy(&dst, &src)) ret = GST_FLOW_ERROR;
        gst_video_frame_unmap(&dst);
      } else {
        ret = GST_FLOW_ERROR;
      }
      gst_video_frame_unmap(&src);
    } else {
      ret = GST_FLOW_ERROR;
    }
    if (ret == GST_FLOW_ERROR)
      GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot copy the newest analysed picture into a frame"), (nullptr));
    gst_clear_buffer(&picture);
  }
  if (done) {
    if (ret == GST_FLOW_OK) async_move_results(self, done, done_frame, copy ? out : in);
    gst_buffer_unref(done);
  }
  return ret;
}

/* Gives every ROI meta of `buf` that has none a "prism-camera" param naming the element's camera
 * (header: "The camera a frame comes from"). Nothing without a camera. */
static void stamp_camera(GstPrismCudaFilter *self, GstBuffer *buf) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  GST_OBJECT_LOCK(self);
  GstStructure *param = priv->camera
                            ? gst_structure_new("prism-camera", "camera", G_TYPE_STRING, priv->camera, "camera-uri",
                                                G_TYPE_STRING, priv->camera_uri ? priv->camera_uri : "", nullptr)
                            : nullptr;
  GST_OBJECT_UNLOCK(self);
  if (!param) return;
  gpointer iter = nullptr;
  GstMeta *meta;
  while ((meta = gst_buffer_iterate_meta_filtered(buf, &iter, GST_VIDEO_REGION_OF_INTEREST_META_API_TYPE))) {
    auto *roi = (GstVideoRegionOfInterestMeta *)meta;
    if (!gst_video_region_of_interest_meta_get_param(roi, "prism-camera"))
      gst_video_region_of_interest_meta_add_param(roi, gst_structure_copy(param));
  }
  gst_structure_free(param);
}

static GstFlowReturn transform(GstBaseTransform *trans, GstBuffer *inbuf, GstBuffer *outbuf) {
  GstPrismCudaFilter *self = GST_PRISM_CUDA_FILTER(trans);
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  if (!GST_PRISM_CUDA_FILTER_GET_CLASS(self)->process) return GST_FLOW_NOT_SUPPORTED; /* in place */
  const guint64 frame = priv->frames++;
  if (priv->worker) return async_submit(self, inbuf, outbuf, frame);
  priv->frame_number = frame;
  priv->frame_segment = &trans->segment;
  const GstFlowReturn ret = run_copy(self, inbuf, outbuf);
  stamp_camera(self, outbuf);
  return ret;
}

static GstFlowReturn transform_ip(GstBaseTransform *trans, GstBuffer *buf) {
  GstPrismCudaFilter *self = GST_PRISM_CUDA_FILTER(trans);
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  if (!GST_PRISM_CUDA_FILTER_GET_CLASS(self)->process_ip) return GST_FLOW_NOT_SUPPORTED; /* copy mode */
  const guint64 frame = priv->frames++;
  if (priv->worker) return async_submit(self, buf, nullptr, frame);
  priv->frame_number = frame;
  priv->frame_segment = &trans->segment;
  const GstFlowReturn ret = run_ip(self, buf);
  stamp_camera(self, buf);
  return ret;
}

/* GstController bindings (GST_PARAM_CONTROLLABLE properties) take their values at each frame's
 * stream time, before the frame is processed (as GStreamer's own video filters do). */
static void before_transform(GstBaseTransform *trans, GstBuffer *buf) {
  const GstClockTime ts = GST_BUFFER_PTS(buf);
  if (trans->segment.format != GST_FORMAT_TIME || !GST_CLOCK_TIME_IS_VALID(ts)) return;
  const GstClockTime stream_time = gst_segment_to_stream_time(&trans->segment, GST_FORMAT_TIME, ts);
  if (GST_CLOCK_TIME_IS_VALID(stream_time)) gst_object_sync_values(GST_OBJECT(trans), stream_time);
}

/* EOS waits for the running analysis (its message goes before EOS; its meta has no frame to go
 * on); a flush waits for it and drops what it would deliver after the seek. */
static gboolean sink_event(GstBaseTransform *trans, GstEvent *event) {
  GstPrismCudaFilter *self = GST_PRISM_CUDA_FILTER(trans);
  if (GST_EVENT_TYPE(event) == GST_EVENT_EOS) async_drain(self, TRUE);
  if (GST_EVENT_TYPE(event) == GST_EVENT_FLUSH_STOP) async_drain(self, TRUE);
  return GST_BASE_TRANSFORM_CLASS(gst_prism_cuda_filter_parent_class)->sink_event(trans, event);
}

/* Going down, the worker is joined before the pads are deactivated and the subclass's stop() frees
 * what the worker uses. */
static GstStateChangeReturn change_state(GstElement *element, GstStateChange transition) {
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) async_quit(GST_PRISM_CUDA_FILTER(element));
  return GST_ELEMENT_CLASS(gst_prism_cuda_filter_parent_class)->change_state(element, transition);
}

static gboolean get_unit_size(GstBaseTransform *trans, GstCaps *caps, gsize *size) {
  (void)trans;
  GstVideoInfo info;
  if (!gst_prism_info_from_caps(&info, caps)) return FALSE;
  *size = GST_VIDEO_INFO_SIZE(&info);
  return TRUE;
}

/* ---- class ---- */

/* The shape is known only once the subclass's class_init has run: in place when it set process_ip. */
static void constructed(GObject *object) {
  G_OBJECT_CLASS(gst_prism_cuda_filter_parent_class)->constructed(object);
  if (GST_PRISM_CUDA_FILTER_GET_CLASS(object)->process_ip)
    gst_base_transform_set_in_place(GST_BASE_TRANSFORM(object), TRUE);
}

static void finalize(GObject *object) {
  g_free(PRIV(object)->camera);
  g_free(PRIV(object)->camera_uri);
#if defined(PRISM_HAVE_CUDA)
  using Staging = prism::GstPrismDeviceArray<guint8>;
  PRIV(object)->staging_in.~Staging();
  PRIV(object)->staging_out.~Staging();
#endif
  G_OBJECT_CLASS(gst_prism_cuda_filter_parent_class)->finalize(object);
}

static void gst_prism_cuda_filter_class_init(GstPrismCudaFilterClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);

  gobject_class->set_property = set_property;
  gobject_class->get_property = get_property;
  gobject_class->constructed = constructed;
  gobject_class->finalize = finalize;
  gst_prism_cuda_install_properties(gobject_class, PROP_DEVICE, PROP_CUDA_DEVICE_ID);

  element_class->set_context = GST_DEBUG_FUNCPTR(set_context);
  element_class->change_state = GST_DEBUG_FUNCPTR(change_state);
  trans_class->before_transform = GST_DEBUG_FUNCPTR(before_transform);
  trans_class->sink_event = GST_DEBUG_FUNCPTR(sink_event);
  trans_class->passthrough_on_same_caps = TRUE;
  trans_class->start = GST_DEBUG_FUNCPTR(start);
  trans_class->stop = GST_DEBUG_FUNCPTR(stop);
  trans_class->query = GST_DEBUG_FUNCPTR(query);
  trans_class->set_caps = GST_DEBUG_FUNCPTR(set_caps);
  trans_class->propose_allocation = GST_DEBUG_FUNCPTR(propose_allocation);
  trans_class->decide_allocation = GST_DEBUG_FUNCPTR(decide_allocation);
  trans_class->transform_meta = GST_DEBUG_FUNCPTR(transform_meta);
  trans_class->transform = GST_DEBUG_FUNCPTR(transform);
  /* Only in-place subclasses (process_ip) are set in place; a passthrough copy-mode element is
   * left alone. */
  trans_class->transform_ip = GST_DEBUG_FUNCPTR(transform_ip);
  trans_class->transform_ip_on_passthrough = FALSE;
  trans_class->get_unit_size = GST_DEBUG_FUNCPTR(get_unit_size);
  trans_class->transform_caps = GST_DEBUG_FUNCPTR(transform_caps);
  klass->transform_structure = default_transform_structure;

  gst_type_mark_as_plugin_api(GST_TYPE_PRISM_CUDA_FILTER, (GstPluginAPIFlags)0);
}

static void gst_prism_cuda_filter_init(GstPrismCudaFilter *self) {
  gst_prism_cuda_init(&PRIV(self)->cuda);
  PRIV(self)->async_prop = -1;
#if defined(PRISM_HAVE_CUDA)
  new (&PRIV(self)->staging_in) prism::GstPrismDeviceArray<guint8>();
  new (&PRIV(self)->staging_out) prism::GstPrismDeviceArray<guint8>();
#endif
}

gboolean gst_prism_cuda_filter_uses_cuda(GstPrismCudaFilter *self) { return PRIV(self)->cuda.use_cuda; }

void gst_prism_cuda_filter_class_install_async(GObjectClass *klass, guint prop_async, guint prop_skipped,
                                               gboolean async_default) {
  g_object_class_install_property(
      klass, prop_async,
      g_param_spec_boolean("async", "Asynchronous",
                           "Analyse on the element's own thread while frames pass at the source's rate: frames that "
                           "arrive while it is busy are skipped (counted in frames-skipped), results go on the next "
                           "frame pushed (false: every frame analysed in the streaming thread)",
                           async_default,
                           (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY)));
  g_object_class_install_property(
      klass, prop_skipped,
      g_param_spec_uint64("frames-skipped", "Frames skipped",
                          "async: frames not analysed because the worker was busy, since start", 0, G_MAXUINT64, 0,
                          (GParamFlags)(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS)));
}

gboolean gst_prism_cuda_filter_async_set_property(GstPrismCudaFilter *self, const GValue *value, GParamSpec *pspec) {
  if (std::strcmp(pspec->name, "async") != 0) return FALSE;
  GST_OBJECT_LOCK(self);
  PRIV(self)->async_prop = g_value_get_boolean(value);
  GST_OBJECT_UNLOCK(self);
  return TRUE;
}

gboolean gst_prism_cuda_filter_async_get_property(GstPrismCudaFilter *self, GValue *value, GParamSpec *pspec) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  if (std::strcmp(pspec->name, "async") == 0) {
    GST_OBJECT_LOCK(self);
    g_value_set_boolean(value, async_value(self));
    GST_OBJECT_UNLOCK(self);
    return TRUE;
  }
  if (std::strcmp(pspec->name, "frames-skipped") != 0) return FALSE;
  guint64 skipped = 0;
  GST_OBJECT_LOCK(self); /* the worker is freed under it */
  if (priv->worker) {
    skipped = priv->worker->skipped();
  } else {
    skipped = priv->skipped_at_stop;
  }
  GST_OBJECT_UNLOCK(self);
  g_value_set_uint64(value, skipped);
  return TRUE;
}

void gst_prism_cuda_filter_class_install_camera(GObjectClass *klass, guint prop_camera, guint prop_camera_uri) {
  const auto flags = (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING);
  g_object_class_install_property(
      klass, prop_camera,
      g_param_spec_string("camera", "Camera",
                          "The camera the frames come from, a stable id named in every result (message field, JSON "
                          "line, ROI meta param prism-camera); empty: none",
                          nullptr, flags));
  g_object_class_install_property(
      klass, prop_camera_uri,
      g_param_spec_string("camera-uri", "Camera URI", "The camera's source URI, named with camera in every result",
                          nullptr, flags));
}

gboolean gst_prism_cuda_filter_camera_set_property(GstPrismCudaFilter *self, const GValue *value, GParamSpec *pspec) {
  const gboolean is_camera = std::strcmp(pspec->name, "camera") == 0;
  if (!is_camera && std::strcmp(pspec->name, "camera-uri") != 0) return FALSE;
  const gchar *text = g_value_get_string(value);
  GST_OBJECT_LOCK(self);
  gchar **field = is_camera ? &PRIV(self)->camera : &PRIV(self)->camera_uri;
  g_free(*field);
  *field = text && *text ? g_strdup(text) : nullptr;
  GST_OBJECT_UNLOCK(self);
  return TRUE;
}

gboolean gst_prism_cuda_filter_camera_get_property(GstPrismCudaFilter *self, GValue *value, GParamSpec *pspec) {
  const gboolean is_camera = std::strcmp(pspec->name, "camera") == 0;
  if (!is_camera && std::strcmp(pspec->name, "camera-uri") != 0) return FALSE;
  GST_OBJECT_LOCK(self);
  g_value_set_string(value, is_camera ? PRIV(self)->camera : PRIV(self)->camera_uri);
  GST_OBJECT_UNLOCK(self);
  return TRUE;
}

gboolean gst_prism_cuda_filter_is_async(GstPrismCudaFilter *self) { return PRIV(self)->worker != nullptr; }

guint64 gst_prism_cuda_filter_frame_number(GstPrismCudaFilter *self) { return PRIV(self)->frame_number; }

const GstSegment *gst_prism_cuda_filter_frame_segment(GstPrismCudaFilter *self) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  return priv->frame_segment ? priv->frame_segment : &GST_BASE_TRANSFORM(self)->segment;
}

void gst_prism_cuda_filter_post_frame_message(GstPrismCudaFilter *self, GstStructure *s) {
  prism::GstPrismAsyncWorker *w = PRIV(self)->worker;
  if (w) gst_structure_set(s, "skipped", G_TYPE_UINT64, w->skipped(), nullptr);
  GST_OBJECT_LOCK(self);
  if (PRIV(self)->camera)
    gst_structure_set(s, "camera", G_TYPE_STRING, PRIV(self)->camera, "camera-uri", G_TYPE_STRING,
                      PRIV(self)->camera_uri ? PRIV(self)->camera_uri : "", nullptr);
  GST_OBJECT_UNLOCK(self);
  gst_prism_post_frame_message(GST_ELEMENT(self), s);
}

GstPrismCuda *gst_prism_cuda_filter_get_cuda(GstPrismCudaFilter *self) { return &PRIV(self)->cuda; }

gboolean gst_prism_cuda_filter_push_context(GstPrismCudaFilter *self) {
#if defined(PRISM_HAVE_CUDA)
  return PRIV(self)->cuda.use_cuda && gst_prism_cuda_push(&PRIV(self)->cuda);
#else
  (void)self;
  return FALSE;
#endif
}

void gst_prism_cuda_filter_pop_context(void) {
#if defined(PRISM_HAVE_CUDA)
  gst_prism_cuda_pop();
#endif
}

gpointer gst_prism_cuda_filter_get_stream(GstPrismCudaFilter *self) {
#if defined(PRISM_HAVE_CUDA)
  return PRIV(self)->cuda.stream;
#else
  (void)self;
  return nullptr;
#endif
}

const GstVideoInfo *gst_prism_cuda_filter_in_info(GstPrismCudaFilter *self) { return &PRIV(self)->in_info; }
const GstVideoInfo *gst_prism_cuda_filter_out_info(GstPrismCudaFilter *self) { return &PRIV(self)->out_info; }

void gst_prism_cuda_filter_class_add_pad_templates(GstElementClass *klass, const gchar *formats,
                                                   const gchar *cuda_formats) {
  GstCaps *caps = gst_prism_cuda_template_caps(formats, cuda_formats);
  gst_prism_cuda_filter_class_add_pad_templates_full(klass, caps, caps);
  gst_caps_unref(caps);
}

void gst_prism_cuda_filter_class_add_pad_templates_full(GstElementClass *klass, GstCaps *sink_caps, GstCaps *src_caps) {
  gst_element_class_add_pad_template(klass, gst_pad_template_new("sink", GST_PAD_SINK, GST_PAD_ALWAYS, sink_caps));
  gst_element_class_add_pad_template(klass, gst_pad_template_new("src", GST_PAD_SRC, GST_PAD_ALWAYS, src_caps));
}

const GstPrismTensorInfo *gst_prism_cuda_filter_in_tensor(GstPrismCudaFilter *self) {
  return PRIV(self)->in_is_tensor ? &PRIV(self)->in_tensor : nullptr;
}
const GstPrismTensorInfo *gst_prism_cuda_filter_out_tensor(GstPrismCudaFilter *self) {
  return PRIV(self)->out_is_tensor ? &PRIV(self)->out_tensor : nullptr;
}
