#include "gsttextureid.h"

#include <gst/video/video.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "gst/prism/gstprismcudamemory.h" /* the index and the device grey live in the element's context */
#include "gst/prism/gstprismgrey.h"
#include "common/stopwatch.h"
#include "gst/prism/gstprismmessage.h"
#include "texture/catalog.h"
#include "texture/detection_image.h"
#include "texture/features.h"
#include "texture/gallery.h"
#include "texture/index.h"
#include "texture/sharpness.h"
#include "texture/verify.h"

GST_DEBUG_CATEGORY_STATIC(gst_texture_id_debug);
#define GST_CAT_DEFAULT gst_texture_id_debug

namespace texture = prism::texture;
namespace match = prism::match;

#define FORMATS PRISM_GREY_FORMATS
/* In GPU memory: the formats nvh264dec and cudaupload give whose grey is cheap on the device. */
#define CUDA_FORMATS "{ NV12, I420, RGBA }"

typedef enum { MODE_SEARCH, MODE_VERIFY } TextureIdMode;
#define GST_TYPE_TEXTURE_ID_MODE (texture_id_mode_get_type())
static GType texture_id_mode_get_type(void) {
  static GType type = 0;
  static const GEnumValue values[] = {{MODE_SEARCH, "1:M: which enrolled texture is shown", "search"},
                                      {MODE_VERIFY, "1:1: is the texture shown 'claimed-id'", "verify"},
                                      {0, nullptr, nullptr}};
  if (g_once_init_enter(&type)) g_once_init_leave(&type, g_enum_register_static("GstTextureIdMode", values));
  return type;
}

enum {
  PROP_0,
  PROP_GALLERY,
  PROP_MODE,
  PROP_CLAIMED_ID,
  PROP_INTERVAL,
  PROP_MIN_SHARPNESS,
  PROP_MIN_INLIERS,
  PROP_MIN_SIGNIFICANCE,
  PROP_SHORTLIST,
  PROP_COLLECTIONS,
  PROP_GPU_MEMORY,
  PROP_HOST_MEMORY,
  PROP_DIGEST_ROWS,
  PROP_DIGEST_CANDIDATES,
  PROP_STREAM_DIGESTS,
  PROP_ASYNC,
  PROP_FRAMES_SKIPPED,
  PROP_CAMERA,
  PROP_CAMERA_URI,
};

constexpr guint kDefaultInterval = 10;

/* Made at start(), gone at stop(). */
struct State {
  std::string gallery;
  texture::FeatureParams features; /* the gallery's normalisation (its record), as at its enrolment */
  texture::Catalog catalog;        /* read-only: the gallery's entries in the index */
  bool attempted = false;          // an identification has run
  guint64 last_attempt = 0;        // its frame
  cv::Mat grey;                    // RGB-ish host frames converted here (reused)
#if defined(PRISM_HAVE_CUDA)
  /* GPU path: kernels/sift's CUDA SIFT for every frame, host or device, so both memory kinds give
   * the same features (made at start in the element's context; device frames are read on its
   * stream). */
  std::unique_ptr<texture::CudaFeatureExtractor> extractor;
  prism::GstPrismDeviceArray<uint8_t> device_grey; /* RGBA caps on the GPU path: the grey (set_info) */
  /* min-sharpness of device frames, measured where they lie (its two sums' buffers made at start) */
  std::unique_ptr<texture::CudaSharpness> sharpness;
#endif
  explicit State(const texture::CatalogOptions &o) : catalog(o) {}
};

struct _GstTextureId {
  GstPrismCudaFilter parent; /* device, cuda-device-id, the context the index's GPU buffers live in */
  /* properties (object lock) */
  gchar *gallery, *claimed_id;
  TextureIdMode mode;
  guint interval;
  gdouble min_sharpness;
  gint min_inliers, shortlist;
  gdouble min_significance;
  gchar *collections; /* comma-separated; empty: the whole gallery */
  /* `collections` parsed when set (parse_collections): the names, or the first bad one */
  std::vector<std::string> *collection_names;
  std::string *bad_collection;
  gboolean collections_valid;
  gint64 gpu_memory, host_memory;
  gint digest_rows, digest_candidates; /* IndexOptions::host_digest_rows, SearchParams::digest_candidates */
  gboolean stream_digests;             /* IndexOptions::stream_host_digests */
  /* streaming state */
  State *state;
};

G_DEFINE_TYPE(GstTextureId, gst_texture_id, GST_TYPE_PRISM_CUDA_FILTER);
GST_ELEMENT_REGISTER_DEFINE(textureid, "textureid", GST_RANK_NONE, GST_TYPE_TEXTURE_ID);

