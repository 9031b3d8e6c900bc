#include "gst/prism/gstprismcuda.h"

#include "gst/prism/gstprismtensor.h"

#include <map>
#include <string>

#include "common/gpu.h"

#if defined(PRISM_HAVE_CUDA)
#include <gst/cuda/cuda-gst.h>
#include <gst/cuda/gstcudabufferpool.h>
#include <gst/cuda/gstcudaloader.h>
#include <gst/cuda/gstcudamemory.h>
#include <gst/cuda/gstcudautils.h>
#endif

GType gst_prism_device_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {GST_PRISM_DEVICE_AUTO, "The GPU when a CUDA driver and device are present, else the CPU", "auto"},
      {GST_PRISM_DEVICE_CUDA, "The GPU; fail to start without one", "cuda"},
      {GST_PRISM_DEVICE_CPU, "The CPU", "cpu"},
      {0, nullptr, nullptr}};
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstPrismDevice", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

void gst_prism_cuda_init(GstPrismCuda *cuda) {
  *cuda = GstPrismCuda{};
  cuda->device = GST_PRISM_DEVICE_AUTO;
  cuda->device_id = -1;
#if defined(PRISM_HAVE_CUDA)
  gst_cuda_memory_init_once();
#endif
}

/* ---- properties ---- */

void gst_prism_cuda_install_properties(GObjectClass *klass, guint prop_device, guint prop_device_id) {
  g_object_class_install_property(
      klass, prop_device,
      g_param_spec_enum("device", "Device",
                        "Where the element computes: auto (the GPU when a CUDA driver and device "
                        "are present, else the CPU), cuda (fail without a GPU) or cpu",
                        GST_TYPE_PRISM_DEVICE, GST_PRISM_DEVICE_AUTO,
                        (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY)));
  g_object_class_install_property(
      klass, prop_device_id,
      g_param_spec_int("cuda-device-id", "CUDA device id",
                       "CUDA device to use; -1 shares a neighbour's CUDA context or takes device 0", -1, G_MAXINT, -1,
                       (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY)));
  gst_type_mark_as_plugin_api(GST_TYPE_PRISM_DEVICE, (GstPluginAPIFlags)0);
}

gboolean gst_prism_cuda_set_property(GstPrismCuda *cuda, GObject *object, const GValue *value, GParamSpec *pspec) {
  gboolean handled = TRUE;
  GST_OBJECT_LOCK(object);
  if (g_str_equal(pspec->name, "device"))
    cuda->device = (GstPrismDevice)g_value_get_enum(value);
  else if (g_str_equal(pspec->name, "cuda-device-id"))
    cuda->device_id = g_value_get_int(value);
  else
    handled = FALSE;
  GST_OBJECT_UNLOCK(object);
  return handled;
}

gboolean gst_prism_cuda_get_property(GstPrismCuda *cuda, GObject *object, GValue *value, GParamSpec *pspec) {
  gboolean handled = TRUE;
  GST_OBJECT_LOCK(object);
  if (g_str_equal(pspec->name, "device"))
    g_value_set_enum(value, cuda->device);
  else if (g_str_equal(pspec->name, "cuda-device-id"))
    g_value_set_int(value, cuda->device_id);
  else
    handled = FALSE;
  GST_OBJECT_UNLOCK(object);
  return handled;
}

/* ---- context sharing ---- */

void gst_prism_cuda_set_context(GstPrismCuda *cuda, GstElement *element, GstContext *context) {
#if defined(PRISM_HAVE_CUDA)
  if (cuda->device != GST_PRISM_DEVICE_CPU && gst_cuda_load_library())
    gst_cuda_handle_set_context(element, context, cuda->device_id, &cuda->context);
#else
  (void)cuda;
  (void)element;
  (void)context;
#endif
}

gboolean gst_prism_cuda_handle_context_query(GstPrismCuda *cuda, GstElement *element, GstQuery *query) {
#if defined(PRISM_HAVE_CUDA)
  if (GST_QUERY_TYPE(query) == GST_QUERY_CONTEXT && cuda->context)
    return gst_cuda_handle_context_query(element, query, cuda->context);
#else
  (void)cuda;
  (void)element;
  (void)query;
#endif
  return FALSE;
}

