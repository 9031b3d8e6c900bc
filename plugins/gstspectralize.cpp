#include "gstspectralize.h"

#include <stdexcept>
#include <string>

#include "spectral/spectralize.h"

GST_DEBUG_CATEGORY_STATIC(gst_spectralize_debug);
#define GST_CAT_DEFAULT gst_spectralize_debug

namespace spectral = prism::spectral;
namespace tensor = prism::tensor;

#define VIDEO_FORMATS "{ NV12, I420, GRAY8 }"
#define CUDA_VIDEO_FORMATS "{ NV12, I420 }" /* GstCudaMemory 1.22 cannot hold GRAY8 */
#define OUTPUT_DTYPES "{ f32, u16 }"

enum { PROP_0, PROP_BINS, PROP_WINDOW };

struct _GstSpectralize {
  GstPrismCudaFilter parent;
  gint bins, window;                  /* object lock */
  spectral::SpectralizeParams params; /* fixed per caps */
};

G_DEFINE_TYPE(GstSpectralize, gst_spectralize, GST_TYPE_PRISM_CUDA_FILTER);
GST_ELEMENT_REGISTER_DEFINE(spectralize, "spectralize", GST_RANK_NONE, GST_TYPE_SPECTRALIZE);

static void set_property(GObject *object, guint id, const GValue *value, GParamSpec *pspec) {
  GstSpectralize *self = GST_SPECTRALIZE(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_BINS: self->bins = g_value_get_int(value); break;
    case PROP_WINDOW: self->window = g_value_get_int(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void get_property(GObject *object, guint id, GValue *value, GParamSpec *pspec) {
  GstSpectralize *self = GST_SPECTRALIZE(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_BINS: g_value_set_int(value, self->bins); break;
    case PROP_WINDOW: g_value_set_int(value, self->window); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

/* video (any of our formats) <-> tensor of `bins` channels, same size and framerate */
static GstCaps *transform_structure(GstPrismCudaFilter *filter, GstPadDirection direction, const GstStructure *in) {
  GstSpectralize *self = GST_SPECTRALIZE(filter);
  GST_OBJECT_LOCK(self);
  const gint bins = self->bins;
  GST_OBJECT_UNLOCK(self);
  GstStructure *s = direction == GST_PAD_SINK
                        ? gst_prism_tensor_structure_new(OUTPUT_DTYPES, bins, bins)
                        : gst_structure_from_string("video/x-raw, format=(string)" VIDEO_FORMATS, nullptr);
  gst_prism_structure_copy_geometry(s, in);
  return gst_caps_new_full(s, nullptr);
}

static gboolean set_info(GstPrismCudaFilter *filter, const GstVideoInfo *in, const GstVideoInfo *) {
  GstSpectralize *self = GST_SPECTRALIZE(filter);
  const GstPrismTensorInfo *out = gst_prism_cuda_filter_out_tensor(filter);
  GST_OBJECT_LOCK(self);
  self->params = {self->bins, self->window};
  GST_OBJECT_UNLOCK(self);
  try {
    spectral::validate(self->params);
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS, ("spectralize: %s", e.what()), (nullptr));
    return FALSE;
  }
  if (gst_prism_cuda_filter_in_tensor(filter) || !out || out->channels != self->params.bins ||
      out->width != GST_VIDEO_INFO_WIDTH(in) || out->height != GST_VIDEO_INFO_HEIGHT(in) ||
      out->dtype == tensor::DType::U8) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                      ("spectralize: pad 'sink' takes video and pad 'src' gives other/x-prism-tensor (f32 or u16) "
                       "of 'bins' channels and the input's size"),
                      (nullptr));
    return FALSE;
  }
  return TRUE;
}

static GstFlowReturn process(GstPrismCudaFilter *filter, const GstPrismFrame *in, const GstPrismFrame *out) {
  GstSpectralize *self = GST_SPECTRALIZE(filter);
  const GstPrismTensorInfo *t = gst_prism_cuda_filter_out_tensor(filter);
  const int W = t->width, H = t->height;
  const bool f32 = t->dtype == tensor::DType::F32;
  /* The kernels throw (their CUDA calls checked); this is where that becomes an element error. */
  try {
#if defined(PRISM_HAVE_CUDA)
    if (in->device) {
      cudaStream_t s = (cudaStream_t)gst_prism_cuda_filter_get_stream(filter);
      if (f32)
        spectral::spectralize_cuda(in->data[0], W, H, in->stride[0], self->params, (float *)out->data[0], s,
                                   out->stride[0]);
      else
        spectral::spectralize_cuda(in->data[0], W, H, in->stride[0], self->params, (uint16_t *)out->data[0], s,
                                   out->stride[0]);
      return GST_FLOW_OK;
    }
#endif
    if (f32)
      spectral::spectralize_cpu(in->data[0], W, H, in->stride[0], self->params, (float *)out->data[0], out->stride[0]);
    else
      spectral::spectralize_cpu(in->data[0], W, H, in->stride[0], self->params, (uint16_t *)out->data[0],
                                out->stride[0]);
    return GST_FLOW_OK;
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("spectralize: %s", e.what()), (nullptr));
  }
  return GST_FLOW_ERROR;
}

static void gst_spectralize_class_init(GstSpectralizeClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstPrismCudaFilterClass *filter_class = GST_PRISM_CUDA_FILTER_CLASS(klass);
  oc->set_property = set_property;
  oc->get_property = get_property;
  const GParamFlags rw = (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  g_object_class_install_property(
      oc, PROP_BINS,
      g_param_spec_int("bins", "Bins", "Histogram bins over 0..255: the output's channels", 2, 32, 11, rw));
  g_object_class_install_property(
      oc, PROP_WINDOW,
      g_param_spec_int("window", "Window", "Odd window size (replicated border at the frame's edges)", 1, 31, 11, rw));
  gst_element_class_set_static_metadata(
      element_class, "Prism spectralize", "Filter/Converter/Video/Hardware",
      "Multispectral frames from video: per pixel, the grey-level histogram of an odd window, as "
      "other/x-prism-tensor (GPU in CUDA memory, or CPU)",
      "Prism developers");
  GstCaps *sink = gst_prism_cuda_template_caps(VIDEO_FORMATS, CUDA_VIDEO_FORMATS);
  GstCaps *src = gst_prism_tensor_template_caps(OUTPUT_DTYPES, 2, 32);
  gst_prism_cuda_filter_class_add_pad_templates_full(element_class, sink, src);
  gst_caps_unref(sink);
  gst_caps_unref(src);
  filter_class->transform_structure = transform_structure;
  filter_class->set_info = set_info;
  filter_class->process = process;
  GST_BASE_TRANSFORM_CLASS(klass)->passthrough_on_same_caps = FALSE;
  GST_DEBUG_CATEGORY_INIT(gst_spectralize_debug, "spectralize", 0, "Prism spectralize");
}

static void gst_spectralize_init(GstSpectralize *self) {
  self->bins = 11;
  self->window = 11;
}
