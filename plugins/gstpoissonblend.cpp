#include "gstpoissonblend.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "colorconvert/colorconvert.h"
#include "gst/prism/gstprismframe.h"
#include "gst/prism/gstprismvideo.h"
#include "gstpoissonblendpad.h"
#include "poisson/seamless_clone.h"
#include "poisson/yuv_clone.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#include <gst/cuda/gstcudamemory.h>

#include "common/gpu.h"
#include "gst/prism/gstprismcudamemory.h"
#endif

GST_DEBUG_CATEGORY_STATIC(gst_poisson_blend_debug);
#define GST_CAT_DEFAULT gst_poisson_blend_debug

namespace pp = prism::poisson;
namespace cc = prism::colorconvert;

/* Background and output; overlays. GstCudaMemory holds all of them in 1.22. */
#define BACKGROUND_FORMATS "{ RGBA, BGRA, RGBx, BGRx, RGB, BGR, NV12, I420 }"
#define OVERLAY_FORMATS "{ RGBA, BGRA, RGBx, BGRx, RGB, BGR }"

using prism::poissonblend::OverlayState;

/* ------------------------------------------------------------------------------------------ */
/* Types                                                                                       */
/* ------------------------------------------------------------------------------------------ */

namespace {

/* Element-wide per-run state (streaming thread, start/stop). */
struct BlendState {
  GstVideoInfo out_info{};
  gboolean out_cuda = FALSE;
  std::vector<uint8_t> rgba_scratch; /* CPU: NV12/I420 rectangle as RGBA */
#if defined(PRISM_HAVE_CUDA)
  std::unique_ptr<pp::CudaCloner> cloner;
  prism::GstPrismDeviceArray<uint8_t> staging;  /* system-memory output on the GPU path, laid out like out_info */
  prism::GstPrismDeviceArray<uint8_t> rgba_dev; /* NV12/I420 rectangle as RGBA on the GPU */
#endif
};

}  // namespace

struct _GstPoissonBlend {
  GstVideoAggregator parent;
  GstPrismCuda cuda;
  GstPoissonBlendPad *background; /* the always "sink" pad */
  guint next_pad_index;           /* for overlay_%u names */
  guint next_serial;              /* creation order of overlay pads */
  guint background_timeout_ms;    /* property: 0 = wait for a background forever */
  GRecMutex check_lock;           /* background_check, background_check_ms; held while the check posts */
  GstClockID background_check;    /* the armed check that `sink` got linked; NULL once fired or cancelled */
  guint background_check_ms;      /* the timeout it was armed with */
  BlendState *state;
};

static void gst_poisson_blend_child_proxy_init(gpointer g_iface, gpointer iface_data);
G_DEFINE_TYPE_WITH_CODE(GstPoissonBlend, gst_poisson_blend, GST_TYPE_VIDEO_AGGREGATOR,
                        G_IMPLEMENT_INTERFACE(GST_TYPE_CHILD_PROXY, gst_poisson_blend_child_proxy_init));
GST_ELEMENT_REGISTER_DEFINE(poissonblend, "poissonblend", GST_RANK_NONE, GST_TYPE_POISSON_BLEND);

static OverlayState *STATE(gpointer pad) {
  return gst_poisson_blend_overlay_pad_get_state(GST_POISSON_BLEND_OVERLAY_PAD(pad));
}

/* ------------------------------------------------------------------------------------------ */
/* Element properties, context, child proxy                                                    */
/* ------------------------------------------------------------------------------------------ */

enum { PROP_0, PROP_DEVICE, PROP_CUDA_DEVICE_ID, PROP_BACKGROUND_TIMEOUT };

#define DEFAULT_BACKGROUND_TIMEOUT_MS 30000

static void set_property(GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec) {
  GstPoissonBlend *self = GST_POISSON_BLEND(object);
  if (prop_id == PROP_BACKGROUND_TIMEOUT) {
    GST_OBJECT_LOCK(self);
    self->background_timeout_ms = g_value_get_uint(value);
    GST_OBJECT_UNLOCK(self);
  } else if (!gst_prism_cuda_set_property(&self->cuda, object, value, pspec)) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
  }
}

static void get_property(GObject *object, guint prop_id, GValue *value, GParamSpec *pspec) {
  GstPoissonBlend *self = GST_POISSON_BLEND(object);
  if (prop_id == PROP_BACKGROUND_TIMEOUT) {
    GST_OBJECT_LOCK(self);
    g_value_set_uint(value, self->background_timeout_ms);
    GST_OBJECT_UNLOCK(self);
  } else if (!gst_prism_cuda_get_property(&self->cuda, object, value, pspec)) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
  }
}

static void set_context(GstElement *element, GstContext *context) {
  gst_prism_cuda_set_context(&GST_POISSON_BLEND(element)->cuda, element, context);
  GST_ELEMENT_CLASS(gst_poisson_blend_parent_class)->set_context(element, context);
}

static GObject *child_proxy_get_child_by_index(GstChildProxy *proxy, guint index) {
  GObject *obj = nullptr;
  GST_OBJECT_LOCK(proxy);
  obj = (GObject *)g_list_nth_data(GST_ELEMENT_CAST(proxy)->sinkpads, index);
  if (obj) gst_object_ref(obj);
  GST_OBJECT_UNLOCK(proxy);
  return obj;
}

static guint child_proxy_get_children_count(GstChildProxy *proxy) {
  GST_OBJECT_LOCK(proxy);
  guint count = GST_ELEMENT_CAST(proxy)->numsinkpads;
  GST_OBJECT_UNLOCK(proxy);
  return count;
}

static void gst_poisson_blend_child_proxy_init(gpointer g_iface, gpointer) {
  GstChildProxyInterface *iface = (GstChildProxyInterface *)g_iface;
  iface->get_child_by_index = child_proxy_get_child_by_index;
  iface->get_children_count = child_proxy_get_children_count;
}

/* overlay_%u pads, named as requested when the name is free (gst-launch's b.overlay_3). */
static GstAggregatorPad *create_new_pad(GstAggregator *agg, GstPadTemplate *templ, const gchar *req_name,
                                        const GstCaps *) {
  GstPoissonBlend *self = GST_POISSON_BLEND(agg);
  if (templ->direction != GST_PAD_SINK || templ->presence != GST_PAD_REQUEST) return nullptr;
  GST_OBJECT_LOCK(self);
  guint index = self->next_pad_index;
  unsigned int requested = 0;
  char tail = 0;
  if (req_name && std::sscanf(req_name, "overlay_%u%c", &requested, &tail) == 1) index = requested;
  gchar *name = g_strdup_printf("overlay_%u", index);
  gboolean taken = FALSE;
  for (GList *l = GST_ELEMENT(self)->sinkpads; l; l = l->next) taken |= g_str_equal(GST_OBJECT_NAME(l->data), name);
  if (taken) {
    GST_OBJECT_UNLOCK(self);
    GST_WARNING_OBJECT(self, "pad %s exists already", name);
    g_free(name);
    return nullptr;
  }
  self->next_pad_index = MAX(self->next_pad_index, index + 1);
  guint serial = self->next_serial++;
  GST_OBJECT_UNLOCK(self);
  GstAggregatorPad *pad = (GstAggregatorPad *)g_object_new(GST_TYPE_POISSON_BLEND_OVERLAY_PAD, "name", name,
                                                           "direction", GST_PAD_SINK, "template", templ, nullptr);
  STATE(pad)->serial = serial;
  g_free(name);
  return pad;
}

