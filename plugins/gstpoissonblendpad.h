/* poissonblend's sink pads (the element is in gstpoissonblend.h):
 *   GstPoissonBlendPad         the background pad "sink": a GstVideoAggregatorPad whose buffers the
 *                              base class never maps (CUDA memory stays on the device); it installs
 *                              `zorder` again only to document it
 *   GstPoissonBlendOverlayPad  the overlay_%u request pads, with what one overlay knows
 *                              (OverlayState): its properties and its per-stream caches
 *
 * Inputs:
 *   "sink": the background frames; "overlay_%u": one overlay stream each. Caps and memory kinds are
 *   the element's pad templates (gstpoissonblend.h).
 *
 * Outputs:
 *   None: the element reads the pads' current buffers in aggregate_frames and maps them itself.
 *
 * Properties:
 *   Overlay pads; all may change while playing (read for each output frame), and all but
 *   mask-location are controllable with GstController (synced to each output frame's stream time).
 *   xpos, ypos     where the centre of the mask's bounding box lands in the background: exactly
 *                  the `p` of cv::seamlessClone (the box's top-left is xpos - w/2, ypos - h/2)
 *   mode           normal, mixed, monochrome-transfer (cv::NORMAL_CLONE, MIXED_CLONE,
 *                  MONOCHROME_TRANSFER)
 *   mask-location  an image file the overlay's size, decoded once, when set (its grey as
 *                  cvtColor BGR2GRAY; alpha ignored; 0 = background, 255 = overlay); unset = the
 *                  overlay's alpha channel is the mask (the overlay must then be RGBA or BGRA)
 *   zorder         GstVideoAggregatorPad's: the solving order (ties: creation order); the
 *                  background pad ignores it
 *
 * Messages and meta:
 *   None from the pads. A mask-location that cannot be decoded is kept as an error in the pad's
 *   state and reported by the element (at start, or with the next frame): set_property has no good
 *   place to report it.
 *
 * Device memory:
 *   An overlay pad owns, in OverlayState, the device copies of its system-memory overlay and of its
 *   mask file (GstPrismDeviceArray, made by the element on the GPU path, freed in the context they
 *   were made in: at stop, on release, and from finalize).
 *
 * Notes:
 *   `props` is guarded by the pad's object lock (the streaming thread copies it once per frame);
 *   the caches belong to the streaming thread. The overlay's GstMemory is cached (with its alpha box
 *   and device copy) only when it was shared when first seen, as imagefreeze's still is, and a
 *   reference of ours keeps it shared, so its pixels cannot change while cached.
 */
#pragma once

#include <gst/gst.h>
#include <gst/video/gstvideoaggregator.h>
#include <gst/video/video.h>

#include <memory>
#include <string>
#include <vector>

#include "poisson/seamless_clone.h"

#if defined(PRISM_HAVE_CUDA)
#include "gst/prism/gstprismcudamemory.h"
#endif

G_BEGIN_DECLS

#define GST_TYPE_POISSON_BLEND_MODE (gst_poisson_blend_mode_get_type())
GType gst_poisson_blend_mode_get_type(void);

/* The background pad: a GstVideoAggregatorPad whose buffers are never mapped for it by the base
 * class (CUDA memory stays on the device). */
#define GST_TYPE_POISSON_BLEND_PAD (gst_poisson_blend_pad_get_type())
G_DECLARE_DERIVABLE_TYPE(GstPoissonBlendPad, gst_poisson_blend_pad, GST, POISSON_BLEND_PAD, GstVideoAggregatorPad)
struct _GstPoissonBlendPadClass {
  GstVideoAggregatorPadClass parent_class;
};

/* An overlay pad: xpos, ypos, mode, mask-location. */
#define GST_TYPE_POISSON_BLEND_OVERLAY_PAD (gst_poisson_blend_overlay_pad_get_type())
G_DECLARE_FINAL_TYPE(GstPoissonBlendOverlayPad, gst_poisson_blend_overlay_pad, GST, POISSON_BLEND_OVERLAY_PAD,
                     GstPoissonBlendPad)

G_END_DECLS

namespace prism::poissonblend {

/* A decoded mask-location file, immutable once made (shared between the property and the
 * streaming thread). */
struct MaskFile {
  std::string location;
  int width = 0, height = 0;
  std::vector<uint8_t> grey;
  poisson::Box box; /* mask_box(), computed once */

  poisson::MaskView view() const { return poisson::MaskView{grey.data(), width, height, width, 1}; }
};

/* What one overlay pad knows. `props` is guarded by the pad's object lock; the rest belongs to
 * the streaming thread (and to start/stop, when it is not running). */
struct OverlayState {
  struct Props {
    gint xpos = 0, ypos = 0;
    poisson::CloneMode mode = poisson::CloneMode::Normal;
    std::string location;                 /* mask-location, empty when unset */
    std::shared_ptr<const MaskFile> mask; /* decoded mask-location */
    std::string mask_error;               /* why mask-location could not be decoded */
    gboolean mask_missing = FALSE;        /* ... because the file is not there */
  } props;
  guint serial = 0; /* creation order, breaks zorder ties */

  /* The overlay's current GstMemory when it can be cached: it was shared (not writable) when we
   * first saw it, as imagefreeze's still is, and `holder` keeps it shared (a parent of ours), so
   * its pixels cannot change while it is cached. */
  GstBuffer *holder = nullptr;
  GstMemory *cached_mem = nullptr;
  gint cached_width = 0, cached_height = 0;
  GstVideoFormat cached_format = GST_VIDEO_FORMAT_UNKNOWN;
  gboolean alpha_box_valid = FALSE;
  poisson::Box alpha_box;
  gboolean warned_clipped = FALSE, warned_empty = FALSE;
#if defined(PRISM_HAVE_CUDA)
  gboolean device_copy_valid = FALSE;       /* overlay_dev holds cached_mem's pixels */
  GstPrismDeviceArray<uint8_t> overlay_dev; /* system-memory overlay, packed rows */
  GstPrismDeviceArray<uint8_t> mask_dev;    /* mask-location pixels */
  std::shared_ptr<const MaskFile> mask_dev_of;
#endif

  void forget_memory() {
    gst_clear_buffer(&holder);
    cached_mem = nullptr;
    alpha_box_valid = FALSE;
#if defined(PRISM_HAVE_CUDA)
    device_copy_valid = FALSE;
#endif
  }
  /* Drops every cache (stop, release, pad finalize). */
  void reset_stream_state() {
    forget_memory();
    warned_clipped = warned_empty = FALSE;
#if defined(PRISM_HAVE_CUDA)
    overlay_dev.reset();
    mask_dev.reset();
    mask_dev_of.reset();
#endif
  }
};

}  // namespace prism::poissonblend

/* The pad's state; owned by the pad. */
prism::poissonblend::OverlayState *gst_poisson_blend_overlay_pad_get_state(GstPoissonBlendOverlayPad *pad);
