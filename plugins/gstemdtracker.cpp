#include "gstemdtracker.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "gst/prism/gstprismmessage.h"
#include "emd/emd_map.h"
#include "emd/tracking.h"
#include "spectral/spectralize.h"
#include "tensor/tensor.h"

GST_DEBUG_CATEGORY_STATIC(gst_emd_tracker_debug);
#define GST_CAT_DEFAULT gst_emd_tracker_debug

namespace emd = prism::emd;
namespace spectral = prism::spectral;
namespace tensor = prism::tensor;

#define INPUT_FORMATS "{ NV12, I420, GRAY8 }"
/* GstCudaMemory 1.22 cannot hold GRAY8. */
#define CUDA_INPUT_FORMATS "{ NV12, I420 }"
#define INPUT_DTYPES "{ u8, u16, f32 }"

typedef enum { GROUND_ABS_DIFF, GROUND_SQUARED_DIFF, GROUND_WAVELENGTHS, GROUND_MATRIX } GroundKind;
#define GST_TYPE_EMD_GROUND (ground_kind_get_type())
static GType ground_kind_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {GROUND_ABS_DIFF, "|i - j| between bins", "abs-diff"},
      {GROUND_SQUARED_DIFF, "(i - j)^2 between bins", "squared-diff"},
      {GROUND_WAVELENGTHS, "|w_i - w_j| of the 'wavelengths' property", "wavelengths"},
      {GROUND_MATRIX, "the n x n matrix in 'ground-distance-location'", "matrix"},
      {0, nullptr, nullptr}};
  if (g_once_init_enter(&type)) g_once_init_leave(&type, g_enum_register_static("GstEmdGroundDistance", values));
  return type;
}

#define GST_TYPE_EMD_NORMALIZATION (normalization_get_type())
static GType normalization_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {
      {(gint)emd::Normalization::Flow, "total cost / flow moved (Rubner; the smaller mass)", "flow"},
      {(gint)emd::Normalization::LargerMass, "total cost / the larger mass (cv::EMD)", "larger-mass"},
      {0, nullptr, nullptr}};
  if (g_once_init_enter(&type)) g_once_init_leave(&type, g_enum_register_static("GstEmdNormalization", values));
  return type;
}

enum {
  PROP_0,
  PROP_TARGET,
  PROP_TARGET_LOCATION,
  PROP_TARGET_RECT,
  PROP_TARGET_FRAME,
  PROP_BINS,
  PROP_WINDOW,
  PROP_GROUND,
  PROP_WAVELENGTHS,
  PROP_GROUND_LOCATION,
  PROP_NORMALIZATION,
  PROP_CACHE_SIZE,
  PROP_DEDUP,
  PROP_THRESHOLD,
  PROP_MIN_AREA,
  PROP_HEATMAP_MAX,
  PROP_OPACITY,
  PROP_DRAW_BOXES,
};

struct _GstEmdTracker {
  GstPrismCudaFilter parent;
  /* properties (object lock) */
  gchar *target_text, *target_location, *target_rect, *wavelengths, *ground_location;
  guint target_frame;
  gint bins, window;
  GroundKind ground_kind;
  emd::Normalization normalization;
  gint64 cache_size;
  gboolean dedup;
  gfloat threshold, heatmap_max, opacity;
  gboolean draw_boxes;
  gint64 min_area;
  /* streaming state */
  struct State *state;
};

/* Everything made per caps (and the target once known). */
constexpr int kMaxDrawn = 64;  // boxes drawn per frame (all are reported)

struct State {
  int width = 0, height = 0;
  bool tensor_in = false;                // signatures come in (other/x-prism-tensor) instead of video
  bool distance_out = false;             // output the float distance map instead of the heat map
  GstPrismFrame out{};  // the output frame of the current transform (for drawing boxes)
  std::unique_ptr<emd::GroundDistance> ground;
  std::vector<float> target;  // empty until known
  guint64 frame = 0;
  emd::Tracker tracker;
  std::vector<emd::GridCell> grid;  // host (pinned on the GPU path)
  emd::FrameStats stats;
  bool solved_this_frame = false;
  // CPU path
  std::unique_ptr<emd::CpuEmdMap> cpu_map;
  std::vector<float> sig, dist;
#if defined(PRISM_HAVE_CUDA)
  std::unique_ptr<emd::CudaEmdMap> cuda_map;
  float *d_sig = nullptr, *d_dist = nullptr;
  emd::GridCell *d_grid = nullptr, *h_grid = nullptr;
  emd::Box *d_boxes = nullptr, *h_boxes = nullptr;  // kMaxDrawn each
  void free_device() {
    cudaFree(d_boxes);
    cudaFreeHost(h_boxes);
    d_boxes = h_boxes = nullptr;
    cuda_map.reset();
    cudaFree(d_sig);
    cudaFree(d_dist);
    cudaFree(d_grid);
    cudaFreeHost(h_grid);
    d_sig = d_dist = nullptr;
    d_grid = h_grid = nullptr;
  }
#endif
};