static GstPad *request_new_pad(GstElement *element, GstPadTemplate *templ, const gchar *name, const GstCaps *caps) {
  GstPad *pad = GST_ELEMENT_CLASS(gst_poisson_blend_parent_class)->request_new_pad(element, templ, name, caps);
  if (pad) gst_child_proxy_child_added(GST_CHILD_PROXY(element), G_OBJECT(pad), GST_OBJECT_NAME(pad));
  return pad;
}

static void release_pad(GstElement *element, GstPad *pad) {
  if (pad == GST_PAD(GST_POISSON_BLEND(element)->background)) return; /* the always pad stays */
  gst_object_ref(pad);
  gst_child_proxy_child_removed(GST_CHILD_PROXY(element), G_OBJECT(pad), GST_OBJECT_NAME(pad));
  /* The base class takes the aggregation lock: after this no frame uses the pad any more. */
  GST_ELEMENT_CLASS(gst_poisson_blend_parent_class)->release_pad(element, pad);
  if (GST_IS_POISSON_BLEND_OVERLAY_PAD(pad)) STATE(pad)->reset_stream_state();
  gst_object_unref(pad);
}

/* ------------------------------------------------------------------------------------------ */
/* Caps                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* What a sink pad can take: overlays their template whatever the background is; the background
 * what downstream accepts, since the output has its caps. */
static GstCaps *sink_getcaps(GstPoissonBlend *self, GstPad *pad, GstCaps *filter) {
  GstCaps *templ = gst_pad_get_pad_template_caps(pad);
  GstCaps *caps;
  if (pad == GST_PAD(self->background)) {
    GstAggregator *agg = GST_AGGREGATOR(self);
    GstCaps *src_templ = gst_pad_get_pad_template_caps(agg->srcpad);
    GstCaps *downstream = gst_pad_peer_query_caps(agg->srcpad, src_templ);
    gst_caps_unref(src_templ);
    /* Our order first (memory:CUDAMemory before system memory), so that a cudaupload upstream
     * uploads instead of passing system memory through when downstream takes either. */
    caps = gst_caps_intersect_full(templ, downstream, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(downstream);
    gst_caps_unref(templ);
  } else {
    caps = templ;
  }
  caps = gst_prism_cuda_allowed_caps(&self->cuda, caps);
  if (filter) {
    /* Our order wins over the filter's: cudaupload asks with system memory first (it prefers
     * passthrough), which would keep frames on the host although we take CUDA memory. */
    GstCaps *tmp = gst_caps_intersect_full(caps, filter, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref(caps);
    caps = tmp;
  }
  GST_DEBUG_OBJECT(pad, "caps %" GST_PTR_FORMAT, caps);
  return caps;
}

static gboolean sink_query(GstAggregator *agg, GstAggregatorPad *pad, GstQuery *query) {
  GstPoissonBlend *self = GST_POISSON_BLEND(agg);
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_CONTEXT:
      if (gst_prism_cuda_handle_context_query(&self->cuda, GST_ELEMENT(agg), query)) return TRUE;
      break;
    case GST_QUERY_CAPS: {
      GstCaps *filter;
      gst_query_parse_caps(query, &filter);
      GstCaps *caps = sink_getcaps(self, GST_PAD(pad), filter);
      gst_query_set_caps_result(query, caps);
      gst_caps_unref(caps);
      return TRUE;
    }
    case GST_QUERY_ACCEPT_CAPS: {
      GstCaps *caps;
      gst_query_parse_accept_caps(query, &caps);
      GstCaps *allowed = sink_getcaps(self, GST_PAD(pad), nullptr);
      gboolean ok = gst_caps_is_subset(caps, allowed);
      if (!ok) GST_INFO_OBJECT(pad, "refusing %" GST_PTR_FORMAT " (accepts %" GST_PTR_FORMAT ")", caps, allowed);
      gst_caps_unref(allowed);
      gst_query_set_accept_caps_result(query, ok);
      return TRUE;
    }
    default: break;
  }
  return GST_AGGREGATOR_CLASS(gst_poisson_blend_parent_class)->sink_query(agg, pad, query);
}

static gboolean src_query(GstAggregator *agg, GstQuery *query) {
  GstPoissonBlend *self = GST_POISSON_BLEND(agg);
  switch (GST_QUERY_TYPE(query)) {
    case GST_QUERY_CONTEXT:
      if (gst_prism_cuda_handle_context_query(&self->cuda, GST_ELEMENT(agg), query)) return TRUE;
      break;
    case GST_QUERY_CAPS: {
      /* The background's caps once known, else anything the background could have. */
      GstCaps *filter;
      gst_query_parse_caps(query, &filter);
      GstCaps *caps = gst_pad_get_current_caps(GST_PAD(self->background));
      if (!caps) caps = gst_prism_cuda_allowed_caps(&self->cuda, gst_pad_get_pad_template_caps(agg->srcpad));
      if (filter) {
        GstCaps *tmp = gst_caps_intersect_full(filter, caps, GST_CAPS_INTERSECT_FIRST);
        gst_caps_unref(caps);
        caps = tmp;
      }
      gst_query_set_caps_result(query, caps);
      gst_caps_unref(caps);
      return TRUE;
    }
    default: break;
  }
  return GST_AGGREGATOR_CLASS(gst_poisson_blend_parent_class)->src_query(agg, query);
}

/* The caps of the background frame being aggregated (bg->info, set when its buffer was taken), in
 * the memory kind of the pad's caps. The pad's current caps can be newer: when the size changes
 * frame by frame, the caps of frames still queued behind this one. */
static GstCaps *background_frame_caps(GstPoissonBlend *self) {
  GstVideoAggregatorPad *bg = GST_VIDEO_AGGREGATOR_PAD(self->background);
  GstCaps *caps = gst_pad_get_current_caps(GST_PAD(bg));
  GstVideoInfo latest;
  if (!caps || GST_VIDEO_INFO_FORMAT(&bg->info) == GST_VIDEO_FORMAT_UNKNOWN ||
      (gst_video_info_from_caps(&latest, caps) && gst_video_info_is_equal(&latest, &bg->info)))
    return caps;
  GstCaps *frame = gst_video_info_to_caps(&bg->info);
  gst_caps_set_features(frame, 0, gst_caps_features_copy(gst_caps_get_features(caps, 0)));
  GST_DEBUG_OBJECT(self, "background frame %" GST_PTR_FORMAT " (pad has %" GST_PTR_FORMAT ")", frame, caps);
  gst_caps_unref(caps);
  return frame;
}

/* The output caps are the background's (format, size, framerate, memory), nothing else. */
static GstFlowReturn update_src_caps(GstAggregator *agg, GstCaps *downstream, GstCaps **ret) {
  GstPoissonBlend *self = GST_POISSON_BLEND(agg);
  GstVideoAggregatorPad *bg = GST_VIDEO_AGGREGATOR_PAD(self->background);
  GstCaps *bg_caps = background_frame_caps(self);
  if (!bg_caps || GST_VIDEO_INFO_FORMAT(&bg->info) == GST_VIDEO_FORMAT_UNKNOWN) {
    if (bg_caps) gst_caps_unref(bg_caps);
    GST_DEBUG_OBJECT(self, "no background caps yet");
    return GST_AGGREGATOR_FLOW_NEED_DATA;
  }
  *ret = gst_caps_intersect_full(bg_caps, downstream, GST_CAPS_INTERSECT_FIRST);
  if (gst_caps_is_empty(*ret)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                      ("the output must have the background's caps (pad 'sink') and downstream refuses them"),
                      ("background %" GST_PTR_FORMAT ", downstream accepts %" GST_PTR_FORMAT, bg_caps, downstream));
    gst_caps_unref(bg_caps);
    gst_clear_caps(ret);
    return GST_FLOW_NOT_NEGOTIATED;
  }
  gst_caps_unref(bg_caps);
  return GST_FLOW_OK;
}

