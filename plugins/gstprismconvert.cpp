#include "gstprismconvert.h"

#include <stdexcept>

#include "colorconvert/colorconvert.h"
#include "common/gpu.h"
#include "gst/prism/gstprismvideo.h"

GST_DEBUG_CATEGORY_STATIC(gst_prism_convert_debug);
#define GST_CAT_DEFAULT gst_prism_convert_debug

namespace cc = prism::colorconvert;

#define SYSTEM_FORMATS "{ NV12, I420, YUY2, UYVY, RGBA, BGRA, RGBx, BGRx, RGB, BGR, GRAY8 }"
/* GstCudaMemory in 1.22 cannot hold GRAY8 (its allocator has no pitch rule for it); the 4:2:2
 * packed formats are converted in system memory only (not verified with 1.22's allocator). */
#define CUDA_FORMATS "{ NV12, I420, RGBA, BGRA, RGBx, BGRx, RGB, BGR }"

struct _GstPrismConvert {
  GstPrismCudaFilter parent;
  cc::Plan plan;
};

G_DEFINE_TYPE(GstPrismConvert, gst_prism_convert, GST_TYPE_PRISM_CUDA_FILTER);
GST_ELEMENT_REGISTER_DEFINE(prismconvert, "prismconvert", GST_RANK_NONE, GST_TYPE_PRISM_CONVERT);

static GstCaps *transform_structure(GstPrismCudaFilter *, GstPadDirection, const GstStructure *in) {
  GstStructure *s = gst_structure_copy(in);
  /* Any supported format and any size on the other side; colorimetry follows the format. */
  gst_structure_remove_fields(s, "format", "colorimetry", "chroma-site", "width", "height", "pixel-aspect-ratio",
                              nullptr);
  GValue formats = G_VALUE_INIT;
  g_value_init(&formats, GST_TYPE_LIST);
  for (const cc::PixelFormat pf : cc::kAllFormats) {
    const char *f = cc::format_name(pf);
    GValue v = G_VALUE_INIT;
    g_value_init(&v, G_TYPE_STRING);
    g_value_set_static_string(&v, f);
    gst_value_list_append_and_take_value(&formats, &v);
  }
  gst_structure_take_value(s, "format", &formats);
  gst_structure_set(s, "width", GST_TYPE_INT_RANGE, 1, 32768, "height", GST_TYPE_INT_RANGE, 1, 32768,
                    "pixel-aspect-ratio", GST_TYPE_FRACTION_RANGE, 1, 32768, 32768, 1, nullptr);
  return gst_caps_new_full(s, nullptr);
}

/* Picks the output format (the input's when allowed), then the size and pixel aspect ratio so
 * that the display aspect ratio is kept, as videoscale does. */
static GstCaps *fixate_caps(GstBaseTransform *, GstPadDirection direction, GstCaps *caps, GstCaps *othercaps) {
  othercaps = gst_caps_truncate(othercaps);
  othercaps = gst_caps_make_writable(othercaps);
  GstStructure *in = gst_caps_get_structure(caps, 0);
  GstStructure *out = gst_caps_get_structure(othercaps, 0);

  const gchar *in_format = gst_structure_get_string(in, "format");
  if (in_format) gst_structure_fixate_field_string(out, "format", in_format);

  gint in_w = 0, in_h = 0, in_par_n = 1, in_par_d = 1;
  gst_structure_get_int(in, "width", &in_w);
  gst_structure_get_int(in, "height", &in_h);
  gst_structure_get_fraction(in, "pixel-aspect-ratio", &in_par_n, &in_par_d);
  if (in_w > 0 && in_h > 0) {
    gboolean w_fixed =
        gst_structure_has_field(out, "width") && G_VALUE_HOLDS_INT(gst_structure_get_value(out, "width"));
    gboolean h_fixed =
        gst_structure_has_field(out, "height") && G_VALUE_HOLDS_INT(gst_structure_get_value(out, "height"));
    if (!w_fixed && !h_fixed) {
      gst_structure_fixate_field_nearest_int(out, "width", in_w);
      gst_structure_fixate_field_nearest_int(out, "height", in_h);
      gst_structure_fixate_field_nearest_fraction(out, "pixel-aspect-ratio", in_par_n, in_par_d);
    } else {
      gst_structure_fixate_field_nearest_fraction(out, "pixel-aspect-ratio", in_par_n, in_par_d);
      gint out_par_n = 1, out_par_d = 1;
      gst_structure_get_fraction(out, "pixel-aspect-ratio", &out_par_n, &out_par_d);
      /* display aspect = w * par_n / (h * par_d) */
      const double dar = (double)in_w * in_par_n / ((double)in_h * in_par_d);
      if (w_fixed && !h_fixed) {
        gint w;
        gst_structure_get_int(out, "width", &w);
        gst_structure_fixate_field_nearest_int(out, "height", (gint)(w * out_par_n / (dar * out_par_d) + 0.5));
      } else if (h_fixed && !w_fixed) {
        gint h;
        gst_structure_get_int(out, "height", &h);
        gst_structure_fixate_field_nearest_int(out, "width", (gint)(h * dar * out_par_d / out_par_n + 0.5));
      }
    }
  }
  /* Keep the input's colorimetry when both sides are YUV of the same family. */
  const gchar *colorimetry = gst_structure_get_string(in, "colorimetry");
  const gchar *out_format = gst_structure_get_string(out, "format");
  auto yuv = [](const gchar *name) {
    cc::PixelFormat f;
    return name && cc::format_from_name(name, &f) && (cc::is_yuv420(f) || cc::is_yuv422(f));
  };
  if (colorimetry && yuv(in_format) && yuv(out_format) && !gst_structure_has_field(out, "colorimetry"))
    gst_structure_set(out, "colorimetry", G_TYPE_STRING, colorimetry, nullptr);
  (void)direction;
  return gst_caps_fixate(othercaps);
}

