/* textureid: identifies the textures (products, surfaces, prints) shown in a video against a gallery
 * made by `prism texture enroll` (kernels/texture: SIFT/RootSIFT features, the fused matcher,
 * RANSAC verification). Pixels pass through untouched: GstPrismCudaFilter's in-place shape, never
 * passthrough (the buffer is made writable for the meta; its pixels are only read).
 *
 * Inputs:
 *   sink: video/x-raw NV12, I420 or RGBA in memory:CUDAMemory (GPU path; from nvh264dec or
 *   cudaupload): frames of the element's context are read on the GPU where they lie (the Y plane, or
 *   RGBA made grey by cv::cvtColor's integer formula in a CUDA kernel), another context's on the
 *   host. GRAY8, RGBA, BGRA, BGRx, RGBx, RGB, BGR, NV12 or I420 in system memory: GRAY8/NV12/I420
 *   give their grey (Y) plane, the others cv::cvtColor's grey, on the host. device=cpu offers no
 *   CUDA caps (upstream then gives system memory, or negotiation fails).
 *
 * Outputs:
 *   src: the input buffer, same caps.
 *
 * Properties:
 *   gallery (required; read and indexed at start). mode: search (1:M, which enrolled texture is
 *   this?) or verify (1:1, is it `claimed-id`?). interval (default 10; 0: every frame) and
 *   min-sharpness (variance of the grey Laplacian; a due frame below it is skipped and the next one
 *   tried) decide which frames are identified. The decision: min-significance (default 3.6,
 *   calibrated in docs/TEXTUREID.md) and min-inliers; search verifies the best `shortlist` images.
 *   All but gallery, mode, gpu-memory, host-memory and async may change while playing. async
 *   (default true; read at start) and frames-skipped (read only): GstPrismCudaFilter's asynchronous
 *   mode (gstprismcudafilter.h): identification on the element's own thread, frames arriving
 *   meanwhile skipped and counted, so a live source never waits; async=false identifies in the
 *   streaming thread (every due frame: files, tests). `device` (auto, cuda, cpu) and
 *   `cuda-device-id` are the base class's and say where the gallery is matched.
 *
 * Messages and meta:
 *   Per identification attempt, an element message "prism-textureid": timestamp, stream-time,
 *   running-time, duration, frame (gst_prism_frame_message_new), then mode ("search" or "verify"),
 *   id (the identified or claimed product; not identified in search mode, the best candidate; ""
 *   with none), identified (boolean), inliers, matches (int), score (double: the significance the
 *   decision is made on), latency-ms (features + matching + verification), when identified x, y,
 *   width, height (int: the ROI meta's box), homography and quad (below) and, with min-sharpness
 *   set, sharpness. An identified frame also gets a GstVideoRegionOfInterestMeta of type "texture"
 *   over the inliers' bounding box (the whole frame without one) with a "textureid" param: id,
 *   identified, inliers, matches, score, latency-ms, homography, quad. Where the gallery image lies
 *   in the frame (texture::gallery_in_query): homography, a GstValueArray of 9 doubles, row-major,
 *   mapping gallery-image pixels to frame pixels ([2][2] = 1; the inverse of the verification's
 *   frame -> gallery fit), and quad, 8 doubles x0 y0 ... x3 y3: the gallery image's outer corners
 *   (top-left, top-right, bottom-right, bottom-left) mapped into the frame. Both in the frame's own
 *   pixels, also when SIFT ran on a shrunk copy, pixel centres at integers (cv::warpPerspective's
 *   convention); absent when the fit is degenerate (a corner at infinity). Frames not identified carry no meta; frames
 * not due, or below min-sharpness, post nothing. In async mode the message names the analysed frame and adds skipped
 * (uint64: frames skipped so far); the meta of an identified frame goes on the next frame pushed after the result, its
 * param adding source-frame and source-timestamp. Frame numbers count every frame, skipped ones too, and so does
 * interval.
 *
 * Device memory:
 *   GPU path (an sm_80+ GPU), in the element's GstCudaContext, at start: the gallery's FP16
 *   descriptors, per-image counts and scores and a query slot (texture::TextureIndex, which also
 *   creates its own CUDA stream for the matching), and the CUDA SIFT (texture::CudaFeatureExtractor:
 *   its stream, pyramid and keypoint buffers grow to the largest frame and are kept; the shrink's
 *   tables are made once per frame size) and the two 64-bit sums of min-sharpness (device and
 *   pinned host); with RGBA caps a W x H grey image (set_info); the
 *   per-candidate verification buffers (device, and pinned host) grow on the first identifications
 *   to the shortlist's size and are kept. Freed at stop in the same context. System-memory frames
 *   are not staged by the base class (ip_host_frames): SIFT uploads the grey image.
 *
 * Notes:
 *   Features: SIFT (Lowe 2004) made RootSIFT (Arandjelovic & Zisserman 2012), after the contrast
 *   normalisation the gallery records (texture/normalise.h: its entries were enrolled with it, so
 *   its queries must use it too; none for older galleries). On the CPU path OpenCV's cv::SIFT; on
 *   the GPU path kernels/sift's CUDA SIFT (interchangeable with cv::SIFT within sift.h's tolerance)
 *   for frames in either memory kind, which give the same features: a frame whose longer side
 *   exceeds 1024 is shrunk as cv::resize(INTER_AREA) shrinks it, on the host for system memory and
 *   bit for bit the same on the device for CUDA memory (texture/detection_image.h). In async mode
 *   the worker reads a CUDA frame through its own buffer holding the frame's GstCudaMemory (a
 *   reference, mapped for reading on the device until the identification has synchronised its
 *   streams), so the frame pushed meanwhile is never written under it and its pool cannot reuse the
 *   memory before. A CUDA frame never goes to the host: with min-sharpness set its sharpness is
 *   measured on the device too (texture/sharpness.h: the host's value bit for bit; only two sums
 *   are downloaded). The ratio-test matching of the query against the whole gallery
 *   runs on the GPU (or the CPU, the same function); the shortlist is verified by a RANSAC
 *   homography (cv::findHomography) and scored by the significance of its inliers
 *   (texture::chance_significance). With device=auto a GPU older than sm_80 means matching on the
 *   CPU, said once as an INFO message; device=cuda then fails at start. Each identification waits
 *   for its features and its matching (host syncs on the SIFT's and the index's streams); the frames
 *   in between are only counted. At start the gallery is streamed into the index from its pack (one
 *   entry in memory at a time, so a large gallery is never held twice); one that does not fit the
 *   budgets fails there, naming gpu-memory and host-memory.
 */
#pragma once

#include "gst/prism/gstprismcudafilter.h"

G_BEGIN_DECLS

#define GST_TYPE_TEXTURE_ID (gst_texture_id_get_type())
G_DECLARE_FINAL_TYPE(GstTextureId, gst_texture_id, GST, TEXTURE_ID, GstPrismCudaFilter)

GST_ELEMENT_REGISTER_DECLARE(textureid);

G_END_DECLS
