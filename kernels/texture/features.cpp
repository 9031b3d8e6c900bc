#include "texture/features.h"

#include <opencv2/features2d.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cassert>
#include <condition_variable>
#include <cstring>
#include <atomic>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <exception>
#include <stdexcept>
#include <thread>
#include <string>

#include "common/lease_pool.h"
#if defined(PRISM_HAVE_CUDA)
#include "image/jpeg_parallel.h"
#endif
#include "sift/sift.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif
#include "texture/detection_image.h"

namespace prism::texture {

namespace {

cv::Mat to_grey(const cv::Mat& image) {
  if (image.empty()) throw std::invalid_argument("extract_features: empty image");
  if (image.depth() != CV_8U) throw std::invalid_argument("extract_features: the image must be 8-bit");
  cv::Mat grey;
  switch (image.channels()) {
    case 1: return image;
    case 3: cv::cvtColor(image, grey, cv::COLOR_BGR2GRAY); return grey;
    case 4: cv::cvtColor(image, grey, cv::COLOR_BGRA2GRAY); return grey;
    default: throw std::invalid_argument("extract_features: the image must have 1, 3 or 4 channels");
  }
}

}  // namespace

const char* digest_order_name(DigestOrder o) {
  switch (o) {
    case DigestOrder::kStrongest: return "strongest";
    case DigestOrder::kSpread: return "spread";
    case DigestOrder::kLargest: return "largest";
  }
  return "?";
}

DigestOrder parse_digest_order(const std::string& name) {
  for (DigestOrder o : {DigestOrder::kStrongest, DigestOrder::kSpread, DigestOrder::kLargest})
    if (name == digest_order_name(o)) return o;
  throw std::invalid_argument("unknown digest order '" + name + "' (strongest, spread or largest)");
}

std::vector<int> digest_order(const Features& f, DigestOrder o, int first) {
  const int n = f.count();
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  first = std::clamp(first, 0, n);
  if (o == DigestOrder::kStrongest || first == 0) return order;
  // One 64-bit key a row, its rank above the row: sorted, they give the order, ties in the stored order
  // (strongest first). kLargest ranks by size, descending: the float's bits made to order as unsigned
  // integers. kSpread ranks by round: a row's rank within its cell.
  std::vector<uint64_t> keys(n);
  if (o == DigestOrder::kLargest) {
    for (int i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &f.keypoints[i].size, sizeof u);
      u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending as the floats
      keys[i] = uint64_t(~u) << 32 | uint32_t(i);
    }
  } else {
    constexpr int kCells = 4;
    int seen[kCells * kCells] = {};
    for (int i = 0; i < n; ++i) {
      const Keypoint& k = f.keypoints[i];
      const int cx = std::clamp(int(k.x * kCells / std::max(1, f.width)), 0, kCells - 1);
      const int cy = std::clamp(int(k.y * kCells / std::max(1, f.height)), 0, kCells - 1);
      keys[i] = uint64_t(seen[cy * kCells + cx]++) << 32 | uint32_t(i);
    }
  }
  // Only the first `first` are ranked (an index adds one image at a time: its digest rows alone); the
  // others follow in the stored order.
  std::nth_element(keys.begin(), keys.begin() + first - 1, keys.end());
  std::sort(keys.begin(), keys.begin() + first);
  std::vector<char> taken(n, 0);
  for (int i = 0; i < first; ++i) taken[order[i] = int(keys[i] & 0xFFFFFFFFu)] = 1;
  for (int i = 0, at = first; i < n; ++i)
    if (!taken[i]) order[at++] = i;
  return order;
}

