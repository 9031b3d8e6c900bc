/* spectralize: multispectral frames from ordinary video, as the reference tracking system simulated
 * them: each pixel's spectrum is the histogram of the grey levels in an odd window around it
 * (kernels/spectral). It makes, as a separate step, the signatures emdtracker would make itself from
 * the same video (the same kernel), so `spectralize ! emdtracker` gives emdtracker's distances.
 *
 * Inputs:
 *   sink: video/x-raw NV12 or I420 in memory:CUDAMemory or system memory, GRAY8 in system memory
 *   only (GstCudaMemory 1.22 cannot hold it); only the grey (Y) plane is read.
 *
 * Outputs:
 *   src: other/x-prism-tensor with `bins` channels, the input's size and framerate, dtype f32 (the
 *   default) or u16 (half the memory; choose it with a caps filter), in the input's memory kind when
 *   downstream allows it. Each value is a count: every histogram holds window x window pixels.
 *
 * Properties:
 *   bins (2..32, default 11): equal-width bins of 0..255 (bin = v * bins / 256), the output's
 *   channels. window (odd, 1..31, default 11): the histogram's window. Both are read when caps are
 *   set.
 *
 * Messages and meta:
 *   No message. Meta passes as GstPrismCudaFilter copies it (regions keep their pixel coordinates
 *   across video -> tensor).
 *
 * Device memory:
 *   None of its own: the kernel writes the output directly and allocates nothing. On the GPU path
 *   the base class reserves per caps, in the element's GstCudaContext, a device staging buffer for
 *   system-memory input and/or output.
 *
 * Notes:
 *   The window is clamped at the frame's edges (replicated border, like OpenCV's BORDER_REPLICATE),
 *   so all signatures have the same mass. The CPU and CUDA paths share the per-pixel code and give
 *   the same counts. set_info refuses an output tensor that is not f32/u16 with `bins` channels and
 *   the input's size, naming both pads.
 */
#pragma once

#include "gst/prism/gstprismcudafilter.h"

G_BEGIN_DECLS

#define GST_TYPE_SPECTRALIZE (gst_spectralize_get_type())
G_DECLARE_FINAL_TYPE(GstSpectralize, gst_spectralize, GST, SPECTRALIZE, GstPrismCudaFilter)

GST_ELEMENT_REGISTER_DECLARE(spectralize);

G_END_DECLS