/* ---- properties ---- */

/* The `collections` property: comma-separated names, each a valid collection (the characters of a
 * product id), none empty (spaces around a name are dropped), as HTTP's `collections`. False
 * with the first bad item in *bad. */
static bool parse_collections(const gchar *text, std::vector<std::string> *out, std::string *bad) {
  out->clear();
  bad->clear();
  if (!text || !*text) return true;
  std::string list(text);
  for (size_t start = 0;;) {
    const size_t comma = list.find(',', start);
    std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t first = name.find_first_not_of(" \t"), last = name.find_last_not_of(" \t");
    name = first == std::string::npos ? std::string() : name.substr(first, last - first + 1);  // "a, b"
    if (name.empty() || !texture::valid_collection(name)) {
      *bad = name;
      return false;
    }
    out->push_back(name);
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

static void set_property(GObject *object, guint id, const GValue *value, GParamSpec *pspec) {
  GstTextureId *self = GST_TEXTURE_ID(object);
  if (gst_prism_cuda_filter_async_set_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  if (gst_prism_cuda_filter_camera_set_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_GALLERY:
      g_free(self->gallery);
      self->gallery = g_value_dup_string(value);
      break;
    case PROP_MODE: self->mode = (TextureIdMode)g_value_get_enum(value); break;
    case PROP_CLAIMED_ID:
      g_free(self->claimed_id);
      self->claimed_id = g_value_dup_string(value);
      break;
    case PROP_INTERVAL: self->interval = g_value_get_uint(value); break;
    case PROP_MIN_SHARPNESS: self->min_sharpness = g_value_get_double(value); break;
    case PROP_MIN_INLIERS: self->min_inliers = g_value_get_int(value); break;
    case PROP_MIN_SIGNIFICANCE: self->min_significance = g_value_get_double(value); break;
    case PROP_SHORTLIST: self->shortlist = g_value_get_int(value); break;
    case PROP_COLLECTIONS:
      g_free(self->collections);
      self->collections = g_value_dup_string(value);
      /* parsed here, once: start refuses a bad value, a frame while playing stops the stream */
      self->collections_valid = parse_collections(self->collections, self->collection_names, self->bad_collection);
      break;
    case PROP_GPU_MEMORY: self->gpu_memory = g_value_get_int64(value); break;
    case PROP_HOST_MEMORY: self->host_memory = g_value_get_int64(value); break;
    case PROP_DIGEST_ROWS: self->digest_rows = g_value_get_int(value); break;
    case PROP_DIGEST_CANDIDATES: self->digest_candidates = g_value_get_int(value); break;
    case PROP_STREAM_DIGESTS: self->stream_digests = g_value_get_boolean(value); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

static void get_property(GObject *object, guint id, GValue *value, GParamSpec *pspec) {
  GstTextureId *self = GST_TEXTURE_ID(object);
  if (gst_prism_cuda_filter_async_get_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  if (gst_prism_cuda_filter_camera_get_property(GST_PRISM_CUDA_FILTER(self), value, pspec)) return;
  GST_OBJECT_LOCK(self);
  switch (id) {
    case PROP_GALLERY: g_value_set_string(value, self->gallery); break;
    case PROP_MODE: g_value_set_enum(value, self->mode); break;
    case PROP_CLAIMED_ID: g_value_set_string(value, self->claimed_id); break;
    case PROP_INTERVAL: g_value_set_uint(value, self->interval); break;
    case PROP_MIN_SHARPNESS: g_value_set_double(value, self->min_sharpness); break;
    case PROP_MIN_INLIERS: g_value_set_int(value, self->min_inliers); break;
    case PROP_MIN_SIGNIFICANCE: g_value_set_double(value, self->min_significance); break;
    case PROP_SHORTLIST: g_value_set_int(value, self->shortlist); break;
    case PROP_COLLECTIONS: g_value_set_string(value, self->collections); break;
    case PROP_GPU_MEMORY: g_value_set_int64(value, self->gpu_memory); break;
    case PROP_HOST_MEMORY: g_value_set_int64(value, self->host_memory); break;
    case PROP_DIGEST_ROWS: g_value_set_int(value, self->digest_rows); break;
    case PROP_DIGEST_CANDIDATES: g_value_set_int(value, self->digest_candidates); break;
    case PROP_STREAM_DIGESTS: g_value_set_boolean(value, self->stream_digests); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec);
  }
  GST_OBJECT_UNLOCK(self);
}

/* ---- start/stop: the gallery is read and indexed once, before any data flows ---- */

static GstPrismCuda *cuda_of(GstTextureId *self) { return gst_prism_cuda_filter_get_cuda(GST_PRISM_CUDA_FILTER(self)); }

/* The index of `gallery`, streamed from its files (a bounded batch in memory: a large gallery is
 * never held twice), on `device`, into *out; posts the error. Runs with the context pushed. */
static bool build_index(GstTextureId *self, const texture::IndexOptions &options, const std::string &gallery,
                        TextureIdMode mode, const std::string &claimed, std::unique_ptr<State> *out) {
  try {
    texture::CatalogOptions c;
    c.gallery = gallery;
    c.index = options;
    *out = std::make_unique<State>(c);
  } catch (const std::invalid_argument &e) { /* the digests do not fit the budgets */
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                      ("textureid: properties 'digest-rows', 'gpu-memory' and 'host-memory': %s", e.what()), (nullptr));
    return false;
  } catch (const texture::GalleryError &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, OPEN_READ,
                      ("textureid: property 'gallery': cannot open '%s': %s", gallery.c_str(), e.what()), (nullptr));
    return false;
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND, ("textureid: property 'device': %s", e.what()), (nullptr));
    return false;
  }
  try {
    texture::Catalog &catalog = (*out)->catalog;
    catalog.load();
    if (!catalog.open_note().empty())
      GST_INFO_OBJECT(self, "gallery %s: %s", gallery.c_str(), catalog.open_note().c_str());
  } catch (const texture::IndexFull &e) {
    GST_ELEMENT_ERROR(
        self, RESOURCE, NO_SPACE_LEFT,
        ("textureid: %s: gallery '%s' does not fit: %s",
         (*out)->catalog.index().on_gpu() ? "properties 'gpu-memory' and 'host-memory'" : "property 'host-memory'",
         gallery.c_str(), e.what()),
        (nullptr));
    return false;
  } catch (const texture::GalleryError &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, OPEN_READ,
                      ("textureid: property 'gallery': cannot open '%s': %s", gallery.c_str(), e.what()), (nullptr));
    return false;
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, LIBRARY, INIT, ("textureid: gallery '%s': %s", gallery.c_str(), e.what()), (nullptr));
    return false;
  }
  if (mode == MODE_VERIFY && !(*out)->catalog.contains(claimed)) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                      ("textureid: property 'claimed-id': product '%s' is not enrolled in gallery '%s'",
                       claimed.c_str(), gallery.c_str()),
                      (nullptr));
    return false;
  }
  return true;
}