namespace {

// The detection image: grey, shrunk (INTER_AREA) when its longer side exceeds max_side; `scale`
// = original / detection coordinates. CudaFeatureExtractor::extract_device shrinks on the device
// to the same bits (detection_image.h).
cv::Mat detection_image(const cv::Mat& grey, const FeatureParams& params, double* scale) {
  const cv::Size size = detection_size(grey.cols, grey.rows, params.max_side, scale);
  cv::Mat detect = grey;
  if (*scale != 1.0) cv::resize(grey, detect, size, 0, 0, cv::INTER_AREA);
  return normalise(detect, params.normalisation);  // after the shrink, before SIFT
}

// How to_features takes its keypoints: cv::SIFT's in the order its threads found them (sorted
// here), or kernels/sift's, strongest first in strongest_first's order already (sift.h; sorting
// them again would leave them in place: TextureFeatures.OurSiftListsKeypointsInTheFeaturesOrder).
enum class KeypointOrder { kAny, kStrongestFirst };

// SIFT keypoints and float descriptors (either extractor's) to Features: the strongest
// max_features in a total order, coordinates back in the original image, RootSIFT.
Features to_features(int width, int height, double scale, const std::vector<cv::KeyPoint>& kps, const cv::Mat& desc,
                     const FeatureParams& params, KeypointOrder given) {
  const int max_features = std::clamp(params.max_features, 1, match::kSlot);
  Features f;
  f.width = width;
  f.height = height;
  std::vector<int> order(kps.size());
  std::iota(order.begin(), order.end(), 0);
  if (given == KeypointOrder::kAny)  // stable: equal keypoints (none after SIFT's dedupe) keep their order
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return strongest_first(kps[a], kps[b]); });
  assert(given == KeypointOrder::kAny || std::is_sorted(kps.begin(), kps.end(), strongest_first));
  if (int(order.size()) > max_features) order.resize(max_features);

  f.keypoints.reserve(order.size());
  f.descriptors.resize(order.size() * match::kDim);
  if (params.keep_fp16) f.descriptors_fp16.resize(order.size() * match::kDim);
  if (params.keep_fp32) f.descriptors_fp32.resize(order.size() * match::kDim);
  for (size_t i = 0; i < order.size(); ++i) {
    const cv::KeyPoint& k = kps[order[i]];
    // cv::KeyPoint coordinates have pixel centres at integers, so scale about the half-pixel edge.
    f.keypoints.push_back({float((k.pt.x + 0.5) * scale - 0.5), float((k.pt.y + 0.5) * scale - 0.5),
                           float(k.size * scale), k.angle, k.response, k.octave});
    match::rootsift_u8(desc.ptr<float>(order[i]), 1, &f.descriptors[i * match::kDim]);
    if (params.keep_fp16) match::rootsift(desc.ptr<float>(order[i]), 1, &f.descriptors_fp16[i * match::kDim]);
    if (params.keep_fp32) match::rootsift_float(desc.ptr<float>(order[i]), 1, &f.descriptors_fp32[i * match::kDim]);
  }
  return f;
}

#if defined(PRISM_HAVE_CUDA)
// kernels/sift on one extractor, for prepared images: results[i] for images[i], left empty (no
// features) for one smaller than 8x8. One image alone goes through detect_and_compute, several
// through detect_and_compute_batch (equal to it bit for bit, images of one size per launch).
void sift_cuda(sift::CudaExtractor& extractor, const DetectionImage* images, size_t n, size_t max_bytes,
               sift::Result* results) {
  std::vector<size_t> at;
  std::vector<cv::Mat> batch;
  for (size_t i = 0; i < n; ++i) {
    const cv::Mat& p = images[i].pixels;
    if (p.cols < 8 || p.rows < 8) continue;
    at.push_back(i);
    batch.push_back(p.isContinuous() ? p : p.clone());
  }
  if (batch.empty()) return;
  if (batch.size() == 1) {
    results[at[0]] = extractor.detect_and_compute(batch[0]);
    return;
  }
  std::vector<sift::Result> r = extractor.detect_and_compute_batch(batch, max_bytes);
  for (size_t k = 0; k < at.size(); ++k) results[at[k]] = std::move(r[k]);
}

Features cuda_features(const DetectionImage& d, const sift::Result& r, const FeatureParams& params) {
  return to_features(d.width, d.height, d.scale, r.keypoints, r.descriptors, params, KeypointOrder::kStrongestFirst);
}

