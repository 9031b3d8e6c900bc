/* poissonblend: Poisson seamless cloning of one or more overlay streams into a background stream,
 * used like compositor, computing what OpenCV 4.6's cv::seamlessClone computes (kernels/poisson/).
 * A GstVideoAggregator that embeds a GstPrismCuda (the device/cuda-device-id properties, the shared
 * GstCudaContext, one stream); its pads are in gstpoissonblendpad.h.
 *
 * Inputs:
 *   sink (always): the background, video/x-raw RGBA, BGRA, RGBx, BGRx, RGB, BGR, NV12 or I420, in
 *   memory:CUDAMemory or system memory (I420 in CUDA memory needs an even height); it is offered
 *   only the caps downstream accepts, since the output has its caps.
 *   overlay_%u (request): overlays, RGBA, BGRA, RGBx, BGRx, RGB or BGR, in either memory kind
 *   independently of the background's; never converted (other caps fail negotiation).
 *
 * Outputs:
 *   src: exactly the background's caps (format, size, framerate, memory kind): a copy of the
 *   background frame with the overlays cloned in, one after another in increasing `zorder` (ties:
 *   pad creation order), i.e. the result of repeated cv::seamlessClone calls. No output without a
 *   background frame; EOS when the background ends, even if an overlay (imagefreeze) would go on.
 *   A background at framerate 0/1 (a still without imagefreeze) gives one output frame per
 *   background frame, at framerate 0/1 and with no latency. When the background's caps change
 *   (size, format, even on every frame), the output is renegotiated at the first frame that has
 *   them.
 *
 * Properties:
 *   Element: `device`, `cuda-device-id` and `background-timeout` (ms, default 30000; 0 = wait
 *   forever). Per overlay pad (gstpoissonblendpad.h): xpos, ypos, mode, mask-location, zorder.
 *
 * Messages and meta:
 *   No element message. The background's metas (GstVideoRegionOfInterestMeta included) are copied
 *   onto the output, except memory-layout metas. WARNINGs, once per pad: a mask box clipped by the
 *   frame's edge, an empty mask. Errors name the pad and the file or sizes: a mask-location that
 *   cannot be decoded, a mask not the overlay's size, an overlay without alpha and no mask-location,
 *   a `sink` still unlinked `background-timeout` ms after start.
 *
 * Device memory:
 *   On the GPU path, in the element's GstCudaContext:
 *   - at start, one prism::poisson::CudaCloner on the element's stream; its scratch buffers, cuFFT
 *     plans and cuBLAS handle are made the first time a box size is seen and kept (a few sizes,
 *     least recently used evicted), so a new box size (an overlay of a new size, or a box whose
 *     clipping changes at the frame's edge) allocates on that frame;
 *   - per output caps (negotiated_src_caps): a staging buffer for a system-memory output, and for
 *     NV12/I420 an RGBA buffer of the frame's size for the round trip;
 *   - per overlay pad: the device copy of a system-memory overlay (reserved on its first frame,
 *     grown only for a larger one) and of its mask-location pixels (once per decoded file).
 *   Freed at stop, and by the pad's finalize, in the context they were made in.
 *
 * Notes:
 *   The algorithm is "Poisson Image Editing" (Perez, Gangnet, Blake 2003) as cv::seamlessClone
 *   implements it: bit for bit on the CPU; on the GPU bit for bit for small and thin boxes (OpenCV's
 *   float DFTs replayed), else a double-precision solve (cuFFT, or FP64 DGEMMs for large boxes) with
 *   OpenCV's float rounding of the lowest frequencies replayed, chosen per box size
 *   (CudaCloner::solver_for). Where OpenCV throws because the box leaves the background, the box is
 *   clipped and the stream goes on; a box under 3 pixels a side after clipping, or an empty mask,
 *   leaves the background unchanged. NV12/I420 backgrounds: the destination box, grown by one pixel
 *   to even coordinates, goes to RGBA (prismconvert's matrix, the caps' colorimetry), is cloned into
 *   and goes back, so that rectangle makes an RGB round trip (kernels/poisson/yuv_clone.h). On the
 *   GPU path everything stays in device memory: CUDA overlays of our context are read in place,
 *   system-memory overlays are uploaded once per new GstMemory (an imagefreeze still once), and the
 *   stream is synchronised once per output frame (once more for a CUDA overlay whose alpha box is
 *   not cached). The mask's box, found on the host or the device, is cached while the overlay's
 *   memory is shared and unchanged.
 *   An unlinked `sink` would leave GstAggregator waiting for a background forever (compositor does
 *   so with an unlinked pad). A check at start would refuse a background that a demuxer or
 *   decodebin links a little later (a sometimes pad), so a `sink` without a peer at start must have
 *   one `background-timeout` ms later, else the element posts an error naming it.
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
