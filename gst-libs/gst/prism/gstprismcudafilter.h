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
 * Two shapes, chosen by the subclass in class_init:
 *  - copy (GstVideoFilter's transform_frame): set `process`. One frame in, another out; the caps
 *    of the two pads may differ (transform_structure maps them). prismconvert is the example to
 *    copy; spectralize and emdtracker are others.
 *  - in place (GstVideoFilter's transform_frame_ip): set `process_ip`. One frame, read (and
 *    written) where it lies; both pads carry the same caps, minus memory:CUDAMemory on the CPU
 *    path (transform_structure is not used). The element is never passthrough, so process_ip gets
 *    a writable buffer for its meta; pixels are copied only when it maps them for writing while
 *    the memory is shared. bowclassify and textureid are the examples.
 * Both may set `set_info` (plans made per caps). The caps of the copy shape are the subclass's
 * transform_structure (and fixate_caps) over structures; this class adds the memory features.
 * Either shape may set `finish`, which runs after the element's stream has been synchronised and
 * before the buffer is pushed: the place for work on the finished output (host-side decisions,
 * meta, bus messages, drawing over the result).
 *
 * Where the frame lives, on the GPU path:
 *  - GstCudaMemory of the element's own context is used in place (device pointers);
 *  - system memory, or another context's GstCudaMemory (gst_prism_cuda_buffer_is_ours), is
 *    mapped on the host and copied through a device staging buffer of the element (uploaded
 *    before process/process_ip, downloaded after when it is written), unless an in-place subclass
 *    sets `ip_host_frames` to get such frames on the host (it then does its own uploads).
 * On the CPU path every frame is mapped on the host.
 */
#pragma once

#include <gst/base/gstbasetransform.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include "gst/prism/gstprismcuda.h" /* GstPrismDevice, GstPrismFrame and the shared CUDA plumbing */
#include "gst/prism/gstprismtensor.h"

G_BEGIN_DECLS

#define GST_TYPE_PRISM_CUDA_FILTER (gst_prism_cuda_filter_get_type())
G_DECLARE_DERIVABLE_TYPE(GstPrismCudaFilter, gst_prism_cuda_filter, GST, PRISM_CUDA_FILTER, GstBaseTransform)

struct _GstPrismCudaFilterClass {
  GstBaseTransformClass parent_class;

  /* Maps one caps structure (no memory features) to what the other pad can carry; the base
   * class adds memory:CUDAMemory and system-memory variants. Default: unchanged. */
  GstCaps *(*transform_structure)(GstPrismCudaFilter *self, GstPadDirection direction, const GstStructure *s);
  /* Called when caps are set; build per-caps plans here. Return FALSE to refuse the caps. */
  gboolean (*set_info)(GstPrismCudaFilter *self, const GstVideoInfo *in_info, const GstVideoInfo *out_info);
  /* Copy mode: process one frame. With in->device TRUE the work is enqueued on the element's stream
   * (gst_prism_cuda_filter_get_stream) with the CUDA context already pushed; the base class
   * synchronises the stream before the buffer is pushed. in->device and out->device are always
   * equal (TRUE on the GPU path). */
  GstFlowReturn (*process)(GstPrismCudaFilter *self, const GstPrismFrame *in, const GstPrismFrame *out);

  /* In-place mode (set it instead of `process`): process the frame of `buf` in place. `buf` is
   * writable (meta may be added); `frame` is mapped as map_flags_ip said. frame->device TRUE: device
   * pointers, work enqueued on the element's stream with the context pushed, as for `process`.
   * frame->device FALSE: host pointers (the CPU path, or with `ip_host_frames`; on the GPU path the
   * context is pushed here too, so GPU work of the subclass's own runs in it). */
  GstFlowReturn (*process_ip)(GstPrismCudaFilter *self, GstBuffer *buf, const GstPrismFrame *frame);
  /* In-place mode: how the next frame is mapped for process_ip, asked once per buffer right before
   * the map. GST_MAP_READ when the pixels are only read (a read map of shared memory copies
   * nothing, and GPU memory mapped for reading is not marked as changed), GST_MAP_READWRITE when
   * process_ip writes them. Latch here the settings that decide it (a property that may change
   * while playing) and use the latched value in process_ip. NULL: GST_MAP_READWRITE. */
  GstMapFlags (*map_flags_ip)(GstPrismCudaFilter *self, GstBuffer *buf);
  /* In-place mode on the GPU path: TRUE hands process_ip system-memory frames (and another
   * context's GstCudaMemory, copied by GstCudaMemory) on the host instead of staged on the device,
   * for subclasses whose GPU work starts from host data. Device frames then reach process_ip only
   * with memory:CUDAMemory caps (in the element's own context). The base does not synchronise the
   * stream after a host frame: GPU work process_ip starts for one must end before it returns
   * (its results are on the host then anyway). Default FALSE. */
  gboolean ip_host_frames;

  /* Optional, both modes: runs once per buffer after process/process_ip succeeded and the element's
   * stream was synchronised, before the buffer is pushed (emdtracker's detections, tracks and box
   * drawing are the case it was made for). `outbuf` is the output buffer (the buffer itself in
   * place); `out` is its frame as the buffer holds it now, still mapped: device pointers when it is
   * GstCudaMemory of the element's context (out->device TRUE), else host pointers holding the
   * finished pixels (a staged output has been downloaded already). Draw on out->device frames with
   * work enqueued on the element's stream (the context is pushed) and synchronise it before
   * returning: the base class does not synchronise again (most frames draw nothing, and a second
   * sync per frame would cost every element). Draw only on frames mapped for writing (copy mode,
   * or map_flags_ip returned GST_MAP_READWRITE): a read map may share another buffer's memory.
   * Errors: post them and return GST_FLOW_ERROR. */
  GstFlowReturn (*finish)(GstPrismCudaFilter *self, GstBuffer *outbuf, const GstPrismFrame *out);

  /* Optional, both modes: frees what process/process_ip/finish use (the subclass's per-run state).
   * Called by the base class's GstBaseTransform stop() after the async worker is joined (no
   * analysis runs or starts any more) and before the CUDA context is released (push it with
   * prism::GstPrismContextScope to free device memory in it). Set this, not GstBaseTransformClass's
   * stop: the base runs it in the right order, so no subclass joins the worker itself. Also called
   * when a subclass's start() fails after chaining up and calls the base's stop(). */
  gboolean (*stop)(GstPrismCudaFilter *self);

  gpointer _reserved[3];
};

/* ---- The asynchronous mode (live sources never wait for an analysis) ----
 *
 * An analysis element that offers it calls gst_prism_cuda_filter_class_install_async() in class_init
 * (its `async` and `frames-skipped` properties) and routes them from its set/get_property. With
 * async=TRUE (read at start), frames pass through at the source's rate while process/process_ip and
 * finish run on the element's own worker thread, one frame at a time:
 *  - a frame that arrives while the worker is idle becomes its job; one that arrives while it is
 *    busy is not analysed: it is skipped and counted (`frames-skipped`, and the `skipped` field the
 *    base adds to the messages posted with gst_prism_cuda_filter_post_frame_message()). So every
 *    frame is either analysed or skipped: analysed + skipped = frames;
 *  - the worker analyses its own buffer holding the frame's memory (in place: a shallow copy
 *    without the frame's ROI meta, pixels shared and only read; copy mode: the input's memory and an
 *    output buffer of the worker's). The message it posts names the analysed frame: timestamps from
 *    that frame and gst_prism_cuda_filter_frame_segment(), frame number from
 *    gst_prism_cuda_filter_frame_number(). The ROI meta finish adds cannot go on that frame (it was
 *    pushed already): they are moved onto the next frame pushed after the result, each param given
 *    `source-frame` (guint64, the analysed frame's number) and `source-timestamp` (guint64, its PTS);
 *  - copy mode: every frame pushed carries the newest finished output picture (copied; through the
 *    host for CUDA memory). The first frame after start, new caps or a flush waits for its own
 *    result, as there is no earlier picture to show;
 *  - the worker pushes the element's CUDA context itself (GstPrismContextScope in the same code as
 *    the synchronous path) and uses the element's stream, which no one else uses then;
 *  - EOS waits for the running analysis (at most one): its message is posted before EOS goes on,
 *    its meta is dropped (no frame follows). A flush (seek) and new caps wait for it too and drop
 *    its meta and the newest picture. A state change to READY or NULL waits for it (one analysis at
 *    most) and drops the frame waiting for the worker, if any. A failure on the worker is posted
 *    there and returned by the next frame. The worker's life (idle, running, failed, stopping,
 *    stopped) is written down in gstprismasyncworker.h.
 * Writes into the picture (an overlay) are not seen in async mode: the worker's buffer shares the
 * frame's memory only for reading (a write map copies it). */
void gst_prism_cuda_filter_class_install_async(GObjectClass *klass, guint prop_async, guint prop_skipped,
                                               gboolean async_default);
/* From the subclass's set/get_property: TRUE when `pspec` is `async` or `frames-skipped`. */
gboolean gst_prism_cuda_filter_async_set_property(GstPrismCudaFilter *self, const GValue *value, GParamSpec *pspec);
gboolean gst_prism_cuda_filter_async_get_property(GstPrismCudaFilter *self, GValue *value, GParamSpec *pspec);
/* TRUE when the element runs in async mode (latched at start). */
gboolean gst_prism_cuda_filter_is_async(GstPrismCudaFilter *self);
/* In process/process_ip/finish: the number of the frame being processed, counting every frame that
 * reached the element since start (skipped ones too), from 0. */
guint64 gst_prism_cuda_filter_frame_number(GstPrismCudaFilter *self);
/* In process/process_ip/finish: the segment of the frame being processed (use it rather than
 * GstBaseTransform's, which the streaming thread changes while the worker runs). */
const GstSegment *gst_prism_cuda_filter_frame_segment(GstPrismCudaFilter *self);
/* ---- The camera a frame comes from (many cameras in one pipeline: README, "Many cameras") ----
 *
 * An analysis element that posts results calls gst_prism_cuda_filter_class_install_camera() in
 * class_init (its `camera` and `camera-uri` properties, strings, mutable in PLAYING) and routes them
 * from its set/get_property. When `camera` is set, every result names it:
 *  - the per-frame message (gst_prism_cuda_filter_post_frame_message) gets `camera` and
 *    `camera-uri` (strings), and so every JSON line (docs/RESULTS.md: `camera`, `camera_uri`);
 *  - every GstVideoRegionOfInterestMeta on the frames the element pushes gets a param named
 *    "prism-camera" with the same two fields (once: a meta that has one keeps it).
 * Why a property of the analysis element and not something carried by the stream (a stream-id of
 * STREAM_START, tags): the stream's own ids are made by the source (uridecodebin's are hashes) and
 * change when a camera's source is made anew after it drops, while the element outlives its
 * camera's sources; `prism run` sets both for each camera's elements (pipelines/camera_config.h),
 * and a gst-launch line can set them by hand. The URI is shown as given: `prism run` takes the
 * password out of it first. */
void gst_prism_cuda_filter_class_install_camera(GObjectClass *klass, guint prop_camera, guint prop_camera_uri);
/* From the subclass's set/get_property: TRUE when `pspec` is `camera` or `camera-uri`. */
gboolean gst_prism_cuda_filter_camera_set_property(GstPrismCudaFilter *self, const GValue *value, GParamSpec *pspec);
gboolean gst_prism_cuda_filter_camera_get_property(GstPrismCudaFilter *self, GValue *value, GParamSpec *pspec);

/* Posts a per-frame message (gst_prism_frame_message_new; `s` taken), adding `skipped` (guint64:
 * frames skipped since start) in async mode, and
 * `camera` and `camera-uri` when the element has a camera. */
void gst_prism_cuda_filter_post_frame_message(GstPrismCudaFilter *self, GstStructure *s);

/* TRUE once started on the GPU path. */
gboolean gst_prism_cuda_filter_uses_cuda(GstPrismCudaFilter *self);
/* The element's CUDA plumbing (gstprismcuda.h): its `device` and `cuda-device-id` (read them with
 * the object lock), its path, context and stream. Read only for subclasses. In C++,
 * prism::GstPrismContextScope scope(gst_prism_cuda_filter_get_cuda(self)) (gstprismcudamemory.h)
 * pushes the context on the GPU path around work outside process() and process_ip(), such as
 * making and freeing the subclass's device state in start() and the class's `stop`. A subclass
 * that overrides GstBaseTransform's start() chains up: the base class's start() chooses the path (a
 * subclass checks its own properties first, then chains up, then builds what depends on the path).
 * It frees that state in GstPrismCudaFilterClass's `stop` (not GstBaseTransform's): the base's stop()
 * joins the async worker, runs it, then releases the context. */
GstPrismCuda *gst_prism_cuda_filter_get_cuda(GstPrismCudaFilter *self);
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
void gst_prism_cuda_filter_class_add_pad_templates_full(GstElementClass *klass, GstCaps *sink_caps, GstCaps *src_caps);

G_END_DECLS
