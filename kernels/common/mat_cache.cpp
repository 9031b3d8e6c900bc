#include "common/mat_cache.h"

#include <atomic>
#include <cstdlib>
#include <list>
#include <map>
#include <mutex>
#include <new>
#include <opencv2/core.hpp>

namespace prism::mat_cache {

size_t size_class(size_t bytes) {
  if (bytes < kMinBytes) return bytes;
  size_t top = kMinBytes;
  while (top <= bytes / 2) top *= 2;  // the largest power of two not above bytes
  const size_t step = top / 8;
  return (bytes + step - 1) / step * step;
}

namespace {

struct Block {
  void* data;
  size_t bytes;  // its size class
};

// One cache for the process; its allocator object only forwards here (cv::MatAllocator's methods
// are const).
class Cache {
 public:
  void* take(size_t bytes) {
    const size_t cls = size_class(bytes);
    std::list<Block> drop;
    {
      std::lock_guard<std::mutex> g(mutex_);
      const auto it = by_class_.find(cls);
      if (it != by_class_.end()) {
        void* data = it->second->data;
        lru_.erase(it->second);
        by_class_.erase(it);
        kept_ -= cls;
        in_use_ += cls;
        ++hits_;
        return data;
      }
      // A miss: make room under the cap from the kept blocks (never from those in use).
      trim(drop, cls);
      in_use_ += cls;
      ++misses_;
    }
    release(drop);  // outside the lock: unmapping hundreds of MB takes a while
    void* data = std::aligned_alloc(64, cls);
    if (!data) {
      std::lock_guard<std::mutex> g(mutex_);
      in_use_ -= cls;
      throw std::bad_alloc();
    }
    return data;
  }

  void give(void* data, size_t bytes) {
    const size_t cls = size_class(bytes);
    std::list<Block> drop;
    {
      std::lock_guard<std::mutex> g(mutex_);
      in_use_ -= cls;
      lru_.push_front(Block{data, cls});
      by_class_.emplace(cls, lru_.begin());
      kept_ += cls;
      trim(drop);
    }
    release(drop);
  }

  void set_cap(size_t cap) {
    std::list<Block> drop;
    {
      std::lock_guard<std::mutex> g(mutex_);
      cap_ = cap;
      trim(drop);
    }
    release(drop);
  }

  Stats stats() {
    std::lock_guard<std::mutex> g(mutex_);
    Stats s;
    s.hits = hits_;
    s.misses = misses_;
    s.freed = freed_;
    s.kept_bytes = kept_;
    s.in_use_bytes = in_use_;
    s.cap_bytes = cap_;
    return s;
  }

 private:
  // The least recently kept block, unlinked from by_class_ (the caller moves it out of lru_).
  std::list<Block>::iterator evict_oldest() {
    const auto last = std::prev(lru_.end());
    const auto range = by_class_.equal_range(last->bytes);
    for (auto it = range.first; it != range.second; ++it)
      if (it->second == last) {
        by_class_.erase(it);
        break;
      }
    kept_ -= last->bytes;
    return last;
  }
  // Kept blocks past the cap, with `room` more bytes in use, into `drop` (freed by the caller
  // outside the lock).
  void trim(std::list<Block>& drop, size_t room = 0) {
    while (!lru_.empty() && kept_ + in_use_ + room > cap_) {
      drop.splice(drop.end(), lru_, evict_oldest());
      ++freed_;
    }
  }
  static void release(std::list<Block>& drop) {
    for (const Block& b : drop) std::free(b.data);
  }

  std::mutex mutex_;
  std::list<Block> lru_;  // kept blocks, most recently kept first
  std::multimap<size_t, std::list<Block>::iterator> by_class_;
  size_t cap_ = 0, kept_ = 0, in_use_ = 0;
  uint64_t hits_ = 0, misses_ = 0, freed_ = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: Mats freed during exit still come back here
  return *c;
}

constexpr size_t kAutoStep = 0x7fffffff;  // OpenCV's C API CV_AUTOSTEP (core_c.h, not included here)

// OpenCV's StdMatAllocator (modules/core/src/matrix.cpp) with the large blocks from the cache.
class Allocator : public cv::MatAllocator {
 public:
  cv::UMatData* allocate(int dims, const int* sizes, int type, void* data0, size_t* step, cv::AccessFlag,
                         cv::UMatUsageFlags) const override {
    size_t total = CV_ELEM_SIZE(type);
    for (int i = dims - 1; i >= 0; --i) {
      if (step) {
        if (data0 && step[i] != kAutoStep) {
          CV_Assert(total <= step[i]);
          total = step[i];
        } else {
          step[i] = total;
        }
      }
      total *= size_t(sizes[i]);
    }
    void* data = data0;
    if (!data) data = total >= kMinBytes ? cache().take(total) : cv::fastMalloc(total);
    cv::UMatData* u = new cv::UMatData(this);
    u->data = u->origdata = static_cast<uchar*>(data);
    u->size = total;
    if (data0) u->flags |= cv::UMatData::USER_ALLOCATED;
    return u;
  }

  bool allocate(cv::UMatData* u, cv::AccessFlag, cv::UMatUsageFlags) const override { return u != nullptr; }

  void deallocate(cv::UMatData* u) const override {
    if (!u) return;
    CV_Assert(u->urefcount == 0);
    CV_Assert(u->refcount == 0);
    if (!(u->flags & cv::UMatData::USER_ALLOCATED)) {
      if (u->size >= kMinBytes)
        cache().give(u->origdata, u->size);
      else
        cv::fastFree(u->origdata);
      u->origdata = nullptr;
    }
    delete u;
  }
};

std::once_flag installed_once;
std::atomic<bool> installed{false};

}  // namespace

void install(size_t cap_bytes) {
  cache().set_cap(cap_bytes);
  std::call_once(installed_once, [] {
    static Allocator* a = new Allocator;
    cv::Mat::setDefaultAllocator(a);
    installed = true;
  });
}

Stats stats() {
  Stats s = cache().stats();
  s.installed = installed.load();
  return s;
}

}  // namespace prism::mat_cache
