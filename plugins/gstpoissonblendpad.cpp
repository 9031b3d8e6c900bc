#include "gstpoissonblendpad.h"

#include <cstring>
#include <memory>
#include <string>

#include "gst/prism/gstprismimagefile.h"

/* The element's category: both files initialise "poissonblend", which GStreamer makes once. */
GST_DEBUG_CATEGORY_STATIC(gst_poisson_blend_pad_debug);
#define GST_CAT_DEFAULT gst_poisson_blend_pad_debug

namespace pp = prism::poisson;
using prism::poissonblend::MaskFile;
using prism::poissonblend::OverlayState;

GType gst_poisson_blend_mode_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {(gint)pp::CloneMode::Normal, "Normal clone: the overlay's gradients inside the mask (cv::NORMAL_CLONE)",
       "normal"},
      {(gint)pp::CloneMode::Mixed,
       "Mixed clone: per channel, the stronger of the overlay's and the background's gradients "
       "(cv::MIXED_CLONE)",
       "mixed"},
      {(gint)pp::CloneMode::MonochromeTransfer,
       "Monochrome transfer: the overlay's grey-level gradients on every channel "
       "(cv::MONOCHROME_TRANSFER)",
       "monochrome-transfer"},
      {0, nullptr, nullptr}};
  if (g_once_init_enter(&type)) {
    GType t = g_enum_register_static("GstPoissonBlendMode", values);
    g_once_init_leave(&type, t);
  }
  return type;
}

struct _GstPoissonBlendOverlayPad {
  GstPoissonBlendPad parent;
  OverlayState *state;
};

G_DEFINE_TYPE(GstPoissonBlendPad, gst_poisson_blend_pad, GST_TYPE_VIDEO_AGGREGATOR_PAD);
G_DEFINE_TYPE(GstPoissonBlendOverlayPad, gst_poisson_blend_overlay_pad, GST_TYPE_POISSON_BLEND_PAD);

OverlayState *gst_poisson_blend_overlay_pad_get_state(GstPoissonBlendOverlayPad *pad) { return pad->state; }

/* ------------------------------------------------------------------------------------------ */
/* The background pad                                                                          */
/* ------------------------------------------------------------------------------------------ */

/* The base class would map every buffer on the host here; CUDA memory must stay on the device,
 * so nothing is prepared: aggregate_frames maps what it needs itself. */
static gboolean pad_prepare_frame(GstVideoAggregatorPad *, GstVideoAggregator *, GstBuffer *, GstVideoFrame *) {
  return TRUE;
}

static void pad_clean_frame(GstVideoAggregatorPad *, GstVideoAggregator *, GstVideoFrame *prepared) {
  memset(prepared, 0, sizeof(*prepared));
}

/* `zorder` is GstVideoAggregatorPad's (which keeps the element's pad list sorted by it); it is
 * installed again here only to say what it means for poissonblend, and forwarded. */
enum { PROP_BASE_PAD_0, PROP_BASE_PAD_ZORDER };

static GParamSpec *base_zorder_pspec(void) {
  return g_object_class_find_property(G_OBJECT_CLASS(gst_poisson_blend_pad_parent_class), "zorder");
}

static void pad_set_property(GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec) {
  if (prop_id != PROP_BASE_PAD_ZORDER) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
    return;
  }
  GParamSpec *base = base_zorder_pspec();
  G_OBJECT_CLASS(gst_poisson_blend_pad_parent_class)->set_property(object, base->param_id, value, base);
}

static void pad_get_property(GObject *object, guint prop_id, GValue *value, GParamSpec *pspec) {
  if (prop_id != PROP_BASE_PAD_ZORDER) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec);
    return;
  }
  GParamSpec *base = base_zorder_pspec();
  G_OBJECT_CLASS(gst_poisson_blend_pad_parent_class)->get_property(object, base->param_id, value, base);
}

