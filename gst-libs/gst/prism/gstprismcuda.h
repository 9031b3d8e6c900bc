/* GstPrismCuda: the CUDA plumbing shared by every Prism element, whatever its GStreamer base class
 * (GstPrismCudaFilter for one-in/one-out elements, GstVideoAggregator for poissonblend).
 *
 *  - the `device` (auto, cuda, cpu) and `cuda-device-id` properties;
 *  - choosing the path at start: the CUDA loader is checked before any GstCudaContext is made
 *    (gst_cuda_context_new aborts without a driver), then the context is shared with neighbours
 *    through the GstContext mechanism (set_context and the CONTEXT query); with `auto` and no
 *    usable GPU the element runs on the CPU and says so once (an INFO message on the bus);
 *  - one CUDA stream per element, created in the element's context;
 *  - caps helpers (memory:CUDAMemory variants), buffer pools (GstCudaBufferPool of our context for
 *    CUDA output), frame mapping to device pointers, host <-> device plane copies.
 *
 * Embed a GstPrismCuda in the element's instance, call gst_prism_cuda_init() in instance init,
 * and route the element's vmethods to the functions below.
 */
#pragma once

#include <gst/gst.h>
#include <gst/video/video.h>

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#include <gst/cuda/gstcudacontext.h>
#endif

G_BEGIN_DECLS

#define GST_PRISM_CUDA_FEATURE "memory:CUDAMemory"

#define GST_TYPE_PRISM_DEVICE (gst_prism_device_get_type())
typedef enum {
  GST_PRISM_DEVICE_AUTO = 0,
  GST_PRISM_DEVICE_CUDA = 1,
  GST_PRISM_DEVICE_CPU = 2,
} GstPrismDevice;
GType gst_prism_device_get_type(void);

/* A mapped frame: plane pointers in device memory when `device` is TRUE, host memory otherwise. */
typedef struct {
  guint8 *data[GST_VIDEO_MAX_PLANES];
  gint stride[GST_VIDEO_MAX_PLANES];
  gboolean device;
} GstPrismFrame;

typedef struct {
  /* properties (written with the element's object lock) */
  GstPrismDevice device;
  gint device_id;
  /* chosen by gst_prism_cuda_start() */
  gboolean use_cuda;
  gboolean started;
#if defined(PRISM_HAVE_CUDA)
  GstCudaContext *context;
  cudaStream_t stream;
#endif
} GstPrismCuda;

void gst_prism_cuda_init(GstPrismCuda *cuda);

/* Installs `device` and `cuda-device-id` with the given property ids. */
void gst_prism_cuda_install_properties(GObjectClass *klass, guint prop_device, guint prop_device_id);
/* Handle the two properties (matched by name); FALSE when `pspec` is not one of them. */
gboolean gst_prism_cuda_set_property(GstPrismCuda *cuda, GObject *object, const GValue *value, GParamSpec *pspec);
gboolean gst_prism_cuda_get_property(GstPrismCuda *cuda, GObject *object, GValue *value, GParamSpec *pspec);

/* GstElement::set_context (the caller chains up afterwards). */
void gst_prism_cuda_set_context(GstPrismCuda *cuda, GstElement *element, GstContext *context);
/* Answers a GST_QUERY_CONTEXT for our GstCudaContext; FALSE when not answered. */
gboolean gst_prism_cuda_handle_context_query(GstPrismCuda *cuda, GstElement *element, GstQuery *query);

/* One CUDA context for a whole pipeline of many streams, made with CU_CTX_SCHED_BLOCKING_SYNC:
 * GstCudaContext's own (flags 0, CU_CTX_SCHED_AUTO) spins while it waits for the GPU whenever the
 * process has fewer contexts than cores, so K streams' threads waiting on decodes and syncs keep K
 * cores busy doing nothing; blocking, they sleep. NULL without a usable driver or device
 * `device_id`. Applications share it through a GstPrismCudaContextSharer. */
GstContext *gst_prism_cuda_shared_context_new(gint device_id);

/* Answers the need-context messages of a pipeline's elements (nvh264dec, cudaupload and ours) so
 * that every element asking for a CUDA context on device N gets the same blocking-sync one
 * (gst_prism_cuda_shared_context_new(N)), made when the first asks. N is the asking element's
 * `cuda-device-id` (0 when it has none or leaves it at -1, "any"). Elements ask from their own
 * streaming threads: answering is thread-safe. Where no context can be made (no GPU), nothing is
 * answered and the elements make their own, as without a sharer. */
typedef struct _GstPrismCudaContextSharer GstPrismCudaContextSharer;
GstPrismCudaContextSharer *gst_prism_cuda_context_sharer_new(void);
/* Drops the sharer's references; elements keep the contexts they were given. */
void gst_prism_cuda_context_sharer_free(GstPrismCudaContextSharer *sharer);
/* TRUE when `msg` was a need-context for a CUDA context and was answered. */
gboolean gst_prism_cuda_context_sharer_answer(GstPrismCudaContextSharer *sharer, GstMessage *msg);
/* Answers every need-context posted on `bus` from now on (from a sync-message handler, so before the
 * asking element goes on); the sharer must outlive the pipeline's run. */
