#include "gstprismcudafilter.h"

#include <string>

#include "common/gpu.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#include <gst/cuda/gstcudabufferpool.h>
#include <gst/cuda/gstcudacontext.h>
#include <gst/cuda/gstcudaloader.h>
#include <gst/cuda/gstcudamemory.h>
#include <gst/cuda/gstcudautils.h>
#endif

GST_DEBUG_CATEGORY_STATIC(gst_prism_cuda_filter_debug);
#define GST_CAT_DEFAULT gst_prism_cuda_filter_debug

#define CUDA_FEATURE "memory:CUDAMemory"

enum { PROP_0, PROP_DEVICE, PROP_CUDA_DEVICE_ID };

GType gst_prism_device_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {GST_PRISM_DEVICE_AUTO, "The GPU when a CUDA driver and device are present, else the CPU",
       "auto"},
      {GST_PRISM_DEVICE_CUDA, "The GPU; fail to start without one", "cuda"},
      {GST_PRISM_DEVICE_CPU, "The CPU", "cpu"},
      {0, nullptr, nullptr}};
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstPrismDevice", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

typedef struct {
  GstPrismDevice device;
  gint device_id;
  gboolean use_cuda;
  gboolean started;
  GstVideoInfo in_info, out_info;
  gboolean in_cuda_caps, out_cuda_caps;
#if defined(PRISM_HAVE_CUDA)
  GstCudaContext *context;
  cudaStream_t stream;
  /* Device copies of system-memory frames on the GPU path (packed like the caps' GstVideoInfo). */
  guint8 *staging_in, *staging_out;
#endif
} GstPrismCudaFilterPrivate;

G_DEFINE_ABSTRACT_TYPE_WITH_CODE(GstPrismCudaFilter, gst_prism_cuda_filter,
                                 GST_TYPE_BASE_TRANSFORM,
                                 G_ADD_PRIVATE(GstPrismCudaFilter)
                                     GST_DEBUG_CATEGORY_INIT(gst_prism_cuda_filter_debug,
                                                             "prismcudafilter", 0,
                                                             "Prism CUDA filter base"));

#define PRIV(self) \
  ((GstPrismCudaFilterPrivate *)gst_prism_cuda_filter_get_instance_private(GST_PRISM_CUDA_FILTER(self)))

static gboolean caps_are_cuda(GstCaps *caps) {
  GstCapsFeatures *f = gst_caps_get_features(caps, 0);
  return f && gst_caps_features_contains(f, CUDA_FEATURE);
}

/* ---- properties ---- */