Features extract_cuda(sift::CudaExtractor& extractor, const DetectionImage& d, const FeatureParams& params) {
  sift::Result r;
  sift_cuda(extractor, &d, 1, 0, &r);
  return cuda_features(d, r, params);
}
#endif

// cv::SIFT, which keeps the strongest nfeatures (ties at the cut may add a few; to_features cuts
// exactly) in the order its threads found them.
Features sift_cpu(const DetectionImage& d, const FeatureParams& params) {
  cv::Ptr<cv::SIFT> sift = cv::SIFT::create(std::clamp(params.max_features, 1, match::kSlot));
  std::vector<cv::KeyPoint> kps;
  cv::Mat desc;
  sift->detectAndCompute(d.pixels, cv::noArray(), kps, desc);
  return to_features(d.width, d.height, d.scale, kps, desc, params, KeypointOrder::kAny);
}

#if defined(PRISM_HAVE_CUDA)
// The CUDA extractors extract_features shares among its calling threads: each holds about 250 MB
// of GPU buffers for 1024-pixel images, so one per thread of a 16- or 128-thread pool would hold
// gigabytes for work the GPU does one image at a time anyway. At most kPoolSize per device and
// feature count; a thread borrows one for a call, or waits for one.
class ExtractorLease {
 public:
  explicit ExtractorLease(int max_features)
      : lease_(pool_for(max_features).borrow([&] {
          sift::Params p;
          p.nfeatures = max_features;
          return new sift::CudaExtractor(p);
        })) {}
  sift::CudaExtractor& get() { return *lease_; }

 private:
  static constexpr int kPoolSize = 8;
  using Pool = LeasePool<sift::CudaExtractor>;
  static Pool& pool_for(int max_features) {
    int device = 0;
    PRISM_CUDA_CHECK(cudaGetDevice(&device));
    return keyed_lease_pool<sift::CudaExtractor>(std::make_pair(device, max_features), kPoolSize);
  }
  Pool::Lease lease_;
};
#endif

// extract_features_batch's extractors at once (of the pool's kPoolSize).
constexpr size_t kBatchExtractors = 4;

std::atomic<int> gpu_extractor_count{8};  // set_gpu_extractors

bool use_cuda(gpu::Device device) {
  if (device == gpu::Device::kCpu) return false;
  std::string why;
  if (gpu::available(&why)) return true;
  if (device == gpu::Device::kCuda) throw gpu::CudaError("extract_features: device cuda, but " + why);
  return false;
}

#if defined(PRISM_HAVE_CUDA)
// Device buffers each of `workers` extractors running batches at once may take: a share of the free
// memory, at most sift.h's 2 GiB default, so that a smaller GPU batches less rather than fails.
size_t batch_bytes(size_t workers) {
  size_t free_bytes = 0, total_bytes = 0;
  PRISM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return std::min(size_t(1) << 31, free_bytes / (2 * std::max<size_t>(workers, 1)));
}
#endif

}  // namespace

std::string extraction_device(const FeatureParams& params) {
  if (params.device == gpu::Device::kCpu) return "cpu (cv::SIFT)";
  std::string why;
  if (!gpu::available(&why)) return "cpu (cv::SIFT; no GPU: " + why + ")";
#if defined(PRISM_HAVE_CUDA)
  int device = 0;
  PRISM_CUDA_CHECK(cudaGetDevice(&device));
  return "cuda:" + std::to_string(device) + " (" + gpu::device_name(device) + ")";
#else
  return "cpu (cv::SIFT)";
#endif
}

void to_original_pixels(Features& f, int width, int height, int reduction) {
  if (reduction < 1) throw std::invalid_argument("to_original_pixels: a reduction of " + std::to_string(reduction));
  f.width = width;
  f.height = height;
  if (reduction == 1) return;
  const double r = reduction;
  for (Keypoint& k : f.keypoints) {
    k.x = float((k.x + 0.5) * r - 0.5);
    k.y = float((k.y + 0.5) * r - 0.5);
    k.size = float(k.size * r);
  }
}