static GstCaps *fixate_src_caps(GstAggregator *, GstCaps *caps) { return gst_caps_fixate(caps); }

/* Per-caps plans: device staging for system-memory output on the GPU path, RGBA scratch for
 * YUV backgrounds. Allocated here, never per frame. */
static gboolean negotiated_src_caps(GstAggregator *agg, GstCaps *caps) {
  GstPoissonBlend *self = GST_POISSON_BLEND(agg);
  BlendState *s = self->state;
  GstVideoInfo info;
  if (!gst_video_info_from_caps(&info, caps)) return FALSE;
  const gboolean cuda_caps = gst_prism_caps_are_cuda(caps);
  if (cuda_caps && !self->cuda.use_cuda) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("memory:CUDAMemory caps on the CPU path"), ("%" GST_PTR_FORMAT, caps));
    return FALSE;
  }
  if (!gst_prism_cuda_check_i420_height(GST_ELEMENT(self), &info, cuda_caps, "sink")) return FALSE;
  const GstVideoFormat format = GST_VIDEO_INFO_FORMAT(&info);
  const gboolean yuv = format == GST_VIDEO_FORMAT_NV12 || format == GST_VIDEO_FORMAT_I420;
  const size_t rgba_size = (size_t)GST_VIDEO_INFO_WIDTH(&info) * GST_VIDEO_INFO_HEIGHT(&info) * 4;
  s->out_info = info;
  s->out_cuda = cuda_caps;
  if (!self->cuda.use_cuda) {
    s->rgba_scratch.assign(yuv ? rgba_size : 0, 0);
    s->rgba_scratch.shrink_to_fit();
  }
#if defined(PRISM_HAVE_CUDA)
  else {
    s->staging.reset();
    s->rgba_dev.reset();
    try {
      const prism::GstPrismContextAlloc alloc(self->cuda.context);
      if (!cuda_caps) s->staging.reserve(GST_VIDEO_INFO_SIZE(&info), alloc);
      if (yuv) s->rgba_dev.reserve(rgba_size, alloc);
    } catch (const prism::gpu::CudaError &e) {
      GST_ELEMENT_ERROR(self, RESOURCE, NO_SPACE_LEFT, ("cannot allocate GPU memory for %" GST_PTR_FORMAT, caps),
                        ("%s", e.what()));
      return FALSE;
    }
  }
#endif
  /* At framerate 0/1 (a still, or a variable rate) GstVideoAggregator 1.22 takes GST_SECOND / 0 as
   * its latency (GStreamer-CRITICALs), although it aggregates such caps well otherwise: one output
   * frame per background frame. What its negotiated_src_caps does that matters is done here: the
   * output info, the caps, and no latency. */
  if (GST_VIDEO_INFO_FPS_N(&info) == 0) {
    GST_OBJECT_LOCK(self);
    GST_VIDEO_AGGREGATOR(agg)->info = info;
    GST_OBJECT_UNLOCK(self);
    gst_aggregator_set_src_caps(agg, caps);
    gst_aggregator_set_latency(agg, 0, 0);
    return TRUE;
  }
  if (!GST_AGGREGATOR_CLASS(gst_poisson_blend_parent_class)->negotiated_src_caps(agg, caps)) return FALSE;
  /* The base class skips caps equal to those it set last, which may be older than 0/1 caps set
   * above. */
  GstCaps *current = gst_pad_get_current_caps(agg->srcpad);
  if (!current || !gst_caps_is_equal(current, caps)) {
    const GstClockTime frame =
        gst_util_uint64_scale(GST_SECOND, GST_VIDEO_INFO_FPS_D(&info), GST_VIDEO_INFO_FPS_N(&info));
    gst_aggregator_set_src_caps(agg, caps);
    gst_aggregator_set_latency(agg, frame, frame);
  }
  if (current) gst_caps_unref(current);
  return TRUE;
}

/* QoS at framerate 0/1 would make GstVideoAggregator 1.22 divide by the framerate: it is forwarded
 * upstream as GstAggregator does, without the frame-dropping bookkeeping. */
static gboolean src_event(GstAggregator *agg, GstEvent *event) {
  if (GST_EVENT_TYPE(event) == GST_EVENT_QOS && GST_VIDEO_INFO_FPS_N(&GST_VIDEO_AGGREGATOR(agg)->info) == 0) {
    GstAggregatorClass *base = GST_AGGREGATOR_CLASS(g_type_class_peek(GST_TYPE_AGGREGATOR));
    return base->src_event(agg, event);
  }
  return GST_AGGREGATOR_CLASS(gst_poisson_blend_parent_class)->src_event(agg, event);
}

/* ------------------------------------------------------------------------------------------ */
/* Allocation, start, stop                                                                     */
/* ------------------------------------------------------------------------------------------ */

static gboolean propose_allocation(GstAggregator *agg, GstAggregatorPad *, GstQuery *, GstQuery *query) {
  return gst_prism_cuda_propose_allocation(&GST_POISSON_BLEND(agg)->cuda, query);
}

static gboolean decide_allocation(GstAggregator *agg, GstQuery *query) {
  return gst_prism_cuda_decide_allocation(&GST_POISSON_BLEND(agg)->cuda, GST_ELEMENT(agg), query);
}

/* Overlay pads, with a ref each, in solving order: zorder, then creation. */
struct OverlayRef {
  GstPoissonBlendOverlayPad *pad;
  guint zorder;
  guint serial;
};

static std::vector<OverlayRef> overlays_in_order(GstPoissonBlend *self) {
  std::vector<OverlayRef> pads;
  GST_OBJECT_LOCK(self);
  for (GList *l = GST_ELEMENT(self)->sinkpads; l; l = l->next) {
    if (!GST_IS_POISSON_BLEND_OVERLAY_PAD(l->data)) continue;
    GstPoissonBlendOverlayPad *pad = GST_POISSON_BLEND_OVERLAY_PAD(gst_object_ref(l->data));
    pads.push_back({pad, 0, STATE(pad)->serial});
  }
  GST_OBJECT_UNLOCK(self);
  for (auto &p : pads) g_object_get(p.pad, "zorder", &p.zorder, nullptr);
  std::stable_sort(pads.begin(), pads.end(), [](const OverlayRef &a, const OverlayRef &b) {
    return a.zorder != b.zorder ? a.zorder < b.zorder : a.serial < b.serial;
  });
  return pads;
}

static void release_overlays(std::vector<OverlayRef> &pads) {
  for (auto &p : pads) gst_object_unref(p.pad);
  pads.clear();
}

/* A mask-location that could not be decoded: an error naming the pad and the file. */
static void post_mask_error(GstPoissonBlend *self, GstPad *pad, const OverlayState::Props &props) {
  /* A file name need not be UTF-8; GStreamer warns about (and bus readers choke on) text that is not. */
  gchar *error = g_utf8_make_valid(props.mask_error.c_str(), -1);
  gchar *location = g_utf8_make_valid(props.location.c_str(), -1);
  if (props.mask_missing)
    GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("%s: mask-location: %s", GST_PAD_NAME(pad), error),
                      ("pad %s, mask-location '%s'", GST_PAD_NAME(pad), location));
  else
    GST_ELEMENT_ERROR(self, STREAM, DECODE, ("%s: mask-location: %s", GST_PAD_NAME(pad), error),
                      ("pad %s, mask-location '%s'", GST_PAD_NAME(pad), location));
  g_free(error);
  g_free(location);
}

