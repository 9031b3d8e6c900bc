/* spectralize: multispectral frames from ordinary video, as the reference tracking system simulated
 * them: each pixel's spectrum is the histogram of the grey levels in an odd window around it
 * (kernels/spectral). Input NV12, I420 or GRAY8 (the luma plane is used), in CUDA or system memory;
 * output other/x-prism-tensor with `bins` channels of counts (f32 or u16), in the same memory kind
 * when downstream allows it. */
#pragma once

#include "gst/prism/gstprismcudafilter.h"

G_BEGIN_DECLS

#define GST_TYPE_SPECTRALIZE (gst_spectralize_get_type())
G_DECLARE_FINAL_TYPE(GstSpectralize, gst_spectralize, GST, SPECTRALIZE, GstPrismCudaFilter)

GST_ELEMENT_REGISTER_DECLARE(spectralize);

G_END_DECLS