uint64_t extraction_host_bytes(int width, int height, const FeatureParams& params) {
  double scale = 1;
  const cv::Size d = detection_size(width, height, params.max_side, &scale);
  const uint64_t pixels = uint64_t(d.width) * uint64_t(d.height);
  uint64_t bytes = 2 * pixels;
  const bool cv_sift = params.device == gpu::Device::kCpu || (params.device == gpu::Device::kAuto && !gpu::available());
  if (cv_sift) {
    constexpr uint64_t kLayers = 3;                       // cv::SIFT's nOctaveLayers
    const uint64_t octave0 = 4 * pixels * sizeof(float);  // the doubled base image
    bytes += octave0 * (2 * kLayers + 5) * 4 / 3;         // Gaussians and differences, all octaves
  }
  return bytes;
}

DetectionImage prepare_detection(const cv::Mat& image, const FeatureParams& params) {
  const cv::Mat grey = to_grey(image);
  DetectionImage d;
  d.width = grey.cols;
  d.height = grey.rows;
  d.pixels = detection_image(grey, params, &d.scale);
  return d;
}

Features extract_features(const cv::Mat& image, const FeatureParams& params) {
  const bool cuda = use_cuda(params.device);
  const DetectionImage d = prepare_detection(image, params);
#if defined(PRISM_HAVE_CUDA)
  if (cuda) {
    ExtractorLease lease(std::clamp(params.max_features, 1, match::kSlot));
    return extract_cuda(lease.get(), d, params);
  }
#else
  (void)cuda;
#endif
  return sift_cpu(d, params);
}

std::vector<Features> extract_prepared(const std::vector<DetectionImage>& images, const FeatureParams& params) {
  const int n = int(images.size());
  std::vector<Features> out(n);
#if defined(PRISM_HAVE_CUDA)
  if (use_cuda(params.device)) {
    std::vector<sift::Result> results(n);
    {
      ExtractorLease lease(std::clamp(params.max_features, 1, match::kSlot));
      sift_cuda(lease.get(), images.data(), images.size(), batch_bytes(1), results.data());
    }
    cv::parallel_for_(cv::Range(0, n), [&](const cv::Range& r) {
      for (int i = r.start; i < r.end; ++i) out[i] = cuda_features(images[i], results[i], params);
    });
    return out;
  }
#else
  use_cuda(params.device);
#endif
  // One image: cv::SIFT on this thread, free to use OpenCV's pool (inside parallel_for_ it could not).
  if (n == 1) {
    out[0] = sift_cpu(images[0], params);
    return out;
  }
  cv::parallel_for_(cv::Range(0, n), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) out[i] = sift_cpu(images[i], params);
  });
  return out;
}

std::vector<Features> extract_features_batch(const std::vector<cv::Mat>& images, const FeatureParams& params) {
  const bool cuda = use_cuda(params.device);
  const int n = int(images.size());
  std::vector<DetectionImage> prepared(n);
  std::vector<std::string> errors(n);
  cv::parallel_for_(cv::Range(0, n), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) try {
        prepared[i] = prepare_detection(images[i], params);
      } catch (const std::invalid_argument& e) {
        errors[i] = e.what();
      }
  });
  for (int i = 0; i < n; ++i)
    if (!errors[i].empty()) throw std::invalid_argument(errors[i] + " (image " + std::to_string(i) + ")");