/* An unlinked background leaves GstAggregator waiting for its data forever (as compositor waits
 * for an unlinked pad): no output, no preroll, no error. It is not refused at start because a
 * demuxer or decodebin links it a little later (a sometimes pad); instead, if `sink` was unlinked
 * at start, it must have a peer background-timeout ms later, or the element posts an error naming
 * it.
 *
 * The check runs on the system clock's thread. Its user data is a weak ref, so a check left armed
 * (READY->PAUSED failing after start(), where GstAggregator calls no stop()) neither keeps the
 * element alive nor outlives it. check_lock guards the armed id and is held while the check posts:
 * once background_check_cancel() (stop(), a failed READY->PAUSED, READY->NULL, dispose, a new arm)
 * has cleared the id, a check that fires after it posts nothing, and one already posting has
 * finished before cancel returns. It is recursive for a bus sync handler that stops the pipeline
 * from the check's own post. */
static void background_check_free_ref(gpointer data) {
  auto *ref = static_cast<GWeakRef *>(data);
  g_weak_ref_clear(ref);
  g_free(ref);
}

static gboolean background_check_fired(GstClock *, GstClockTime, GstClockID id, gpointer data) {
  auto *self = static_cast<GstPoissonBlend *>(g_weak_ref_get(static_cast<GWeakRef *>(data)));
  if (!self) return TRUE; /* disposed */
  g_rec_mutex_lock(&self->check_lock);
  if (self->background_check == id) { /* else cancelled, or re-armed with another id */
    self->background_check = nullptr;
    gst_clock_id_unref(id); /* the element's ref; the clock holds its own while calling back */
    const guint timeout_ms = self->background_check_ms;
    if (!gst_pad_is_linked(GST_PAD(self->background)))
      GST_ELEMENT_ERROR(self, CORE, PAD,
                        ("pad 'sink' (the background) is not linked %u ms after start: no output without a "
                         "background (link it, or raise background-timeout for a source that links it later)",
                         timeout_ms),
                        ("background-timeout=%u", timeout_ms));
  }
  g_rec_mutex_unlock(&self->check_lock);
  gst_object_unref(self);
  return TRUE;
}

static void background_check_cancel(GstPoissonBlend *self) {
  g_rec_mutex_lock(&self->check_lock);
  GstClockID id = self->background_check;
  self->background_check = nullptr;
  g_rec_mutex_unlock(&self->check_lock);
  if (!id) return;
  gst_clock_id_unschedule(id);
  gst_clock_id_unref(id);
}

static void background_check_arm(GstPoissonBlend *self) {
  background_check_cancel(self);
  GST_OBJECT_LOCK(self);
  const guint timeout_ms = self->background_timeout_ms;
  GST_OBJECT_UNLOCK(self);
  if (timeout_ms == 0 || gst_pad_is_linked(GST_PAD(self->background))) return;
  GstClock *clock = gst_system_clock_obtain();
  GstClockID id =
      gst_clock_new_single_shot_id(clock, gst_clock_get_time(clock) + (GstClockTime)timeout_ms * GST_MSECOND);
  gst_object_unref(clock);
  auto *ref = g_new0(GWeakRef, 1);
  g_weak_ref_init(ref, self);
  /* Published before it is scheduled (a short timeout may fire at once); the check waits for the lock. */
  g_rec_mutex_lock(&self->check_lock);
  self->background_check = id;
  self->background_check_ms = timeout_ms;
  /* The clock frees ref with the entry. It refuses before taking ref only an invalid time, an unscheduled
   * id or a clock without async waits, none of which can happen here. */
  const GstClockReturn ret = gst_clock_id_wait_async(id, background_check_fired, ref, background_check_free_ref);
  if (ret != GST_CLOCK_OK) {
    GST_WARNING_OBJECT(self, "cannot schedule the check that pad 'sink' is linked: %d", ret);
    self->background_check = nullptr;
  }
  g_rec_mutex_unlock(&self->check_lock);
  if (ret != GST_CLOCK_OK) gst_clock_id_unref(id);
}

static gboolean start(GstAggregator *agg) {
  GstPoissonBlend *self = GST_POISSON_BLEND(agg);
  if (!gst_prism_cuda_start(&self->cuda, GST_ELEMENT(self))) return FALSE;
  /* Fail early on a mask file that could not be decoded. */
  std::vector<OverlayRef> pads = overlays_in_order(self);
  for (auto &p : pads) {
    GST_OBJECT_LOCK(p.pad);
    OverlayState::Props props = STATE(p.pad)->props;
    GST_OBJECT_UNLOCK(p.pad);
    if (!props.mask_error.empty()) {
      post_mask_error(self, GST_PAD(p.pad), props);
      release_overlays(pads);
      gst_prism_cuda_stop(&self->cuda);
      return FALSE;
    }
  }
  release_overlays(pads);
#if defined(PRISM_HAVE_CUDA)
  if (self->cuda.use_cuda) {
    try {
      prism::GstPrismContextScope scope(&self->cuda);
      if (!scope.pushed()) throw prism::gpu::CudaError("cannot push the CUDA context");
      self->state->cloner = std::make_unique<pp::CudaCloner>(self->cuda.stream);
    } catch (const std::exception &e) {
      GST_ELEMENT_ERROR(self, LIBRARY, INIT, ("cannot set up the GPU solver"), ("%s", e.what()));
      gst_prism_cuda_stop(&self->cuda);
      return FALSE;
    }
  }
#endif
  if (!GST_AGGREGATOR_CLASS(gst_poisson_blend_parent_class)->start(agg)) return FALSE;
  background_check_arm(self);
  return TRUE;
}

static gboolean stop(GstAggregator *agg) {
  GstPoissonBlend *self = GST_POISSON_BLEND(agg);
  background_check_cancel(self);
  std::vector<OverlayRef> pads = overlays_in_order(self);
  for (auto &p : pads) STATE(p.pad)->reset_stream_state();
  release_overlays(pads);
  BlendState *s = self->state;
  s->rgba_scratch.clear();
  s->rgba_scratch.shrink_to_fit();
#if defined(PRISM_HAVE_CUDA)
  if (s->cloner) {
    prism::GstPrismContextScope scope(&self->cuda);
    if (self->cuda.stream) {
      const cudaError_t err = cudaStreamSynchronize(self->cuda.stream);
      if (err != cudaSuccess) GST_WARNING_OBJECT(self, "cudaStreamSynchronize: %s", cudaGetErrorString(err));
    }
    s->cloner.reset();
  }
  s->staging.reset();
  s->rgba_dev.reset();
#endif
  gst_prism_cuda_stop(&self->cuda);
  return GST_AGGREGATOR_CLASS(gst_poisson_blend_parent_class)->stop(agg);
}

/* No background frame, no output: a gap while the background has none yet, EOS once it has
 * ended (even when an overlay, such as imagefreeze, would go on forever). */
