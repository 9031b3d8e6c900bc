/* prismconvert: colour conversion and scaling between NV12, I420, RGBA, BGRx, BGR and GRAY8, in
 * GPU memory (memory:CUDAMemory) or system memory. It stands in for videoconvert + videoscale and
 * for nvcodec's cudaconvert/cudascale, which do not register with CUDA 13.
 * The example of GstPrismCudaFilter's copy shape (transform_structure, fixate_caps, set_info,
 * process): start a new one-in/one-out element from this one. */
#pragma once

#include "gst/prism/gstprismcudafilter.h"

G_BEGIN_DECLS

#define GST_TYPE_PRISM_CONVERT (gst_prism_convert_get_type())
G_DECLARE_FINAL_TYPE(GstPrismConvert, gst_prism_convert, GST, PRISM_CONVERT, GstPrismCudaFilter)

GST_ELEMENT_REGISTER_DECLARE(prismconvert);

G_END_DECLS
