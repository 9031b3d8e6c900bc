#include "gst/prism/gstprismtensor.h"

#include <string>

#include "gst/prism/gstprismcuda.h"

namespace tensor = prism::tensor;

gboolean gst_prism_structure_is_tensor(const GstStructure *s) {
  return s && gst_structure_has_name(s, GST_PRISM_TENSOR_MEDIA_TYPE);
}

gboolean gst_prism_caps_are_tensor(const GstCaps *caps) {
  return caps && gst_caps_get_size(caps) > 0 && gst_prism_structure_is_tensor(gst_caps_get_structure(caps, 0));
}

void gst_prism_tensor_info_init(GstPrismTensorInfo *info, tensor::DType dtype, gint channels, gint width, gint height,
                                gint fps_n, gint fps_d) {
  info->dtype = dtype;
  info->channels = channels;
  info->width = width;
  info->height = height;
  info->fps_n = fps_n;
  info->fps_d = fps_d;
  const gsize packed = (gsize)width * channels * tensor::dtype_size(dtype);
  info->row_bytes = (packed + 3) & ~(gsize)3;
}

gboolean gst_prism_tensor_info_from_caps(GstPrismTensorInfo *info, const GstCaps *caps) {
  if (!gst_prism_caps_are_tensor(caps) || !gst_caps_is_fixed(caps)) return FALSE;
  const GstStructure *s = gst_caps_get_structure(caps, 0);
  const gchar *dtype = gst_structure_get_string(s, "dtype");
  const gchar *layout = gst_structure_get_string(s, "layout");
  tensor::DType t;
  gint channels, width, height, fps_n = 0, fps_d = 1;
  if (!dtype || !tensor::parse_dtype(dtype, &t) || !gst_structure_get_int(s, "channels", &channels) ||
      !gst_structure_get_int(s, "width", &width) || !gst_structure_get_int(s, "height", &height) || channels < 1 ||
      channels > GST_PRISM_TENSOR_MAX_CHANNELS || width < 1 || height < 1 ||
      (layout && g_strcmp0(layout, "interleaved") != 0))
    return FALSE;
  gst_structure_get_fraction(s, "framerate", &fps_n, &fps_d);
  gst_prism_tensor_info_init(info, t, channels, width, height, fps_n, fps_d);
  return TRUE;
}

GstCaps *gst_prism_tensor_info_to_caps(const GstPrismTensorInfo *info) {
  return gst_caps_new_simple(GST_PRISM_TENSOR_MEDIA_TYPE, "dtype", G_TYPE_STRING, tensor::dtype_name(info->dtype),
                             "channels", G_TYPE_INT, info->channels, "width", G_TYPE_INT, info->width, "height",
                             G_TYPE_INT, info->height, "framerate", GST_TYPE_FRACTION, info->fps_n, info->fps_d,
                             "layout", G_TYPE_STRING, "interleaved", nullptr);
}

GstStructure *gst_prism_tensor_structure_new(const gchar *dtypes, gint min_channels, gint max_channels) {
  std::string text = std::string(GST_PRISM_TENSOR_MEDIA_TYPE) + ", dtype=(string)" + dtypes + ", channels=(int)";
  text += min_channels == max_channels
              ? std::to_string(min_channels)
              : "[ " + std::to_string(min_channels) + ", " + std::to_string(max_channels) + " ]";
  text +=
      ", width=(int)[ 1, 32768 ], height=(int)[ 1, 32768 ], framerate=(fraction)[ 0/1, 2147483647/1 ], "
      "layout=(string)interleaved";
  return gst_structure_from_string(text.c_str(), nullptr);
}

void gst_prism_structure_copy_geometry(GstStructure *to, const GstStructure *from) {
  for (const char *field : {"width", "height", "framerate"})
    if (const GValue *v = gst_structure_get_value(from, field)) gst_structure_set_value(to, field, v);
}

GstCaps *gst_prism_tensor_template_caps(const gchar *dtypes, gint min_channels, gint max_channels) {
  GstCaps *caps = gst_caps_new_empty();
#if defined(PRISM_HAVE_CUDA)
  gst_caps_append_structure_full(caps, gst_prism_tensor_structure_new(dtypes, min_channels, max_channels),
                                 gst_caps_features_new(GST_PRISM_CUDA_FEATURE, nullptr));
#endif
  gst_caps_append_structure(caps, gst_prism_tensor_structure_new(dtypes, min_channels, max_channels));
  return caps;
}

void gst_prism_tensor_storage_info(const GstPrismTensorInfo *info, GstVideoInfo *storage) {
  gst_video_info_set_format(storage, GST_VIDEO_FORMAT_RGBA, (guint)(info->row_bytes / 4), (guint)info->height);
  GST_VIDEO_INFO_FPS_N(storage) = info->fps_n;
  GST_VIDEO_INFO_FPS_D(storage) = info->fps_d;
}

tensor::FrameLayout gst_prism_tensor_layout(const GstPrismTensorInfo *info, gint row_stride) {
  tensor::FrameLayout l;
  l.dtype = info->dtype;
  l.width = info->width;
  l.height = info->height;
  l.channels = info->channels;
  l.row_bytes = row_stride;
  return l;
}

gboolean gst_prism_info_from_caps(GstVideoInfo *info, const GstCaps *caps) {
  if (!gst_prism_caps_are_tensor(caps)) return gst_video_info_from_caps(info, caps);
  GstPrismTensorInfo t;
  if (!gst_prism_tensor_info_from_caps(&t, caps)) return FALSE;
  gst_prism_tensor_storage_info(&t, info);
  return TRUE;
}
