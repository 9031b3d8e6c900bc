// The Python module `prism`: the parts of Prism people script, as a thin pybind11 layer over the
// kernels' own API (no algorithm here).
//   - Gallery: the texture gallery (kernels/texture gallery.h, index.h): open or create, enrol from
//     an image file or a numpy array, search (top-k with scores), verify, update, delete, list; it
//     behaves as `prism texture` (tools/prism/texture_command.cpp) does.
//   - seamless_clone: Poisson cloning on numpy arrays (kernels/poisson, the CPU path: OpenCV 4.6's
//     cv::seamlessClone bit for bit, with the box clipped where OpenCV throws).
//   - load_grey: an image file as 8-bit grey, decoded by GStreamer as the CLI decodes it.
// C++ exceptions become Python ones with the C++ message: GalleryError (and IndexFull) for the
// gallery, ValueError for bad arguments (std::invalid_argument), TypeError for arrays of the wrong
// type or shape, RuntimeError otherwise. Long calls release the GIL.
#include <gst/gst.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <opencv2/core.hpp>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "common/grey.h"
#include "gst/prism/gstprismimagefile.h"
#include "poisson/seamless_clone.h"
#include "texture/catalog.h"
#include "texture/gallery.h"
#include "texture/index.h"

namespace py = pybind11;

namespace prism::python {
namespace {

using texture::Gallery;
using texture::GalleryEntry;
using texture::GalleryError;

// ---- arguments ----

// A numpy array of uint8 with 2 dimensions, or 3 whose last is one of `channels`, made C-contiguous
// (a copy only when it is not). Anything else is a TypeError naming the argument: converting
// float or int data to bytes silently would give garbage.
py::array_t<uint8_t, py::array::c_style> u8_image(const py::handle& obj, const char* what,
                                                  std::initializer_list<int> channels) {
  if (!py::isinstance<py::array>(obj))
    throw py::type_error(std::string(what) + ": expected a numpy array of uint8 or a file path, got " +
                         std::string(py::str(py::type::of(obj).attr("__name__"))));
  const auto a = py::reinterpret_borrow<py::array>(obj);
  if (!a.dtype().is(py::dtype::of<uint8_t>()))
    throw py::type_error(std::string(what) + ": expected dtype uint8, got " + std::string(py::str(a.dtype())));
  std::string shapes;
  for (int c : channels) shapes += ", (H, W, " + std::to_string(c) + ")";
  const bool ok = a.ndim() == 2 ||
                  (a.ndim() == 3 && std::find(channels.begin(), channels.end(), int(a.shape(2))) != channels.end());
  if (!ok) {
    std::string shape;
    for (py::ssize_t i = 0; i < a.ndim(); ++i) shape += (i ? ", " : "") + std::to_string(a.shape(i));
    throw py::type_error(std::string(what) + ": expected shape (H, W)" + shapes + ", got (" + shape + ")");
  }
  if (a.shape(0) < 1 || a.shape(1) < 1) throw py::value_error(std::string(what) + ": the image is empty");
  return py::array_t<uint8_t, py::array::c_style>::ensure(a);
}

int channels_of(const py::array& a) { return a.ndim() == 2 ? 1 : int(a.shape(2)); }

// A header over the array's pixels (no copy), only read: valid while the array lives. (data(), not
// mutable_data(): a read-only array, e.g. np.frombuffer of bytes, is a valid input.)
cv::Mat mat_of(const py::array_t<uint8_t, py::array::c_style>& a) {
  return cv::Mat(int(a.shape(0)), int(a.shape(1)), CV_8UC(channels_of(a)), const_cast<uint8_t*>(a.data()));
}

void ensure_gstreamer() {
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    GError* error = nullptr;
    if (!gst_init_check(nullptr, nullptr, &error)) {
      failure = std::string("GStreamer failed to initialise: ") + (error ? error->message : "unknown reason");
      g_clear_error(&error);
    }
  });
  if (!failure.empty()) throw std::runtime_error(failure);
}