static GstFlowReturn create_output_buffer(GstVideoAggregator *vagg, GstBuffer **outbuf) {
  GstPoissonBlend *self = GST_POISSON_BLEND(vagg);
  GstVideoAggregatorPad *bg = GST_VIDEO_AGGREGATOR_PAD(self->background);
  if (!gst_video_aggregator_pad_has_current_buffer(bg)) {
    *outbuf = nullptr;
    if (gst_aggregator_pad_is_eos(GST_AGGREGATOR_PAD(bg))) {
      GST_DEBUG_OBJECT(self, "background ended");
      return GST_FLOW_EOS;
    }
    return GST_FLOW_OK;
  }
  return GST_VIDEO_AGGREGATOR_CLASS(gst_poisson_blend_parent_class)->create_output_buffer(vagg, outbuf);
}

/* ------------------------------------------------------------------------------------------ */
/* Aggregation                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* A packed RGB(A/x) frame as the solver sees it: byte offsets of R, G, B from the format. */
static pp::PackedImage packed_image(const GstVideoInfo *info, uint8_t *data, int64_t stride) {
  pp::PackedImage im;
  im.data = data;
  im.width = GST_VIDEO_INFO_WIDTH(info);
  im.height = GST_VIDEO_INFO_HEIGHT(info);
  im.stride = stride;
  im.channels = GST_VIDEO_INFO_COMP_PSTRIDE(info, 0);
  im.r = GST_VIDEO_INFO_COMP_POFFSET(info, GST_VIDEO_COMP_R);
  im.g = GST_VIDEO_INFO_COMP_POFFSET(info, GST_VIDEO_COMP_G);
  im.b = GST_VIDEO_INFO_COMP_POFFSET(info, GST_VIDEO_COMP_B);
  return im;
}

static pp::MaskView alpha_view(const GstVideoInfo *info, const uint8_t *data, int64_t stride) {
  return pp::MaskView{data + GST_VIDEO_INFO_COMP_POFFSET(info, GST_VIDEO_COMP_A), GST_VIDEO_INFO_WIDTH(info),
                      GST_VIDEO_INFO_HEIGHT(info), stride, GST_VIDEO_INFO_COMP_PSTRIDE(info, 0)};
}

/* A YUV 4:2:0 frame as the RGB round trip takes it (kernels/poisson/yuv_clone.h), with the RGBA
 * scratch in the same memory. */
static pp::YuvBackground yuv_background(const GstVideoInfo *info, const GstPrismFrame *frame, uint8_t *rgba) {
  pp::YuvBackground bg;
  bg.frame.format =
      GST_VIDEO_INFO_FORMAT(info) == GST_VIDEO_FORMAT_NV12 ? cc::PixelFormat::NV12 : cc::PixelFormat::I420;
  bg.frame.width = GST_VIDEO_INFO_WIDTH(info);
  bg.frame.height = GST_VIDEO_INFO_HEIGHT(info);
  for (guint p = 0; p < GST_VIDEO_INFO_N_PLANES(info); p++) {
    bg.frame.plane[p] = frame->data[p];
    bg.frame.stride[p] = frame->stride[p];
  }
  bg.colorimetry = prism::colorimetry_of(info);
  bg.rgba = rgba;
  return bg;
}

/* One overlay's job for this frame, decided before any pixel is touched. */
struct OverlayWork {
  GstPoissonBlendOverlayPad *pad = nullptr;
  GstBuffer *buffer = nullptr;
  const GstVideoInfo *info = nullptr;
  OverlayState::Props props;
};

/* Checks the overlay's configuration against its caps; FALSE with an error posted. */
static gboolean check_overlay(GstPoissonBlend *self, const OverlayWork &w) {
  const gchar *name = GST_PAD_NAME(w.pad);
  if (!w.props.mask_error.empty()) {
    post_mask_error(self, GST_PAD(w.pad), w.props);
    return FALSE;
  }
  if (w.props.mask) {
    if (w.props.mask->width != GST_VIDEO_INFO_WIDTH(w.info) || w.props.mask->height != GST_VIDEO_INFO_HEIGHT(w.info)) {
      GST_ELEMENT_ERROR(self, STREAM, WRONG_TYPE,
                        ("%s: the mask (%dx%d, '%s') must be the size of the overlay (%dx%d)", name,
                         w.props.mask->width, w.props.mask->height, w.props.mask->location.c_str(),
                         GST_VIDEO_INFO_WIDTH(w.info), GST_VIDEO_INFO_HEIGHT(w.info)),
                        ("pad %s", name));
      return FALSE;
    }
  } else if (!GST_VIDEO_INFO_HAS_ALPHA(w.info)) {
    GST_ELEMENT_ERROR(self, STREAM, WRONG_TYPE,
                      ("%s: the overlay is %s, which has no alpha channel, and mask-location is not set; "
                       "set mask-location or give the overlay as RGBA or BGRA",
                       name, gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(w.info))),
                      ("pad %s", name));
    return FALSE;
  }
  return TRUE;
}

/* Follows the overlay's GstMemory: keeps it (as a parent, so it stays read-only) when it is
 * shared, forgets the previous one's analysis when it changed. */
static void track_memory(OverlayState *st, GstBuffer *buffer, const GstVideoInfo *info) {
  GstMemory *mem = gst_buffer_n_memory(buffer) == 1 ? gst_buffer_peek_memory(buffer, 0) : nullptr;
  if (mem && mem == st->cached_mem && st->cached_width == GST_VIDEO_INFO_WIDTH(info) &&
      st->cached_height == GST_VIDEO_INFO_HEIGHT(info) && st->cached_format == GST_VIDEO_INFO_FORMAT(info))
    return;
  st->forget_memory();
  if (mem && !gst_memory_is_writable(mem)) {
    st->holder = gst_buffer_new();
    gst_buffer_append_memory(st->holder, gst_memory_ref(mem));
    st->cached_mem = mem;
    st->cached_width = GST_VIDEO_INFO_WIDTH(info);
    st->cached_height = GST_VIDEO_INFO_HEIGHT(info);
    st->cached_format = GST_VIDEO_INFO_FORMAT(info);
  }
}

/* Box and placement; FALSE when this overlay leaves the background unchanged this frame. */
static gboolean place_overlay(GstPoissonBlend *self, const OverlayWork &w, const pp::Box &box, pp::Placement *pl) {
  OverlayState *st = STATE(w.pad);
  const gchar *name = GST_PAD_NAME(w.pad);
  if (box.empty()) {
    if (!st->warned_empty) {
      st->warned_empty = TRUE;
      GST_ELEMENT_WARNING(self, STREAM, FORMAT,
                          ("%s: the mask is empty (no non-zero pixel inside its 1-pixel border); the "
                           "background is left unchanged",
                           name),
                          ("pad %s, mask %s", name, w.props.mask ? w.props.mask->location.c_str() : "alpha channel"));
    }
    return FALSE;
  }
  *pl = pp::place(box, w.props.xpos, w.props.ypos, GST_VIDEO_INFO_WIDTH(&self->state->out_info),
                  GST_VIDEO_INFO_HEIGHT(&self->state->out_info));
  if (pl->clipped && !st->warned_clipped) {
    st->warned_clipped = TRUE;
    GST_ELEMENT_WARNING(self, STREAM, FORMAT,
                        ("%s: the overlay reaches outside the background (xpos %d, ypos %d, mask box %dx%d in a "
                         "%dx%d frame) and is clipped",
                         name, w.props.xpos, w.props.ypos, box.width, box.height,
                         GST_VIDEO_INFO_WIDTH(&self->state->out_info), GST_VIDEO_INFO_HEIGHT(&self->state->out_info)),
                        ("pad %s; only the part inside the frame is solved (warned once)", name));
  }
  return pl->solvable();
}