/* The settings and the gallery folder are checked first; then the base class chooses the path
 * (device=cuda without a GPU fails there) and the index is built in the element's context, streamed
 * from the gallery's pack (Gallery::for_each_entry: a bounded batch in memory): on the
 * GPU path its descriptors, buffers and stream live there, and cuda-device-id picks the GPU. */
static void post_bad_collections(GstTextureId *self, const std::string &bad) {
  GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                    ("textureid: property 'collections': '%s' is not a collection name (comma-separated names of "
                     "A-Z a-z 0-9 . _ -, none empty)",
                     bad.c_str()),
                    (nullptr));
}

static gboolean start(GstBaseTransform *trans) {
  GstTextureId *self = GST_TEXTURE_ID(trans);
  GstPrismCuda *cuda = cuda_of(self);
  GST_OBJECT_LOCK(self);
  const std::string gallery = self->gallery ? self->gallery : "";
  const std::string claimed = self->claimed_id ? self->claimed_id : "";
  const TextureIdMode mode = self->mode;
  const GstPrismDevice device = cuda->device;
  texture::IndexOptions options;
  options.gpu_budget = self->gpu_memory;
  options.host_budget = self->host_memory;
  options.host_digest_rows = self->digest_rows;
  options.stream_host_digests = self->stream_digests;
  const bool collections_ok = self->collections_valid;
  const std::string bad_collection = *self->bad_collection;
  GST_OBJECT_UNLOCK(self);
  if (!collections_ok) {
    post_bad_collections(self, bad_collection);
    return FALSE;
  }

  if (!texture::valid_host_digest_rows(options.host_digest_rows)) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                      ("textureid: property 'digest-rows': %d is not a divisor of 768 from 16 to 384 (0: no digests)",
                       options.host_digest_rows),
                      (nullptr));
    return FALSE;
  }

  if (gallery.empty()) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                      ("textureid: property 'gallery' is not set (a directory made by 'prism texture enroll "
                       "--gallery DIR IMAGE...')"),
                      (nullptr));
    return FALSE;
  }
  if (mode == MODE_VERIFY && claimed.empty()) {
    GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                      ("textureid: property 'claimed-id' is not set; mode=verify checks the frames against it"),
                      (nullptr));
    return FALSE;
  }
  std::error_code ec;
  if (!std::filesystem::exists(gallery, ec)) {
    GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND,
                      ("textureid: property 'gallery': '%s' does not exist (make it with 'prism texture enroll "
                       "--gallery %s IMAGE...')",
                       gallery.c_str(), gallery.c_str()),
                      (nullptr));
    return FALSE;
  }
  /* The folder is checked here (marker, format, entries/) so that a wrong gallery is named before
   * anything else; its entries are read into the index below. Frames are extracted with the
   * normalisation the gallery records. */
  texture::FeatureParams features;
  try {
    features.normalisation = texture::Gallery::open(gallery, false, texture::Gallery::Load::kNoEntries).normalisation();
  } catch (const texture::GalleryError &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, OPEN_READ,
                      ("textureid: property 'gallery': cannot open '%s': %s", gallery.c_str(), e.what()), (nullptr));
    return FALSE;
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(self, LIBRARY, INIT, ("textureid: gallery '%s': %s", gallery.c_str(), e.what()), (nullptr));
    return FALSE;
  }
  if (!GST_BASE_TRANSFORM_CLASS(gst_texture_id_parent_class)->start(trans)) return FALSE;

  /* kCuda fails and kAuto falls back to the CPU without an sm_80+ GPU; on the CPU path the base
   * class has said why already. */
  options.device = !cuda->use_cuda                   ? texture::Device::kCpu
                   : device == GST_PRISM_DEVICE_CUDA ? texture::Device::kCuda
                                                     : texture::Device::kAuto;
  std::unique_ptr<State> st;
  bool ok;
  {
    prism::GstPrismContextScope scope(cuda);
    ok = build_index(self, options, gallery, mode, claimed, &st);
#if defined(PRISM_HAVE_CUDA)
    if (ok && cuda->use_cuda) {
      try {
        st->extractor = std::make_unique<texture::CudaFeatureExtractor>(features);
        st->sharpness = std::make_unique<texture::CudaSharpness>();
      } catch (const std::exception &e) {
        GST_ELEMENT_ERROR(self, LIBRARY, INIT,
                          ("textureid: property 'device': the CUDA SIFT cannot start: %s", e.what()), (nullptr));
        ok = false;
      }
    }
#endif
    if (!ok) st.reset(); /* its GPU buffers are freed in the context */
  }
  if (!ok) {
    GST_BASE_TRANSFORM_CLASS(gst_texture_id_parent_class)->stop(trans);
    return FALSE;
  }
  if (st->catalog.size() == 0)
    GST_ELEMENT_WARNING(self, RESOURCE, SETTINGS,
                        ("textureid: gallery '%s' is empty: nothing can be identified", gallery.c_str()), (nullptr));
  if (device == GST_PRISM_DEVICE_AUTO && cuda->use_cuda && !st->catalog.index().on_gpu())
    GST_ELEMENT_INFO(self, RESOURCE, NOT_FOUND, ("no usable CUDA GPU; running on the CPU"),
                     ("%s", st->catalog.index().device_description().c_str()));
  GST_INFO_OBJECT(self, "gallery %s: %zu products, matching on %s", gallery.c_str(), st->catalog.size(),
                  st->catalog.index().device_description().c_str());
  st->gallery = gallery;
  st->features = features;
  delete self->state;
  self->state = st.release();
  return TRUE;
}