// The CLI's image loader (texture_util.cpp load_grey): GStreamer decodes, grey = OpenCV's BGR2GRAY.
// Called without the GIL.
cv::Mat load_grey_file(const std::string& path) {
  ensure_gstreamer();
  ImageFile image;
  GError* error = nullptr;
  if (!image_file_load_grey(path.c_str(), &image, &error)) {
    const std::string why = error ? error->message : path + ": cannot decode";
    g_clear_error(&error);
    throw std::runtime_error(why);
  }
  return cv::Mat(image.height, image.width, CV_8UC1, image.pixels.data()).clone();
}

// The CLI's features of an image file (texture_util.cpp file_features): a JPEG whose longer side is
// at least twice params.max_side decoded reduced by libjpeg's DCT scaling, the features put back in
// the file's own pixels (texture::to_original_pixels). Called without the GIL.
texture::Features file_features(const std::string& path, const texture::FeatureParams& params) {
  ensure_gstreamer();
  ImageFile image;
  GError* error = nullptr;
  if (!image_file_load_grey(path.c_str(), &image, &error, kImageFileMaxPixels, params.max_side)) {
    const std::string why = error ? error->message : path + ": cannot decode";
    g_clear_error(&error);
    throw std::runtime_error(why);
  }
  texture::Features f =
      texture::extract_features(cv::Mat(image.height, image.width, CV_8UC1, image.pixels.data()), params);
  texture::to_original_pixels(f, image.file_width, image.file_height, image.reduction);
  return f;
}

std::optional<std::string> path_of(const py::handle& obj) {
  if (py::isinstance<py::str>(obj)) return obj.cast<std::string>();
  if (py::hasattr(obj, "__fspath__")) return py::module_::import("os").attr("fspath")(obj).cast<std::string>();
  return std::nullopt;
}

// Features of `image` (a path or an array), the work done without the GIL. `source` receives the
// path, or a description of the array.
// `params`: the gallery's normalisation (its record: entries and queries must use the same).
texture::Features features_of(const py::handle& image, std::string* source, const texture::FeatureParams& params) {
  if (auto path = path_of(image)) {
    *source = *path;
    py::gil_scoped_release release;
    return file_features(*path, params);
  }
  auto a = u8_image(image, "image", {1, 3, 4});
  *source = "numpy array " + std::to_string(a.shape(0)) + "x" + std::to_string(a.shape(1)) + "x" +
            std::to_string(channels_of(a));
  const cv::Mat m = mat_of(a);
  py::gil_scoped_release release;
  return texture::extract_features(m, params);
}

gpu::Device device_of(const std::string& d) {
  if (d == "auto") return gpu::Device::kAuto;
  if (d == "cpu") return gpu::Device::kCpu;
  if (d == "cuda") return gpu::Device::kCuda;
  throw std::invalid_argument("device: expected 'auto', 'cpu' or 'cuda', not '" + d + "'");
}

// The CLI's ranges for the search options (texture_command.cpp parse).
texture::SearchParams search_params(int top, const std::vector<std::string>& collections, double min_significance,
                                    int min_inliers, double ratio, int shortlist) {
  auto range = [](const char* name, double v, double lo, double hi) {
    if (!(v >= lo && v <= hi))
      throw std::invalid_argument(std::string(name) + ": expected a value in [" + cv::format("%g", lo) + ", " +
                                  cv::format("%g", hi) + "], not " + cv::format("%g", v));
  };
  range("top", top, 1, 1000);
  range("min_significance", min_significance, 0, 1000);
  range("min_inliers", min_inliers, 4, 100000);
  range("ratio", ratio, 0.01, 1);
  range("shortlist", shortlist, 1, 1000);
  for (const auto& c : collections)
    if (!texture::valid_collection(c) || c.empty())
      throw std::invalid_argument("collections: invalid collection '" + c + "'");
  texture::SearchParams p;
  p.min_significance = min_significance;
  p.min_inliers = min_inliers;
  p.ratio = float(ratio);
  p.shortlist = shortlist;
  p.collections = collections;
  return p;
}

// ---- results ----

