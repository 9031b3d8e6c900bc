/* textureid: identifies the textures (products, surfaces, prints) shown in a video against a gallery
 * made by `prism texture enroll` (kernels/texture: SIFT/RootSIFT features, the fused matcher, RANSAC
 * verification). Mode `search` (1:M, which enrolled texture is this?) or `verify` (1:1, is this
 * `claimed-id`?), every `interval` frames and/or when the frame is sharp enough (`min-sharpness`).
 * Pixels pass through untouched (GstPrismCudaFilter's in-place shape, system memory only: frames
 * are read on the host, where the features are extracted). `device` (auto, cuda, cpu) and
 * `cuda-device-id` come from the base class: on the GPU path the gallery is matched on the GPU in
 * the element's CUDA context, shared with its neighbours (it needs sm_80+; with `auto` an older GPU
 * means the CPU). Each identification attempt posts a
 * "prism-textureid" element message (id, identified, inliers, matches, score, latency-ms, frame,
 * mode, pts); an identified frame also gets a GstVideoRegionOfInterestMeta of type "texture" over the
 * inliers' box with a "textureid" param. Frames that were not identified carry no meta. */
#pragma once

#include "gst/prism/gstprismcudafilter.h"

G_BEGIN_DECLS

#define GST_TYPE_TEXTURE_ID (gst_texture_id_get_type())
G_DECLARE_FINAL_TYPE(GstTextureId, gst_texture_id, GST, TEXTURE_ID, GstPrismCudaFilter)

GST_ELEMENT_REGISTER_DECLARE(textureid);

G_END_DECLS