static void set_property(GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec) {
  GstPrismCudaFilterPrivate *priv = PRIV(object);
  GST_OBJECT_LOCK(object);
  switch (prop_id) {
    case PROP_DEVICE: priv->device = (GstPrismDevice)g_value_get_enum(value); break;
    case PROP_CUDA_DEVICE_ID: priv->device_id = g_value_get_int(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
  }
  GST_OBJECT_UNLOCK(object);
}

static void get_property(GObject *object, guint prop_id, GValue *value, GParamSpec *pspec) {
  GstPrismCudaFilterPrivate *priv = PRIV(object);
  GST_OBJECT_LOCK(object);
  switch (prop_id) {
    case PROP_DEVICE: g_value_set_enum(value, priv->device); break;
    case PROP_CUDA_DEVICE_ID: g_value_set_int(value, priv->device_id); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
  }
  GST_OBJECT_UNLOCK(object);
}

/* ---- context sharing ---- */

static void set_context(GstElement *element, GstContext *context) {
#if defined(PRISM_HAVE_CUDA)
  GstPrismCudaFilterPrivate *priv = PRIV(element);
  if (priv->device != GST_PRISM_DEVICE_CPU && gst_cuda_load_library())
    gst_cuda_handle_set_context(element, context, priv->device_id, &priv->context);
#endif
  GST_ELEMENT_CLASS(gst_prism_cuda_filter_parent_class)->set_context(element, context);
}

static gboolean query(GstBaseTransform *trans, GstPadDirection direction, GstQuery *q) {
#if defined(PRISM_HAVE_CUDA)
  if (GST_QUERY_TYPE(q) == GST_QUERY_CONTEXT) {
    GstPrismCudaFilterPrivate *priv = PRIV(trans);
    if (priv->context && gst_cuda_handle_context_query(GST_ELEMENT(trans), q, priv->context))
      return TRUE;
  }
#endif
  return GST_BASE_TRANSFORM_CLASS(gst_prism_cuda_filter_parent_class)->query(trans, direction, q);
}

/* ---- start / stop: choose the path ---- */

static gboolean start(GstBaseTransform *trans) {
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
  priv->use_cuda = FALSE;
  priv->started = TRUE;
  if (priv->device == GST_PRISM_DEVICE_CPU) return TRUE;

  std::string why;
#if defined(PRISM_HAVE_CUDA)
  /* gst_cuda_context_new asserts without a driver: check the loader and the runtime first. */
  if (!gst_cuda_load_library()) {
    why = "the NVIDIA driver (libcuda) could not be loaded";
  } else if (!prism::gpu::available(&why)) {
    /* why is set */
  } else if (!gst_cuda_ensure_element_context(GST_ELEMENT(trans), priv->device_id, &priv->context)) {
    why = "no CUDA context could be created for cuda-device-id " + std::to_string(priv->device_id);
  } else {
    gst_cuda_context_push(priv->context);
    cudaError_t err = cudaStreamCreateWithFlags(&priv->stream, cudaStreamNonBlocking);
    gst_cuda_context_pop(nullptr);
    if (err == cudaSuccess) {
      priv->use_cuda = TRUE;
      GST_INFO_OBJECT(trans, "running on the GPU");
      return TRUE;
    }
    why = std::string("cudaStreamCreate failed: ") + cudaGetErrorString(err);
    gst_clear_object(&priv->context);
  }
#else
  prism::gpu::available(&why);
#endif
  if (priv->device == GST_PRISM_DEVICE_CUDA) {
    GST_ELEMENT_ERROR(trans, RESOURCE, NOT_FOUND, ("device=cuda but no usable CUDA GPU"),
                      ("%s", why.c_str()));
    return FALSE;
  }
  GST_ELEMENT_INFO(trans, RESOURCE, NOT_FOUND, ("no usable CUDA GPU; running on the CPU"),
                   ("%s", why.c_str()));
  return TRUE;
}

static void free_staging(GstPrismCudaFilterPrivate *priv) {
#if defined(PRISM_HAVE_CUDA)
  if (!priv->context) return;
  gst_cuda_context_push(priv->context);
  if (priv->staging_in) cudaFree(priv->staging_in);
  if (priv->staging_out) cudaFree(priv->staging_out);
  gst_cuda_context_pop(nullptr);
  priv->staging_in = priv->staging_out = nullptr;
#else
  (void)priv;
#endif
}

static gboolean stop(GstBaseTransform *trans) {
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
#if defined(PRISM_HAVE_CUDA)
  free_staging(priv);
  if (priv->context && priv->stream) {
    gst_cuda_context_push(priv->context);
    cudaStreamSynchronize(priv->stream);
    cudaStreamDestroy(priv->stream);
    gst_cuda_context_pop(nullptr);
  }
  priv->stream = nullptr;
  gst_clear_object(&priv->context);
#endif
  priv->use_cuda = FALSE;
  priv->started = FALSE;
  return TRUE;
}

/* ---- caps: the subclass maps structures; here we add memory features ---- */

static GstCaps *default_transform_structure(GstPrismCudaFilter *self, GstPadDirection direction,
                                           const GstStructure *s) {
  (void)self;
  (void)direction;
  return gst_caps_new_full(gst_structure_copy(s), nullptr);
}

static GstCaps *transform_caps(GstBaseTransform *trans, GstPadDirection direction, GstCaps *caps,
                               GstCaps *filter) {
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(trans);
  /* Until start() has chosen the path, offer both memory kinds unless device=cpu. */
  gboolean cuda_ok = priv->device != GST_PRISM_DEVICE_CPU && (!priv->started || priv->use_cuda);
#if !defined(PRISM_HAVE_CUDA)
  cuda_ok = FALSE;
#endif

  GstCaps *ret = gst_caps_new_empty();
  for (guint i = 0; i < gst_caps_get_size(caps); i++) {
    GstCapsFeatures *f = gst_caps_get_features(caps, i);
    gboolean in_cuda = f && !gst_caps_features_is_any(f) && gst_caps_features_contains(f, CUDA_FEATURE);
    if (in_cuda && !cuda_ok) continue;
    GstCaps *mapped = klass->transform_structure(GST_PRISM_CUDA_FILTER(trans), direction,
                                                 gst_caps_get_structure(caps, i));
    GstCaps *both = gst_caps_new_empty();
    for (guint j = 0; j < gst_caps_get_size(mapped); j++) {
      const GstStructure *ms = gst_caps_get_structure(mapped, j);
      /* The incoming memory kind comes first, so a chain of CUDA elements stays in CUDA memory
       * and a system-memory pipeline stays on the host unless downstream asks for CUDA. */
      GstCapsFeatures *first = in_cuda ? gst_caps_features_new(CUDA_FEATURE, nullptr) : gst_caps_features_new_empty();
      gst_caps_append_structure_full(both, gst_structure_copy(ms), first);
      if (in_cuda)
        gst_caps_append_structure_full(both, gst_structure_copy(ms), gst_caps_features_new_empty());
      else if (cuda_ok)
        gst_caps_append_structure_full(both, gst_structure_copy(ms), gst_caps_features_new(CUDA_FEATURE, nullptr));
    }
    gst_caps_unref(mapped);
    ret = gst_caps_merge(ret, both);
  }
  if (filter) {
    GstCaps *tmp = gst_caps_intersect_full(filter, ret, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(ret);
    ret = tmp;
  }
  GST_DEBUG_OBJECT(trans, "transformed %" GST_PTR_FORMAT " into %" GST_PTR_FORMAT, caps, ret);
  return ret;
}

static gboolean set_caps(GstBaseTransform *trans, GstCaps *incaps, GstCaps *outcaps) {
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(trans);
  if (!gst_video_info_from_caps(&priv->in_info, incaps) ||
      !gst_video_info_from_caps(&priv->out_info, outcaps)) {
    GST_ELEMENT_ERROR(trans, CORE, NEGOTIATION, ("invalid caps"),
                      ("in %" GST_PTR_FORMAT " out %" GST_PTR_FORMAT, incaps, outcaps));
    return FALSE;
  }
  priv->in_cuda_caps = caps_are_cuda(incaps);
  priv->out_cuda_caps = caps_are_cuda(outcaps);
  if ((priv->in_cuda_caps || priv->out_cuda_caps) && !priv->use_cuda) {
    GST_ELEMENT_ERROR(trans, CORE, NEGOTIATION, ("memory:CUDAMemory caps on the CPU path"),
                      ("in %" GST_PTR_FORMAT " out %" GST_PTR_FORMAT, incaps, outcaps));
    return FALSE;
  }
  /* GStreamer 1.22's GstCudaMemory places the V plane of I420 at height/2 chroma rows after U,
   * so with an odd height the two planes overlap: refuse instead of producing corrupt frames. */
  for (int side = 0; side < 2; side++) {
    const GstVideoInfo *info = side ? &priv->out_info : &priv->in_info;
    if ((side ? priv->out_cuda_caps : priv->in_cuda_caps) &&
        GST_VIDEO_INFO_FORMAT(info) == GST_VIDEO_FORMAT_I420 && GST_VIDEO_INFO_HEIGHT(info) % 2) {
      GST_ELEMENT_ERROR(trans, CORE, NEGOTIATION,
                        ("I420 in memory:CUDAMemory needs an even height on the %s pad (got %d); use NV12",
                         side ? "src" : "sink", GST_VIDEO_INFO_HEIGHT(info)),
                        ("GstCudaMemory 1.22 overlaps the U and V planes for odd heights"));
      return FALSE;
    }
  }
#if defined(PRISM_HAVE_CUDA)
  free_staging(priv);
  if (priv->use_cuda) {
    gst_cuda_context_push(priv->context);
    cudaError_t err = cudaSuccess;
    if (!priv->in_cuda_caps) err = cudaMalloc((void **)&priv->staging_in, GST_VIDEO_INFO_SIZE(&priv->in_info));
    if (err == cudaSuccess && !priv->out_cuda_caps)
      err = cudaMalloc((void **)&priv->staging_out, GST_VIDEO_INFO_SIZE(&priv->out_info));
    gst_cuda_context_pop(nullptr);
    if (err != cudaSuccess) {
      GST_ELEMENT_ERROR(trans, RESOURCE, NO_SPACE_LEFT, ("cannot allocate GPU staging memory"),
                        ("%s", cudaGetErrorString(err)));
      return FALSE;
    }
  }
#endif
  if (klass->set_info && !klass->set_info(GST_PRISM_CUDA_FILTER(trans), &priv->in_info, &priv->out_info))
    return FALSE;
  return TRUE;
}

/* ---- allocation ---- */

static gboolean propose_allocation(GstBaseTransform *trans, GstQuery *decide_query, GstQuery *q) {
  if (!GST_BASE_TRANSFORM_CLASS(gst_prism_cuda_filter_parent_class)
           ->propose_allocation(trans, decide_query, q))
    return FALSE;
  if (!decide_query) return TRUE; /* passthrough */
  GstCaps *caps;
  gst_query_parse_allocation(q, &caps, nullptr);
  if (!caps) return FALSE;
  GstVideoInfo info;
  if (!gst_video_info_from_caps(&info, caps)) return FALSE;
  gst_query_add_allocation_meta(q, GST_VIDEO_META_API_TYPE, nullptr);
#if defined(PRISM_HAVE_CUDA)
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
  if (caps_are_cuda(caps) && priv->context && gst_query_get_n_allocation_pools(q) == 0) {
    GstBufferPool *pool = gst_cuda_buffer_pool_new(priv->context);
    GstStructure *config = gst_buffer_pool_get_config(pool);
    gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
    gst_buffer_pool_config_set_params(config, caps, GST_VIDEO_INFO_SIZE(&info), 0, 0);
    if (gst_buffer_pool_set_config(pool, config)) {
      config = gst_buffer_pool_get_config(pool);
      guint size;
      gst_buffer_pool_config_get_params(config, nullptr, &size, nullptr, nullptr);
      gst_structure_free(config);
      gst_query_add_allocation_pool(q, pool, size, 0, 0);
    }
    gst_object_unref(pool);
  }
#endif
  return TRUE;
}

static gboolean decide_allocation(GstBaseTransform *trans, GstQuery *q) {
  GstCaps *caps;
  gst_query_parse_allocation(q, &caps, nullptr);
  if (!caps) return FALSE;
  GstVideoInfo info;
  if (!gst_video_info_from_caps(&info, caps)) return FALSE;

  GstBufferPool *pool = nullptr;
  guint size = GST_VIDEO_INFO_SIZE(&info), min = 0, max = 0;
  gboolean update = gst_query_get_n_allocation_pools(q) > 0;
  if (update) gst_query_parse_nth_allocation_pool(q, 0, &pool, &size, &min, &max);

#if defined(PRISM_HAVE_CUDA)
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
  if (caps_are_cuda(caps)) {
    /* Only a CUDA pool of our own context gives memory our stream can write. */
    if (pool && (!GST_IS_CUDA_BUFFER_POOL(pool) || GST_CUDA_BUFFER_POOL(pool)->context != priv->context))
      gst_clear_object(&pool);
    if (!pool) pool = gst_cuda_buffer_pool_new(priv->context);
  }
#endif
  if (!pool) pool = gst_video_buffer_pool_new();

  GstStructure *config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
  gst_buffer_pool_config_set_params(config, caps, size, min, max);
  if (!gst_buffer_pool_set_config(pool, config)) {
    config = gst_buffer_pool_get_config(pool);
    if (!gst_buffer_pool_config_validate_params(config, caps, size, min, max) ||
        !gst_buffer_pool_set_config(pool, config)) {
      gst_object_unref(pool);
      GST_ELEMENT_ERROR(trans, RESOURCE, SETTINGS, ("buffer pool refused its configuration"),
                        ("caps %" GST_PTR_FORMAT, caps));
      return FALSE;
    }
  }
  config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_get_params(config, nullptr, &size, nullptr, nullptr);
  gst_structure_free(config);
  if (update)
    gst_query_set_nth_allocation_pool(q, 0, pool, size, min, max);
  else
    gst_query_add_allocation_pool(q, pool, size, min, max);
  gst_object_unref(pool);
  return GST_BASE_TRANSFORM_CLASS(gst_prism_cuda_filter_parent_class)->decide_allocation(trans, q);
}

/* ---- meta: keep what describes content, rescale what describes positions ---- */

static gboolean transform_meta(GstBaseTransform *trans, GstBuffer *outbuf, GstMeta *meta,
                               GstBuffer *inbuf) {
  GstPrismCudaFilterPrivate *priv = PRIV(trans);
  const GstMetaInfo *info = meta->info;
  if (gst_meta_api_type_has_tag(info->api, g_quark_from_string(GST_META_TAG_MEMORY_STR)) ||
      gst_meta_api_type_has_tag(info->api, g_quark_from_string(GST_META_TAG_VIDEO_COLORSPACE_STR)))
    return FALSE;
  const gint iw = GST_VIDEO_INFO_WIDTH(&priv->in_info), ih = GST_VIDEO_INFO_HEIGHT(&priv->in_info);
  const gint ow = GST_VIDEO_INFO_WIDTH(&priv->out_info), oh = GST_VIDEO_INFO_HEIGHT(&priv->out_info);
  const gboolean resized = iw != ow || ih != oh;
  if (info->api == GST_VIDEO_REGION_OF_INTEREST_META_API_TYPE && iw > 0 && ih > 0) {
    /* GStreamer's own scale transform drops the params (detections' scores, track ids): copy
     * the box scaled to the output size together with every param. */
    const GstVideoRegionOfInterestMeta *m = (const GstVideoRegionOfInterestMeta *)meta;
    GstVideoRegionOfInterestMeta *n = gst_buffer_add_video_region_of_interest_meta_id(
        outbuf, m->roi_type, (guint)gst_util_uint64_scale_int(m->x, ow, iw),
        (guint)gst_util_uint64_scale_int(m->y, oh, ih), (guint)gst_util_uint64_scale_int(m->w, ow, iw),
        (guint)gst_util_uint64_scale_int(m->h, oh, ih));
    n->id = m->id;
    n->parent_id = m->parent_id;
    for (GList *l = m->params; l; l = l->next)
      gst_video_region_of_interest_meta_add_param(n, gst_structure_copy((const GstStructure *)l->data));
    return FALSE;
  }
  if (resized && gst_meta_api_type_has_tag(info->api, g_quark_from_string(GST_META_TAG_VIDEO_SIZE_STR))) {
    if (info->transform_func) {
      GstVideoMetaTransform scale = {&priv->in_info, &priv->out_info};
      info->transform_func(outbuf, meta, inbuf, gst_video_meta_transform_scale_get_quark(), &scale);
    }
    return FALSE; /* rescaled above (or dropped when it cannot be) */
  }
  return TRUE;
}

/* ---- frames ---- */

#if defined(PRISM_HAVE_CUDA)
/* Maps a CUDA-memory buffer for device access. GstCudaMemory's own GstVideoInfo holds the
 * pitched layout when the buffer carries no GstVideoMeta. */
static gboolean map_cuda_frame(GstVideoFrame *frame, const GstVideoInfo *info, GstBuffer *buf,
                               GstMapFlags flags, GstPrismFrame *out) {
  GstMemory *mem = gst_buffer_peek_memory(buf, 0);
  if (!gst_is_cuda_memory(mem)) return FALSE;
  if (!gst_video_frame_map(frame, info, buf, (GstMapFlags)(flags | GST_MAP_CUDA))) return FALSE;
  const GstVideoInfo *layout = gst_buffer_get_video_meta(buf) ? &frame->info : &GST_CUDA_MEMORY_CAST(mem)->info;
  guint8 *base = (guint8 *)frame->map[0].data;
  for (guint i = 0; i < GST_VIDEO_INFO_N_PLANES(info); i++) {
    out->data[i] = gst_buffer_get_video_meta(buf) ? (guint8 *)GST_VIDEO_FRAME_PLANE_DATA(frame, i)
                                                  : base + GST_VIDEO_INFO_PLANE_OFFSET(layout, i);
    out->stride[i] = GST_VIDEO_INFO_PLANE_STRIDE(layout, i);
  }
  out->device = TRUE;
  return TRUE;
}

static void packed_layout(guint8 *base, const GstVideoInfo *info, GstPrismFrame *out) {
  for (guint i = 0; i < GST_VIDEO_INFO_N_PLANES(info); i++) {
    out->data[i] = base + GST_VIDEO_INFO_PLANE_OFFSET(info, i);
    out->stride[i] = GST_VIDEO_INFO_PLANE_STRIDE(info, i);
  }
  out->device = TRUE;
}

/* Copies every plane between a host frame and a device layout, on the stream. */
static cudaError_t copy_planes(const GstVideoFrame *host, const GstPrismFrame *dev, gboolean upload,
                               cudaStream_t stream) {
  for (guint i = 0; i < GST_VIDEO_FRAME_N_PLANES(host); i++) {
    const GstVideoFormatInfo *finfo = host->info.finfo;
    gint comp[GST_VIDEO_MAX_COMPONENTS];
    gst_video_format_info_component(finfo, i, comp);
    gsize width_bytes = (gsize)GST_VIDEO_FRAME_COMP_WIDTH(host, comp[0]) * GST_VIDEO_FRAME_COMP_PSTRIDE(host, comp[0]);
    gsize rows = GST_VIDEO_FRAME_COMP_HEIGHT(host, comp[0]);
    guint8 *h = (guint8 *)GST_VIDEO_FRAME_PLANE_DATA(host, i);
    gint hs = GST_VIDEO_FRAME_PLANE_STRIDE(host, i);
    cudaError_t err = upload ? cudaMemcpy2DAsync(dev->data[i], dev->stride[i], h, hs, width_bytes, rows,
                                                 cudaMemcpyHostToDevice, stream)
                             : cudaMemcpy2DAsync(h, hs, dev->data[i], dev->stride[i], width_bytes, rows,
                                                 cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}
#endif

static void host_layout(const GstVideoFrame *frame, GstPrismFrame *out) {
  for (guint i = 0; i < GST_VIDEO_FRAME_N_PLANES(frame); i++) {
    out->data[i] = (guint8 *)GST_VIDEO_FRAME_PLANE_DATA(frame, i);
    out->stride[i] = GST_VIDEO_FRAME_PLANE_STRIDE(frame, i);
  }
  out->device = FALSE;
}

static GstFlowReturn transform_cpu(GstPrismCudaFilter *self, GstBuffer *inbuf, GstBuffer *outbuf) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(self);
  GstVideoFrame in, out;
  if (!gst_video_frame_map(&in, &priv->in_info, inbuf, GST_MAP_READ)) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the input buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }
  if (!gst_video_frame_map(&out, &priv->out_info, outbuf, GST_MAP_WRITE)) {
    gst_video_frame_unmap(&in);
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the output buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }
  GstPrismFrame fin{}, fout{};
  host_layout(&in, &fin);
  host_layout(&out, &fout);
  GstFlowReturn ret = klass->process(self, &fin, &fout);
  gst_video_frame_unmap(&out);
  gst_video_frame_unmap(&in);
  return ret;
}

#if defined(PRISM_HAVE_CUDA)
static GstFlowReturn transform_cuda(GstPrismCudaFilter *self, GstBuffer *inbuf, GstBuffer *outbuf) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  GstPrismCudaFilterClass *klass = GST_PRISM_CUDA_FILTER_GET_CLASS(self);
  GstVideoFrame in, out;
  GstPrismFrame fin{}, fout{};
  gboolean in_dev = FALSE, out_dev = FALSE, in_mapped = FALSE, out_mapped = FALSE;
  GstFlowReturn ret = GST_FLOW_ERROR;
  cudaError_t err = cudaSuccess;

  if (!gst_cuda_context_push(priv->context)) {
    GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("cannot push the CUDA context"), (nullptr));
    return GST_FLOW_ERROR;
  }
  /* Input: device pointers of CUDA memory, or an upload of system memory into staging. */
  in_dev = map_cuda_frame(&in, &priv->in_info, inbuf, GST_MAP_READ, &fin);
  if (!in_dev) {
    if (!priv->staging_in) {
      GST_ELEMENT_ERROR(self, STREAM, FAILED, ("input buffer is not CUDA memory although the caps say so"), (nullptr));
      goto done;
    }
    if (!gst_video_frame_map(&in, &priv->in_info, inbuf, GST_MAP_READ)) goto map_failed;
    packed_layout(priv->staging_in, &priv->in_info, &fin);
    err = copy_planes(&in, &fin, TRUE, priv->stream);
  }
  in_mapped = TRUE;
  if (err != cudaSuccess) goto cuda_failed;

  out_dev = map_cuda_frame(&out, &priv->out_info, outbuf, GST_MAP_WRITE, &fout);
  if (!out_dev) {
    if (!priv->staging_out) {
      GST_ELEMENT_ERROR(self, STREAM, FAILED, ("output buffer is not CUDA memory although the caps say so"), (nullptr));
      goto done;
    }
    if (!gst_video_frame_map(&out, &priv->out_info, outbuf, GST_MAP_WRITE)) goto map_failed;
    packed_layout(priv->staging_out, &priv->out_info, &fout);
  }
  out_mapped = TRUE;

  ret = klass->process(self, &fin, &fout);
  if (ret != GST_FLOW_OK) goto done;
  if (!out_dev) err = copy_planes(&out, &fout, FALSE, priv->stream);
  /* 1.22 memory carries no stream: finish our work before the buffer leaves the element. */
  if (err == cudaSuccess) err = cudaStreamSynchronize(priv->stream);
  if (err != cudaSuccess) goto cuda_failed;
  ret = GST_FLOW_OK;
  goto done;

map_failed:
  GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map a buffer"), (nullptr));
  ret = GST_FLOW_ERROR;
  goto done;
cuda_failed:
  GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("CUDA error"), ("%s", cudaGetErrorString(err)));
  ret = GST_FLOW_ERROR;