struct PyCandidate {
  std::string id;
  int matches = 0, ratio_matches = 0, inliers = 0;
  double significance = 0;
  bool accepted = false;
  py::array_t<double> homography;  // 3x3, query -> gallery image
  py::tuple query_box;             // (x, y, width, height) of the inliers in the query image
};

struct PyResult {
  bool identified = false;
  std::optional<PyCandidate> best;  // None when nothing was searched
  std::vector<PyCandidate> candidates;
  size_t searched = 0;
  double match_ms = 0, verify_ms = 0;
};

PyCandidate candidate_of(const texture::Candidate& c, const texture::SearchParams& p) {
  PyCandidate out;
  out.id = c.id;
  out.matches = c.geometry.matches;
  out.ratio_matches = c.score;
  out.inliers = c.geometry.inliers;
  out.significance = c.significance;
  out.accepted = texture::accepted(c, p);
  out.homography = py::array_t<double>({3, 3});
  auto h = out.homography.mutable_unchecked<2>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) h(i, j) = c.geometry.homography(i, j);
  const cv::Rect2f& b = c.geometry.query_box;
  out.query_box = py::make_tuple(b.x, b.y, b.width, b.height);
  return out;
}

PyResult result_of(const texture::SearchResult& r, const texture::SearchParams& p, int top) {
  PyResult out;
  out.identified = r.identified;
  if (r.best.index >= 0) out.best = candidate_of(r.best, p);
  for (size_t i = 0; i < r.candidates.size() && int(i) < top; ++i)
    out.candidates.push_back(candidate_of(r.candidates[i], p));
  out.searched = r.searched;
  out.match_ms = r.match_ms;
  out.verify_ms = r.verify_ms;
  return out;
}

// ---- the gallery ----

// One gallery directory and its index (a texture::Catalog), kept in step with this object's writes:
// a write is durable in the gallery, then indexed, and taken back out of the gallery when the index
// refuses it. The object sees the gallery as it was opened plus its own writes (writes by other
// processes are seen after reopening), as one `prism texture` command does. Calls are serialised:
// one object may be shared between threads.
class PyGallery {
 public:
  // `normalise` empty: a new gallery records the CLI's default (poor_light_normalisation); an
  // existing one keeps its record. Named: a new gallery records it; an existing one must agree.
  PyGallery(const std::string& path, bool create, const std::string& device, int64_t gpu_memory, int64_t host_memory,
            const std::string& normalise) try
      : catalog_(options_of(path, create, device, gpu_memory, host_memory, normalise)) {
    catalog_.load();
  } catch (const texture::NormalisationMismatch& e) {  // a bad argument: ValueError
    throw std::invalid_argument(e.what());
  }

