/* bowclassify: labels the scene of video frames with a bag-of-visual-words model made by `prism bow
 * train` (kernels/bow: filter bank, dictionary, spatial-pyramid word histogram, SVM or k-NN), every
 * `interval` frames. GstPrismCudaFilter's in-place shape: pixels pass through unless `overlay` draws
 * the label into them.
 *
 * Inputs:
 *   sink: video/x-raw NV12 or I420 in memory:CUDAMemory (GPU path): frames of the element's
 *   context are read on the GPU where they lie (the Y plane is the grey image), another context's on
 *   the host. GRAY8, RGBA, BGRA, BGRx, RGBx, RGB, BGR, NV12 or I420 in system memory, made grey on
 *   the host (the Y plane, or cv::cvtColor). device=cpu offers no CUDA caps.
 *
 * Outputs:
 *   src: the input buffer, same caps.
 *
 * Properties:
 *   model (required; read at start, errors name the file and the fault). interval (default 30; 0:
 *   every frame): classify every N frames from frame 0, the frames between carry the last result.
 *   overlay (default false): write the latest label and confidence into the picture's top-left
 *   corner (the grey or Y plane for GRAY8/NV12/I420, every channel of packed RGB; only with
 *   async=false, a warning at start says so). interval and overlay may change while playing
 *   (latched per frame in map_flags_ip). async (default true; read at start) and frames-skipped
 *   (read only): GstPrismCudaFilter's asynchronous mode (gstprismcudafilter.h): classification on
 *   the element's own thread, frames arriving meanwhile skipped and counted, so a live source never
 *   waits; async=false classifies in the streaming thread (every due frame). `device` and
 *   `cuda-device-id` are the base class's and say where the filter bank and words run.
 *
 * Messages and meta:
 *   Per classified frame, an element message "prism-bowclassify": timestamp, stream-time,
 *   running-time, duration, frame (gst_prism_frame_message_new), then latency-ms (double: the
 *   classification's wall time, label included), label (string), class-index (int), confidence
 *   (double: the SVM's softmax or the k-NN vote share), scores (a GstValueArray, one structure
 *   "class" per class in the model's class order with label and score: what the decision is made
 *   on, bow::Prediction::scores: the SVM's decision values, whose argmax is the label, or the k-NN
 *   vote shares). Every frame (frame 0 is always classified) carries a GstVideoRegionOfInterestMeta
 *   of type "scene" over the whole frame with a "bowclassify" param: frame (uint64: the frame the
 *   result comes from), label, class-index, confidence, scores. Both are
 *   made in the finish hook, after the stream sync. In async mode the message names the analysed
 *   frame and adds skipped (uint64: frames skipped so far); the meta of an analysed frame goes on
 *   the next frame pushed after the result, its param adding source-frame and source-timestamp, and
 *   frames in between carry none. Frame numbers count every frame, skipped ones too.
 *
 * Device memory:
 *   GPU path, in the element's GstCudaContext: at start, the model's GPU histogrammer (the
 *   dictionary, the finest pyramid level's counts on the device and in pinned host memory, its own
 *   CUDA stream); its per-image buffers (grey upload, filter responses, words) are made on the first
 *   classification and grow only for a larger frame. Freed at stop in the same context. System-memory
 *   frames are not staged by the base class (ip_host_frames): the histogrammer uploads the grey image.
 *
 * Notes:
 *   The classifier runs on the host; the filter bank and the word assignment on the GPU path need an
 *   sm_80+ GPU (tensor-core mma.sync): on an older GPU the element fails at start, even with
 *   device=auto (use device=cpu). A classification waits for its histogram (a host sync on the
 *   histogrammer's stream); with `overlay` on a CUDA frame the label box is drawn on the host and
 *   only it is uploaded into the Y plane, on the element's stream. GPU and CPU words agree except at
 *   near ties (docs/BOW.md has the model and its accuracy).
 */
#pragma once

#include "gst/prism/gstprismcudafilter.h"

G_BEGIN_DECLS

#define GST_TYPE_BOW_CLASSIFY (gst_bow_classify_get_type())
G_DECLARE_FINAL_TYPE(GstBowClassify, gst_bow_classify, GST, BOW_CLASSIFY, GstPrismCudaFilter)

GST_ELEMENT_REGISTER_DECLARE(bowclassify);

G_END_DECLS