/* The base's stop() has joined the async worker (it runs process_ip on the state) and releases the
 * context the state is freed in after this. */
static gboolean stop(GstPrismCudaFilter *filter) {
  GstTextureId *self = GST_TEXTURE_ID(filter);
  prism::GstPrismContextScope scope(cuda_of(self));
  delete self->state;
  self->state = nullptr;
  return TRUE;
}

/* ---- per frame ---- */

/* Pixels are only read: a read map of shared memory copies nothing. */
static GstMapFlags map_flags_ip(GstPrismCudaFilter *, GstBuffer *) { return GST_MAP_READ; }

/* RGBA on the GPU path: the device grey of a CUDA frame, in the element's context. */
static gboolean set_info(GstPrismCudaFilter *filter, const GstVideoInfo *in, const GstVideoInfo *) {
#if defined(PRISM_HAVE_CUDA)
  GstTextureId *self = GST_TEXTURE_ID(filter);
  GstPrismCuda *cuda = cuda_of(self);
  if (!self->state || !cuda->use_cuda || GST_VIDEO_INFO_FORMAT(in) != GST_VIDEO_FORMAT_RGBA) return TRUE;
  try {
    self->state->device_grey.reserve(size_t(GST_VIDEO_INFO_WIDTH(in)) * size_t(GST_VIDEO_INFO_HEIGHT(in)),
                                     prism::GstPrismContextAlloc(cuda->context));
  } catch (const prism::gpu::CudaError &e) {
    GST_ELEMENT_ERROR(self, RESOURCE, NO_SPACE_LEFT, ("textureid: cannot allocate the GPU grey image"),
                      ("%s", e.what()));
    return FALSE;
  }
#else
  (void)filter, (void)in;
#endif
  return TRUE;
}