  std::string path() const { return catalog_.dir().string(); }
  std::string pack_note() const { return catalog_.open_note(); }
  // The gallery's recorded normalisation, as `prism texture` extracts with it.
  texture::FeatureParams feature_params() const { return catalog_.feature_params(); }
  // Under the lock as every other call: another thread may be enrolling. The GIL is released while
  // waiting, as the writers hold the lock without it.
  size_t size() const {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex_);
    return catalog_.size();
  }
  bool contains(const std::string& id) const {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex_);
    return catalog_.contains(id);
  }

  // Enrols `image` as `id` (GalleryError when enrolled already, unless replace; then its
  // collection is kept unless one is given: `prism texture enroll --update`).
  int enroll(const std::string& id, const py::handle& image, const std::optional<std::string>& collection, bool replace,
             const std::optional<std::string>& source) {
    check_id(id);
    GalleryEntry e = make_entry(id, image, collection, source);
    const int n = e.features.count();
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex_);
    if (replace && catalog_.contains(id)) {
      if (!collection) e.collection = catalog_.read(id).collection;
      catalog_.update(e);
    } else {
      catalog_.add(e);
    }
    return n;
  }

  // Replaces an enrolled product's image (GalleryError when not enrolled): `prism texture update`.
  int update(const std::string& id, const py::handle& image, const std::optional<std::string>& collection,
             const std::optional<std::string>& source) {
    check_id(id);
    GalleryEntry e = make_entry(id, image, collection, source);
    const int n = e.features.count();
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!collection && catalog_.contains(id)) e.collection = catalog_.read(id).collection;
    catalog_.update(e);
    return n;
  }

  void remove(const std::string& id) {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!catalog_.remove(id)) throw texture::GalleryError("product '" + id + "' is not enrolled");
  }

  // The products this object holds, as stored, sorted by id: the gallery's pack streamed once
  // (Catalog::for_each_entry), each entry's descriptors dropped as it passes.
  py::list entries() const {
    struct Listed {
      std::string id, collection, source;
      int features = 0, width = 0, height = 0, format = 0;
      int64_t enrolled_unix = 0;
    };
    std::vector<Listed> all;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);  // no write meanwhile, as for_each_entry asks
      all.reserve(catalog_.size());
      catalog_.for_each_entry([&](GalleryEntry&& e) {
        all.push_back({std::move(e.id), std::move(e.collection), std::move(e.source), e.features.count(),
                       e.features.width, e.features.height, e.version, e.enrolled_unix});
      });
    }
    py::list out;
    for (const Listed& e : all) {
      py::dict d;
      d["id"] = e.id;
      d["features"] = e.features;
      d["width"] = e.width;
      d["height"] = e.height;
      d["enrolled_unix"] = e.enrolled_unix;
      d["collection"] = e.collection.empty() ? py::object(py::none()) : py::object(py::str(e.collection));
      d["format"] = e.format;
      d["source"] = e.source;
      out.append(d);
    }
    return out;
  }

  PyResult search(const py::handle& image, int top, const std::vector<std::string>& collections,
                  double min_significance, int min_inliers, double ratio, int shortlist) {
    const auto p = search_params(top, collections, min_significance, min_inliers, ratio, shortlist);
    std::string source;
    const texture::Features q = features_of(image, &source, feature_params());
    texture::SearchResult r;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      r = catalog_.search(q, p);
    }
    return result_of(r, p, top);
  }

  PyResult verify(const std::string& id, const py::handle& image, double min_significance, int min_inliers,
                  double ratio) {
    const auto p = search_params(1, {}, min_significance, min_inliers, ratio, 1);
    std::string source;
    const texture::Features q = features_of(image, &source, feature_params());
    texture::SearchResult r;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      r = catalog_.verify(q, id, p);
    }
    return result_of(r, p, 1);
  }

  std::string device() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex_);
    return catalog_.index().device_description();
  }

 private:
  static texture::CatalogOptions options_of(const std::string& path, bool create, const std::string& device,
                                            int64_t gpu_memory, int64_t host_memory, const std::string& normalise) {
    texture::CatalogOptions o;
    o.gallery = path;
    o.writable = true;
    o.create = create;
    o.setting = "normalise";
    if (!normalise.empty()) o.normalisation = texture::parse_normalisation(normalise);
    o.index.device = device_of(device);
    o.index.gpu_budget = gpu_memory;
    o.index.host_budget = host_memory;
    return o;
  }

  static void check_id(const std::string& id) {
    if (!texture::valid_product_id(id))
      throw std::invalid_argument("id: '" + id +
                                  "' is not a valid product id (1..128 of A-Z a-z 0-9 . _ -, not starting "
                                  "with . or -)");
  }

  GalleryEntry make_entry(const std::string& id, const py::handle& image, const std::optional<std::string>& collection,
                          const std::optional<std::string>& source) const {
    if (collection && !texture::valid_collection(*collection))
      throw std::invalid_argument("collection: invalid collection '" + *collection + "'");
    GalleryEntry e;
    e.id = id;
    e.features = features_of(image, &e.source, feature_params());
    if (source) e.source = *source;
    e.collection = collection.value_or("");
    return e;
  }

  mutable std::mutex mutex_;
  texture::Catalog catalog_;
};

// ---- seamless_clone ----