G_DEFINE_TYPE(GstEmdTracker, gst_emd_tracker, GST_TYPE_PRISM_CUDA_FILTER);
GST_ELEMENT_REGISTER_DEFINE(emdtracker, "emdtracker", GST_RANK_NONE, GST_TYPE_EMD_TRACKER);

static GstBaseTransformClass *filter_class_parent = nullptr;  // GstPrismCudaFilter's vmethods

/* ---- properties ---- */

static void set_property(GObject *object, guint id, const GValue *value, GParamSpec *pspec) {
  GstEmdTracker *self = GST_EMD_TRACKER(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_TARGET: g_free(self->target_text); self->target_text = g_value_dup_string(value); break;
    case PROP_TARGET_LOCATION: g_free(self->target_location); self->target_location = g_value_dup_string(value); break;
    case PROP_TARGET_RECT: g_free(self->target_rect); self->target_rect = g_value_dup_string(value); break;
    case PROP_TARGET_FRAME: self->target_frame = g_value_get_uint(value); break;
    case PROP_BINS: self->bins = g_value_get_int(value); break;
    case PROP_WINDOW: self->window = g_value_get_int(value); break;
    case PROP_GROUND: self->ground_kind = (GroundKind)g_value_get_enum(value); break;
    case PROP_WAVELENGTHS: g_free(self->wavelengths); self->wavelengths = g_value_dup_string(value); break;
    case PROP_GROUND_LOCATION: g_free(self->ground_location); self->ground_location = g_value_dup_string(value); break;
    case PROP_NORMALIZATION: self->normalization = (emd::Normalization)g_value_get_enum(value); break;
    case PROP_CACHE_SIZE: self->cache_size = g_value_get_int64(value); break;
    case PROP_DEDUP: self->dedup = g_value_get_boolean(value); break;
    case PROP_THRESHOLD: self->threshold = g_value_get_float(value); break;
    case PROP_MIN_AREA: self->min_area = g_value_get_int64(value); break;
    case PROP_HEATMAP_MAX: self->heatmap_max = g_value_get_float(value); break;
    case PROP_OPACITY: self->opacity = g_value_get_float(value); break;
    case PROP_DRAW_BOXES: self->draw_boxes = g_value_get_boolean(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void get_property(GObject *object, guint id, GValue *value, GParamSpec *pspec) {
  GstEmdTracker *self = GST_EMD_TRACKER(object);
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_TARGET: g_value_set_string(value, self->target_text); break;
    case PROP_TARGET_LOCATION: g_value_set_string(value, self->target_location); break;
    case PROP_TARGET_RECT: g_value_set_string(value, self->target_rect); break;
    case PROP_TARGET_FRAME: g_value_set_uint(value, self->target_frame); break;
    case PROP_BINS: g_value_set_int(value, self->bins); break;
    case PROP_WINDOW: g_value_set_int(value, self->window); break;
    case PROP_GROUND: g_value_set_enum(value, self->ground_kind); break;
    case PROP_WAVELENGTHS: g_value_set_string(value, self->wavelengths); break;
    case PROP_GROUND_LOCATION: g_value_set_string(value, self->ground_location); break;
    case PROP_NORMALIZATION: g_value_set_enum(value, (gint)self->normalization); break;
    case PROP_CACHE_SIZE: g_value_set_int64(value, self->cache_size); break;
    case PROP_DEDUP: g_value_set_boolean(value, self->dedup); break;
    case PROP_THRESHOLD: g_value_set_float(value, self->threshold); break;
    case PROP_MIN_AREA: g_value_set_int64(value, self->min_area); break;
    case PROP_HEATMAP_MAX: g_value_set_float(value, self->heatmap_max); break;
    case PROP_OPACITY: g_value_set_float(value, self->opacity); break;
    case PROP_DRAW_BOXES: g_value_set_boolean(value, self->draw_boxes); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

/* ---- caps: grey/YUV in, RGBA heat map of the same size out ---- */

/* Sink: video (spectralized here) or a tensor of 2..32 channels (the signatures themselves).
 * Src: the RGBA heat map (first) or the distance map as a 1-channel f32 tensor. Same size. */
static GstCaps *transform_structure(GstPrismCudaFilter *, GstPadDirection direction, const GstStructure *in) {
  GstStructure *video, *map;
  if (direction == GST_PAD_SINK) {
    video = gst_structure_from_string("video/x-raw, format=(string)RGBA", nullptr);
    map = gst_prism_tensor_structure_new("f32", 1, 1);
  } else {
    video = gst_structure_from_string("video/x-raw, format=(string)" INPUT_FORMATS, nullptr);
    map = gst_prism_tensor_structure_new(INPUT_DTYPES, 2, emd::kMaxBins);
  }
  gst_prism_structure_copy_geometry(video, in);
  gst_prism_structure_copy_geometry(map, in);
  return gst_caps_new_full(video, map, nullptr);
}

/* ---- per caps ---- */

/* The ground distance and a target given as numbers; errors name the property. `channels`: the
 * input tensor's, 0 for video input (the 'bins' property counts), -1 before caps are known. */
static bool configure(GstEmdTracker *self, State &st, int channels) {
  GST_OBJECT_LOCK(self);
  const int bins = channels > 0 ? channels : self->bins;
  const GroundKind kind = self->ground_kind;
  const std::string wl = self->wavelengths ? self->wavelengths : "";
  const std::string gl = self->ground_location ? self->ground_location : "";
  const std::string tt = self->target_text ? self->target_text : "";
  const std::string tl = self->target_location ? self->target_location : "";
  const std::string tr = self->target_rect ? self->target_rect : "";
  const int window = self->window;
  GST_OBJECT_UNLOCK(self);
  std::string property;
  try {
    property = "window";
    if (channels <= 0) spectral::validate({bins, window});
    property = "ground-distance";
    switch (kind) {
      case GROUND_ABS_DIFF: st.ground = std::make_unique<emd::GroundDistance>(emd::GroundDistance::abs_diff(bins)); break;
      case GROUND_SQUARED_DIFF:
        st.ground = std::make_unique<emd::GroundDistance>(emd::GroundDistance::squared_diff(bins));
        break;
      case GROUND_WAVELENGTHS: {
        property = "wavelengths";
        const std::vector<float> w = emd::parse_numbers(wl, "wavelengths");
        st.ground = std::make_unique<emd::GroundDistance>(
            emd::GroundDistance::from_wavelengths(std::vector<double>(w.begin(), w.end())));
        break;
      }
      case GROUND_MATRIX:
        property = "ground-distance-location";
        if (gl.empty()) throw std::invalid_argument("ground-distance=matrix needs ground-distance-location");
        st.ground = std::make_unique<emd::GroundDistance>(emd::GroundDistance::load(gl));
        break;
    }
    if (st.ground->bins() != bins && channels >= 0)
      throw std::invalid_argument("the ground distance has " + std::to_string(st.ground->bins()) + " bins and " +
                                  (channels > 0 ? "the input has " + std::to_string(channels) + " channels"
                                                : "'bins' is " + std::to_string(bins)));
    const int given = !tt.empty() + !tl.empty() + !tr.empty();
    property = "target";
    if (given != 1)
      throw std::invalid_argument("set exactly one of target, target-location and target-rect (" +
                                  std::to_string(given) + " set)");
    if (!tt.empty()) {
      st.target = emd::parse_numbers(tt, "target");
    } else if (!tl.empty()) {
      property = "target-location";
      std::ifstream f(tl);
      if (!f) throw std::invalid_argument(tl + ": cannot open the target file");
      std::stringstream text;
      text << f.rdbuf();
      st.target = emd::parse_numbers(text.str(), tl);
    }
    if (!st.target.empty()) emd::validate_target(st.target, channels >= 0 ? bins : (int)st.target.size());
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS, ("emdtracker: property '%s': %s", property.c_str(), e.what()), (nullptr));
    return false;
  }
  return true;
}

static gboolean set_info(GstPrismCudaFilter *filter, const GstVideoInfo *in, const GstVideoInfo *out) {
  GstEmdTracker *self = GST_EMD_TRACKER(filter);
  const GstPrismTensorInfo *tin = gst_prism_cuda_filter_in_tensor(filter);
  const GstPrismTensorInfo *tout = gst_prism_cuda_filter_out_tensor(filter);
  const GstVideoFormat f = GST_VIDEO_INFO_FORMAT(in);
  if (tin ? (tin->channels < 2 || tin->channels > emd::kMaxBins)
          : (f != GST_VIDEO_FORMAT_NV12 && f != GST_VIDEO_FORMAT_I420 && f != GST_VIDEO_FORMAT_GRAY8)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                      ("emdtracker: pad 'sink' takes NV12, I420, GRAY8 or other/x-prism-tensor of 2 to %d channels",
                       emd::kMaxBins),
                      (nullptr));
    return FALSE;
  }
  const int W = tin ? tin->width : GST_VIDEO_INFO_WIDTH(in), H = tin ? tin->height : GST_VIDEO_INFO_HEIGHT(in);
  if (tout ? (tout->dtype != tensor::DType::F32 || tout->channels != 1 || tout->width != W || tout->height != H)
           : (GST_VIDEO_INFO_FORMAT(out) != GST_VIDEO_FORMAT_RGBA || GST_VIDEO_INFO_WIDTH(out) != W ||
              GST_VIDEO_INFO_HEIGHT(out) != H)) {
    GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                      ("emdtracker: pad 'src' gives RGBA or a 1-channel f32 other/x-prism-tensor of the input's size"),
                      (nullptr));
    return FALSE;
  }
  auto st = std::make_unique<State>();
  st->width = W;
  st->height = H;
  st->tensor_in = tin != nullptr;
  st->distance_out = tout != nullptr;
  if (!configure(self, *st, tin ? tin->channels : 0)) return FALSE;
  st->grid.resize((size_t)emd::grid_width(st->width) * emd::grid_height(st->height));
  if (self->state) {
#if defined(PRISM_HAVE_CUDA)
    if (gst_prism_cuda_filter_push_context(filter)) {
      self->state->free_device();
      gst_prism_cuda_filter_pop_context();
    }
#endif
    delete self->state;
  }
  self->state = st.release();
  return TRUE;
}

static gboolean stop(GstBaseTransform *trans) {
  GstEmdTracker *self = GST_EMD_TRACKER(trans);
  if (self->state) {
#if defined(PRISM_HAVE_CUDA)
    if (gst_prism_cuda_filter_push_context(GST_PRISM_CUDA_FILTER(trans))) {
      self->state->free_device();
      gst_prism_cuda_filter_pop_context();
    }
#endif
    delete self->state;
    self->state = nullptr;
  }
  return filter_class_parent->stop(trans);
}

/* target-rect: the mean signature of the rectangle's rw x rh signatures (row-major, on the host). */
static bool learn_target(GstEmdTracker *self, State &st, const float *sig_host_rect, int rw, int rh) {
  const int n = st.ground->bins();
  std::vector<double> sum(n, 0.0);
  for (int64_t p = 0; p < (int64_t)rw * rh; p++)
    for (int b = 0; b < n; b++) sum[b] += sig_host_rect[p * n + b];
  st.target.assign(n, 0.f);
  for (int b = 0; b < n; b++) st.target[b] = (float)(sum[b] / ((double)rw * rh));
  try {
    emd::validate_target(st.target, n);
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, STREAM, FAILED, ("emdtracker: property 'target-rect': %s", e.what()), (nullptr));
    return false;
  }
  GST_INFO_OBJECT(self, "target learned from frame %" G_GUINT64_FORMAT, st.frame);
  return true;
}

