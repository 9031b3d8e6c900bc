// texture::ExtractionBatcher without a GPU: every caller extracts on its own thread (cv::SIFT), with
// extract_features' answer; reservations and options are checked as on the GPU
// (test_texture_gpu.cpp runs the batches).
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <stdexcept>
#include <thread>

#include "batcher_cases.h"
#include "texture/extraction_batcher.h"

namespace prism {
namespace {

TEST(ExtractionBatcher, OnTheCpuEachCallerExtractsItsOwn) {
  std::mt19937 rng(std::random_device{}());
  texture::BatcherOptions o;
  o.max_wait = std::chrono::hours(1);  // would hang a caller if the CPU path waited for a batch
  texture::ExtractionBatcher batcher(gpu::Device::kCpu, o);
  EXPECT_FALSE(batcher.batching());
  std::vector<cv::Mat> images;
  for (int i = 0; i < 6; ++i) images.push_back(test::random_texture(rng, i % 2 ? 320 : 1400, 240));
  texture::FeatureParams p;
  p.normalisation = texture::parse_normalisation("clahe-4-8");
  test::expect_batched_as_one_by_one(batcher, images, p);
  EXPECT_EQ(batcher.stats().batches, 0u);
}

TEST(ExtractionBatcher, AReservationIsUsedOnce) {
  texture::ExtractionBatcher batcher(gpu::Device::kCpu);
  std::mt19937 rng(7);
  const cv::Mat d = test::random_texture(rng);
  texture::ExtractionBatcher::Reservation r = batcher.reserve();
  EXPECT_GT(r.extract(d, {}).count(), 20);
  EXPECT_THROW(r.extract(d, {}), std::logic_error);
  { texture::ExtractionBatcher::Reservation unused = batcher.reserve(); }  // released unused
}

TEST(ExtractionBatcher, RefusesOptionsOutOfRange) {
  texture::BatcherOptions o;
  o.max_batch = 0;
  EXPECT_THROW(texture::ExtractionBatcher(gpu::Device::kCpu, o), std::invalid_argument);
  o = {};
  o.instances = 0;
  EXPECT_THROW(texture::ExtractionBatcher(gpu::Device::kCpu, o), std::invalid_argument);
  o = {};
  o.max_wait = std::chrono::microseconds(-1);
  EXPECT_THROW(texture::ExtractionBatcher(gpu::Device::kCpu, o), std::invalid_argument);
}

TEST(ExtractionBatcher, CudaWithoutAGpuIsRefused) {
  if (gpu::available()) GTEST_SKIP() << "a GPU is present: test_texture_gpu.cpp runs the batches";
  EXPECT_THROW(texture::ExtractionBatcher(gpu::Device::kCuda), gpu::CudaError);
  EXPECT_FALSE(texture::ExtractionBatcher(gpu::Device::kAuto).batching());
}

}  // namespace
}  // namespace prism