poisson::CloneMode mode_of(const py::handle& mode) {
  if (py::isinstance<py::str>(mode)) {
    const std::string m = mode.cast<std::string>();
    if (m == "normal") return poisson::CloneMode::Normal;
    if (m == "mixed") return poisson::CloneMode::Mixed;
    if (m == "monochrome" || m == "monochrome_transfer") return poisson::CloneMode::MonochromeTransfer;
    throw std::invalid_argument("mode: expected 'normal', 'mixed' or 'monochrome', not '" + m + "'");
  }
  if (py::isinstance<py::int_>(mode)) {  // cv2.NORMAL_CLONE, cv2.MIXED_CLONE, cv2.MONOCHROME_TRANSFER
    const int m = mode.cast<int>();
    if (m >= 1 && m <= 3) return poisson::CloneMode(m);
    throw std::invalid_argument("mode: expected 1 (NORMAL_CLONE), 2 (MIXED_CLONE) or 3 (MONOCHROME_TRANSFER), not " +
                                std::to_string(m));
  }
  throw py::type_error("mode: expected a string or an int");
}

// The overlay is only read; the background is our own output array.
poisson::PackedImage packed(const py::array_t<uint8_t, py::array::c_style>& a, bool rgb) {
  const int c = channels_of(a);
  return {const_cast<uint8_t*>(a.data()),
          int(a.shape(1)),
          int(a.shape(0)),
          int64_t(a.shape(1)) * c,
          c,
          rgb ? 0 : 2,
          1,
          rgb ? 2 : 0};
}

py::array seamless_clone(const py::handle& src, const py::handle& dst, const py::handle& mask,
                         std::pair<int, int> center, const py::handle& mode, const std::string& order) {
  if (order != "bgr" && order != "rgb")
    throw std::invalid_argument("order: expected 'bgr' or 'rgb', not '" + order + "'");
  auto overlay = u8_image(src, "src", {3, 4});
  auto background_in = u8_image(dst, "dst", {3, 4});
  auto mask_in = u8_image(mask, "mask", {1, 3, 4});
  if (overlay.ndim() != 3) throw py::type_error("src: expected shape (H, W, 3) or (H, W, 4), got a 2-D array");
  if (background_in.ndim() != 3) throw py::type_error("dst: expected shape (H, W, 3) or (H, W, 4), got a 2-D array");
  if (mask_in.shape(0) != overlay.shape(0) || mask_in.shape(1) != overlay.shape(1))
    throw std::invalid_argument("mask: " + std::to_string(mask_in.shape(1)) + "x" + std::to_string(mask_in.shape(0)) +
                                " is not the size of src, " + std::to_string(overlay.shape(1)) + "x" +
                                std::to_string(overlay.shape(0)));
  const poisson::CloneMode clone_mode = mode_of(mode);
  const bool rgb = order == "rgb";
  // The output: a copy of dst, cloned into in place.
  py::array_t<uint8_t, py::array::c_style> out(
      std::vector<py::ssize_t>(background_in.shape(), background_in.shape() + 3));
  std::memcpy(out.mutable_data(), background_in.data(), size_t(background_in.size()));
  // A colour mask becomes grey as OpenCV makes it (BGR2GRAY, in the array's channel order).
  const int mc = channels_of(mask_in);
  std::vector<uint8_t> grey;
  const uint8_t* mask_data = mask_in.data();
  if (mc > 1) {
    grey.resize(size_t(mask_in.shape(0)) * mask_in.shape(1));
    for (size_t i = 0; i < grey.size(); ++i) {
      const uint8_t* p = mask_in.data() + i * mc;
      grey[i] = rgb ? grey_bgr(p[2], p[1], p[0]) : grey_bgr(p[0], p[1], p[2]);
    }
    mask_data = grey.data();
  }
  poisson::CloneJob job;
  job.background = packed(out, rgb);
  job.overlay = packed(overlay, rgb);
  job.mask = {mask_data, int(mask_in.shape(1)), int(mask_in.shape(0)), int64_t(mask_in.shape(1)), 1};
  job.mode = clone_mode;
  {
    py::gil_scoped_release release;
    job.placement = poisson::place(poisson::mask_box(job.mask), center.first, center.second, job.background.width,
                                   job.background.height);
    poisson::clone_cpu(job);
  }
  return std::move(out);
}