static bool parse_rect(GstEmdTracker *self, const State &st, int *x, int *y, int *w, int *h) {
  GST_OBJECT_LOCK(self);
  const std::string text = self->target_rect ? self->target_rect : "";
  GST_OBJECT_UNLOCK(self);
  try {
    const std::vector<float> v = emd::parse_numbers(text, "target-rect");
    if (v.size() != 4) throw std::invalid_argument("'" + text + "': expected x,y,width,height");
    int x0 = std::max(0, (int)v[0]), y0 = std::max(0, (int)v[1]);
    int x1 = std::min(st.width, (int)(v[0] + v[2])), y1 = std::min(st.height, (int)(v[1] + v[3]));
    if (x1 <= x0 || y1 <= y0)
      throw std::invalid_argument("'" + text + "' has no pixel inside the " + std::to_string(st.width) + "x" +
                                  std::to_string(st.height) + " frame");
    *x = x0, *y = y0, *w = x1 - x0, *h = y1 - y0;
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS, ("emdtracker: property 'target-rect': %s", e.what()), (nullptr));
    return false;
  }
  return true;
}

static emd::EmdMapConfig map_config(GstEmdTracker *self) {
  emd::EmdMapConfig c;
  GST_OBJECT_LOCK(self);
  c.normalization = self->normalization;
  c.cache_capacity = self->cache_size;
  c.dedup = self->dedup;
  GST_OBJECT_UNLOCK(self);
  return c;
}

