/* poissonblend: Poisson seamless cloning (OpenCV's cv::seamlessClone, computed by
 * kernels/poisson/) of one or more overlay streams into a background stream, like compositor.
 *
 *   sink          (always)  the background; the output has exactly its caps (format, size,
 *                           framerate, memory kind) and is a copy of it with the overlays cloned in
 *   overlay_%u    (request) overlays, solved one after another in increasing `zorder` (ties: pad
 *                           creation order), i.e. the result of repeated cv::seamlessClone calls
 *
 * The pads (GstPoissonBlendPad, GstPoissonBlendOverlayPad) and the overlay pad properties (xpos,
 * ypos, mode, mask-location, zorder) are in gstpoissonblendpad.h.
 *
 * Where OpenCV throws because the box leaves the background, the box is clipped (one WARNING per
 * pad) and the stream goes on; an empty mask leaves the background unchanged (one WARNING).
 * NV12/I420 backgrounds: the destination box (grown by one pixel, to even coordinates) goes to
 * RGBA, is cloned into and goes back, so that rectangle makes an RGB round trip
 * (prism::poisson::clone_yuv_cpu/clone_yuv_cuda, kernels/poisson/yuv_clone.h).
 *
 * On the GPU path (device=auto with a GPU, or cuda) everything stays in device memory: CUDA
 * overlays are read in place, system-memory overlays are uploaded once per new GstMemory (an
 * imagefreeze still once), and one prism::poisson::CudaCloner on the element's stream does the
 * solves.
 */
#pragma once

#include <gst/gst.h>
#include <gst/video/gstvideoaggregator.h>
#include <gst/video/video.h>

#include "gst/prism/gstprismcuda.h"

G_BEGIN_DECLS

#define GST_TYPE_POISSON_BLEND (gst_poisson_blend_get_type())
G_DECLARE_FINAL_TYPE(GstPoissonBlend, gst_poisson_blend, GST, POISSON_BLEND, GstVideoAggregator)

GST_ELEMENT_REGISTER_DECLARE(poissonblend);

G_END_DECLS
