#include "texture/features.h"

#include <opencv2/features2d.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "sift/sift.h"
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

// SIFT keypoints and float descriptors (either extractor's) to Features: the strongest
// max_features in a total order, coordinates back in the original image, RootSIFT.
Features to_features(int width, int height, double scale, const std::vector<cv::KeyPoint>& kps, const cv::Mat& desc,
                     const FeatureParams& params) {
  const int max_features = std::clamp(params.max_features, 1, match::kSlot);
  Features f;
  f.width = width;
  f.height = height;
  std::vector<int> order(kps.size());
  std::iota(order.begin(), order.end(), 0);
  // A total order: cv::SIFT gathers its keypoints from per-thread lists, whose order varies from
  // run to run (kernels/sift's output is in this order already).
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const cv::KeyPoint &p = kps[a], &q = kps[b];
    if (p.response != q.response) return p.response > q.response;
    if (p.pt.y != q.pt.y) return p.pt.y < q.pt.y;
    if (p.pt.x != q.pt.x) return p.pt.x < q.pt.x;
    if (p.size != q.size) return p.size < q.size;
    if (p.angle != q.angle) return p.angle < q.angle;
    if (p.octave != q.octave) return p.octave < q.octave;
    return a < b;
  });
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
Features extract_cuda(sift::CudaExtractor& extractor, const cv::Mat& grey, const FeatureParams& params) {
  double scale = 1.0;
  const cv::Mat detect = detection_image(grey, params, &scale);
  if (detect.cols < 8 || detect.rows < 8) return to_features(grey.cols, grey.rows, scale, {}, cv::Mat(), params);
  const sift::Result r = extractor.detect_and_compute(detect.isContinuous() ? detect : detect.clone());
  return to_features(grey.cols, grey.rows, scale, r.keypoints, r.descriptors, params);
}
#endif

bool use_cuda(gpu::Device device) {
  if (device == gpu::Device::kCpu) return false;
  std::string why;
  if (gpu::available(&why)) return true;
  if (device == gpu::Device::kCuda) throw gpu::CudaError("extract_features: device cuda, but " + why);
  return false;
}

}  // namespace

Features extract_features(const cv::Mat& image, const FeatureParams& params) {
  const int max_features = std::clamp(params.max_features, 1, match::kSlot);
  const cv::Mat grey = to_grey(image);
#if defined(PRISM_HAVE_CUDA)
  if (use_cuda(params.device)) {
    // One extractor per thread and feature count: its buffers and CUDA graph are kept.
    thread_local std::unique_ptr<sift::CudaExtractor> extractor;
    thread_local int extractor_features = 0;
    if (!extractor || extractor_features != max_features) {
      sift::Params p;
      p.nfeatures = max_features;
      extractor = std::make_unique<sift::CudaExtractor>(p);
      extractor_features = max_features;
    }
    return extract_cuda(*extractor, grey, params);
  }
#else
  use_cuda(params.device);
#endif
  double scale = 1.0;
  const cv::Mat detect = detection_image(grey, params, &scale);
  // cv::SIFT keeps the strongest nfeatures (ties at the cut may add a few); to_features cuts exactly.
  cv::Ptr<cv::SIFT> sift = cv::SIFT::create(max_features);
  std::vector<cv::KeyPoint> kps;
  cv::Mat desc;
  sift->detectAndCompute(detect, cv::noArray(), kps, desc);
  return to_features(grey.cols, grey.rows, scale, kps, desc, params);
}

#if defined(PRISM_HAVE_CUDA)
struct CudaFeatureExtractor::Impl {
  FeatureParams params;
  sift::CudaExtractor sift;
  CudaAreaResize shrink;             // extract_device's shrink: tables per size
  gpu::DeviceArray<uint8_t> shrunk;  // ... and its output, grown to the largest seen
};

CudaFeatureExtractor::CudaFeatureExtractor(const FeatureParams& params) {
  sift::Params p;
  p.nfeatures = std::clamp(params.max_features, 1, match::kSlot);
  impl_ = std::make_unique<Impl>(Impl{params, sift::CudaExtractor(p), {}, {}});
}
CudaFeatureExtractor::~CudaFeatureExtractor() = default;
CudaFeatureExtractor::CudaFeatureExtractor(CudaFeatureExtractor&&) noexcept = default;
CudaFeatureExtractor& CudaFeatureExtractor::operator=(CudaFeatureExtractor&&) noexcept = default;

Features CudaFeatureExtractor::extract(const cv::Mat& image) {
  return extract_cuda(impl_->sift, to_grey(image), impl_->params);
}

Features CudaFeatureExtractor::extract_device(const uint8_t* grey, size_t pitch, int width, int height) {
  Impl& m = *impl_;
  const FeatureParams& p = m.params;
  if (!grey) throw std::invalid_argument("extract_device: null device image");
  if (width < 1 || height < 1 || pitch < size_t(width))
    throw std::invalid_argument("extract_device: a " + std::to_string(width) + "x" + std::to_string(height) +
                                " image with a pitch of " + std::to_string(pitch) + " bytes");
  if (p.normalisation.kind != Normalisation::Kind::kNone)
    throw std::invalid_argument("extract_device: normalisation " + p.normalisation.name() +
                                " is not on the device yet: give frames in system memory");
  double scale = 1.0;
  const cv::Size size = detection_size(width, height, p.max_side, &scale);
  // As extract(): too small a detection image has no features.
  if (size.width < 8 || size.height < 8) return to_features(width, height, scale, {}, cv::Mat(), p);
  if (scale != 1.0) {
    m.shrink.prepare(width, height, size.width, size.height);
    m.shrunk.reserve(size_t(size.area()));
    m.shrink.run(grey, pitch, m.shrunk.data(), size_t(size.width), m.sift.stream());
    grey = m.shrunk.data();
    pitch = size_t(size.width);
  }
  const sift::Result r = m.sift.detect_and_compute_device(grey, pitch, size.width, size.height);
  return to_features(width, height, scale, r.keypoints, r.descriptors, p);
}

cudaStream_t CudaFeatureExtractor::stream() const { return impl_->sift.stream(); }
#endif

double sharpness(const cv::Mat& grey, cv::Mat* scratch) {
  cv::Mat local;
  cv::Mat& lap = scratch ? *scratch : local;
  cv::Laplacian(grey, lap, CV_32F);
  cv::Scalar mean, stddev;
  cv::meanStdDev(lap, mean, stddev);
  return stddev[0] * stddev[0];
}

}  // namespace prism::texture
