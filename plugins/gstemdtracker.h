/* emdtracker: fixed-camera target tracking by the exact Earth Mover's Distance. Every pixel's
 * spectral signature is compared with a target's under a ground distance; pixels close to it form
 * detections, tracked from frame to frame. The per-frame pipeline and the parsing of the settings
 * are emd::Tracker's (kernels/emd/tracker.h); this element maps frames, holds the properties and
 * turns the results into meta and messages (in GstPrismCudaFilter's finish hook).
 *
 * Inputs:
 *   sink: video/x-raw NV12 or I420 in memory:CUDAMemory or system memory, GRAY8 in system memory
 *   only: the grey (Y) plane is spectralized here (per pixel, the histogram of grey levels in a
 *   `window` x `window` neighbourhood over `bins` bins, as spectralize does). Or
 *   other/x-prism-tensor of 2..32 channels, dtype u8, u16 or f32, in either memory kind (envisrc,
 *   spectralize): the signatures themselves (packed f32 is read in place, the rest converted).
 *
 * Outputs:
 *   src, the input's size, in the input's memory kind when downstream allows it: video/x-raw RGBA, a
 *   false-colour heat map of the distance (red near the target, blue at `heatmap-max` and beyond)
 *   over the grey frame (tensor input: the colours alone) with the detections outlined; or, when
 *   downstream asks for it, other/x-prism-tensor f32 of 1 channel, the distance map itself
 *   (+infinity where a pixel's signature is empty, NaN before the target is known).
 *
 * Properties:
 *   Target, exactly one of: target (`bins` numbers), target-location (a file of numbers),
 *   target-rect (x,y,w,h: the mean signature of that rectangle of frame target-frame, learned then).
 *   Signatures of video input: bins (2..32, default 11), window (odd, default 11); tensor input
 *   brings its channels and the target and ground distance must match them. ground-distance:
 *   abs-diff (default), squared-diff, wavelengths (|w_i - w_j| of `wavelengths`) or matrix
 *   (ground-distance-location: n lines of n numbers). normalization: flow (Rubner's, default) or
 *   larger-mass (cv::EMD's). Detection: threshold (controllable, read per frame), min-area, max-area,
 *   merge-gap; tracking: max-age.
 *   Picture: heatmap-max (0: 3 x threshold), opacity, draw-boxes. threshold, heatmap-max, opacity
 *   and draw-boxes may change while playing; the numbers among them are controllable (a GstController
 *   binding gives each frame the value at its stream time). async (default false; read at start)
 *   and frames-skipped (read only): GstPrismCudaFilter's asynchronous mode (gstprismcudafilter.h):
 *   frames pass at the source's rate carrying the newest heat map while the worker analyses one
 *   frame at a time; tracking then sees only the analysed frames (target-frame counts those), so it
 *   is for a live source on a slow CPU only. cache-size and dedup change the
 *   work, never a result. The settings are checked at start (READY -> PAUSED) and read when caps are
 *   set; errors name the property (and a file's line).
 *
 * Messages and meta:
 *   Per detection, a GstVideoRegionOfInterestMeta of type "emd-target" (its id the track id) with an
 *   "emd" param: distance (double), track-id, pixels (int64).
 *   Per frame, an element message "prism-emdtracker": timestamp, stream-time, running-time,
 *   duration, frame (gst_prism_frame_message_new), then target-known (boolean), detections (a list
 *   of "detection" structures: x, y, width, height, distance, track-id, pixels), tracks (a list of
 *   "track" structures: track-id, x, y, width, height (the filtered box, or the predicted one while
 *   the track coasts), vx, vy (pixels per frame), age (frames since its last object), hits) and,
 *   once the target is known, stats (a "stats" structure: solved, duplicates, cache-hits, hit-rate, dedup-ratio,
 *   pivots, cache-flushed). In async mode the message names the analysed frame (its number counting
 *   every frame since the caps) and adds skipped; the meta go on the next frame pushed, their params
 *   adding source-frame (the base class's count since start) and source-timestamp.
 *
 * Device memory:
 *   On the GPU path, per caps in set_info (the previous caps' freed, with the element's
 *   GstCudaContext pushed): the tracker's signature, distance, mask and box buffers (device, and
 *   pinned host for the mask and boxes) and, when the target is given, the EMD map (target, cost
 *   matrix, counters). A target learned from target-rect makes the EMD map on the frame that learns
 *   it, once. The map's cache table starts on the first frame it computes at two frames' signatures
 *   and doubles when the cache and a frame would not fit (at most cache-size entries plus one
 *   frame's pixels); a static scene stops growing it after its first frames. Plus the base class's per-caps staging for
 * system-memory input or output. Everything is freed in stop() in the same context.
 *
 * Notes:
 *   The EMD is exact: the transportation simplex (Dantzig; Rubner et al. 2000 for its use as the
 *   EMD), one problem per CUDA thread, after a frame-to-frame cache keyed by the signature's exact
 *   bits and in-frame deduplication: a fixed camera sees mostly the same signatures. Video input is
 *   spectralized as the reference system simulated multispectral input. A detection is an object
 *   (kernels/emd/objects.h): 8-connected regions of the full-resolution mask of pixels within
 *   threshold, regions whose boxes come within merge-gap pixels joined, kept when their on-target
 *   pixels are within [min-area, max-area]. Tracks: IoU (>= 0.2) against each track's predicted box
 *   (a constant-velocity alpha-beta filter), greedily by IoU; a track keeps its id through up to
 *   max-age frames without an object; only unmatched objects get new ids. The
 *   first 64 boxes are drawn, all are reported. Host syncs on the GPU path: the base class's, before
 *   finish (the mask, W x H / 4 bytes, comes back in pinned memory); besides, once on the frame that learns the target
 *   (its rectangle comes to the host), once each time the cache table grows, and after drawing boxes
 *   on a device frame. New caps start over: the frame count (and so target-frame and the message's
 *   `frame`), a learned target and the tracks.
 */
#pragma once

#include "gst/prism/gstprismcudafilter.h"

G_BEGIN_DECLS

#define GST_TYPE_EMD_TRACKER (gst_emd_tracker_get_type())
G_DECLARE_FINAL_TYPE(GstEmdTracker, gst_emd_tracker, GST, EMD_TRACKER, GstPrismCudaFilter)

GST_ELEMENT_REGISTER_DECLARE(emdtracker);

G_END_DECLS
