#include "texture/extraction_batcher.h"

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/dynamic_batcher.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::texture {

namespace {

struct Item {
  DetectionImage image;
  FeatureParams params;
};

// Images that may share a batch: one size (kernels/sift batches images of one size per launch) and
// the same selection and outputs of the features.
bool same_batch(const Item& a, const Item& b) {
  return a.image.pixels.size() == b.image.pixels.size() && a.params.max_features == b.params.max_features &&
         a.params.keep_fp16 == b.params.keep_fp16 && a.params.keep_fp32 == b.params.keep_fp32;
}

std::vector<Features> run(std::vector<Item>& batch) {
  std::vector<DetectionImage> images;
  images.reserve(batch.size());
  for (const Item& i : batch) images.push_back(i.image);
  return extract_prepared(images, batch.front().params);
}

DynamicBatcherOptions core_options(const BatcherOptions& o) {
  DynamicBatcherOptions c;
  c.max_batch = o.max_batch;
  c.max_wait = o.max_wait;
  c.instances = o.instances;
  return c;
}

}  // namespace

struct ExtractionBatcher::Impl {
  BatcherOptions options;
  gpu::Device device = gpu::Device::kCpu;
  std::unique_ptr<DynamicBatcher<Item, Features>> core;  // batching only
  bool on_gpu = false;                                   // the GPU, one image per caller (max_batch 1)
};

ExtractionBatcher::ExtractionBatcher(gpu::Device device, const BatcherOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (options.max_batch < 1 || options.instances < 1 || options.max_wait.count() < 0)
    throw std::invalid_argument("ExtractionBatcher: max_batch " + std::to_string(options.max_batch) + ", instances " +
                                std::to_string(options.instances) + ", max_wait " +
                                std::to_string(options.max_wait.count()) + " us (at least 1, 1 and 0)");
  Impl& m = *impl_;
  m.options = options;
  m.device = device;
  std::string why;
  if (device == gpu::Device::kCuda && !gpu::available(&why)) throw gpu::CudaError("ExtractionBatcher: " + why);
  bool batching = device != gpu::Device::kCpu && gpu::available();
  std::function<void()> on_start;
#if defined(PRISM_HAVE_CUDA)
  if (batching) {
    int cuda_device = 0;
    PRISM_CUDA_CHECK(cudaGetDevice(&cuda_device));
    // The constructing thread's device on every dispatcher; a failure shows at the first batch.
    on_start = [cuda_device] { cudaSetDevice(cuda_device); };
  }
#else
  batching = false;
#endif
  if (batching && options.max_batch == 1)
    m.on_gpu = true;
  else if (batching)
    m.core = std::make_unique<DynamicBatcher<Item, Features>>(core_options(options), same_batch, run, on_start);
}

ExtractionBatcher::~ExtractionBatcher() = default;  // the core runs what was handed, then stops

ExtractionBatcher::Reservation ExtractionBatcher::reserve() {
  if (impl_->core) impl_->core->announce();
  return Reservation(this);
}

ExtractionBatcher::Reservation::~Reservation() {
  if (owner_ && owner_->impl_->core) owner_->impl_->core->withdraw();
}

Features ExtractionBatcher::Reservation::extract(const cv::Mat& image, const FeatureParams& params) {
  if (!owner_) throw std::logic_error("ExtractionBatcher::Reservation::extract: used already");
  Impl& m = *owner_->impl_;
  owner_ = nullptr;
  FeatureParams p = params;
  p.device = m.device;
#if defined(PRISM_HAVE_CUDA)
  if (m.on_gpu) return extract_on_gpu(image, p);  // this thread, every step on the GPU
#endif
  if (!m.core) return extract_features(image, p);  // the CPU: this thread
  return m.core->submit(Item{prepare_detection(image, p), p}, true).get();
}

std::optional<Features> ExtractionBatcher::Reservation::extract_jpeg(const uint8_t* jpeg, size_t size, int width,
                                                                     int height, int reduction,
                                                                     const FeatureParams& params) {
  if (!owner_) throw std::logic_error("ExtractionBatcher::Reservation::extract_jpeg: used already");
#if defined(PRISM_HAVE_CUDA)
  if (owner_->impl_->on_gpu) {
    FeatureParams p = params;
    p.device = owner_->impl_->device;
    std::optional<Features> f = extract_jpeg_on_gpu(jpeg, size, width, height, reduction, p);
    if (f) owner_ = nullptr;
    return f;
  }
#else
  (void)jpeg, (void)size, (void)width, (void)height, (void)reduction, (void)params;
#endif
  return std::nullopt;
}

bool ExtractionBatcher::batching() const { return impl_->core != nullptr; }
bool ExtractionBatcher::on_gpu() const { return impl_->core != nullptr || impl_->on_gpu; }

ExtractionBatcher::Stats ExtractionBatcher::stats() const {
  Stats s;
  if (!impl_->core) return s;
  const DynamicBatcherStats c = impl_->core->stats();
  s.batches = c.batches;
  s.images = c.requests;
  s.largest = c.largest;
  return s;
}

const BatcherOptions& ExtractionBatcher::options() const { return impl_->options; }

}  // namespace prism::texture