/* The frame's signatures as packed floats [pixels][n]: spectralized from video, or the input
 * tensor itself when it is packed f32, else converted. On the device when `dev`. */
static const float *signatures(GstEmdTracker *self, State &st, const GstPrismFrame *in, const spectral::SpectralizeParams &sp,
                               float *scratch, bool dev) {
  const int W = st.width, H = st.height;
  if (!st.tensor_in) {
#if defined(PRISM_HAVE_CUDA)
    if (dev) {
      spectral::spectralize_cuda(in->data[0], W, H, in->stride[0], sp, scratch,
                                 (cudaStream_t)gst_prism_cuda_filter_get_stream(GST_PRISM_CUDA_FILTER(self)));
      return scratch;
    }
#endif
    spectral::spectralize_cpu(in->data[0], W, H, in->stride[0], sp, scratch);
    return scratch;
  }
  const tensor::FrameLayout layout =
      gst_prism_tensor_layout(gst_prism_cuda_filter_in_tensor(GST_PRISM_CUDA_FILTER(self)), in->stride[0]);
  if (layout.dtype == tensor::DType::F32 && (layout.row_bytes == layout.packed_row_bytes() || H == 1))
    return (const float *)in->data[0];
#if defined(PRISM_HAVE_CUDA)
  if (dev) {
    tensor::to_signatures_cuda(in->data[0], layout, scratch,
                               (cudaStream_t)gst_prism_cuda_filter_get_stream(GST_PRISM_CUDA_FILTER(self)));
    return scratch;
  }
#endif
  tensor::to_signatures_cpu(in->data[0], layout, scratch);
  return scratch;
}