/* Where aggregate_frames was when an exception left it: the pad whose work failed and the step,
 * for its one error message. */
struct Step {
  const gchar *pad = "sink";
  const char *doing = "copying the background";
  void at(const gchar *p, const char *d) {
    pad = p;
    doing = d;
  }
};

/* Collects the overlays with a buffer this frame and checks them. */
static gboolean collect_work(GstPoissonBlend *self, std::vector<OverlayRef> &pads, std::vector<OverlayWork> *work) {
  for (auto &p : pads) {
    GstVideoAggregatorPad *vpad = GST_VIDEO_AGGREGATOR_PAD(p.pad);
    GstBuffer *buf = gst_video_aggregator_pad_get_current_buffer(vpad);
    if (!buf || (gst_buffer_get_size(buf) == 0 && GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_GAP))) continue;
    OverlayWork w;
    w.pad = p.pad;
    w.buffer = buf;
    w.info = &vpad->info;
    GST_OBJECT_LOCK(p.pad);
    w.props = STATE(p.pad)->props;
    GST_OBJECT_UNLOCK(p.pad);
    if (!check_overlay(self, w)) return FALSE;
    work->push_back(std::move(w));
  }
  return TRUE;
}

/* Throws what the kernels throw; aggregate_frames reports it. */
static GstFlowReturn aggregate_cpu(GstPoissonBlend *self, GstBuffer *bgbuf, GstBuffer *outbuf,
                                   std::vector<OverlayWork> &work, Step *step) {
  BlendState *s = self->state;
  GstVideoAggregatorPad *bg = GST_VIDEO_AGGREGATOR_PAD(self->background);
  const GstVideoInfo *out_info = &s->out_info;
  prism::GstPrismFrameMap in, out;
  if (!in.map_host(&bg->info, bgbuf, GST_MAP_READ)) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the background buffer (pad sink)"), (nullptr));
    return GST_FLOW_ERROR;
  }
  if (!out.map_host(out_info, outbuf, GST_MAP_WRITE)) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the output buffer"), (nullptr));
    return GST_FLOW_ERROR;
  }
  gboolean copied = gst_video_frame_copy(out.frame(), in.frame());
  in.unmap();
  if (!copied) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot copy the background into the output"), (nullptr));
    return GST_FLOW_ERROR;
  }
  GstPrismFrame fout{};
  gst_prism_frame_from_host(out.frame(), &fout);
  const GstVideoFormat format = GST_VIDEO_INFO_FORMAT(out_info);
  const gboolean yuv = format == GST_VIDEO_FORMAT_NV12 || format == GST_VIDEO_FORMAT_I420;

  for (OverlayWork &w : work) {
    OverlayState *st = STATE(w.pad);
    prism::GstPrismFrameMap ov;
    if (!ov.map_host(w.info, w.buffer, GST_MAP_READ)) {
      GST_ELEMENT_ERROR(self, STREAM, FAILED, ("%s: cannot map the overlay buffer", GST_PAD_NAME(w.pad)), (nullptr));
      return GST_FLOW_ERROR;
    }
    uint8_t *ov_data = (uint8_t *)GST_VIDEO_FRAME_PLANE_DATA(ov.frame(), 0);
    const int64_t ov_stride = GST_VIDEO_FRAME_PLANE_STRIDE(ov.frame(), 0);
    pp::CloneJob job;
    job.mode = w.props.mode;
    job.overlay = packed_image(w.info, ov_data, ov_stride);
    pp::Box box;
    if (w.props.mask) {
      job.mask = w.props.mask->view();
      box = w.props.mask->box;
    } else {
      job.mask = alpha_view(w.info, ov_data, ov_stride);
      track_memory(st, w.buffer, w.info);
      if (!st->alpha_box_valid) {
        st->alpha_box = pp::mask_box(job.mask);
        st->alpha_box_valid = st->cached_mem != nullptr; /* only a kept memory stays valid */
      }
      box = st->alpha_box;
    }
    if (!place_overlay(self, w, box, &job.placement)) continue;
    step->at(GST_PAD_NAME(w.pad), "seamless clone");
    if (!yuv) {
      job.background = packed_image(out_info, fout.data[0], fout.stride[0]);
      pp::clone_cpu(job);
    } else {
      pp::clone_yuv_cpu(yuv_background(out_info, &fout, s->rgba_scratch.data()), job);
    }
  }
  return GST_FLOW_OK;
}

#if defined(PRISM_HAVE_CUDA)

/* Waits for the element's stream unless disarmed (after the final synchronisation): however the
 * frame's work ends, nothing may still read or write its buffers once they are unmapped. */
class StreamDrain {
 public:
  StreamDrain(GstPoissonBlend *self, cudaStream_t stream) : self_(self), stream_(stream) {}
  ~StreamDrain() {
    if (!armed_) return;
    const cudaError_t err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) GST_WARNING_OBJECT(self_, "cudaStreamSynchronize: %s", cudaGetErrorString(err));
  }
  StreamDrain(const StreamDrain &) = delete;
  StreamDrain &operator=(const StreamDrain &) = delete;
  void disarm() { armed_ = false; }

 private:
  GstPoissonBlend *self_;
  cudaStream_t stream_;
  bool armed_ = true;
};

/* Runs with the context pushed; work is enqueued on the element's stream and synchronised once at
 * the end. Throws what the kernels throw and prism::gpu::CudaError for a failed CUDA call;
 * aggregate_frames reports it. */
