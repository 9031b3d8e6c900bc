/* emdtracker: fixed-camera target tracking by the Earth Mover's Distance. Each pixel's spectral
 * signature (here: the histogram of grey levels in a window around it, as the reference system
 * simulated multispectral input) is compared with a target's by the exact EMD (kernels/emd: a
 * frame-to-frame result cache, in-frame deduplication, the transportation simplex per remaining
 * problem). Input: video (spectralized here) or other/x-prism-tensor signatures of 2..32 channels
 * (envisrc, spectralize). Output: a false-colour heat map of the distance over the grey frame (RGBA)
 * or the distance map itself (1-channel f32 other/x-prism-tensor; NaN before the target is known), the
 * target's regions as GstVideoRegionOfInterestMeta ("emd-target", params "emd": distance,
 * track-id, pixels), and one "emdtracker" element message per frame with the detections and the
 * frame's statistics (problems solved, duplicates, cache hits). The per-frame pipeline and the
 * parsing of the settings are emd::Tracker's (kernels/emd/tracker.h); this element maps frames,
 * holds the properties and turns its results into meta and messages. */
#pragma once

#include "gst/prism/gstprismcudafilter.h"

G_BEGIN_DECLS

#define GST_TYPE_EMD_TRACKER (gst_emd_tracker_get_type())
G_DECLARE_FINAL_TYPE(GstEmdTracker, gst_emd_tracker, GST, EMD_TRACKER, GstPrismCudaFilter)

GST_ELEMENT_REGISTER_DECLARE(emdtracker);

G_END_DECLS
