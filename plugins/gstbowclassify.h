/* bowclassify: labels the scene of video frames with a bag-of-visual-words model made by `prism bow
 * train` (kernels/bow: filter bank, dictionary, pyramid histogram, SVM or k-NN), every `interval`
 * frames. Each classification posts a "prism-bowclassify" element message (frame, pts,
 * running-time, label, class-index, confidence, latency-ms); every frame from the first
 * classification on carries a GstVideoRegionOfInterestMeta of type "scene" over the whole frame with
 * a "bowclassify" param (label, class-index, confidence, frame: the frame the result comes from).
 * In place (GstPrismCudaFilter's in-place shape): NV12/I420 in memory:CUDAMemory of the element's
 * context are read on the GPU where they lie (the Y plane is the grey image), every grey-readable
 * format in system memory on the host; with `overlay=true` the label is written into the picture's
 * top-left corner (the grey or Y plane for GRAY8/NV12/I420). `device` and `cuda-device-id` come from
 * the base class; on the GPU path the histograms are computed on the GPU for both memory kinds. */
#pragma once

#include "gst/prism/gstprismcudafilter.h"

G_BEGIN_DECLS

#define GST_TYPE_BOW_CLASSIFY (gst_bow_classify_get_type())
G_DECLARE_FINAL_TYPE(GstBowClassify, gst_bow_classify, GST, BOW_CLASSIFY, GstPrismCudaFilter)

GST_ELEMENT_REGISTER_DECLARE(bowclassify);

G_END_DECLS