static GstFlowReturn aggregate_cuda(GstPoissonBlend *self, GstBuffer *bgbuf, GstBuffer *outbuf,
                                    std::vector<OverlayWork> &work, Step *step) {
  BlendState *s = self->state;
  GstVideoAggregatorPad *bg = GST_VIDEO_AGGREGATOR_PAD(self->background);
  const GstVideoInfo *out_info = &s->out_info;
  cudaStream_t stream = self->cuda.stream;
  const GstVideoFormat format = GST_VIDEO_INFO_FORMAT(out_info);
  const gboolean yuv = format == GST_VIDEO_FORMAT_NV12 || format == GST_VIDEO_FORMAT_I420;

  /* Declared before the drain: unmapped after the stream has finished with them. */
  prism::GstPrismFrameMap out;
  std::vector<prism::GstPrismFrameMap> overlay_frames; /* kept mapped until the stream is synchronised */
  overlay_frames.reserve(work.size());
  StreamDrain drain(self, stream);
  GstPrismFrame fout{}, fin{};

  /* 1. output = background */
  const gboolean out_dev = out.map_device(out_info, outbuf, GST_MAP_WRITE, &fout);
  if (!out_dev) {
    if (!s->staging.data() || !out.map_host(out_info, outbuf, GST_MAP_WRITE)) {
      GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the output buffer"), (nullptr));
      return GST_FLOW_ERROR;
    }
    gst_prism_frame_from_staging(s->staging.data(), out_info, &fout);
  }
  {
    /* Unmapped at the end of this block, possibly before the copy has run: an unmap frees nothing,
     * and the pad holds the buffer until aggregate_frames returns, after the final sync. */
    prism::GstPrismFrameMap in;
    if (gst_prism_cuda_buffer_is_ours(&self->cuda, bgbuf) && in.map_device(&bg->info, bgbuf, GST_MAP_READ, &fin)) {
      PRISM_CUDA_CHECK(gst_prism_cuda_copy_device_planes(&fin, &fout, out_info, stream));
    } else if (in.map_host(&bg->info, bgbuf, GST_MAP_READ)) {
      PRISM_CUDA_CHECK(gst_prism_cuda_copy_planes(in.frame(), &fout, TRUE, stream)); /* host memory upload */
    } else {
      GST_ELEMENT_ERROR(self, STREAM, FAILED, ("cannot map the background buffer (pad sink)"), (nullptr));
      return GST_FLOW_ERROR;
    }
  }

  /* 2. each overlay, in z-order */
  for (OverlayWork &w : work) {
    OverlayState *st = STATE(w.pad);
    const gchar *name = GST_PAD_NAME(w.pad);
    const int ow = GST_VIDEO_INFO_WIDTH(w.info), oh = GST_VIDEO_INFO_HEIGHT(w.info);
    pp::CloneJob job;
    job.mode = w.props.mode;
    uint8_t *ov_data = nullptr;
    int64_t ov_stride = 0;
    GstPrismFrame fov{};
    const gboolean alpha = !w.props.mask;
    pp::Box box;

    track_memory(st, w.buffer, w.info);
    prism::GstPrismFrameMap ov;
    if (gst_prism_cuda_buffer_is_ours(&self->cuda, w.buffer) && ov.map_device(w.info, w.buffer, GST_MAP_READ, &fov)) {
      overlay_frames.push_back(std::move(ov));
      ov_data = fov.data[0];
      ov_stride = fov.stride[0];
      if (alpha && !st->alpha_box_valid) {
        step->at(name, "seamless clone");
        st->alpha_box = s->cloner->mask_box(alpha_view(w.info, ov_data, ov_stride)); /* syncs once */
        st->alpha_box_valid = st->cached_mem != nullptr; /* only a kept memory stays valid */
      }
      if (alpha) box = st->alpha_box;
    } else {
      /* System memory (or another context's): a device copy, uploaded again only when the
       * GstMemory changed. */
      step->at(name, "uploading the overlay");
      const int pstride = GST_VIDEO_INFO_COMP_PSTRIDE(w.info, 0);
      ov_stride = (int64_t)ow * pstride;
      st->overlay_dev.reserve((size_t)ov_stride * oh, prism::GstPrismContextAlloc(self->cuda.context));
      ov_data = st->overlay_dev.data();
      if (!st->device_copy_valid || (alpha && !st->alpha_box_valid)) {
        if (!ov.map_host(w.info, w.buffer, GST_MAP_READ)) {
          GST_ELEMENT_ERROR(self, STREAM, FAILED, ("%s: cannot map the overlay buffer", name), (nullptr));
          return GST_FLOW_ERROR;
        }
        if (!st->device_copy_valid) {
          GstPrismFrame dev{};
          dev.data[0] = ov_data;
          dev.stride[0] = (gint)ov_stride;
          PRISM_CUDA_CHECK(gst_prism_cuda_copy_planes(ov.frame(), &dev, TRUE, stream));
          st->device_copy_valid = st->cached_mem != nullptr;
        }
        if (alpha && !st->alpha_box_valid) {
          st->alpha_box = pp::mask_box(alpha_view(w.info, (const uint8_t *)GST_VIDEO_FRAME_PLANE_DATA(ov.frame(), 0),
                                                  GST_VIDEO_FRAME_PLANE_STRIDE(ov.frame(), 0)));
          st->alpha_box_valid = st->cached_mem != nullptr;
        }
        ov.unmap(); /* (the upload is staged: pageable memory) */
      }
      if (alpha) box = st->alpha_box;
    }
    job.overlay = packed_image(w.info, ov_data, ov_stride);

    if (alpha) {
      job.mask = alpha_view(w.info, ov_data, ov_stride);
    } else {
      /* mask-location: uploaded once per decoded file */
      if (st->mask_dev_of != w.props.mask) {
        step->at(name, "uploading the mask");
        st->mask_dev.reserve(w.props.mask->grey.size(), prism::GstPrismContextAlloc(self->cuda.context));
        PRISM_CUDA_CHECK(cudaMemcpyAsync(st->mask_dev.data(), w.props.mask->grey.data(), w.props.mask->grey.size(),
                                         cudaMemcpyHostToDevice, stream));
        st->mask_dev_of = w.props.mask;
      }
      job.mask = pp::MaskView{st->mask_dev.data(), ow, oh, ow, 1};
      box = w.props.mask->box;
    }

    if (!place_overlay(self, w, box, &job.placement)) continue;
    step->at(name, "seamless clone");
    if (!yuv) {
      job.background = packed_image(out_info, fout.data[0], fout.stride[0]);
      s->cloner->clone(job);
    } else {
      pp::clone_yuv_cuda(*s->cloner, yuv_background(out_info, &fout, s->rgba_dev.data()), job, stream);
    }
  }

  /* 3. system-memory output: download; then finish our work before the buffer leaves */
  step->at("src", "downloading the output");
  if (!out_dev) PRISM_CUDA_CHECK(gst_prism_cuda_copy_planes(out.frame(), &fout, FALSE, stream));
  step->at("src", "finishing the GPU work");
  PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
  drain.disarm();
  return GST_FLOW_OK;
}
#endif

/* Copies one meta of the background onto the output, except those describing memory layout
 * (the output's pool adds its own GstVideoMeta). */
static gboolean copy_meta(GstBuffer *inbuf, GstMeta **meta, gpointer outbuf) {
  const GstMetaInfo *info = (*meta)->info;
  if (!info->transform_func || gst_meta_api_type_has_tag(info->api, g_quark_from_string(GST_META_TAG_MEMORY_STR)))
    return TRUE;
  GstMetaTransformCopy copy = {FALSE, 0, (gsize)-1};
  info->transform_func((GstBuffer *)outbuf, *meta, inbuf, _gst_meta_transform_copy, &copy);
  return TRUE;
}

/* The one place where exceptions from the kernels (and failed CUDA calls) become an error
 * message, naming the pad whose work failed. */
static GstFlowReturn aggregate_frames(GstVideoAggregator *vagg, GstBuffer *outbuf) {
  GstPoissonBlend *self = GST_POISSON_BLEND(vagg);
  GstVideoAggregatorPad *bg = GST_VIDEO_AGGREGATOR_PAD(self->background);
  GstBuffer *bgbuf = gst_video_aggregator_pad_get_current_buffer(bg);
  if (!bgbuf) return GST_FLOW_EOS; /* create_output_buffer made no buffer in that case */
  if (GST_VIDEO_INFO_FORMAT(&bg->info) != GST_VIDEO_INFO_FORMAT(&self->state->out_info) ||
      GST_VIDEO_INFO_WIDTH(&bg->info) != GST_VIDEO_INFO_WIDTH(&self->state->out_info) ||
      GST_VIDEO_INFO_HEIGHT(&bg->info) != GST_VIDEO_INFO_HEIGHT(&self->state->out_info)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("the background's caps changed without renegotiation"), (nullptr));
    return GST_FLOW_NOT_NEGOTIATED;
  }

  /* The background's metadata (region-of-interest detections, ...) stays with its pixels. */
  gst_buffer_foreach_meta(bgbuf, copy_meta, outbuf);

  std::vector<OverlayRef> pads = overlays_in_order(self);
  std::vector<OverlayWork> work;
  GstFlowReturn ret = GST_FLOW_ERROR;
  Step step;
  try {
    if (collect_work(self, pads, &work)) {
#if defined(PRISM_HAVE_CUDA)
      if (self->cuda.use_cuda) {
        prism::GstPrismContextScope scope(&self->cuda);
        if (!scope.pushed())
          GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("cannot push the CUDA context"), (nullptr));
        else
          ret = aggregate_cuda(self, bgbuf, outbuf, work, &step);
      } else
#endif
        ret = aggregate_cpu(self, bgbuf, outbuf, work, &step);
    }
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("%s: %s failed", step.pad, step.doing), ("%s", e.what()));
    ret = GST_FLOW_ERROR;
  }
  release_overlays(pads);
  return ret;
}