static GstFlowReturn process(GstPrismCudaFilter *filter, const GstPrismFrame *in, const GstPrismFrame *out) {
  GstEmdTracker *self = GST_EMD_TRACKER(filter);
  State &st = *self->state;
  const int W = st.width, H = st.height, n = st.ground->bins();
  GST_OBJECT_LOCK(self);
  const spectral::SpectralizeParams sp{self->bins, self->window};
  const float threshold = self->threshold;
  /* Without a grey frame under it (tensor input) the colour is shown alone. */
  const emd::HeatmapParams hp{self->heatmap_max > 0 ? self->heatmap_max : 3.f * self->threshold,
                              st.tensor_in ? 1.f : self->opacity};
  const guint target_frame = self->target_frame;
  GST_OBJECT_UNLOCK(self);
  const emd::HeatmapParams grey_only{1.f, 0.f};
  const uint8_t *grey = st.tensor_in ? nullptr : in->data[0];
  const int64_t grey_stride = st.tensor_in ? 0 : in->stride[0];
  const bool learn_now = st.target.empty() && st.frame == target_frame;
  int rx = 0, ry = 0, rw = 0, rh = 0;
  if (learn_now && !parse_rect(self, st, &rx, &ry, &rw, &rh)) return GST_FLOW_ERROR;
  st.solved_this_frame = false;
  st.out = *out;
  try {
    if (!in->device) {
      st.sig.resize((size_t)W * H * n);
      st.dist.resize((size_t)W * H);
      const float *sig = signatures(self, st, in, sp, st.sig.data(), false);
      if (learn_now) {
        std::vector<float> rect((size_t)rw * rh * n);
        for (int y = 0; y < rh; y++)
          std::copy_n(&sig[((size_t)(ry + y) * W + rx) * n], (size_t)rw * n, &rect[(size_t)y * rw * n]);
        if (!learn_target(self, st, rect.data(), rw, rh)) return GST_FLOW_ERROR;
      }
      if (!st.target.empty()) {
        if (!st.cpu_map) st.cpu_map = std::make_unique<emd::CpuEmdMap>(*st.ground, st.target, map_config(self));
        st.stats = st.cpu_map->compute(sig, (int64_t)W * H, st.dist.data());
        st.solved_this_frame = true;
        emd::reduce_grid_cpu(st.dist.data(), W, H, threshold, st.grid.data());
      } else {
        std::fill(st.dist.begin(), st.dist.end(), NAN);  // no target yet: no distance
      }
      if (st.distance_out) {
        for (int y = 0; y < H; y++)
          std::copy_n(&st.dist[(size_t)y * W], W, (float *)(out->data[0] + (int64_t)y * out->stride[0]));
      } else {
        emd::render_heatmap_cpu(st.dist.data(), grey, grey_stride, W, H, st.target.empty() ? grey_only : hp,
                                out->data[0], out->stride[0]);
      }
      return GST_FLOW_OK;
    }
#if defined(PRISM_HAVE_CUDA)
    cudaStream_t s = (cudaStream_t)gst_prism_cuda_filter_get_stream(filter);
    if (!st.d_sig) {  // once per caps
      if (cudaMalloc((void **)&st.d_sig, sizeof(float) * W * H * n) != cudaSuccess ||
          cudaMalloc((void **)&st.d_dist, sizeof(float) * W * H) != cudaSuccess ||
          cudaMalloc((void **)&st.d_grid, sizeof(emd::GridCell) * st.grid.size()) != cudaSuccess ||
          cudaMallocHost((void **)&st.h_grid, sizeof(emd::GridCell) * st.grid.size()) != cudaSuccess ||
          cudaMalloc((void **)&st.d_boxes, sizeof(emd::Box) * kMaxDrawn) != cudaSuccess ||
          cudaMallocHost((void **)&st.h_boxes, sizeof(emd::Box) * kMaxDrawn) != cudaSuccess) {
        GST_ELEMENT_ERROR(self, RESOURCE, NO_SPACE_LEFT, ("emdtracker: cannot allocate GPU memory"), (nullptr));
        return GST_FLOW_ERROR;
      }
      cudaMemsetAsync(st.d_dist, 0xFF, sizeof(float) * W * H, s);  // all-ones bits: NaN, no distance yet
    }
    const float *sig = signatures(self, st, in, sp, st.d_sig, true);
    if (learn_now) {  // once: the rectangle's signatures come to the host
      std::vector<float> rect((size_t)rw * rh * n);
      cudaMemcpy2DAsync(rect.data(), sizeof(float) * rw * n, sig + ((size_t)ry * W + rx) * n, sizeof(float) * W * n,
                        sizeof(float) * rw * n, rh, cudaMemcpyDeviceToHost, s);
      if (cudaStreamSynchronize(s) != cudaSuccess || !learn_target(self, st, rect.data(), rw, rh))
        return GST_FLOW_ERROR;
    }
    if (!st.target.empty()) {
      if (!st.cuda_map) st.cuda_map = std::make_unique<emd::CudaEmdMap>(s, *st.ground, st.target, map_config(self));
      st.cuda_map->compute(sig, (int64_t)W * H, st.d_dist);
      st.solved_this_frame = true;
      emd::reduce_grid_cuda(st.d_dist, W, H, threshold, st.d_grid, s);
      cudaMemcpyAsync(st.h_grid, st.d_grid, sizeof(emd::GridCell) * st.grid.size(), cudaMemcpyDeviceToHost, s);
    }
    if (st.distance_out) {
      PRISM_CUDA_CHECK(cudaMemcpy2DAsync(out->data[0], out->stride[0], st.d_dist, sizeof(float) * W,
                                         sizeof(float) * W, H, cudaMemcpyDeviceToDevice, s));
    } else {
      emd::render_heatmap_cuda(st.d_dist, grey, grey_stride, W, H, st.target.empty() ? grey_only : hp, out->data[0],
                               out->stride[0], s);
    }
    return GST_FLOW_OK;
#endif
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("emdtracker: %s", e.what()), (nullptr));
    return GST_FLOW_ERROR;
  }
  return GST_FLOW_ERROR;
}

