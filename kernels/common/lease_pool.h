// A bounded pool of objects too costly to make per call or per thread, borrowed one call at a time:
// CUDA extractors holding hundreds of MB of GPU buffers each, which a server's 16 or 128 request
// threads share. At most `capacity` are ever made (lazily, on the first borrows that find none
// idle); a borrower finding all of them out waits for one to come back. Objects are never dropped:
// a pool lives as long as its owner (often the process).
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace prism {

template <class T>
class LeasePool {
 public:
  explicit LeasePool(int capacity) : capacity_(capacity) {
    if (capacity < 1) throw std::invalid_argument("LeasePool: a capacity of " + std::to_string(capacity));
  }
  LeasePool(const LeasePool&) = delete;
  LeasePool& operator=(const LeasePool&) = delete;

  // One object, the pool's until the lease ends.
  class Lease {
   public:
    Lease(Lease&& o) noexcept : pool_(std::exchange(o.pool_, nullptr)), object_(std::move(o.object_)) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (pool_) pool_->give_back(std::move(object_));
    }
    T& operator*() const { return *object_; }
    T* operator->() const { return object_.get(); }

   private:
    friend class LeasePool;
    Lease(LeasePool* pool, std::unique_ptr<T> object) : pool_(pool), object_(std::move(object)) {}
    LeasePool* pool_;
    std::unique_ptr<T> object_;
  };

  // An idle object, or a new one from make() (called without the pool's lock held, so that making
  // one, which may take long, does not hold up others giving theirs back), or the next given back
  // when `capacity` exist. What make() throws leaves the pool as it was and reaches the caller.
  template <class Make>
  Lease borrow(Make&& make) {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_or_room_.wait(lock, [&] { return !idle_.empty() || made_ < capacity_; });
    if (!idle_.empty()) {
      std::unique_ptr<T> object = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(object));
    }
    ++made_;
    lock.unlock();
    try {
      return Lease(this, std::unique_ptr<T>(make()));
    } catch (...) {
      {
        std::lock_guard<std::mutex> relock(mutex_);
        --made_;
      }
      idle_or_room_.notify_one();
      throw;
    }
  }

  int capacity() const { return capacity_; }

 private:
  void give_back(std::unique_ptr<T> object) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      idle_.push_back(std::move(object));
    }
    idle_or_room_.notify_one();
  }

  const int capacity_;
  std::mutex mutex_;
  std::condition_variable idle_or_room_;
  std::vector<std::unique_ptr<T>> idle_;
  int made_ = 0;
};

// The process's one LeasePool<T> for `key` (made with `capacity` on first use): the pools of a few
// configurations (device, parameters) that request threads share. Never shrinks.
template <class T, class Key>
LeasePool<T>& keyed_lease_pool(const Key& key, int capacity) {
  static std::mutex mutex;
  static std::map<Key, std::unique_ptr<LeasePool<T>>> pools;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<LeasePool<T>>& pool = pools[key];
  if (!pool) pool = std::make_unique<LeasePool<T>>(capacity);
  return *pool;
}

}  // namespace prism