/* ------------------------------------------------------------------------------------------ */
/* Class                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* A check still armed (READY->PAUSED failed after start(): no stop()) ends with the element. */
static GstStateChangeReturn change_state(GstElement *element, GstStateChange transition) {
  GstPoissonBlend *self = GST_POISSON_BLEND(element);
  const GstStateChangeReturn ret = GST_ELEMENT_CLASS(gst_poisson_blend_parent_class)->change_state(element, transition);
  if ((transition == GST_STATE_CHANGE_READY_TO_PAUSED && ret == GST_STATE_CHANGE_FAILURE) ||
      transition == GST_STATE_CHANGE_READY_TO_NULL)
    background_check_cancel(self);
  return ret;
}

static void dispose(GObject *object) {
  background_check_cancel(GST_POISSON_BLEND(object));
  G_OBJECT_CLASS(gst_poisson_blend_parent_class)->dispose(object);
}

static void finalize(GObject *object) {
  GstPoissonBlend *self = GST_POISSON_BLEND(object);
  g_rec_mutex_clear(&self->check_lock);
  delete self->state;
  self->state = nullptr;
  G_OBJECT_CLASS(gst_poisson_blend_parent_class)->finalize(object);
}

static void gst_poisson_blend_class_init(GstPoissonBlendClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstAggregatorClass *agg_class = GST_AGGREGATOR_CLASS(klass);
  GstVideoAggregatorClass *vagg_class = GST_VIDEO_AGGREGATOR_CLASS(klass);

  GST_DEBUG_CATEGORY_INIT(gst_poisson_blend_debug, "poissonblend", 0, "Prism Poisson seamless cloning");

  gobject_class->set_property = set_property;
  gobject_class->get_property = get_property;
  gobject_class->dispose = dispose;
  gobject_class->finalize = finalize;
  gst_prism_cuda_install_properties(gobject_class, PROP_DEVICE, PROP_CUDA_DEVICE_ID);
  g_object_class_install_property(
      gobject_class, PROP_BACKGROUND_TIMEOUT,
      g_param_spec_uint("background-timeout", "Background timeout",
                        "Milliseconds after start within which pad 'sink' (the background) must be linked, "
                        "else an error names it instead of waiting forever; a demuxer or decodebin may link it "
                        "within that time (an RTSP source falling back to TCP can take 20 s). 0 = wait forever (as "
                        "compositor does)",
                        0, G_MAXUINT, DEFAULT_BACKGROUND_TIMEOUT_MS,
                        (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY)));

  GstCaps *bg_caps = gst_prism_cuda_template_caps(BACKGROUND_FORMATS, BACKGROUND_FORMATS);
  GstCaps *ov_caps = gst_prism_cuda_template_caps(OVERLAY_FORMATS, OVERLAY_FORMATS);
  gst_element_class_add_pad_template(element_class, gst_pad_template_new_with_gtype("src", GST_PAD_SRC, GST_PAD_ALWAYS,
                                                                                    bg_caps, GST_TYPE_AGGREGATOR_PAD));
  gst_element_class_add_pad_template(
      element_class,
      gst_pad_template_new_with_gtype("sink", GST_PAD_SINK, GST_PAD_ALWAYS, bg_caps, GST_TYPE_POISSON_BLEND_PAD));
  gst_element_class_add_pad_template(
      element_class, gst_pad_template_new_with_gtype("overlay_%u", GST_PAD_SINK, GST_PAD_REQUEST, ov_caps,
                                                     GST_TYPE_POISSON_BLEND_OVERLAY_PAD));
  gst_caps_unref(bg_caps);
  gst_caps_unref(ov_caps);

  gst_element_class_set_static_metadata(
      element_class, "Prism Poisson seamless cloning", "Filter/Editor/Video/Compositor/Hardware",
      "Clones overlay streams (request pads overlay_%u) into a background stream (pad sink) by Poisson "
      "image editing, as OpenCV's cv::seamlessClone computes it (within 1 grey level), in CUDA memory on "
      "the GPU or on the CPU. The output has the background's caps. Per overlay: xpos/ypos = where the "
      "centre of the mask's bounding box lands (seamlessClone's p; boxes leaving the frame are clipped), "
      "mode, mask-location (else the overlay's alpha), zorder (solving order, ties by pad creation). NV12 "
      "and I420 backgrounds make an RGB round trip around each destination box.",
      "Prism developers");

  element_class->change_state = GST_DEBUG_FUNCPTR(change_state);
  element_class->set_context = GST_DEBUG_FUNCPTR(set_context);
  element_class->request_new_pad = GST_DEBUG_FUNCPTR(request_new_pad);
  element_class->release_pad = GST_DEBUG_FUNCPTR(release_pad);

  agg_class->create_new_pad = GST_DEBUG_FUNCPTR(create_new_pad);
  agg_class->start = GST_DEBUG_FUNCPTR(start);
  agg_class->stop = GST_DEBUG_FUNCPTR(stop);
  agg_class->sink_query = GST_DEBUG_FUNCPTR(sink_query);
  agg_class->src_query = GST_DEBUG_FUNCPTR(src_query);
  agg_class->src_event = GST_DEBUG_FUNCPTR(src_event);
  agg_class->update_src_caps = GST_DEBUG_FUNCPTR(update_src_caps);
  agg_class->fixate_src_caps = GST_DEBUG_FUNCPTR(fixate_src_caps);
  agg_class->negotiated_src_caps = GST_DEBUG_FUNCPTR(negotiated_src_caps);
  agg_class->propose_allocation = GST_DEBUG_FUNCPTR(propose_allocation);
  agg_class->decide_allocation = GST_DEBUG_FUNCPTR(decide_allocation);

  vagg_class->create_output_buffer = GST_DEBUG_FUNCPTR(create_output_buffer);
  vagg_class->aggregate_frames = GST_DEBUG_FUNCPTR(aggregate_frames);

  gst_type_mark_as_plugin_api(GST_TYPE_POISSON_BLEND_PAD, (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api(GST_TYPE_POISSON_BLEND_OVERLAY_PAD, (GstPluginAPIFlags)0);
  gst_type_mark_as_plugin_api(GST_TYPE_POISSON_BLEND_MODE, (GstPluginAPIFlags)0);
}

static void gst_poisson_blend_init(GstPoissonBlend *self) {
  gst_prism_cuda_init(&self->cuda);
  self->background_timeout_ms = DEFAULT_BACKGROUND_TIMEOUT_MS;
  g_rec_mutex_init(&self->check_lock);
  self->state = new BlendState();
  GstPadTemplate *templ = gst_element_class_get_pad_template(GST_ELEMENT_GET_CLASS(self), "sink");
  self->background = GST_POISSON_BLEND_PAD(
      g_object_new(GST_TYPE_POISSON_BLEND_PAD, "name", "sink", "direction", GST_PAD_SINK, "template", templ, nullptr));
  gst_element_add_pad(GST_ELEMENT(self), GST_PAD(self->background));
}
