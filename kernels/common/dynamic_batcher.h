// The core of a dynamic batcher (the dynamic batching of Triton's scheduler, max_queue_delay_microseconds):
// callers hand requests and wait for their results; dispatcher threads take the requests that arrived
// together and may share a batch, and run each batch as one call. The texture extraction batcher
// (texture/extraction_batcher.h: SIFT of several images per launch) and the service's search batcher
// (service/local_backend.h: several queries per matcher launch) are this queue with their own
// requests, batch rule and run.
//
// Waiting: a batch waits for more requests only while some caller has announced one (announce()) and
// not handed it yet, up to max_wait after its first request arrived, or until it holds max_batch. A
// lone request is never held: with nobody else announced, it leaves at once. Requests that arrive
// while every dispatcher is busy queue, and leave together when one frees up.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace prism {

struct DynamicBatcherOptions {
  int max_batch = 16;                        // requests per batch; 1: no batching
  std::chrono::microseconds max_wait{1000};  // how long a batch's first request may wait for others
  int instances = 2;                         // batches run at once, each on its own dispatcher thread
};

struct DynamicBatcherStats {
  uint64_t batches = 0;   // batches run
  uint64_t requests = 0;  // requests in them
  int largest = 0;        // the most requests in one
};

template <class Request, class Result>
class DynamicBatcher {
 public:
  // Whether two requests may share a batch (the first one's, and a later one's).
  using SameBatch = std::function<bool(const Request& first, const Request& other)>;
  // Runs a batch: one result per request, in order. What it throws is every member's.
  using Run = std::function<std::vector<Result>(std::vector<Request>& batch)>;

  // Starts options.instances dispatchers, each calling `on_start` first on its own thread (a CUDA
  // device to set, say). std::invalid_argument for options out of range.
  DynamicBatcher(const DynamicBatcherOptions& options, SameBatch same_batch, Run run,
                 std::function<void()> on_start = {})
      : options_(options), same_batch_(std::move(same_batch)), run_(std::move(run)) {
    if (options.max_batch < 1 || options.instances < 1 || options.max_wait.count() < 0)
      throw std::invalid_argument("dynamic batcher: max_batch " + std::to_string(options.max_batch) + ", instances " +
                                  std::to_string(options.instances) + ", max_wait " +
                                  std::to_string(options.max_wait.count()) + " us (at least 1, 1 and 0)");
    try {
      for (int i = 0; i < options.instances; ++i)
        dispatchers_.emplace_back([this, on_start] {
          if (on_start) on_start();
          dispatch();
        });
    } catch (...) {
      stop();
      throw;
    }
  }
  // Runs what was handed already, then stops its threads.
  ~DynamicBatcher() { stop(); }
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // A caller's announcement that it will hand a request soon: batches wait for announced requests only.
  // Each is taken back by withdraw() or by a submit(…, true).
  void announce() {
    std::lock_guard<std::mutex> g(mutex_);
    ++announced_;
  }
  void withdraw() {
    {
      std::lock_guard<std::mutex> g(mutex_);
      --announced_;
    }
    changed_.notify_all();  // a batch waiting for this request need not
  }
  // Queues `request` (taking back the caller's announcement when `announced`); its result, or what its
  // batch's run threw, through the future.
  std::future<Result> submit(Request request, bool announced) {
    auto item = std::make_unique<Item>(Item{std::move(request), Clock::now(), {}});
    std::future<Result> done = item->done.get_future();
    {
      std::lock_guard<std::mutex> g(mutex_);
      if (announced) --announced_;
      queue_.push_back(std::move(item));
    }
    changed_.notify_all();
    return done;
  }

  DynamicBatcherStats stats() const {
    std::lock_guard<std::mutex> g(mutex_);
    return stats_;
  }
  const DynamicBatcherOptions& options() const { return options_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Item {
    Request request;
    Clock::time_point arrived;
    std::promise<Result> done;
  };

  void stop() {
    {
      std::lock_guard<std::mutex> g(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    for (std::thread& t : dispatchers_)
      if (t.joinable()) t.join();
  }

  size_t joining(const Item& first) const {
    size_t n = 0;
    for (const auto& i : queue_) n += same_batch_(first.request, i->request);
    return n;
  }

  void dispatch() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || (!forming_ && !queue_.empty()); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      forming_ = true;             // the queue's front is this dispatcher's batch
      const Item& first = *queue_.front();
      const Clock::time_point until = first.arrived + options_.max_wait;
      while (!stopping_ && announced_ > 0 && joining(first) < size_t(options_.max_batch) && Clock::now() < until)
        changed_.wait_until(lock, until);
      std::vector<std::unique_ptr<Item>> batch;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
      for (auto it = queue_.begin(); it != queue_.end() && batch.size() < size_t(options_.max_batch);)
        if (same_batch_(batch.front()->request, (*it)->request)) {
          batch.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      forming_ = false;
      ++stats_.batches;
      stats_.requests += batch.size();
      stats_.largest = std::max(stats_.largest, int(batch.size()));
      changed_.notify_all();  // another dispatcher may form the next batch meanwhile
      lock.unlock();
      run(batch);
      lock.lock();
    }
  }

  void run(std::vector<std::unique_ptr<Item>>& batch) {
    std::vector<Request> requests;
    requests.reserve(batch.size());
    for (auto& i : batch) requests.push_back(std::move(i->request));
    try {
      std::vector<Result> out = run_(requests);
      if (out.size() != batch.size()) throw std::logic_error("dynamic batcher: a run gave one result per request");
      for (size_t k = 0; k < batch.size(); ++k) batch[k]->done.set_value(std::move(out[k]));
    } catch (...) {
      for (auto& i : batch) i->done.set_exception(std::current_exception());
    }
  }

  const DynamicBatcherOptions options_;
  const SameBatch same_batch_;
  const Run run_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Item>> queue_;
  int announced_ = 0;     // announcements not yet handed in
  bool forming_ = false;  // a dispatcher is waiting for its batch to fill
  bool stopping_ = false;
  DynamicBatcherStats stats_;
  std::vector<std::thread> dispatchers_;  // last: started once the rest is built
};

}  // namespace prism