/* A due frame's features into *q, or false when it is not sharp enough (*sharp: the sharpness, when
 * measured). A host frame (system memory, or another context's GPU memory, which GstCudaMemory
 * downloads) is made grey on the host; a device frame (GPU memory of the element's context) is
 * read where it lies: the Y plane, or RGBA made grey on the extractor's stream; its min-sharpness
 * is measured there too (texture::CudaSharpness, equal to the host's bit for bit), so nothing but
 * two sums comes to the host. On the GPU path both go to the CUDA SIFT, which shrinks large frames
 * as the host does, so both give the same features. Throws. */
static bool frame_features(GstTextureId *self, State &st, const GstVideoInfo *info, const GstPrismFrame *frame,
                           guint64 index, double min_sharpness, double *sharp, double *features_ms,
                           texture::Features *q) {
  const int W = GST_VIDEO_INFO_WIDTH(info), H = GST_VIDEO_INFO_HEIGHT(info);
  auto sharp_enough = [&](double measured) {
    *sharp = measured;
    if (*sharp >= min_sharpness) return true;
    GST_DEBUG_OBJECT(self, "frame %" G_GUINT64_FORMAT ": sharpness %.1f < min-sharpness %.1f, not identified", index,
                     *sharp, min_sharpness);
    return false;
  };
  if (!frame->device) {
    const cv::Mat grey = prism::frame_grey(info, frame->data[0], size_t(frame->stride[0]), st.grey);
    if (min_sharpness > 0 && !sharp_enough(texture::sharpness(grey))) return false;
    const auto t0 = std::chrono::steady_clock::now();
#if defined(PRISM_HAVE_CUDA)
    *q = st.extractor ? st.extractor->extract(grey) : texture::extract_features(grey, st.features);
#else
    *q = texture::extract_features(grey, st.features);
#endif
    *features_ms = prism::ms_since(t0);
    return true;
  }
#if defined(PRISM_HAVE_CUDA)
  if (!st.extractor) throw std::logic_error("a device frame without the CUDA SIFT");
  texture::CudaFeatureExtractor &extractor = *st.extractor;
  const cudaStream_t stream = extractor.stream();
  const auto t0 = std::chrono::steady_clock::now();
  const uint8_t *grey = frame->data[0];
  size_t pitch = size_t(frame->stride[0]);
  if (GST_VIDEO_INFO_FORMAT(info) == GST_VIDEO_FORMAT_RGBA) {
    if (st.device_grey.size() < size_t(W) * size_t(H)) throw std::logic_error("RGBA frame without its grey buffer");
    texture::grey_from_rgba_cuda(grey, pitch, W, H, st.device_grey.data(), size_t(W), stream);
    grey = st.device_grey.data();
    pitch = size_t(W);
  }
  if (min_sharpness > 0 && !sharp_enough(st.sharpness->measure(grey, pitch, W, H, stream))) return false;
  *q = extractor.extract_device(grey, pitch, W, H);
  *features_ms = prism::ms_since(t0);
  return true;
#else
  (void)W, (void)H;
  throw std::logic_error("a device frame in a build without CUDA");
#endif
}

/* A frame on the host or, with CUDA caps on the GPU path, in GPU memory (frame_features). On the GPU
 * path the base class has pushed the element's context, so SIFT and the index run in it. In async
 * mode this runs on the base class's worker with its own buffer of the frame (the frame's memory,
 * only read; the meta added here go on a later frame), and frames that came meanwhile are counted
 * by the base class: the frame number counts them too, so `interval` counts every frame. */