static void gst_poisson_blend_pad_class_init(GstPoissonBlendPadClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstVideoAggregatorPadClass *vpad_class = GST_VIDEO_AGGREGATOR_PAD_CLASS(klass);
  GST_DEBUG_CATEGORY_INIT(gst_poisson_blend_pad_debug, "poissonblend", 0, "Prism Poisson seamless cloning");
  gobject_class->set_property = pad_set_property;
  gobject_class->get_property = pad_get_property;
  g_object_class_install_property(
      gobject_class, PROP_BASE_PAD_ZORDER,
      g_param_spec_uint("zorder", "Z-order",
                        "Overlays: the solving order. They are cloned one after another in increasing "
                        "zorder (equal values in pad creation order), each into the result of the "
                        "previous ones, as repeated cv::seamlessClone calls; default: the number of sink "
                        "pads when the pad was requested. The background pad 'sink' ignores it",
                        0, G_MAXUINT, 0,
                        (GParamFlags)(G_PARAM_READWRITE | GST_PARAM_CONTROLLABLE | GST_PARAM_MUTABLE_PLAYING |
                                      G_PARAM_STATIC_STRINGS)));
  vpad_class->prepare_frame = GST_DEBUG_FUNCPTR(pad_prepare_frame);
  vpad_class->clean_frame = GST_DEBUG_FUNCPTR(pad_clean_frame);
}

static void gst_poisson_blend_pad_init(GstPoissonBlendPad *) {}

/* ------------------------------------------------------------------------------------------ */
/* Overlay pads                                                                                */
/* ------------------------------------------------------------------------------------------ */

enum { PROP_PAD_0, PROP_PAD_XPOS, PROP_PAD_YPOS, PROP_PAD_MODE, PROP_PAD_MASK_LOCATION };

static OverlayState *STATE(gpointer pad) { return GST_POISSON_BLEND_OVERLAY_PAD(pad)->state; }

static void overlay_pad_set_property(GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec) {
  OverlayState *st = STATE(object);
  switch (prop_id) {
    case PROP_PAD_XPOS:
      GST_OBJECT_LOCK(object);
      st->props.xpos = g_value_get_int(value);
      GST_OBJECT_UNLOCK(object);
      break;
    case PROP_PAD_YPOS:
      GST_OBJECT_LOCK(object);
      st->props.ypos = g_value_get_int(value);
      GST_OBJECT_UNLOCK(object);
      break;
    case PROP_PAD_MODE:
      GST_OBJECT_LOCK(object);
      st->props.mode = (pp::CloneMode)g_value_get_enum(value);
      GST_OBJECT_UNLOCK(object);
      break;
    case PROP_PAD_MASK_LOCATION: {
      /* Decoded here, once, not per frame; errors are reported when the element starts or, while
       * it runs, with the next frame (set_property has no good place to report them). */
      const gchar *location = g_value_get_string(value);
      std::shared_ptr<MaskFile> mask;
      std::string error;
      gboolean missing = FALSE;
      if (location && *location) {
        prism::ImageFile image;
        GError *err = nullptr;
        if (prism::image_file_load_grey(location, &image, &err)) {
          mask = std::make_shared<MaskFile>();
          mask->location = location;
          mask->width = image.width;
          mask->height = image.height;
          mask->grey = std::move(image.pixels);
          mask->box = pp::mask_box(mask->view());
          GST_DEBUG_OBJECT(object, "mask %s: %dx%d, box %d,%d %dx%d", location, mask->width, mask->height, mask->box.x,
                           mask->box.y, mask->box.width, mask->box.height);
        } else {
          error = err->message;
          missing = g_error_matches(err, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND);
          g_clear_error(&err);
          GST_WARNING_OBJECT(object, "mask-location: %s", error.c_str());
        }
      }
      GST_OBJECT_LOCK(object);
      st->props.location = location ? location : "";
      st->props.mask = mask;
      st->props.mask_error = error;
      st->props.mask_missing = missing;
      GST_OBJECT_UNLOCK(object);
      break;
    }
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
  }
}