/* ---- one context for a pipeline ---- */

GstContext *gst_prism_cuda_shared_context_new(gint device_id) {
#if defined(PRISM_HAVE_CUDA)
  if (!gst_cuda_load_library() || !prism::gpu::available(nullptr)) return nullptr;
  CUdevice device;
  CUcontext handle;
  if (CuInit(0) != CUDA_SUCCESS || CuDeviceGet(&device, device_id) != CUDA_SUCCESS ||
      CuCtxCreate(&handle, CU_CTX_SCHED_BLOCKING_SYNC, device) != CUDA_SUCCESS)
    return nullptr;
  CuCtxPopCurrent(nullptr); /* created current on this thread; the elements push it to use it */
  /* Wrapped: GstCudaContext does not destroy a context it did not make, so the handle lives as
   * long as the process (GstCudaContext's own live as long as an element holds them). */
  GstCudaContext *context = gst_cuda_context_new_wrapped(handle, device);
  if (!context) {
    CuCtxDestroy(handle);
    return nullptr;
  }
  GstContext *shared = gst_context_new_cuda_context(context);
  gst_object_unref(context);
  return shared;
#else
  (void)device_id;
  return nullptr;
#endif
}

struct _GstPrismCudaContextSharer {
  GMutex lock;
  std::map<gint, GstContext *> contexts; /* NULL where making one failed: not tried again */
  guint answered = 0;
};

GstPrismCudaContextSharer *gst_prism_cuda_context_sharer_new(void) {
  auto *sharer = new GstPrismCudaContextSharer();
  g_mutex_init(&sharer->lock);
  return sharer;
}

void gst_prism_cuda_context_sharer_free(GstPrismCudaContextSharer *sharer) {
  if (!sharer) return;
  for (auto &entry : sharer->contexts)
    if (entry.second) gst_context_unref(entry.second);
  g_mutex_clear(&sharer->lock);
  delete sharer;
}

/* The device an element will run on: its cuda-device-id (ours, nvcodec's decoders and
 * GstCudaBaseTransform's all have one), -1 ("any") and none taken as 0. */
static gint element_device_id(GstElement *element) {
  GParamSpec *spec = g_object_class_find_property(G_OBJECT_GET_CLASS(element), "cuda-device-id");
  if (!spec || (spec->flags & G_PARAM_READABLE) == 0) return 0;
  GValue v = G_VALUE_INIT;
  g_value_init(&v, spec->value_type);
  g_object_get_property(G_OBJECT(element), "cuda-device-id", &v);
  gint id = 0;
  if (G_VALUE_HOLDS_INT(&v))
    id = g_value_get_int(&v);
  else if (G_VALUE_HOLDS_UINT(&v))
    id = gint(g_value_get_uint(&v));
  g_value_unset(&v);
  return id < 0 ? 0 : id;
}

gboolean gst_prism_cuda_context_sharer_answer(GstPrismCudaContextSharer *sharer, GstMessage *msg) {
  const gchar *type = nullptr;
  if (!sharer || GST_MESSAGE_TYPE(msg) != GST_MESSAGE_NEED_CONTEXT || !gst_message_parse_context_type(msg, &type) ||
      g_strcmp0(type, "gst.cuda.context") != 0 || !GST_IS_ELEMENT(GST_MESSAGE_SRC(msg)))
    return FALSE;
  GstElement *element = GST_ELEMENT(GST_MESSAGE_SRC(msg));
  const gint device_id = element_device_id(element);
  g_mutex_lock(&sharer->lock);
  auto found = sharer->contexts.find(device_id);
  if (found == sharer->contexts.end())
    found = sharer->contexts.emplace(device_id, gst_prism_cuda_shared_context_new(device_id)).first;
  GstContext *context = found->second ? gst_context_ref(found->second) : nullptr;
  if (context) sharer->answered++;
  g_mutex_unlock(&sharer->lock);
  if (!context) return FALSE;
  gst_element_set_context(element, context);
  gst_context_unref(context);
  return TRUE;
}

static void on_need_context(GstBus *, GstMessage *msg, gpointer sharer) {
  gst_prism_cuda_context_sharer_answer(static_cast<GstPrismCudaContextSharer *>(sharer), msg);
}

