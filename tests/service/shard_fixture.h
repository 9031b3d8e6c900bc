// Shared by the sharded service's tests (test_sharded.cpp on the CPU, test_service_gpu.cpp with
// GPU workers): shard workers on threads of the test, the front's options, generated products,
// and field-by-field comparisons of answers.
#pragma once
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <random>
#include <thread>

#include "gallery_cases.h"
#include "local_backend.h"
#include "redis_server.h"
#include "shard_worker.h"
#include "sharded_backend.h"

#define PRISM_NEED_REDIS()                                                                        \
  do {                                                                                            \
    if (::prism::test::redis_server_path().empty()) {                                             \
      if (::prism::test::redis_required()) FAIL() << "PRISM_REQUIRE_REDIS=1 but no redis-server"; \
      std::cerr << "*** SKIPPING: redis-server not found (apt install redis-server) ***\n";       \
      GTEST_SKIP() << "no redis-server";                                                          \
    }                                                                                             \
  } while (0)

namespace prism::service::test_support {

using namespace std::chrono_literals;
using texture::GalleryEntry;

inline texture::IndexOptions small_index(texture::Device device = texture::Device::kCpu) {
  texture::IndexOptions o;
  o.device = device;
  o.host_budget = 200 * int64_t(match::kSlotBytes);
  o.block_slots = 8;
  return o;
}

inline LocalOptions local_options(const std::filesystem::path& gallery,
                                  texture::Device device = texture::Device::kCpu) {
  LocalOptions o;
  o.gallery = gallery;
  o.index = small_index(device);
  return o;
}

// `n` products p000.. of 30..90 random features, a third in collection "a", a third in "b".
inline std::vector<GalleryEntry> products(int n, std::mt19937& rng) {
  std::vector<GalleryEntry> out;
  for (int i = 0; i < n; ++i) {
    char id[16];
    std::snprintf(id, sizeof id, "p%03d", i);
    const std::string collection = i % 3 == 0 ? "" : i % 3 == 1 ? "a" : "b";
    GalleryEntry e = test::random_gallery_entry(id, rng, 30 + int(rng() % 60), collection);
    e.features.descriptors_fp16.clear();  // never stored
    e.enrolled_unix = 1700000000 + i;
    out.push_back(std::move(e));
  }
  return out;
}

// A worker on a thread of this process.
class Worker {
 public:
  Worker(const std::string& url, int shard, int shards, const std::string& replica, const std::filesystem::path& dir,
         texture::Device device = texture::Device::kCpu)
      : Worker(options(url, shard, shards, replica, dir, device)) {}
  explicit Worker(const ShardWorkerOptions& o) : worker_(std::make_unique<ShardWorker>(o)) {
    thread_ = std::thread([this] {
      try {
        worker_->run(stop_);
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex_);
        error_ = e.what();
      }
    });
  }
  ~Worker() {
    stop_ = true;
    thread_.join();
  }
  LocalBackend& backend() { return worker_->backend(); }
  std::string error() {
    std::lock_guard lock(mutex_);
    return error_;
  }

  static ShardWorkerOptions options(const std::string& url, int shard, int shards, const std::string& replica,
                                    const std::filesystem::path& dir, texture::Device device = texture::Device::kCpu) {
    ShardWorkerOptions o;
    o.redis = url;
    o.shard = shard;
    o.shards = shards;
    o.replica = replica;
    o.readers = 2;
    o.local = local_options(dir, device);
    return o;
  }

 private:
  std::unique_ptr<ShardWorker> worker_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mutex_;
  std::string error_;
};

inline ShardedOptions front_options(const std::string& url, int shards, std::chrono::milliseconds timeout = 10s) {
  ShardedOptions o;
  o.redis = url;
  o.shards = shards;
  o.default_timeout = timeout;
  return o;
}

inline Clock::time_point in(std::chrono::milliseconds d) { return Clock::now() + d; }

// The front's health once every shard's worker has announced itself (its liveness key is set when
// its threads start): "" when healthy within 10 s, else the last reason.
inline std::string health_when_live(ShardedBackend& front) {
  std::string why = front.health();
  for (int i = 0; i < 200 && !why.empty(); ++i) {
    std::this_thread::sleep_for(50ms);
    why = front.health();
  }
  return why;
}

inline void expect_same_product(const Product& a, const Product& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.collection, b.collection);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.enrolled_unix, b.enrolled_unix);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.height, b.height);
}

inline void expect_same_match(const Match& a, const Match& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.score, b.score);
  EXPECT_EQ(a.matches, b.matches);
  EXPECT_EQ(a.inliers, b.inliers);
  EXPECT_EQ(a.significance, b.significance);
  EXPECT_EQ(a.geometric_significance, b.geometric_significance);
  EXPECT_EQ(a.accepted, b.accepted);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(a.homography.val[i], b.homography.val[i]);
}

// The status of the ServiceError `f` throws (0: none), its message in `message`.
template <typename F>
int service_status(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const ServiceError& e) {
    if (message) *message = e.what();
    return e.status;
  }
  return 0;
}

}  // namespace prism::service::test_support