done:
  if (out_mapped) gst_video_frame_unmap(&out);
  if (in_mapped) gst_video_frame_unmap(&in);
  gst_cuda_context_pop(nullptr);
  return ret;
}
#endif

static GstFlowReturn transform(GstBaseTransform *trans, GstBuffer *inbuf, GstBuffer *outbuf) {
  GstPrismCudaFilter *self = GST_PRISM_CUDA_FILTER(trans);
#if defined(PRISM_HAVE_CUDA)
  if (PRIV(self)->use_cuda) return transform_cuda(self, inbuf, outbuf);
#endif
  return transform_cpu(self, inbuf, outbuf);
}

static gboolean get_unit_size(GstBaseTransform *trans, GstCaps *caps, gsize *size) {
  (void)trans;
  GstVideoInfo info;
  if (!gst_video_info_from_caps(&info, caps)) return FALSE;
  *size = GST_VIDEO_INFO_SIZE(&info);
  return TRUE;
}

/* ---- class ---- */

static void gst_prism_cuda_filter_class_init(GstPrismCudaFilterClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);

  gobject_class->set_property = set_property;
  gobject_class->get_property = get_property;
  g_object_class_install_property(
      gobject_class, PROP_DEVICE,
      g_param_spec_enum("device", "Device",
                        "Where the element computes: auto (the GPU when a CUDA driver and device "
                        "are present, else the CPU), cuda (fail without a GPU) or cpu",
                        GST_TYPE_PRISM_DEVICE, GST_PRISM_DEVICE_AUTO,
                        (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                      GST_PARAM_MUTABLE_READY)));
  g_object_class_install_property(
      gobject_class, PROP_CUDA_DEVICE_ID,
      g_param_spec_int("cuda-device-id", "CUDA device id",
                       "CUDA device to use; -1 shares a neighbour's CUDA context or takes device 0",
                       -1, G_MAXINT, -1,
                       (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
                                     GST_PARAM_MUTABLE_READY)));

  element_class->set_context = GST_DEBUG_FUNCPTR(set_context);
  trans_class->passthrough_on_same_caps = TRUE;
  trans_class->start = GST_DEBUG_FUNCPTR(start);
  trans_class->stop = GST_DEBUG_FUNCPTR(stop);
  trans_class->query = GST_DEBUG_FUNCPTR(query);
  trans_class->set_caps = GST_DEBUG_FUNCPTR(set_caps);
  trans_class->propose_allocation = GST_DEBUG_FUNCPTR(propose_allocation);
  trans_class->decide_allocation = GST_DEBUG_FUNCPTR(decide_allocation);
  trans_class->transform_meta = GST_DEBUG_FUNCPTR(transform_meta);
  trans_class->transform = GST_DEBUG_FUNCPTR(transform);
  trans_class->get_unit_size = GST_DEBUG_FUNCPTR(get_unit_size);
  trans_class->transform_caps = GST_DEBUG_FUNCPTR(transform_caps);
  klass->transform_structure = default_transform_structure;

  gst_type_mark_as_plugin_api(GST_TYPE_PRISM_DEVICE, (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api(GST_TYPE_PRISM_CUDA_FILTER, (GstPluginAPIFlags)0);
}

static void gst_prism_cuda_filter_init(GstPrismCudaFilter *self) {
  GstPrismCudaFilterPrivate *priv = PRIV(self);
  priv->device = GST_PRISM_DEVICE_AUTO;
  priv->device_id = -1;
#if defined(PRISM_HAVE_CUDA)
  gst_cuda_memory_init_once();
#endif
}

gboolean gst_prism_cuda_filter_uses_cuda(GstPrismCudaFilter *self) { return PRIV(self)->use_cuda; }

gpointer gst_prism_cuda_filter_get_stream(GstPrismCudaFilter *self) {
#if defined(PRISM_HAVE_CUDA)
  return PRIV(self)->stream;
#else
  (void)self;
  return nullptr;
#endif
}

const GstVideoInfo *gst_prism_cuda_filter_in_info(GstPrismCudaFilter *self) { return &PRIV(self)->in_info; }
const GstVideoInfo *gst_prism_cuda_filter_out_info(GstPrismCudaFilter *self) { return &PRIV(self)->out_info; }

void gst_prism_cuda_filter_class_add_pad_templates(GstElementClass *klass, const gchar *formats,
                                                   const gchar *cuda_formats) {
  GstCaps *caps = gst_caps_new_empty();
#if defined(PRISM_HAVE_CUDA)
  if (cuda_formats) {
    gchar *s = g_strdup_printf("video/x-raw(" CUDA_FEATURE "), format=(string)%s, width=(int)[1, 32768], height=(int)[1, 32768], framerate=(fraction)[0/1, 2147483647/1]", cuda_formats);
    caps = gst_caps_merge(caps, gst_caps_from_string(s));
    g_free(s);
  }
#else
  (void)cuda_formats;
#endif
  gchar *s = g_strdup_printf("video/x-raw, format=(string)%s, width=(int)[1, 32768], height=(int)[1, 32768], framerate=(fraction)[0/1, 2147483647/1]", formats);
  caps = gst_caps_merge(caps, gst_caps_from_string(s));
  g_free(s);
  gst_element_class_add_pad_template(klass, gst_pad_template_new("sink", GST_PAD_SINK, GST_PAD_ALWAYS, caps));
  gst_element_class_add_pad_template(klass, gst_pad_template_new("src", GST_PAD_SRC, GST_PAD_ALWAYS, caps));
  gst_caps_unref(caps);
}