#if defined(PRISM_HAVE_CUDA)
  if (cuda) {
    // A few extractors at once, each on its share: one's host work (the keypoints' selection, the
    // copies) overlaps another's kernels (docs/benchmarks/sift.md, "Batched enrolment").
    std::vector<sift::Result> results(n);
    const size_t workers = std::min<size_t>(kBatchExtractors, (n + 15) / 16);
    std::vector<std::exception_ptr> failed(workers);
    std::vector<std::thread> threads;
    int device = 0;
    PRISM_CUDA_CHECK(cudaGetDevice(&device));
    const size_t max_bytes = batch_bytes(workers);
    const auto join_all = [&] {
      for (std::thread& t : threads) t.join();
    };
    for (size_t w = 0; w < workers; ++w) try {
        threads.emplace_back([&, w] {
          try {
            PRISM_CUDA_CHECK(cudaSetDevice(device));  // the caller's device, in this thread too
            const size_t first = size_t(n) * w / workers, last = size_t(n) * (w + 1) / workers;
            ExtractorLease lease(std::clamp(params.max_features, 1, match::kSlot));
            sift_cuda(lease.get(), prepared.data() + first, last - first, max_bytes, results.data() + first);
          } catch (...) {
            failed[w] = std::current_exception();
          }
        });
      } catch (...) {  // no thread: the started ones are joined before the error leaves
        join_all();
        throw;
      }
    join_all();
    for (const std::exception_ptr& e : failed)
      if (e) std::rethrow_exception(e);
    std::vector<Features> out(n);
    cv::parallel_for_(cv::Range(0, n), [&](const cv::Range& r) {
      for (int i = r.start; i < r.end; ++i) out[i] = cuda_features(prepared[i], results[i], params);
    });
    return out;
  }
#else
  (void)cuda;
#endif
  std::vector<Features> out(n);
  cv::parallel_for_(cv::Range(0, n), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) out[i] = sift_cpu(prepared[i], params);
  });
  return out;
}

#if defined(PRISM_HAVE_CUDA)
struct CudaFeatureExtractor::Impl {
  FeatureParams params;
  sift::CudaExtractor sift;
  CudaAreaResize shrink;             // extract_device's shrink: tables per size
  gpu::DeviceArray<uint8_t> shrunk;  // ... and its output, grown to the largest seen
  CudaNormaliser normaliser;         // extract_device's normalisation (the gallery's)
  gpu::DeviceArray<uint8_t> normalised;
};

CudaFeatureExtractor::CudaFeatureExtractor(const FeatureParams& params) {
  sift::Params p;
  p.nfeatures = std::clamp(params.max_features, 1, match::kSlot);
  impl_ = std::make_unique<Impl>(Impl{params, sift::CudaExtractor(p), {}, {}, {}, {}});
}
CudaFeatureExtractor::~CudaFeatureExtractor() = default;
CudaFeatureExtractor::CudaFeatureExtractor(CudaFeatureExtractor&&) noexcept = default;
CudaFeatureExtractor& CudaFeatureExtractor::operator=(CudaFeatureExtractor&&) noexcept = default;

Features CudaFeatureExtractor::extract(const cv::Mat& image) {
  return extract_cuda(impl_->sift, prepare_detection(image, impl_->params), impl_->params);
}

Features CudaFeatureExtractor::extract_device(const uint8_t* grey, size_t pitch, int width, int height) {
  Impl& m = *impl_;
  const FeatureParams& p = m.params;
  if (!grey) throw std::invalid_argument("extract_device: null device image");
  if (width < 1 || height < 1 || pitch < size_t(width))
    throw std::invalid_argument("extract_device: a " + std::to_string(width) + "x" + std::to_string(height) +
                                " image with a pitch of " + std::to_string(pitch) + " bytes");
  double scale = 1.0;
  const cv::Size size = detection_size(width, height, p.max_side, &scale);
  // As extract(): too small a detection image has no features.
  if (size.width < 8 || size.height < 8)
    return to_features(width, height, scale, {}, cv::Mat(), p, KeypointOrder::kStrongestFirst);
  if (scale != 1.0) {
    m.shrink.prepare(width, height, size.width, size.height);
    m.shrunk.reserve(size_t(size.area()));
    m.shrink.run(grey, pitch, m.shrunk.data(), size_t(size.width), m.sift.stream());
    grey = m.shrunk.data();
    pitch = size_t(size.width);
  }
  if (p.normalisation.kind != Normalisation::Kind::kNone) {  // after the shrink, as on the host
    m.normalised.reserve(size_t(size.area()));
    m.normaliser.run(p.normalisation, grey, pitch, size.width, size.height, m.normalised.data(), size_t(size.width),
                     m.sift.stream());
    grey = m.normalised.data();
    pitch = size_t(size.width);
  }
  const sift::Result r = m.sift.detect_and_compute_device(grey, pitch, size.width, size.height);
  return to_features(width, height, scale, r.keypoints, r.descriptors, p, KeypointOrder::kStrongestFirst);
}