static GstFlowReturn process_ip(GstPrismCudaFilter *filter, GstBuffer *buf, const GstPrismFrame *pixels) {
  GstTextureId *self = GST_TEXTURE_ID(filter);
  State &st = *self->state;
  const guint64 frame = gst_prism_cuda_filter_frame_number(filter);
  GST_OBJECT_LOCK(self);
  const guint interval = self->interval;
  const double min_sharpness = self->min_sharpness;
  const TextureIdMode mode = self->mode;
  const std::string claimed = self->claimed_id ? self->claimed_id : "";
  texture::SearchParams params;
  params.min_inliers = self->min_inliers;
  params.min_significance = self->min_significance;
  params.shortlist = self->shortlist;
  params.digest_candidates = self->digest_candidates;
  const bool collections_ok = self->collections_valid;
  std::string bad_collection;
  if (collections_ok)
    params.collections = *self->collection_names;
  else
    bad_collection = *self->bad_collection;
  GST_OBJECT_UNLOCK(self);
  if (!collections_ok) {  // set so while playing
    post_bad_collections(self, bad_collection);
    return GST_FLOW_ERROR;
  }

  /* Due when `interval` frames have passed since the last identification (every frame for 0); a due
   * frame that is not sharp enough is skipped and the next one tried. */
  if (interval > 0 && st.attempted && frame - st.last_attempt < interval) return GST_FLOW_OK;

  const GstVideoInfo *info = gst_prism_cuda_filter_in_info(filter);
  const int W = GST_VIDEO_INFO_WIDTH(info), H = GST_VIDEO_INFO_HEIGHT(info);
  texture::SearchResult r;
  double sharp = -1, features_ms = 0;
  try {
    texture::Features q;
    if (!frame_features(self, st, info, pixels, frame, min_sharpness, &sharp, &features_ms, &q)) return GST_FLOW_OK;
    if (mode == MODE_VERIFY) {
      if (!st.catalog.contains(claimed)) {
        GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS,
                          ("textureid: property 'claimed-id': product '%s' is not enrolled in gallery '%s'",
                           claimed.c_str(), st.gallery.c_str()),
                          (nullptr));
        return GST_FLOW_ERROR;
      }
      r = st.catalog.verify(q, claimed, params);
    } else {
      r = st.catalog.search(q, params);
    }
  } catch (const std::exception &e) {
    GST_ELEMENT_ERROR(
        self, LIBRARY, FAILED,
        ("textureid: frame %" G_GUINT64_FORMAT "%s: %s", frame, pixels->device ? " (GPU memory)" : "", e.what()),
        (nullptr));
    return GST_FLOW_ERROR;
  }
  st.attempted = true;
  st.last_attempt = frame;

  const texture::Candidate &b = r.best;
  const std::string id = b.index >= 0 ? b.id : "";
  const double latency = features_ms + r.match_ms + r.verify_ms;
  GST_DEBUG_OBJECT(self,
                   "frame %" G_GUINT64_FORMAT
                   " (%s): %s '%s', %d inliers of %d matches (significance %.2f), %.1f ms "
                   "(features %.1f, match %.1f, verify %.1f)",
                   frame, mode == MODE_VERIFY ? "verify" : "search", r.identified ? "identified" : "not identified",
                   id.c_str(), b.geometry.inliers, b.geometry.matches, b.significance, latency, features_ms, r.match_ms,
                   r.verify_ms);

  /* Where the gallery image lies in the frame, when identified: the frame's own pixels (keypoints
   * are reported unshrunk), gallery -> frame (the inverse of the verification's homography). */
  const texture::GalleryInQuery placed =
      r.identified ? texture::gallery_in_query(b.geometry.homography, b.gallery_size) : texture::GalleryInQuery{};
  auto fields = [&](GstStructure *s) {
    gst_structure_set(s, "id", G_TYPE_STRING, id.c_str(), "identified", G_TYPE_BOOLEAN, (gboolean)r.identified,
                      "inliers", G_TYPE_INT, b.geometry.inliers, "matches", G_TYPE_INT, b.geometry.matches, "score",
                      G_TYPE_DOUBLE, b.significance, "latency-ms", G_TYPE_DOUBLE, latency, nullptr);
    if (!placed.valid) return;
    double quad[8];
    for (int i = 0; i < 4; ++i) quad[2 * i] = placed.quad[i].x, quad[2 * i + 1] = placed.quad[i].y;
    gst_prism_structure_set_doubles(s, "homography", placed.homography.val, 9);
    gst_prism_structure_set_doubles(s, "quad", quad, 8);
  };
  /* The inliers' box in frame pixels, rounded outwards and clipped; the whole frame without one. */
  int x0 = 0, y0 = 0, x1 = W, y1 = H;
  if (r.identified) {
    const cv::Rect2f &qb = b.geometry.query_box;
    if (qb.width > 0 && qb.height > 0) {
      x0 = std::clamp((int)std::floor(qb.x), 0, W);
      y0 = std::clamp((int)std::floor(qb.y), 0, H);
      x1 = std::clamp((int)std::ceil(qb.x + qb.width), x0, W);
      y1 = std::clamp((int)std::ceil(qb.y + qb.height), y0, H);
      if (x1 == x0 || y1 == y0) x0 = 0, y0 = 0, x1 = W, y1 = H;
    }
    GstVideoRegionOfInterestMeta *m =
        gst_buffer_add_video_region_of_interest_meta(buf, "texture", x0, y0, x1 - x0, y1 - y0);
    GstStructure *p = gst_structure_new_empty("textureid");
    fields(p);
    gst_video_region_of_interest_meta_add_param(m, p);
  }
  GstStructure *s = gst_prism_frame_message_new("textureid", gst_prism_cuda_filter_frame_segment(filter), buf, frame);
  gst_structure_set(s, "mode", G_TYPE_STRING, mode == MODE_VERIFY ? "verify" : "search", nullptr);
  fields(s);
  if (r.identified)
    gst_structure_set(s, "x", G_TYPE_INT, x0, "y", G_TYPE_INT, y0, "width", G_TYPE_INT, x1 - x0, "height", G_TYPE_INT,
                      y1 - y0, nullptr);
  if (sharp >= 0) gst_structure_set(s, "sharpness", G_TYPE_DOUBLE, sharp, nullptr);
  gst_prism_cuda_filter_post_frame_message(filter, s);
  return GST_FLOW_OK;
}