py::array load_grey(const py::handle& path_obj) {
  const auto path = path_of(path_obj);
  if (!path) throw py::type_error("path: expected a str or os.PathLike");
  cv::Mat m;
  {
    py::gil_scoped_release release;
    m = load_grey_file(*path);
  }
  py::array_t<uint8_t> out({m.rows, m.cols});
  for (int y = 0; y < m.rows; ++y) std::memcpy(out.mutable_data(y, 0), m.ptr(y), size_t(m.cols));
  return std::move(out);
}

}  // namespace
}  // namespace prism::python

PYBIND11_MODULE(prism, m) {
  using namespace prism::python;
  namespace tx = prism::texture;
  m.doc() = "Prism: the texture gallery (enrol, search, verify) and Poisson seamless cloning.";
  m.attr("__version__") = PRISM_VERSION;

  auto gallery_error = py::register_exception<tx::GalleryError>(m, "GalleryError", PyExc_RuntimeError);
  // The index's own errors are GalleryError in Python, as they were before the index had its own
  // types (an id twice, a broken index); IndexFull keeps its subclass. (Translators run last
  // registered first: IndexFull's before this one.)
  static PyObject* const gallery_error_type = gallery_error.ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tx::IndexError& e) {
      PyErr_SetString(gallery_error_type, e.what());
    }
  });
  py::register_exception<tx::IndexFull>(m, "IndexFull", gallery_error.ptr());
  py::register_exception<prism::gpu::CudaError>(m, "CudaError", PyExc_RuntimeError);

  py::class_<PyCandidate>(m, "Candidate", "A verified gallery product: its scores and the geometry found.")
      .def_readonly("id", &PyCandidate::id)
      .def_readonly("matches", &PyCandidate::matches, "one-to-one correspondences verified geometrically")
      .def_readonly("ratio_matches", &PyCandidate::ratio_matches,
                    "query features passing Lowe's ratio test (what ranks the shortlist)")
      .def_readonly("inliers", &PyCandidate::inliers, "RANSAC inliers of the homography")
      .def_readonly("significance", &PyCandidate::significance,
                    "the decision score: -log10 of the chance that a wrong product is as consistent")
      .def_readonly("accepted", &PyCandidate::accepted, "passes min_significance and min_inliers")
      .def_readonly("homography", &PyCandidate::homography, "3x3, query image -> gallery image")
      .def_readonly("query_box", &PyCandidate::query_box, "(x, y, width, height) of the inliers in the query")
      .def("__repr__", [](const PyCandidate& c) {
        return "Candidate(id=" + c.id + ", inliers=" + std::to_string(c.inliers) +
               ", matches=" + std::to_string(c.matches) + ", significance=" + cv::format("%.2f", c.significance) + ")";
      });

  py::class_<PyResult>(m, "SearchResult", "The answer of Gallery.search or Gallery.verify.")
      .def_readonly("identified", &PyResult::identified,
                    "search: the best candidate is accepted; verify: the claimed product is")
      .def_readonly("best", &PyResult::best, "the most significant candidate, or None")
      .def_readonly("candidates", &PyResult::candidates, "the verified candidates, most significant first (top)")
      .def_readonly("searched", &PyResult::searched, "products matched")
      .def_readonly("match_ms", &PyResult::match_ms)
      .def_readonly("verify_ms", &PyResult::verify_ms)
      .def("__bool__", [](const PyResult& r) { return r.identified; })
      .def("__repr__", [](const PyResult& r) {
        return std::string("SearchResult(identified=") + (r.identified ? "True" : "False") +
               ", best=" + (r.best ? r.best->id : "None") + ", searched=" + std::to_string(r.searched) + ")";
      });

  py::class_<PyGallery>(m, "Gallery", R"(A texture gallery directory (the one `prism texture` and textureid use).

Gallery(path, create=False, device="auto", gpu_memory=-1, host_memory=-1, normalise="")

create makes a new gallery in an absent or empty folder; it records normalise, the contrast
normalisation applied before SIFT ("none" or "clahe-CLIP-TILES"; "": clahe-4-8, as
`prism texture enroll`), and every enrol, search and verify applies the gallery's record. device is where searches match
("auto": the GPU when usable, else the CPU). gpu_memory/host_memory: bytes of descriptor slots
per tier (-1: the defaults of `prism texture`). Opening indexes every entry on that device (so a
device error is raised here). Writes are durable when they return, and an enrolment the index
refuses (IndexFull: the budgets are used) is taken back out of the gallery before the error is
raised. The object sees the gallery as opened plus its own writes; reopen it to see other
processes' writes.)")
      .def(py::init<const std::string&, bool, const std::string&, int64_t, int64_t, const std::string&>(),
           py::arg("path"), py::arg("create") = false, py::arg("device") = "auto",
           py::arg("gpu_memory") = tx::kDefaultBudget, py::arg("host_memory") = tx::kDefaultBudget,
           py::arg("normalise") = "")
      .def_property_readonly("path", &PyGallery::path)
      .def_property_readonly("pack_note", &PyGallery::pack_note,
                             "what opening said about the gallery's pack ('' when it was read as it was)")
      .def_property_readonly(
          "normalisation", [](const PyGallery& g) { return g.feature_params().normalisation.name(); },
          "the contrast normalisation the gallery records, e.g. 'clahe-4-8' or 'none'")
      .def_property_readonly("device", &PyGallery::device, "where searches match, e.g. 'cpu (...)'")
      .def("__len__", &PyGallery::size)
      .def("__contains__", &PyGallery::contains)
      .def("enroll", &PyGallery::enroll, py::arg("id"), py::arg("image"), py::arg("collection") = py::none(),
           py::arg("replace") = false, py::arg("source") = py::none(),
           "Enrols an image (a file path, or a uint8 array (H, W), (H, W, 3) BGR or (H, W, 4) BGRA) as product "
           "`id`; returns its feature count. An enrolled id raises GalleryError unless replace=True (which keeps "
           "its collection unless one is given).")
      .def("update", &PyGallery::update, py::arg("id"), py::arg("image"), py::arg("collection") = py::none(),
           py::arg("source") = py::none(), "Replaces an enrolled product's image; returns its feature count.")
      .def("delete", &PyGallery::remove, py::arg("id"), "Removes a product (GalleryError when not enrolled).")
      .def("list", &PyGallery::entries,
           "The enrolled products, sorted by id: dicts of id, features, width, height, enrolled_unix, collection, "
           "format, source.")
      .def("search", &PyGallery::search, py::arg("image"), py::arg("top") = 1,
           py::arg("collections") = std::vector<std::string>{}, py::arg("min_significance") = 3.6,
           py::arg("min_inliers") = 5, py::arg("ratio") = 0.8, py::arg("shortlist") = 8,
           "1:M: which product is this? Candidates holds up to `top` of the `shortlist` verified.")
      .def("verify", &PyGallery::verify, py::arg("id"), py::arg("image"), py::arg("min_significance") = 3.6,
           py::arg("min_inliers") = 5, py::arg("ratio") = 0.8,
           "1:1: is this product `id`? (GalleryError when it is not enrolled)");

  m.def("seamless_clone", &seamless_clone, py::arg("src"), py::arg("dst"), py::arg("mask"), py::arg("center"),
        py::arg("mode") = "normal", py::arg("order") = "bgr",
        R"(Poisson cloning of src into dst: cv2.seamlessClone's arguments and result.

src, dst: uint8 (H, W, 3) or (H, W, 4) arrays (order "bgr" or "rgb": only monochrome mode and colour
masks read it); mask: uint8, src's size, (H, W) or colour; center: (x, y) in dst where the centre
of the mask's box lands; mode: "normal", "mixed", "monochrome" or cv2's flag values 1, 2, 3.
Returns a new array like dst. The same result as OpenCV 4.6 bit for bit (CPU), except that a box
reaching outside dst is clipped where OpenCV raises.)");
  m.def("load_grey", &load_grey, py::arg("path"),
        "An image file as a uint8 (H, W) grey array, decoded by GStreamer as `prism texture` decodes it.");
}
