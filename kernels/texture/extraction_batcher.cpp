#include "texture/extraction_batcher.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::texture {

namespace {

using Clock = std::chrono::steady_clock;

struct Item {
  DetectionImage image;
  FeatureParams params;
  Clock::time_point arrived;
  std::promise<Features> done;
};

// Images that may share a batch: one size (kernels/sift batches images of one size per launch) and
// the same selection and outputs of the features.
bool same_batch(const Item& a, const Item& b) {
  return a.image.pixels.size() == b.image.pixels.size() && a.params.max_features == b.params.max_features &&
         a.params.keep_fp16 == b.params.keep_fp16 && a.params.keep_fp32 == b.params.keep_fp32;
}

}  // namespace

struct ExtractionBatcher::Impl {
  BatcherOptions options;
  gpu::Device device = gpu::Device::kCpu;
  bool batching = false;
  int cuda_device = 0;

  mutable std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::unique_ptr<Item>> queue;
  int announced = 0;     // reservations not yet handed in
  bool forming = false;  // a dispatcher is waiting for its batch to fill: the queue's front is its
  bool stopping = false;
  Stats stats;
  std::vector<std::thread> dispatchers;

  size_t joining(const Item& first) const {
    size_t n = 0;
    for (const auto& i : queue) n += same_batch(first, *i);
    return n;
  }

  void dispatch() {
#if defined(PRISM_HAVE_CUDA)
    cudaSetDevice(cuda_device);  // the constructing thread's device; a failure shows at the first batch
#endif
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stopping || (!forming && !queue.empty()); });
      if (queue.empty()) return;  // stopping, and nothing left to extract
      forming = true;
      const Item& first = *queue.front();
      const Clock::time_point until = first.arrived + options.max_wait;
      while (!stopping && announced > 0 && joining(first) < size_t(options.max_batch) && Clock::now() < until)
        changed.wait_until(lock, until);
      std::vector<std::unique_ptr<Item>> batch;
      batch.push_back(std::move(queue.front()));
      queue.pop_front();
      for (auto it = queue.begin(); it != queue.end() && batch.size() < size_t(options.max_batch);)
        if (same_batch(*batch.front(), **it)) {
          batch.push_back(std::move(*it));
          it = queue.erase(it);
        } else {
          ++it;
        }
      forming = false;
      ++stats.batches;
      stats.images += batch.size();
      stats.largest = std::max(stats.largest, int(batch.size()));
      changed.notify_all();  // another dispatcher may form the next batch meanwhile
      lock.unlock();
      run(batch);
      lock.lock();
    }
  }

  static void run(std::vector<std::unique_ptr<Item>>& batch) {
    std::vector<DetectionImage> images;
    images.reserve(batch.size());
    for (const auto& i : batch) images.push_back(i->image);
    try {
      std::vector<Features> out = extract_prepared(images, batch.front()->params);
      for (size_t k = 0; k < batch.size(); ++k) batch[k]->done.set_value(std::move(out[k]));
    } catch (...) {
      for (const auto& i : batch) i->done.set_exception(std::current_exception());
    }
  }
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
  m.batching = device != gpu::Device::kCpu && gpu::available();
#if defined(PRISM_HAVE_CUDA)
  if (m.batching) PRISM_CUDA_CHECK(cudaGetDevice(&m.cuda_device));
#else
  m.batching = false;
#endif
  if (!m.batching) return;
  try {
    for (int i = 0; i < options.instances; ++i) m.dispatchers.emplace_back([&m] { m.dispatch(); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> g(m.mutex);
      m.stopping = true;
    }
    m.changed.notify_all();
    for (std::thread& t : m.dispatchers) t.join();
    throw;
  }
}

ExtractionBatcher::~ExtractionBatcher() {
  {
    std::lock_guard<std::mutex> g(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->changed.notify_all();
  for (std::thread& t : impl_->dispatchers) t.join();
}

ExtractionBatcher::Reservation ExtractionBatcher::reserve() {
  std::lock_guard<std::mutex> g(impl_->mutex);
  ++impl_->announced;
  return Reservation(this);
}

ExtractionBatcher::Reservation::~Reservation() {
  if (!owner_) return;
  Impl& m = *owner_->impl_;
  {
    std::lock_guard<std::mutex> g(m.mutex);
    --m.announced;
  }
  m.changed.notify_all();  // a batch waiting for this image need not
}

Features ExtractionBatcher::Reservation::extract(DetectionImage image, const FeatureParams& params) {
  if (!owner_) throw std::logic_error("ExtractionBatcher::Reservation::extract: used already");
  Impl& m = *owner_->impl_;
  FeatureParams p = params;
  p.device = m.device;
  auto item = std::make_unique<Item>();
  item->image = std::move(image);
  item->params = p;
  std::future<Features> done = item->done.get_future();
  {
    std::lock_guard<std::mutex> g(m.mutex);
    --m.announced;
    owner_ = nullptr;
    if (m.batching) {
      item->arrived = Clock::now();
      m.queue.push_back(std::move(item));
    }
  }
  m.changed.notify_all();
  if (item) return std::move(extract_prepared({item->image}, p).front());  // the CPU: this thread
  return done.get();
}

bool ExtractionBatcher::batching() const { return impl_->batching; }

ExtractionBatcher::Stats ExtractionBatcher::stats() const {
  std::lock_guard<std::mutex> g(impl_->mutex);
  return impl_->stats;
}

const BatcherOptions& ExtractionBatcher::options() const { return impl_->options; }

}  // namespace prism::texture