void gst_prism_cuda_context_sharer_watch(GstPrismCudaContextSharer *sharer, GstBus *bus) {
  gst_bus_enable_sync_message_emission(bus);
  g_signal_connect(bus, "sync-message::need-context", G_CALLBACK(on_need_context), sharer);
}

guint gst_prism_cuda_context_sharer_answered(GstPrismCudaContextSharer *sharer) {
  g_mutex_lock(&sharer->lock);
  const guint n = sharer->answered;
  g_mutex_unlock(&sharer->lock);
  return n;
}

#if defined(PRISM_HAVE_CUDA)
GstCudaContext *gst_prism_cuda_context_sharer_get(GstPrismCudaContextSharer *sharer, gint device_id) {
  GstCudaContext *cuda = nullptr;
  g_mutex_lock(&sharer->lock);
  auto found = sharer->contexts.find(device_id);
  if (found != sharer->contexts.end() && found->second)
    gst_structure_get(gst_context_get_structure(found->second), "gst.cuda.context", GST_TYPE_CUDA_CONTEXT, &cuda,
                      nullptr);
  g_mutex_unlock(&sharer->lock);
  return cuda;
}
#endif

/* ---- start / stop: choose the path ---- */

gboolean gst_prism_cuda_start(GstPrismCuda *cuda, GstElement *element) {
  cuda->use_cuda = FALSE;
  cuda->started = TRUE;
  if (cuda->device == GST_PRISM_DEVICE_CPU) return TRUE;

  std::string why;
#if defined(PRISM_HAVE_CUDA)
  /* gst_cuda_context_new asserts without a driver: check the loader and the runtime first. */
  if (!gst_cuda_load_library()) {
    why = "the NVIDIA driver (libcuda) could not be loaded";
  } else if (!prism::gpu::available(&why)) {
    /* why is set */
  } else if (!gst_cuda_ensure_element_context(element, cuda->device_id, &cuda->context)) {
    why = "no CUDA context could be created for cuda-device-id " + std::to_string(cuda->device_id);
  } else if (!gst_cuda_context_push(cuda->context)) {
    why = "the CUDA context of cuda-device-id " + std::to_string(cuda->device_id) + " cannot be made current";
    gst_clear_object(&cuda->context);
  } else {
    cudaError_t err = cudaStreamCreateWithFlags(&cuda->stream, cudaStreamNonBlocking);
    gst_cuda_context_pop(nullptr);
    if (err == cudaSuccess) {
      cuda->use_cuda = TRUE;
      GST_INFO_OBJECT(element, "running on the GPU");
      return TRUE;
    }
    cudaGetLastError(); /* not reported again by a later check */
    cuda->stream = nullptr;
    why = std::string("cudaStreamCreate failed: ") + cudaGetErrorString(err);
    gst_clear_object(&cuda->context);
  }
#else
  prism::gpu::available(&why);
#endif
  if (cuda->device == GST_PRISM_DEVICE_CUDA) {
    GST_ELEMENT_ERROR(element, RESOURCE, NOT_FOUND, ("device=cuda but no usable CUDA GPU (property 'device')"),
                      ("%s", why.c_str()));
    return FALSE;
  }
  GST_ELEMENT_INFO(element, RESOURCE, NOT_FOUND, ("no usable CUDA GPU; running on the CPU"), ("%s", why.c_str()));
  return TRUE;
}

void gst_prism_cuda_stop(GstPrismCuda *cuda) {
#if defined(PRISM_HAVE_CUDA)
  if (cuda->context && cuda->stream) {
    /* Teardown cannot fail the element any more: an error from work still queued is logged. */
    if (gst_cuda_context_push(cuda->context)) {
      cudaError_t err = cudaStreamSynchronize(cuda->stream);
      const cudaError_t destroyed = cudaStreamDestroy(cuda->stream);
      if (err == cudaSuccess) err = destroyed;
      if (err != cudaSuccess) {
        GST_WARNING("stopping: %s (%s)", cudaGetErrorName(err), cudaGetErrorString(err));
        cudaGetLastError(); /* a non-sticky error must not be reported again by the next check */
      }
      gst_cuda_context_pop(nullptr);
    } else {
      /* Destroying it in whatever context is current would be worse than leaking it. */
      GST_WARNING("stopping: the CUDA context cannot be made current; its stream is leaked");
    }
  }
  cuda->stream = nullptr;
  gst_clear_object(&cuda->context);
#endif
  cuda->use_cuda = FALSE;
  cuda->started = FALSE;
}