void gst_prism_cuda_context_sharer_watch(GstPrismCudaContextSharer *sharer, GstBus *bus);
/* How many need-context messages were answered so far. */
guint gst_prism_cuda_context_sharer_answered(GstPrismCudaContextSharer *sharer);
#if defined(PRISM_HAVE_CUDA)
/* The context shared on `device_id`, a new reference, or NULL if none was made yet. */
GstCudaContext *gst_prism_cuda_context_sharer_get(GstPrismCudaContextSharer *sharer, gint device_id);
#endif

/* Chooses the GPU or the CPU path (see the top of this file). FALSE, with an error posted, only
 * when device=cuda and no GPU can be used. */
gboolean gst_prism_cuda_start(GstPrismCuda *cuda, GstElement *element);
/* Synchronises and destroys the stream, drops the context. */
void gst_prism_cuda_stop(GstPrismCuda *cuda);

/* Whether memory:CUDAMemory caps may be offered: not with device=cpu, not in a CPU-only build,
 * and once started only on the GPU path. */
gboolean gst_prism_cuda_allows_cuda_caps(GstPrismCuda *cuda);
/* `caps` (taken) without its memory:CUDAMemory structures unless this run may use them. */
GstCaps *gst_prism_cuda_allowed_caps(GstPrismCuda *cuda, GstCaps *caps);
gboolean gst_prism_caps_are_cuda(GstCaps *caps);
/* video/x-raw in `formats` (system memory) and, in a CUDA build, in `cuda_formats`
 * (memory:CUDAMemory, listed first; NULL for none). Any size and framerate. */
GstCaps *gst_prism_cuda_template_caps(const gchar *formats, const gchar *cuda_formats);

/* GStreamer 1.22's GstCudaMemory places the V plane of I420 at height/2 chroma rows after U, so
 * with an odd height the two planes overlap: posts an error naming `pad_name` and returns FALSE. */
gboolean gst_prism_cuda_check_i420_height(GstElement *element, const GstVideoInfo *info, gboolean cuda_caps,
                                          const gchar *pad_name);

/* Allocation queries. propose: adds GstVideoMeta and, for CUDA caps, a GstCudaBufferPool of our
 * context. decide: configures the query's first pool for its caps (our own CUDA pool for CUDA
 * caps, else the downstream pool or a video buffer pool); posts an error when no pool takes the
 * configuration. */
gboolean gst_prism_cuda_propose_allocation(GstPrismCuda *cuda, GstQuery *query);
gboolean gst_prism_cuda_decide_allocation(GstPrismCuda *cuda, GstElement *element, GstQuery *query);

/* Plane pointers of a host-mapped frame. */
void gst_prism_frame_from_host(const GstVideoFrame *frame, GstPrismFrame *out);

/* Whether the buffer's first memory is GstCudaMemory (FALSE in a CPU-only build). */
gboolean gst_prism_buffer_is_cuda(GstBuffer *buffer);

/* The one rule for GstCudaMemory arriving at an element: TRUE when the element runs on the GPU and
 * the buffer's memory is GstCudaMemory of its own CUDA context (the same GstCudaContext, or one
 * wrapping the same CUcontext). Such memory is adopted: its device pointers are used in place on
 * the element's stream. Anything else, system memory or another context's GstCudaMemory (another
 * GPU, or a context that was not shared), is copied: mapped on the host (GstCudaMemory downloads
 * it through its own context) and, where the element needs it on the device, uploaded into the
 * element's own device memory. Device pointers of another context must never reach our kernels:
 * they are not valid in our context. */
gboolean gst_prism_cuda_buffer_is_ours(GstPrismCuda *cuda, GstBuffer *buffer);

#if defined(PRISM_HAVE_CUDA)
gboolean gst_prism_cuda_push(GstPrismCuda *cuda);
void gst_prism_cuda_pop(void);

/* Maps a GstCudaMemory buffer for device access (FALSE, unmapped, when it is not CUDA memory).
 * GstCudaMemory's own GstVideoInfo holds the pitched layout when the buffer has no GstVideoMeta. */
gboolean gst_prism_cuda_map_frame(GstVideoFrame *frame, const GstVideoInfo *info, GstBuffer *buf, GstMapFlags flags,
                                  GstPrismFrame *out);
/* Device layout of a staging buffer packed like `info`. */
void gst_prism_frame_from_staging(guint8 *base, const GstVideoInfo *info, GstPrismFrame *out);
/* Copies every plane between a host frame and a device layout, on the stream. */
cudaError_t gst_prism_cuda_copy_planes(const GstVideoFrame *host, const GstPrismFrame *dev, gboolean upload,
                                       cudaStream_t stream);
/* Copies every plane of a frame described by `info` between two device layouts. */
cudaError_t gst_prism_cuda_copy_device_planes(const GstPrismFrame *src, const GstPrismFrame *dst,
                                              const GstVideoInfo *info, cudaStream_t stream);
#endif

G_END_DECLS
