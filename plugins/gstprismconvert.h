/* prismconvert: colour conversion and scaling of video, in GPU memory or system memory. It stands in
 * for videoconvert + videoscale and for nvcodec's cudaconvert/cudascale, which do not register with
 * CUDA 13. The smallest complete GstPrismCudaFilter element (copy shape: transform_structure,
 * fixate_caps, set_info, process): start a new one-in/one-out element from this one.
 *
 * Inputs:
 *   sink: video/x-raw NV12, I420, RGBA, BGRx, BGR in memory:CUDAMemory or system memory; GRAY8 in
 *   system memory only (GstCudaMemory 1.22 cannot hold it). I420 in CUDA memory needs an even
 *   height (1.22 overlaps its U and V planes otherwise).
 *
 * Outputs:
 *   src: the same formats and memory kinds, 1..32768 pixels a side, in the input's memory kind when
 *   downstream allows it. Negotiated as videoconvertscale does: the input's format when allowed; a
 *   fixed width or height alone gives the other so that the display aspect ratio is kept; NV12 <->
 *   I420 keep the input's colorimetry. Same caps in and out: passthrough.
 *
 * Properties:
 *   Only `device` and `cuda-device-id` (the base class's); the output caps decide what it computes.
 *
 * Messages and meta:
 *   No message. GstVideoRegionOfInterestMeta is rescaled with the frame and keeps its params (which
 *   videoscale drops); other metas tagged with the video size are rescaled by their own transform;
 *   memory and colorspace metas are dropped (GstPrismCudaFilter's transform_meta).
 *
 * Device memory:
 *   None of its own: the plan (kernels/colorconvert: matrix and filter taps) is host data made per
 *   caps in set_info, and the kernel allocates nothing. On the GPU path the base class reserves per
 *   caps, in the element's GstCudaContext, a device staging buffer for system-memory input and/or
 *   output.
 *
 * Notes:
 *   The GPU and CPU paths run the same integer code (kernels/colorconvert) and give identical bytes.
 *   Colour matrix: videoconvert's 8-bit fixed point (coefficients in 1/256, result floored),
 *   BT.601/709/2020 and limited/full range from the caps' colorimetry; GRAY8 is full-range BT.601
 *   luma. 4:2:0 chroma is replicated over its 2x2 block when read and averaged when written
 *   (videoconvert interpolates, so YUV -> RGB differs from it). Scaling is 2-tap bilinear with pixel
 *   centres aligned and edges repeated, like videoscale's default. A plan the kernel cannot do (a
 *   scale ratio beyond 4096x) fails negotiation in set_info. README.md ("prismconvert") has the
 *   differences from GStreamer's elements, as the tests measure them.
 */
#pragma once

#include "gst/prism/gstprismcudafilter.h"

G_BEGIN_DECLS

#define GST_TYPE_PRISM_CONVERT (gst_prism_convert_get_type())
G_DECLARE_FINAL_TYPE(GstPrismConvert, gst_prism_convert, GST, PRISM_CONVERT, GstPrismCudaFilter)

GST_ELEMENT_REGISTER_DECLARE(prismconvert);

G_END_DECLS