/* ---- caps ---- */

gboolean gst_prism_cuda_allows_cuda_caps(GstPrismCuda *cuda) {
#if defined(PRISM_HAVE_CUDA)
  return cuda->device != GST_PRISM_DEVICE_CPU && (!cuda->started || cuda->use_cuda);
#else
  (void)cuda;
  return FALSE;
#endif
}

GstCaps *gst_prism_cuda_allowed_caps(GstPrismCuda *cuda, GstCaps *caps) {
  if (gst_prism_cuda_allows_cuda_caps(cuda)) return caps;
  GstCaps *out = gst_caps_new_empty();
  for (guint i = 0; i < gst_caps_get_size(caps); i++) {
    GstCapsFeatures *f = gst_caps_get_features(caps, i);
    if (f && !gst_caps_features_is_any(f) && gst_caps_features_contains(f, GST_PRISM_CUDA_FEATURE)) continue;
    gst_caps_append_structure_full(out, gst_structure_copy(gst_caps_get_structure(caps, i)),
                                   f ? gst_caps_features_copy(f) : nullptr);
  }
  gst_caps_unref(caps);
  return out;
}

gboolean gst_prism_caps_are_cuda(GstCaps *caps) {
  GstCapsFeatures *f = gst_caps_get_size(caps) ? gst_caps_get_features(caps, 0) : nullptr;
  return f && !gst_caps_features_is_any(f) && gst_caps_features_contains(f, GST_PRISM_CUDA_FEATURE);
}

GstCaps *gst_prism_cuda_template_caps(const gchar *formats, const gchar *cuda_formats) {
  GstCaps *caps = gst_caps_new_empty();
#if defined(PRISM_HAVE_CUDA)
  if (cuda_formats) {
    gchar *s = g_strdup_printf(
        "video/x-raw(" GST_PRISM_CUDA_FEATURE
        "), format=(string)%s, width=(int)[1, 32768], height=(int)[1, 32768], framerate=(fraction)[0/1, 2147483647/1]",
        cuda_formats);
    caps = gst_caps_merge(caps, gst_caps_from_string(s));
    g_free(s);
  }
#else
  (void)cuda_formats;
#endif
  gchar *s = g_strdup_printf(
      "video/x-raw, format=(string)%s, width=(int)[1, 32768], height=(int)[1, 32768], framerate=(fraction)[0/1, "
      "2147483647/1]",
      formats);
  caps = gst_caps_merge(caps, gst_caps_from_string(s));
  g_free(s);
  return caps;
}

gboolean gst_prism_cuda_check_i420_height(GstElement *element, const GstVideoInfo *info, gboolean cuda_caps,
                                          const gchar *pad_name) {
  if (cuda_caps && GST_VIDEO_INFO_FORMAT(info) == GST_VIDEO_FORMAT_I420 && GST_VIDEO_INFO_HEIGHT(info) % 2) {
    GST_ELEMENT_ERROR(element, CORE, NEGOTIATION,
                      ("I420 in memory:CUDAMemory needs an even height on the %s pad (got %d); use NV12", pad_name,
                       GST_VIDEO_INFO_HEIGHT(info)),
                      ("GstCudaMemory 1.22 overlaps the U and V planes for odd heights"));
    return FALSE;
  }
  return TRUE;
}

/* ---- allocation ---- */

/* Video pools take video caps: a tensor's pool is configured with its storage plane (see
 * gstprismtensor.h), in the same memory kind. */
static GstCaps *pool_caps_for(GstCaps *caps, const GstVideoInfo *info) {
  if (!gst_prism_caps_are_tensor(caps)) return gst_caps_ref(caps);
  GstCaps *storage = gst_video_info_to_caps(info);
  if (gst_prism_caps_are_cuda(caps))
    gst_caps_set_features(storage, 0, gst_caps_features_new(GST_PRISM_CUDA_FEATURE, nullptr));
  return storage;
}