static void overlay_pad_get_property(GObject *object, guint prop_id, GValue *value, GParamSpec *pspec) {
  OverlayState *st = STATE(object);
  GST_OBJECT_LOCK(object);
  switch (prop_id) {
    case PROP_PAD_XPOS: g_value_set_int(value, st->props.xpos); break;
    case PROP_PAD_YPOS: g_value_set_int(value, st->props.ypos); break;
    case PROP_PAD_MODE: g_value_set_enum(value, (gint)st->props.mode); break;
    case PROP_PAD_MASK_LOCATION:
      g_value_set_string(value, st->props.location.empty() ? nullptr : st->props.location.c_str());
      break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, prop_id, pspec); break;
  }
  GST_OBJECT_UNLOCK(object);
}

static void overlay_pad_finalize(GObject *object) {
  GstPoissonBlendOverlayPad *pad = GST_POISSON_BLEND_OVERLAY_PAD(object);
  pad->state->reset_stream_state();
  delete pad->state;
  pad->state = nullptr;
  G_OBJECT_CLASS(gst_poisson_blend_overlay_pad_parent_class)->finalize(object);
}

static void gst_poisson_blend_overlay_pad_class_init(GstPoissonBlendOverlayPadClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  gobject_class->set_property = overlay_pad_set_property;
  gobject_class->get_property = overlay_pad_get_property;
  gobject_class->finalize = overlay_pad_finalize;
  const GParamFlags controllable =
      (GParamFlags)(G_PARAM_READWRITE | GST_PARAM_CONTROLLABLE | GST_PARAM_MUTABLE_PLAYING | G_PARAM_STATIC_STRINGS);
  g_object_class_install_property(
      gobject_class, PROP_PAD_XPOS,
      g_param_spec_int("xpos", "X position",
                       "Column of the background where the centre of the mask's bounding box lands "
                       "(cv::seamlessClone's p.x: the box's left edge is xpos - box_width/2, integer "
                       "division). A box reaching outside the background is clipped, never an error",
                       G_MININT, G_MAXINT, 0, controllable));
  g_object_class_install_property(
      gobject_class, PROP_PAD_YPOS,
      g_param_spec_int("ypos", "Y position",
                       "Row of the background where the centre of the mask's bounding box lands "
                       "(cv::seamlessClone's p.y: the box's top edge is ypos - box_height/2, integer "
                       "division). A box reaching outside the background is clipped, never an error",
                       G_MININT, G_MAXINT, 0, controllable));
  g_object_class_install_property(
      gobject_class, PROP_PAD_MODE,
      g_param_spec_enum("mode", "Mode",
                        "How the overlay's gradients enter the background: normal (cv::NORMAL_CLONE), "
                        "mixed (cv::MIXED_CLONE) or monochrome-transfer (cv::MONOCHROME_TRANSFER)",
                        GST_TYPE_POISSON_BLEND_MODE, (gint)pp::CloneMode::Normal, controllable));
  g_object_class_install_property(
      gobject_class, PROP_PAD_MASK_LOCATION,
      g_param_spec_string("mask-location", "Mask location",
                          "Image file (PNG, JPEG, PGM, ...) with the mask, the size of the overlay: 0 = "
                          "background, 255 = overlay, values between are soft; colour files count as "
                          "their grey (cvtColor BGR2GRAY), alpha is ignored. Decoded once when set. "
                          "Unset: the overlay's own alpha channel is the mask (the overlay must be RGBA "
                          "or BGRA)",
                          nullptr,
                          (GParamFlags)(G_PARAM_READWRITE | GST_PARAM_MUTABLE_PLAYING | G_PARAM_STATIC_STRINGS)));
}

static void gst_poisson_blend_overlay_pad_init(GstPoissonBlendOverlayPad *pad) { pad->state = new OverlayState(); }
