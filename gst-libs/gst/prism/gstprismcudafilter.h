/* GstPrismCudaFilter: base class of Prism's one-in/one-out video elements.
 *
 * It owns what every element needs to run on the GPU or the CPU:
 *  - caps in `memory:CUDAMemory` and in system memory (the output keeps the input's memory kind
 *    when downstream allows it, so a chain of our elements stays in GPU memory);
 *  - the GstCudaContext, shared with neighbours (nvh264dec, cudaupload, cudadownload, our own
 *    elements) through the GstContext query mechanism, and pushed around every CUDA call;
 *  - one CUDA stream per element, synchronised before a buffer is pushed (1.22 memory carries no
 *    stream);
 *  - buffer pools (GstCudaBufferPool for CUDA output) and per-caps device staging buffers for
 *    system-memory input or output on the GPU path;
 *  - the `device` (auto, cuda, cpu) and `cuda-device-id` properties. With `auto` and no driver or
 *    no GPU, the element runs its CPU path and says so once (an INFO message on the bus).
 * The CUDA parts are GstPrismCuda's (gstprismcuda.h), shared with elements of other base classes.
 *
 * Pads may also carry other/x-prism-tensor (gstprismtensor.h): such a frame is mapped as its
 * storage plane, so staging, pools and frame mapping are the video ones.
 *
 * Subclasses implement set_info (plan per caps) and process (one frame, on the CPU or enqueued on
 * the element's stream), and their own transform_caps/fixate_caps over structures; this class adds
 * the memory features.
 */
#pragma once

#include <gst/base/gstbasetransform.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include "gst/prism/gstprismcuda.h" /* GstPrismDevice, GstPrismFrame and the shared CUDA plumbing */
#include "gst/prism/gstprismtensor.h"

G_BEGIN_DECLS

#define GST_TYPE_PRISM_CUDA_FILTER (gst_prism_cuda_filter_get_type())
G_DECLARE_DERIVABLE_TYPE(GstPrismCudaFilter, gst_prism_cuda_filter, GST, PRISM_CUDA_FILTER,
                         GstBaseTransform)

struct _GstPrismCudaFilterClass {
  GstBaseTransformClass parent_class;

  /* Maps one caps structure (no memory features) to what the other pad can carry; the base
   * class adds memory:CUDAMemory and system-memory variants. Default: unchanged. */
  GstCaps *(*transform_structure)(GstPrismCudaFilter *self, GstPadDirection direction,
                                  const GstStructure *s);
  /* Called when caps are set; build per-caps plans here. Return FALSE to refuse the caps. */
  gboolean (*set_info)(GstPrismCudaFilter *self, const GstVideoInfo *in_info,
                       const GstVideoInfo *out_info);
  /* Process one frame. With in->device TRUE the work is enqueued on the element's stream
   * (gst_prism_cuda_filter_get_stream) with the CUDA context already pushed; the base class
   * synchronises the stream before the buffer is pushed. */
  GstFlowReturn (*process)(GstPrismCudaFilter *self, const GstPrismFrame *in,
                           const GstPrismFrame *out);

  gpointer _reserved[4];
};

/* TRUE once started on the GPU path. */
gboolean gst_prism_cuda_filter_uses_cuda(GstPrismCudaFilter *self);
/* Makes the element's CUDA context current (GPU path only; FALSE otherwise), for work outside
 * process() such as freeing per-caps device buffers in stop(); pair with ..._pop_context(). */
gboolean gst_prism_cuda_filter_push_context(GstPrismCudaFilter *self);
void gst_prism_cuda_filter_pop_context(void);
/* The element's cudaStream_t (as a pointer), or NULL on the CPU path. */
gpointer gst_prism_cuda_filter_get_stream(GstPrismCudaFilter *self);
const GstVideoInfo *gst_prism_cuda_filter_in_info(GstPrismCudaFilter *self);
const GstVideoInfo *gst_prism_cuda_filter_out_info(GstPrismCudaFilter *self);

/* For other/x-prism-tensor caps (gstprismtensor.h) the GstVideoInfos above describe the storage
 * plane; these give the tensor (NULL when the pad carries video). */
const GstPrismTensorInfo *gst_prism_cuda_filter_in_tensor(GstPrismCudaFilter *self);
const GstPrismTensorInfo *gst_prism_cuda_filter_out_tensor(GstPrismCudaFilter *self);

/* Registers the element class's pad templates: video/x-raw in the given formats, in
 * memory:CUDAMemory (cuda_formats, may be NULL) and system memory (formats). */
void gst_prism_cuda_filter_class_add_pad_templates(GstElementClass *klass, const gchar *formats,
                                                   const gchar *cuda_formats);
/* The same with any caps per pad (video and/or tensor). */
void gst_prism_cuda_filter_class_add_pad_templates_full(GstElementClass *klass, GstCaps *sink_caps,
                                                        GstCaps *src_caps);

G_END_DECLS