static gboolean set_info(GstPrismCudaFilter *filter, const GstVideoInfo *in, const GstVideoInfo *out) {
  GstPrismConvert *self = GST_PRISM_CONVERT(filter);
  cc::PixelFormat sf, df;
  if (!prism::pixel_format_of(in, &sf) || !prism::pixel_format_of(out, &df)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("unsupported format"), (nullptr));
    return FALSE;
  }
  try {
    self->plan = cc::make_plan(sf, prism::colorimetry_of(in), GST_VIDEO_INFO_WIDTH(in), GST_VIDEO_INFO_HEIGHT(in), df,
                               prism::colorimetry_of(out), GST_VIDEO_INFO_WIDTH(out), GST_VIDEO_INFO_HEIGHT(out));
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("cannot convert these caps"), ("%s", e.what()));
    return FALSE;
  }
  return TRUE;
}

static cc::Image image_of(const GstPrismFrame *frame, cc::PixelFormat f, int w, int h) {
  cc::Image im;
  im.format = f;
  im.width = w;
  im.height = h;
  for (int i = 0; i < cc::plane_count(f); i++) {
    im.plane[i] = frame->data[i];
    im.stride[i] = frame->stride[i];
  }
  return im;
}

static GstFlowReturn process(GstPrismCudaFilter *filter, const GstPrismFrame *in, const GstPrismFrame *out) {
  GstPrismConvert *self = GST_PRISM_CONVERT(filter);
  const cc::Plan &p = self->plan;
  cc::Image src = image_of(in, p.src_format, p.src_width, p.src_height);
  cc::Image dst = image_of(out, p.dst_format, p.dst_width, p.dst_height);
  if (!in->device) {
    cc::convert_cpu(p, src, dst);
    return GST_FLOW_OK;
  }
#if defined(PRISM_HAVE_CUDA)
  try {
    cc::convert_cuda(p, src, dst, (cudaStream_t)gst_prism_cuda_filter_get_stream(filter));
  } catch (const prism::gpu::CudaError &e) {
    GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("CUDA kernel launch failed"), ("%s", e.what()));
    return GST_FLOW_ERROR;
  }
  return GST_FLOW_OK;
#else
  return GST_FLOW_ERROR;
#endif
}

static void gst_prism_convert_class_init(GstPrismConvertClass *klass) {
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);
  GstPrismCudaFilterClass *filter_class = GST_PRISM_CUDA_FILTER_CLASS(klass);

  gst_element_class_set_static_metadata(
      element_class, "Prism colour converter and scaler", "Filter/Converter/Video/Scaler/Hardware",
      "Converts between NV12, I420, YUY2, UYVY, RGBA, BGRA, RGBx, BGRx, RGB, BGR and GRAY8 and scales (bilinear, as "
      "videoscale), in CUDA memory on the GPU or in system memory on the CPU. Colour matrix as "
      "videoconvert's 8-bit path; GRAY8, YUY2 and UYVY travel in system memory only; I420 in CUDA memory needs "
      "an even height.",
      "Prism developers");
  gst_prism_cuda_filter_class_add_pad_templates(element_class, SYSTEM_FORMATS, CUDA_FORMATS);
  trans_class->fixate_caps = GST_DEBUG_FUNCPTR(fixate_caps);
  filter_class->transform_structure = transform_structure;
  filter_class->set_info = set_info;
  filter_class->process = process;
  GST_DEBUG_CATEGORY_INIT(gst_prism_convert_debug, "prismconvert", 0, "Prism colour converter");
}

static void gst_prism_convert_init(GstPrismConvert *) {}