/* Box outlines on the output frame, after the detections: on the host for system memory, one
 * small kernel and a stream sync for CUDA memory. The output frame's planes are those process()
 * wrote; the buffer is still ours (not pushed). */
static bool draw_boxes(GstEmdTracker *self, State &st, const std::vector<emd::Detection> &dets, GstBuffer *outbuf) {
  std::vector<emd::Box> boxes;
  for (const emd::Detection &d : dets) {
    if ((int)boxes.size() == kMaxDrawn) break;
    boxes.push_back({d.x, d.y, d.w, d.h});
  }
  if (!st.out.device) {
    emd::draw_boxes_cpu(boxes, st.width, st.height, st.out.data[0], st.out.stride[0]);
    return true;
  }
  if (!gst_prism_buffer_is_cuda(outbuf)) {  // GPU path, system-memory output: already copied out
    GstVideoFrame f;
    if (!gst_video_frame_map(&f, gst_prism_cuda_filter_out_info(GST_PRISM_CUDA_FILTER(self)), outbuf, GST_MAP_WRITE))
      return false;
    emd::draw_boxes_cpu(boxes, st.width, st.height, (uint8_t *)GST_VIDEO_FRAME_PLANE_DATA(&f, 0),
                        GST_VIDEO_FRAME_PLANE_STRIDE(&f, 0));
    gst_video_frame_unmap(&f);
    return true;
  }
#if defined(PRISM_HAVE_CUDA)
  GstPrismCudaFilter *filter = GST_PRISM_CUDA_FILTER(self);
  if (!gst_prism_cuda_filter_push_context(filter)) return false;
  cudaStream_t s = (cudaStream_t)gst_prism_cuda_filter_get_stream(filter);
  std::copy(boxes.begin(), boxes.end(), st.h_boxes);
  cudaMemcpyAsync(st.d_boxes, st.h_boxes, sizeof(emd::Box) * boxes.size(), cudaMemcpyHostToDevice, s);
  emd::draw_boxes_cuda(st.d_boxes, (int)boxes.size(), st.width, st.height, st.out.data[0], st.out.stride[0], s);
  const cudaError_t err = cudaStreamSynchronize(s);
  gst_prism_cuda_filter_pop_context();
  if (err != cudaSuccess) {
    GST_ELEMENT_ERROR(self, LIBRARY, FAILED, ("emdtracker: CUDA error drawing boxes"), ("%s", cudaGetErrorString(err)));
    return false;
  }
#endif
  return true;
}

/* After the base class has run process() and synchronised the stream: detections, tracks, meta
 * and the frame's message. */