gboolean gst_prism_cuda_propose_allocation(GstPrismCuda *cuda, GstQuery *query) {
  GstCaps *caps;
  gst_query_parse_allocation(query, &caps, nullptr);
  if (!caps) return FALSE;
  GstVideoInfo info;
  if (!gst_prism_info_from_caps(&info, caps)) return FALSE;
  gst_query_add_allocation_meta(query, GST_VIDEO_META_API_TYPE, nullptr);
#if defined(PRISM_HAVE_CUDA)
  if (gst_prism_caps_are_cuda(caps) && cuda->context && gst_query_get_n_allocation_pools(query) == 0) {
    GstBufferPool *pool = gst_cuda_buffer_pool_new(cuda->context);
    GstStructure *config = gst_buffer_pool_get_config(pool);
    gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
    GstCaps *pool_caps = pool_caps_for(caps, &info);
    gst_buffer_pool_config_set_params(config, pool_caps, GST_VIDEO_INFO_SIZE(&info), 0, 0);
    gst_caps_unref(pool_caps);
    if (gst_buffer_pool_set_config(pool, config)) {
      config = gst_buffer_pool_get_config(pool);
      guint size;
      gst_buffer_pool_config_get_params(config, nullptr, &size, nullptr, nullptr);
      gst_structure_free(config);
      gst_query_add_allocation_pool(query, pool, size, 0, 0);
    }
    gst_object_unref(pool);
  }
#else
  (void)cuda;
#endif
  return TRUE;
}

gboolean gst_prism_cuda_decide_allocation(GstPrismCuda *cuda, GstElement *element, GstQuery *query) {
  GstCaps *caps;
  gst_query_parse_allocation(query, &caps, nullptr);
  if (!caps) return FALSE;
  GstVideoInfo info;
  if (!gst_prism_info_from_caps(&info, caps)) return FALSE;
  GstCaps *pool_caps = pool_caps_for(caps, &info);

  GstBufferPool *pool = nullptr;
  guint size = GST_VIDEO_INFO_SIZE(&info), min = 0, max = 0;
  gboolean update = gst_query_get_n_allocation_pools(query) > 0;
  if (update) gst_query_parse_nth_allocation_pool(query, 0, &pool, &size, &min, &max);

#if defined(PRISM_HAVE_CUDA)
  if (gst_prism_caps_are_cuda(caps)) {
    /* Only a CUDA pool of our own context gives memory our stream can write. */
    if (pool && (!GST_IS_CUDA_BUFFER_POOL(pool) || GST_CUDA_BUFFER_POOL(pool)->context != cuda->context))
      gst_clear_object(&pool);
    if (!pool) pool = gst_cuda_buffer_pool_new(cuda->context);
  }
#else
  (void)cuda;
#endif
  if (!pool) pool = gst_video_buffer_pool_new();

  GstStructure *config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
  gst_buffer_pool_config_set_params(config, pool_caps, size, min, max);
  if (!gst_buffer_pool_set_config(pool, config)) {
    config = gst_buffer_pool_get_config(pool);
    if (!gst_buffer_pool_config_validate_params(config, pool_caps, size, min, max) ||
        !gst_buffer_pool_set_config(pool, config)) {
      gst_object_unref(pool);
      GST_ELEMENT_ERROR(element, RESOURCE, SETTINGS, ("buffer pool refused its configuration"),
                        ("caps %" GST_PTR_FORMAT, caps));
      gst_caps_unref(pool_caps);
      return FALSE;
    }
  }
  gst_caps_unref(pool_caps);
  config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_get_params(config, nullptr, &size, nullptr, nullptr);
  gst_structure_free(config);
  if (update)
    gst_query_set_nth_allocation_pool(query, 0, pool, size, min, max);
  else
    gst_query_add_allocation_pool(query, pool, size, min, max);
  gst_object_unref(pool);
  return TRUE;
}

/* ---- frames ---- */

void gst_prism_frame_from_host(const GstVideoFrame *frame, GstPrismFrame *out) {
  for (guint i = 0; i < GST_VIDEO_FRAME_N_PLANES(frame); i++) {
    out->data[i] = (guint8 *)GST_VIDEO_FRAME_PLANE_DATA(frame, i);
    out->stride[i] = GST_VIDEO_FRAME_PLANE_STRIDE(frame, i);
  }
  out->device = FALSE;
}