cudaStream_t CudaFeatureExtractor::stream() const { return impl_->sift.stream(); }

namespace {
// extract_on_gpu's pooled extractor with its upload buffer, and extract_jpeg_on_gpu's decoder and
// its output (on the extractor's stream).
struct GpuExtraction {
  explicit GpuExtraction(const FeatureParams& params) : extractor(params) {}
  CudaFeatureExtractor extractor;
  gpu::DeviceArray<uint8_t> grey;
  image::jpeg::CudaJpegDecoder jpeg;
  image::jpeg::DeviceGrey decoded;
};

LeasePool<GpuExtraction>& gpu_extraction_pool(const FeatureParams& params) {
  int device = 0;
  PRISM_CUDA_CHECK(cudaGetDevice(&device));
  // Everything CudaFeatureExtractor keeps of its params (the device is the current one).
  const std::string key = std::to_string(device) + "/" + std::to_string(params.max_features) + "/" +
                          std::to_string(params.max_side) + "/" + params.normalisation.name() + "/" +
                          std::to_string(params.keep_fp16) + std::to_string(params.keep_fp32);
  return keyed_lease_pool<GpuExtraction>(key, gpu_extractors());
}
}  // namespace

Features extract_on_gpu(const cv::Mat& image, const FeatureParams& params) {
  const cv::Mat grey = to_grey(image);
  use_cuda(gpu::Device::kCuda);  // throws gpu::CudaError without a usable GPU
  auto slot = gpu_extraction_pool(params).borrow([&] { return new GpuExtraction(params); });
  const size_t row = size_t(grey.cols);
  slot->grey.reserve(row * size_t(grey.rows));
  PRISM_CUDA_CHECK(cudaMemcpy2DAsync(slot->grey.data(), row, grey.data, grey.step, row, size_t(grey.rows),
                                     cudaMemcpyHostToDevice, slot->extractor.stream()));
  return slot->extractor.extract_device(slot->grey.data(), row, grey.cols, grey.rows);
}

std::optional<Features> extract_jpeg_on_gpu(const uint8_t* jpeg, size_t size, int width, int height, int reduction,
                                            const FeatureParams& params, std::string* why) {
  use_cuda(gpu::Device::kCuda);
  auto slot = gpu_extraction_pool(params).borrow([&] { return new GpuExtraction(params); });
  if (!slot->jpeg.decode_grey(jpeg, size, reduction, &slot->decoded, slot->extractor.stream(), why))
    return std::nullopt;
  const image::jpeg::DeviceGrey& d = slot->decoded;
  Features f = slot->extractor.extract_device(d.pixels.data(), size_t(d.width), d.width, d.height);
  to_original_pixels(f, width, height, reduction);
  return f;
}
#endif

bool same_stored_features(const Features& a, const Features& b) {
  if (a.width != b.width || a.height != b.height || a.keypoints.size() != b.keypoints.size() ||
      a.descriptors != b.descriptors)
    return false;
  for (size_t i = 0; i < a.keypoints.size(); ++i)
    if (a.keypoints[i].x != b.keypoints[i].x || a.keypoints[i].y != b.keypoints[i].y) return false;
  return true;
}

void set_gpu_extractors(int n) {
  if (n < 1 || n > 64) throw std::invalid_argument("gpu extractors: " + std::to_string(n) + " is not in 1..64");
  gpu_extractor_count = n;
}

int gpu_extractors() { return gpu_extractor_count; }

}  // namespace prism::texture