static GstFlowReturn transform(GstBaseTransform *trans, GstBuffer *inbuf, GstBuffer *outbuf) {
  GstEmdTracker *self = GST_EMD_TRACKER(trans);
  GstFlowReturn ret = filter_class_parent->transform(trans, inbuf, outbuf);
  if (ret != GST_FLOW_OK) return ret;
  State &st = *self->state;
  std::vector<emd::Detection> dets;
  GstStructure *stats = nullptr;
  if (st.solved_this_frame) {
    const emd::GridCell *grid = st.grid.data();
#if defined(PRISM_HAVE_CUDA)
    if (st.cuda_map) {
      grid = st.h_grid;
      st.stats = st.cuda_map->last_stats();
    }
#endif
    GST_OBJECT_LOCK(self);
    const gint64 min_area = self->min_area;
    const bool draw = self->draw_boxes;
    GST_OBJECT_UNLOCK(self);
    dets = st.tracker.update(grid, st.width, st.height, min_area);
    if (draw && !st.distance_out && !dets.empty() && !draw_boxes(self, st, dets, outbuf)) return GST_FLOW_ERROR;
    stats = gst_structure_new("stats", "solved", G_TYPE_INT64, (gint64)st.stats.solved, "duplicates", G_TYPE_INT64,
                              (gint64)st.stats.duplicates, "cache-hits", G_TYPE_INT64, (gint64)st.stats.cache_hits,
                              "hit-rate", G_TYPE_DOUBLE, st.stats.hit_rate(), "dedup-ratio", G_TYPE_DOUBLE,
                              st.stats.dedup_ratio(), "pivots", G_TYPE_INT64, (gint64)st.stats.pivots,
                              "cache-flushed", G_TYPE_BOOLEAN, st.stats.flushed, nullptr);
  }
  GValue list = G_VALUE_INIT;
  g_value_init(&list, GST_TYPE_LIST);
  for (const emd::Detection &d : dets) {
    GstVideoRegionOfInterestMeta *m =
        gst_buffer_add_video_region_of_interest_meta(outbuf, "emd-target", d.x, d.y, d.w, d.h);
    m->id = (gint)d.track_id;
    gst_video_region_of_interest_meta_add_param(
        m, gst_structure_new("emd", "distance", G_TYPE_DOUBLE, (double)d.distance, "track-id", G_TYPE_INT64,
                             (gint64)d.track_id, "pixels", G_TYPE_INT64, (gint64)d.pixels, nullptr));
    GValue v = G_VALUE_INIT;
    g_value_init(&v, GST_TYPE_STRUCTURE);
    GstStructure *s = gst_structure_new("detection", "x", G_TYPE_INT, d.x, "y", G_TYPE_INT, d.y, "width", G_TYPE_INT,
                                        d.w, "height", G_TYPE_INT, d.h, "distance", G_TYPE_DOUBLE, (double)d.distance,
                                        "track-id", G_TYPE_INT64, (gint64)d.track_id, "pixels", G_TYPE_INT64,
                                        (gint64)d.pixels, nullptr);
    gst_value_set_structure(&v, s);
    gst_structure_free(s);
    gst_value_list_append_and_take_value(&list, &v);
  }
  GstStructure *msg = gst_prism_frame_message_new("emdtracker", &trans->segment, outbuf, st.frame);
  gst_structure_set(msg, "target-known", G_TYPE_BOOLEAN, !st.target.empty(), nullptr);
  gst_structure_take_value(msg, "detections", &list);
  if (stats) {
    gst_structure_set(msg, "stats", GST_TYPE_STRUCTURE, stats, nullptr);
    gst_structure_free(stats);
  }
  gst_prism_post_frame_message(GST_ELEMENT(trans), msg);
  st.frame++;
  return GST_FLOW_OK;
}

static gboolean start(GstBaseTransform *trans) {
  GstEmdTracker *self = GST_EMD_TRACKER(trans);
  State probe;
  /* Check the properties before any data flows, so a bad one fails at the state change. */
  if (!configure(self, probe, -1)) return FALSE;
  return filter_class_parent->start(trans);
}

static void finalize(GObject *object) {
  GstEmdTracker *self = GST_EMD_TRACKER(object);
  g_free(self->target_text);
  g_free(self->target_location);
  g_free(self->target_rect);
  g_free(self->wavelengths);
  g_free(self->ground_location);
  delete self->state;
  G_OBJECT_CLASS(gst_emd_tracker_parent_class)->finalize(object);
}

