// texture::ExtractionBatcher's cases, run on the CPU (test_extraction_batcher.cpp: no batching) and
// on the GPU (test_texture_gpu.cpp: batches): concurrent callers each get extract_features' answer
// for their own image, bit for bit, and batches hold exactly the images that could wait for each other.
#pragma once
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "texture/extraction_batcher.h"
#include "texture_cases.h"

namespace prism::test {

// `images` extracted by one thread each through `batcher`: every thread reserves first and none
// hands its image before all have reserved, so that (with a max_wait longer than the test) a batch
// waits for every image of its size, and the batches are one per size (at most max_batch each).
// Each answer is compared with extract_features of the same image, bit for bit.
inline void expect_batched_as_one_by_one(texture::ExtractionBatcher& batcher, const std::vector<cv::Mat>& images,
                                         const texture::FeatureParams& params) {
  const size_t n = images.size();
  std::vector<std::optional<texture::ExtractionBatcher::Reservation>> reserved(n);
  std::vector<texture::Features> got(n);
  std::vector<std::string> errors(n);
  std::mutex mutex;
  std::condition_variable all_reserved;
  size_t count = 0;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      reserved[i].emplace(batcher.reserve());
      {
        std::unique_lock<std::mutex> lock(mutex);
        if (++count == n) all_reserved.notify_all();
        all_reserved.wait(lock, [&] { return count == n; });
      }
      try {
        got[i] = reserved[i]->extract(images[i], params);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  texture::FeatureParams alone = params;
  alone.device = batcher.on_gpu() ? gpu::Device::kCuda : gpu::Device::kCpu;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(errors[i], "") << "image " << i;
    EXPECT_EQ(features_difference(got[i], texture::extract_features(images[i], alone)), "") << "image " << i;
  }
}

}  // namespace prism::test