static void finalize(GObject *object) {
  GstTextureId *self = GST_TEXTURE_ID(object);
  g_free(self->gallery);
  g_free(self->claimed_id);
  g_free(self->collections);
  delete self->collection_names;
  delete self->bad_collection;
  delete self->state;
  G_OBJECT_CLASS(gst_texture_id_parent_class)->finalize(object);
}

static void gst_texture_id_class_init(GstTextureIdClass *klass) {
  GObjectClass *oc = G_OBJECT_CLASS(klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS(klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS(klass);
  GstPrismCudaFilterClass *filter_class = GST_PRISM_CUDA_FILTER_CLASS(klass);

  oc->set_property = set_property;
  oc->get_property = get_property;
  oc->finalize = finalize;
  const GParamFlags ready = (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
  const GParamFlags playing = (GParamFlags)(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING);
  const texture::SearchParams defaults;
  auto install = [&](guint id, GParamSpec *p) { g_object_class_install_property(oc, id, p); };
  install(PROP_GALLERY,
          g_param_spec_string("gallery", "Gallery",
                              "The gallery directory, made by 'prism texture enroll --gallery DIR IMAGE...' (required; "
                              "read and indexed when the element starts)",
                              nullptr, ready));
  install(PROP_MODE,
          g_param_spec_enum("mode", "Mode",
                            "search: which enrolled texture is shown (1:M); verify: is it 'claimed-id' (1:1)",
                            GST_TYPE_TEXTURE_ID_MODE, MODE_SEARCH, ready));
  install(PROP_CLAIMED_ID,
          g_param_spec_string("claimed-id", "Claimed id",
                              "mode=verify: the enrolled product id the frames are checked against (required)", nullptr,
                              playing));
  install(PROP_INTERVAL,
          g_param_spec_uint("interval", "Interval",
                            "Identify every N frames (from frame 0); 0: every frame that passes min-sharpness. A "
                            "due frame that is not sharp enough is skipped and the next one tried",
                            0, G_MAXUINT, kDefaultInterval, playing));
  install(PROP_MIN_SHARPNESS,
          g_param_spec_double("min-sharpness", "Minimum sharpness",
                              "Identify a frame only when the variance of its grey Laplacian is at least this "
                              "(0: off; blurred frames score low)",
                              0.0, G_MAXDOUBLE, 0.0, playing));
  install(PROP_MIN_INLIERS,
          g_param_spec_int("min-inliers", "Minimum inliers",
                           "RANSAC inliers needed to identify (or accept a claim), besides min-significance", 4, 100000,
                           defaults.min_inliers, playing));
  install(PROP_MIN_SIGNIFICANCE,
          g_param_spec_double("min-significance", "Minimum significance",
                              "Decision threshold on the inliers' significance, -log10 of the chance that a wrong "
                              "product is as consistent (the 'score' field); the default is calibrated at a 1:1 "
                              "false-accept rate of 0.1% (docs/TEXTUREID.md)",
                              0.0, 1000.0, defaults.min_significance, playing));
  install(PROP_SHORTLIST,
          g_param_spec_int("shortlist", "Shortlist",
                           "mode=search: best-scoring gallery images verified geometrically per identification", 1,
                           1024, defaults.shortlist, playing));
  install(PROP_COLLECTIONS,
          g_param_spec_string("collections", "Collections",
                              "mode=search: search only the products of these collections (comma-separated names "
                              "given at enrolment with 'prism texture enroll --collection'); empty: the whole gallery",
                              nullptr, playing));
  install(PROP_GPU_MEMORY,
          g_param_spec_int64("gpu-memory", "GPU memory",
                             "Bytes of GPU memory for the gallery's descriptors (101,376 per image, their norms "
                             "included; the newest images live there, older ones in host memory); -1: the free "
                             "memory less 2 GiB; 0: none",
                             -1, G_MAXINT64, texture::kDefaultBudget, ready));
  install(PROP_HOST_MEMORY,
          g_param_spec_int64("host-memory", "Host memory",
                             "Bytes of host memory (pinned on the GPU path) for the descriptors beyond gpu-memory; "
                             "-1: half of the available memory; a gallery larger than both fails at start naming them",
                             -1, G_MAXINT64, texture::kDefaultBudget, ready));
  install(PROP_DIGEST_ROWS,
          g_param_spec_int("digest-rows", "Digest rows",
                           "Keep a digest of every host-memory image (the N of its largest keypoints; N divides 768, "
                           "16..384) in GPU memory, out of gpu-memory, for searches with digest-candidates; 0: none",
                           0, 384, 0, ready));
  install(PROP_DIGEST_CANDIDATES,
          g_param_spec_int("digest-candidates", "Digest candidates",
                           "mode=search with digest-rows: match the host-memory images' digests and re-match exactly "
                           "only the images of the K best digest slots (approximate, not bound by PCIe); 0: exact",
                           0, G_MAXINT, 0, playing));
  install(PROP_STREAM_DIGESTS,
          g_param_spec_boolean("stream-digests", "Stream digests",
                               "With digest-rows: keep no digests; each digest search copies the host-memory images' "
                               "first digest-rows rows across PCIe instead (no memory, the same answers, PCIe-bound)",
                               FALSE, ready));
  /* About 1 s per identification on 2 CPU cores: a live source must not wait for it. */
  gst_prism_cuda_filter_class_install_async(oc, PROP_ASYNC, PROP_FRAMES_SKIPPED, TRUE);
  gst_prism_cuda_filter_class_install_camera(oc, PROP_CAMERA, PROP_CAMERA_URI);

  gst_element_class_set_static_metadata(
      element_class, "Prism texture identification", "Filter/Analyzer/Video",
      "Identifies the texture shown in a video against an enrolled gallery (SIFT/RootSIFT, ratio-test matching, "
      "RANSAC verification): 1:M search or 1:1 verify, every N frames or when sharp; results as region-of-interest "
      "meta and 'prism-textureid' element messages. Pixels pass through.",
      "Prism developers");
  /* NV12/I420/RGBA in memory:CUDAMemory (read in place on the GPU path), every grey-readable format
   * in system memory. */
  gst_prism_cuda_filter_class_add_pad_templates(element_class, FORMATS, CUDA_FORMATS);
  trans_class->start = GST_DEBUG_FUNCPTR(start);
  filter_class->stop = stop;
  /* In place, never passthrough: the base class hands process_ip a writable buffer for the meta (a
   * shallow copy when the input is shared: the pixels are only read, never copied). */
  filter_class->set_info = set_info;
  filter_class->process_ip = process_ip;
  filter_class->map_flags_ip = map_flags_ip;
  /* System memory is made grey on the host (cv::cvtColor) and goes to SIFT from there: no staging
   * of whole frames through the device. */
  filter_class->ip_host_frames = TRUE;
  GST_DEBUG_CATEGORY_INIT(gst_texture_id_debug, "textureid", 0, "Prism texture identification");
}

static void gst_texture_id_init(GstTextureId *self) {
  self->mode = MODE_SEARCH;
  self->interval = kDefaultInterval;
  self->min_sharpness = 0.0;
  const texture::SearchParams defaults;
  self->min_inliers = defaults.min_inliers;
  self->min_significance = defaults.min_significance;
  self->shortlist = defaults.shortlist;
  self->gpu_memory = texture::kDefaultBudget;
  self->host_memory = texture::kDefaultBudget;
  self->digest_rows = 0;
  self->digest_candidates = 0;
  self->stream_digests = FALSE;
  self->collection_names = new std::vector<std::string>();
  self->bad_collection = new std::string();
  self->collections_valid = TRUE;
}