#if defined(PRISM_HAVE_CUDA)
gboolean gst_prism_cuda_push(GstPrismCuda *cuda) { return cuda->context && gst_cuda_context_push(cuda->context); }

void gst_prism_cuda_pop(void) { gst_cuda_context_pop(nullptr); }

gboolean gst_prism_cuda_map_frame(GstVideoFrame *frame, const GstVideoInfo *info, GstBuffer *buf, GstMapFlags flags,
                                  GstPrismFrame *out) {
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

void gst_prism_frame_from_staging(guint8 *base, const GstVideoInfo *info, GstPrismFrame *out) {
  for (guint i = 0; i < GST_VIDEO_INFO_N_PLANES(info); i++) {
    out->data[i] = base + GST_VIDEO_INFO_PLANE_OFFSET(info, i);
    out->stride[i] = GST_VIDEO_INFO_PLANE_STRIDE(info, i);
  }
  out->device = TRUE;
}

/* Bytes per row and rows of plane `plane`. */
static void plane_extent(const GstVideoInfo *info, guint plane, gsize *width_bytes, gsize *rows) {
  gint comp[GST_VIDEO_MAX_COMPONENTS];
  gst_video_format_info_component(info->finfo, plane, comp);
  *width_bytes = (gsize)GST_VIDEO_INFO_COMP_WIDTH(info, comp[0]) * GST_VIDEO_INFO_COMP_PSTRIDE(info, comp[0]);
  *rows = GST_VIDEO_INFO_COMP_HEIGHT(info, comp[0]);
}

cudaError_t gst_prism_cuda_copy_planes(const GstVideoFrame *host, const GstPrismFrame *dev, gboolean upload,
                                       cudaStream_t stream) {
  for (guint i = 0; i < GST_VIDEO_FRAME_N_PLANES(host); i++) {
    gsize width_bytes, rows;
    plane_extent(&host->info, i, &width_bytes, &rows);
    guint8 *h = (guint8 *)GST_VIDEO_FRAME_PLANE_DATA(host, i);
    gint hs = GST_VIDEO_FRAME_PLANE_STRIDE(host, i);
    cudaError_t err =
        upload
            ? cudaMemcpy2DAsync(dev->data[i], dev->stride[i], h, hs, width_bytes, rows, cudaMemcpyHostToDevice, stream)
            : cudaMemcpy2DAsync(h, hs, dev->data[i], dev->stride[i], width_bytes, rows, cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t gst_prism_cuda_copy_device_planes(const GstPrismFrame *src, const GstPrismFrame *dst,
                                              const GstVideoInfo *info, cudaStream_t stream) {
  for (guint i = 0; i < GST_VIDEO_INFO_N_PLANES(info); i++) {
    gsize width_bytes, rows;
    plane_extent(info, i, &width_bytes, &rows);
    cudaError_t err = cudaMemcpy2DAsync(dst->data[i], dst->stride[i], src->data[i], src->stride[i], width_bytes, rows,
                                        cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}
#endif

gboolean gst_prism_buffer_is_cuda(GstBuffer *buffer) {
#if defined(PRISM_HAVE_CUDA)
  return gst_buffer_n_memory(buffer) > 0 && gst_is_cuda_memory(gst_buffer_peek_memory(buffer, 0));
#else
  (void)buffer;
  return FALSE;
#endif
}

gboolean gst_prism_cuda_buffer_is_ours(GstPrismCuda *cuda, GstBuffer *buffer) {
#if defined(PRISM_HAVE_CUDA)
  if (!cuda->use_cuda || !cuda->context || !gst_prism_buffer_is_cuda(buffer)) return FALSE;
  GstCudaContext *theirs = GST_CUDA_MEMORY_CAST(gst_buffer_peek_memory(buffer, 0))->context;
  return theirs == cuda->context || gst_cuda_context_get_handle(theirs) == gst_cuda_context_get_handle(cuda->context);
#else
  (void)cuda;
  (void)buffer;
  return FALSE;
#endif
}