static void gst_emd_tracker_class_init(GstEmdTrackerClass *klass) {
  GObjectClass *gobject_class = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);
  GstPrismCudaFilterClass *filter_class = GST_PRISM_CUDA_FILTER_CLASS(klass);
  filter_class_parent = GST_BASE_TRANSFORM_CLASS(gst_emd_tracker_parent_class);

  gobject_class->finalize = finalize;
  /* device/cuda-device-id stay with the base class's handlers (GObject dispatches by owner). */
  const GParamFlags rw = (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  GObjectClass *oc = gobject_class;
  auto install = [&](guint id, GParamSpec *p) { g_object_class_install_property(oc, id, p); };
  oc->set_property = set_property;
  oc->get_property = get_property;
  install(PROP_TARGET, g_param_spec_string("target", "Target signature",
                                           "The target's signature: 'bins' numbers (commas or spaces)", nullptr, rw));
  install(PROP_TARGET_LOCATION, g_param_spec_string("target-location", "Target file",
                                                    "A text file with the target's signature", nullptr, rw));
  install(PROP_TARGET_RECT,
          g_param_spec_string("target-rect", "Target rectangle",
                              "x,y,width,height: learn the target as the mean signature of this rectangle of "
                              "frame 'target-frame'",
                              nullptr, rw));
  install(PROP_TARGET_FRAME, g_param_spec_uint("target-frame", "Target frame",
                                               "Frame (from 0) whose target-rect is learned", 0, G_MAXUINT, 0, rw));
  install(PROP_BINS, g_param_spec_int("bins", "Bins", "Signature bins of video input (grey-level histogram bins); tensor input brings its channels", 2,
                                      emd::kMaxBins, 11, rw));
  install(PROP_WINDOW, g_param_spec_int("window", "Window", "Odd window size of the per-pixel histogram (video input)", 1, 31,
                                        11, rw));
  install(PROP_GROUND, g_param_spec_enum("ground-distance", "Ground distance", "Cost between bins",
                                         GST_TYPE_EMD_GROUND, GROUND_ABS_DIFF, rw));
  install(PROP_WAVELENGTHS, g_param_spec_string("wavelengths", "Wavelengths",
                                                "Band centre wavelengths for ground-distance=wavelengths", nullptr, rw));
  install(PROP_GROUND_LOCATION, g_param_spec_string("ground-distance-location", "Ground distance file",
                                                    "n lines of n numbers for ground-distance=matrix", nullptr, rw));
  install(PROP_NORMALIZATION,
          g_param_spec_enum("normalization", "Normalization",
                            "How the total cost becomes a distance when the masses differ", GST_TYPE_EMD_NORMALIZATION,
                            (gint)emd::Normalization::Flow, rw));
  install(PROP_CACHE_SIZE, g_param_spec_int64("cache-size", "Cache size",
                                              "Signatures kept from earlier frames (0: none); emptied when full", 0,
                                              G_MAXINT64 / 1024, emd::EmdMapConfig{}.cache_capacity, rw));
  install(PROP_DEDUP, g_param_spec_boolean("dedup", "Deduplicate",
                                           "Solve each distinct signature of a frame once (and cache)", TRUE, rw));
  install(PROP_THRESHOLD,
          g_param_spec_float("threshold", "Threshold", "Detection: pixels at this EMD or less are on target", 0.f,
                             G_MAXFLOAT, 1.f, (GParamFlags)(rw | GST_PARAM_CONTROLLABLE)));
  install(PROP_MIN_AREA, g_param_spec_int64("min-area", "Minimum area", "Detection: fewest on-target pixels", 1,
                                            G_MAXINT64, 64, rw));
  install(PROP_HEATMAP_MAX, g_param_spec_float("heatmap-max", "Heat map range",
                                               "Distance shown as blue (0: 3 x threshold)", 0.f, G_MAXFLOAT, 0.f, rw));
  install(PROP_OPACITY, g_param_spec_float("opacity", "Opacity", "Heat map colour over the grey frame (video input; over black for tensor input)", 0.f, 1.f,
                                           0.6f, rw));
  install(PROP_DRAW_BOXES, g_param_spec_boolean("draw-boxes", "Draw boxes",
                                                "Outline the detections on the heat map", TRUE, rw));

  gst_element_class_set_static_metadata(
      element_class, "Prism EMD tracker", "Filter/Analyzer/Video/Hardware",
      "Per-pixel Earth Mover's Distance of multispectral signatures (other/x-prism-tensor, or window "
      "grey-level histograms of video) to a target signature (exact transportation simplex with a "
      "frame-to-frame cache); a heat map or the float distance map, and tracked detections as "
      "region-of-interest meta and element messages. GPU (CUDA memory) or CPU.",
      "Prism developers");
  GstCaps *sink = gst_prism_cuda_template_caps(INPUT_FORMATS, CUDA_INPUT_FORMATS);
  gst_caps_append(sink, gst_prism_tensor_template_caps(INPUT_DTYPES, 2, emd::kMaxBins));
  GstCaps *src = gst_prism_cuda_template_caps("RGBA", "RGBA");
  gst_caps_append(src, gst_prism_tensor_template_caps("f32", 1, 1));
  gst_prism_cuda_filter_class_add_pad_templates_full(element_class, sink, src);
  gst_caps_unref(sink);
  gst_caps_unref(src);
  filter_class->transform_structure = transform_structure;
  filter_class->set_info = set_info;
  filter_class->process = process;
  trans_class->transform = GST_DEBUG_FUNCPTR(transform);
  trans_class->start = GST_DEBUG_FUNCPTR(start);
  trans_class->stop = GST_DEBUG_FUNCPTR(stop);
  trans_class->passthrough_on_same_caps = FALSE;
  GST_DEBUG_CATEGORY_INIT(gst_emd_tracker_debug, "emdtracker", 0, "Prism EMD tracker");
}

static void gst_emd_tracker_init(GstEmdTracker *self) {
  self->bins = 11;
  self->window = 11;
  self->ground_kind = GROUND_ABS_DIFF;
  self->normalization = emd::Normalization::Flow;
  self->cache_size = emd::EmdMapConfig{}.cache_capacity;
  self->dedup = TRUE;
  self->threshold = 1.f;
  self->min_area = 64;
  self->heatmap_max = 0.f;
  self->opacity = 0.6f;
  self->draw_boxes = TRUE;
}
