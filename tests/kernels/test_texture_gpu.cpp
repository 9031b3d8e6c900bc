// Texture identification on the GPU against the CPU path: ratio-test scores over a gallery of fresh
// random textures, search and verify decisions (the matcher's large batches: test_match_gpu.cpp).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <opencv2/imgproc.hpp>

#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/device_array.h"
#include "image/decode.h"
#include "jpeg_cases.h"
#include "ppm.h"
#include "prism_test.h"
#include "texture/gallery.h"
#include "texture/index.h"
#include "batcher_cases.h"
#include "texture/extraction_batcher.h"
#include "texture_cases.h"

namespace prism {
namespace {

TEST(TextureGpu, IndexMatchesTheCpuPath) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  std::vector<cv::Mat> images;
  std::vector<texture::GalleryEntry> entries;
  for (int i = 0; i < 40; ++i) {
    images.push_back(test::random_texture(rng, 400, 300));
    entries.push_back({"t" + std::to_string(i), "", 0, texture::extract_features(images.back())});
  }
  entries.push_back({"empty", "", 0, {}});
  texture::TextureIndex cpu(texture::Device::kCpu), gpu(texture::Device::kCuda);
  ASSERT_TRUE(gpu.on_gpu());
  cpu.build(entries);
  gpu.build(entries);
  for (int i : {0, 17, 39}) {
    cv::Mat q;
    cv::warpPerspective(images[i], q, cv::Mat(test::random_homography(rng, 400, 300)), images[i].size());
    const texture::Features f = texture::extract_features(q);
    const std::vector<int> sc = cpu.scores(f, {}), sg = gpu.scores(f, {});
    ASSERT_EQ(sc.size(), sg.size());
    // FP32 sums in another order may flip a ratio test sitting exactly on its edge: allow a handful.
    int total = 0, differ = 0;
    for (size_t k = 0; k < sc.size(); ++k) {
      total += sc[k];
      differ += std::abs(sc[k] - sg[k]);
    }
    EXPECT_LE(differ, 2 + total / 200) << "query " << i;
    const texture::SearchResult rc = cpu.search(f, {}), rg = gpu.search(f, {});
    EXPECT_TRUE(rg.identified);
    EXPECT_EQ(rg.best.id, "t" + std::to_string(i));
    EXPECT_EQ(rg.best.id, rc.best.id);
    EXPECT_NEAR(rg.best.geometry.inliers, rc.best.geometry.inliers, 2 + rc.best.geometry.inliers / 50);
    const texture::SearchResult vg = gpu.verify(f, "t" + std::to_string((i + 1) % 40), {});
    EXPECT_FALSE(vg.identified) << vg.best.geometry.inliers;
  }
}

// Enrolment on the GPU: batches through kernels/sift give each image's features as a single
// extraction on the GPU does (mixed sizes, the shrink of large images, CLAHE, a flat image).
TEST(TextureGpu, BatchExtractionEqualsOneByOne) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  std::vector<cv::Mat> images;
  for (int i = 0; i < 40; ++i)
    images.push_back(i % 4 == 3 ? test::random_texture(rng, 1400, 900) : test::random_texture(rng, 480, 360));
  images.push_back(cv::Mat(300, 300, CV_8U, cv::Scalar(40)));
  const size_t flat = images.size() - 1;
  // Real captures, five of one size per sequence, as the eval's Oxford queries come (PPM copies:
  // the GPU machine's bundle reads no PNG; tools/gpu-suite makes them).
  for (const char* seq : {"bark", "leuven"})
    for (int i = 2; i <= 6; ++i) {
      const std::string path = test::data_dir() + "/oxford-affine/" + seq + "/img" + std::to_string(i) + ".ppm";
      if (!test::gpu_required() && !std::filesystem::exists(path)) continue;  // here: the PNGs only
      const cv::Mat bgr = test::read_ppm(path);
      ASSERT_FALSE(bgr.empty()) << path;
      images.emplace_back();
      cv::cvtColor(bgr, images.back(), cv::COLOR_BGR2GRAY);
    }
  texture::FeatureParams p;
  p.device = gpu::Device::kCuda;
  p.normalisation = texture::parse_normalisation("clahe-4-8");
  const std::vector<texture::Features> batch = texture::extract_features_batch(images, p);
  ASSERT_EQ(batch.size(), images.size());
  for (size_t i = 0; i < images.size(); ++i)
    EXPECT_EQ(test::features_difference(batch[i], texture::extract_features(images[i], p)), "") << "image " << i;
  EXPECT_GT(batch[0].count(), 100);
  EXPECT_EQ(batch[flat].count(), 0);
}

// kernels/sift against cv::SIFT where it matters: a gallery enrolled with one extractor and queried
// with the other identifies what the all-CPU path identifies (the same product, inliers within a
// few), in both directions, on re-captured (warped, blurred, noisy) fresh random textures.
TEST(TextureGpu, MixedExtractorsIdentifyAsTheCpuPath) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  texture::FeatureParams on_cpu, on_gpu;
  on_gpu.device = gpu::Device::kCuda;
  std::vector<cv::Mat> images;
  std::vector<texture::GalleryEntry> by_cpu, by_gpu;
  for (int i = 0; i < 30; ++i) {
    images.push_back(test::random_texture(rng, 480, 360));
    by_cpu.push_back({"t" + std::to_string(i), "", 0, texture::extract_features(images.back(), on_cpu)});
    by_gpu.push_back({"t" + std::to_string(i), "", 0, texture::extract_features(images.back(), on_gpu)});
  }
  texture::TextureIndex cpu_enrolled(texture::Device::kCuda), gpu_enrolled(texture::Device::kCuda);
  cpu_enrolled.build(by_cpu);
  gpu_enrolled.build(by_gpu);
  int identified[3] = {0, 0, 0};
  const int queries = 12;
  for (int n = 0; n < queries; ++n) {
    const int i = int(rng() % images.size());
    const cv::Mat q = test::noisy_capture(images[i], rng);
    const texture::Features qc = texture::extract_features(q, on_cpu), qg = texture::extract_features(q, on_gpu);
    const texture::SearchResult all_cpu = cpu_enrolled.search(qc, {});
    const texture::SearchResult gpu_query = cpu_enrolled.search(qg, {});  // enrolled on the CPU, query on the GPU
    const texture::SearchResult cpu_query = gpu_enrolled.search(qc, {});  // and the other way round
    const std::string want = "t" + std::to_string(i);
    identified[0] += all_cpu.identified && all_cpu.best.id == want;
    identified[1] += gpu_query.identified && gpu_query.best.id == want;
    identified[2] += cpu_query.identified && cpu_query.best.id == want;
    EXPECT_EQ(gpu_query.identified, all_cpu.identified) << want;
    EXPECT_EQ(cpu_query.identified, all_cpu.identified) << want;
    if (all_cpu.identified) {
      EXPECT_EQ(gpu_query.best.id, all_cpu.best.id);
      EXPECT_EQ(cpu_query.best.id, all_cpu.best.id);
      const int in = all_cpu.best.geometry.inliers;
      EXPECT_NEAR(gpu_query.best.geometry.inliers, in, 3 + in / 20) << want;
      EXPECT_NEAR(cpu_query.best.geometry.inliers, in, 3 + in / 20) << want;
    }
  }
  std::cout << "identified of " << queries << ": all CPU " << identified[0] << ", CPU gallery + GPU query "
            << identified[1] << ", GPU gallery + CPU query " << identified[2] << "\n";
  EXPECT_GE(identified[0], queries - 1);
}

// Takes all of the GPU's free memory (in ever smaller pieces) until destroyed. Raw cudaMalloc on
// purpose: its failures are the loop's end, not errors (DeviceArray would throw on each).
class MemoryHog {
 public:
  MemoryHog() {
    for (size_t piece = size_t(1) << 30; piece >= 1024; piece /= 16)
      for (void* p = nullptr; cudaMalloc(&p, piece) == cudaSuccess;) held_.push_back(p);
    cudaGetLastError();  // the failed cudaMalloc above set it
  }
  ~MemoryHog() {
    for (void* p : held_) EXPECT_EQ(cudaFree(p), cudaSuccess);
  }

 private:
  std::vector<void*> held_;
};

// Regression: when growing the verification buffers fails, the search throws and the index stays
// usable. The index used to free its old buffers, throw, and keep the freed pointers, which the next
// search and its destructor used again.
TEST(TextureGpu, IndexSurvivesAFailedVerificationAllocation) {
  PRISM_NEED_GPU();
  std::mt19937 rng(18);
  const texture::Features full = texture::extract_features(test::random_texture(rng, 400, 300));
  ASSERT_GE(full.count(), 96);
  texture::Features small = full;  // 16 of its descriptors: a candidate (16 matches) in each of 6 copies
  small.keypoints.resize(16);
  small.descriptors.resize(16 * size_t(match::kDim));
  std::vector<texture::GalleryEntry> entries;
  for (int i = 0; i < 6; ++i) entries.push_back({"a" + std::to_string(i), "", 0, full});
  texture::SearchParams one;
  one.shortlist = 1;

  // Every slot in the host tier: verification copies those into its own buffers, which then grow
  // (GPU-tier slots are read in place and need none).
  texture::IndexOptions host_only;
  host_only.device = texture::Device::kCuda;
  host_only.gpu_budget = 0;
  host_only.host_budget = int64_t(64) << 20;
  texture::TextureIndex index(host_only), fresh(host_only);
  ASSERT_TRUE(index.on_gpu());
  index.build(entries);
  fresh.build(entries);
  // Everything but the verification buffers reaches its final size first (and every kernel runs
  // once), so the search under the hog fails exactly there: one slot here, a 16-row query...
  index.search(small, one);
  // ... and host buffers for a whole query, more than 6 candidates x 16 rows.
  const texture::SearchResult before = index.verify(full, "a0", {});
  {
    MemoryHog hog;
    try {
      index.search(small, {});  // 6 candidates: 6 slots
      ADD_FAILURE() << "the search did not need new verification buffers";
    } catch (const gpu::CudaError& e) {
      EXPECT_NE(std::string(e.what()).find("cudaMalloc("), std::string::npos) << e.what();
    }
  }
  const texture::SearchResult again = index.search(small, {}), expected = fresh.search(small, {});
  ASSERT_EQ(again.candidates.size(), 6u);
  ASSERT_EQ(again.candidates.size(), expected.candidates.size());
  for (size_t i = 0; i < again.candidates.size(); ++i) {
    EXPECT_EQ(again.candidates[i].id, expected.candidates[i].id);
    EXPECT_EQ(again.candidates[i].score, expected.candidates[i].score);
    EXPECT_EQ(again.candidates[i].geometry.inliers, expected.candidates[i].geometry.inliers);
  }
  const texture::SearchResult after = index.verify(full, "a0", {});
  EXPECT_EQ(after.best.geometry.matches, before.best.geometry.matches);
  EXPECT_EQ(after.best.geometry.inliers, before.best.geometry.inliers);
}

// The service's batcher on the GPU: concurrent callers' images of one size go to kernels/sift as one
// batch (every caller reserved before any handed its image, and the wait is longer than the test:
// the batches are exactly one per size and max_batch), and each caller gets extract_features' answer
// for its own image, bit for bit.
TEST(TextureGpu, ConcurrentExtractionsAreBatchedAndEachGetsItsOwn) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  texture::BatcherOptions o;
  o.max_wait = std::chrono::hours(1);
  texture::FeatureParams p;
  p.normalisation = texture::parse_normalisation("clahe-4-8");
  {
    texture::ExtractionBatcher batcher(gpu::Device::kCuda, o);
    ASSERT_TRUE(batcher.batching());
    std::vector<cv::Mat> same;
    for (int i = 0; i < 12; ++i) same.push_back(test::random_texture(rng, 640, 480));
    test::expect_batched_as_one_by_one(batcher, same, p);
    EXPECT_EQ(batcher.stats().batches, 1u);
    EXPECT_EQ(batcher.stats().largest, 12);
    // Two sizes (1400x1000 is shrunk to 1024x731 on the host first) and a flat image: a batch each.
    std::vector<cv::Mat> mixed;
    for (int i = 0; i < 5; ++i) mixed.push_back(test::random_texture(rng, 1400, 1000));
    for (int i = 0; i < 5; ++i) mixed.push_back(test::random_texture(rng, 320, 240));
    mixed.push_back(cv::Mat(240, 320, CV_8U, cv::Scalar(77)));
    test::expect_batched_as_one_by_one(batcher, mixed, p);
    EXPECT_EQ(batcher.stats().batches, 3u);
    EXPECT_EQ(batcher.stats().images, 23u);
  }
  o.max_batch = 4;
  texture::ExtractionBatcher small(gpu::Device::kCuda, o);
  std::vector<cv::Mat> ten;
  for (int i = 0; i < 10; ++i) ten.push_back(test::random_texture(rng, 400, 300));
  test::expect_batched_as_one_by_one(small, ten, p);
  EXPECT_EQ(small.stats().batches, 3u);  // 4, 4 and 2
  EXPECT_EQ(small.stats().largest, 4);
}

// extract_on_gpu (every step after the grey on the GPU) gives extract_features' features bit for
// bit: colour and grey, shrunk or not, normalised or not, and too small for any.
TEST(TextureGpu, ExtractOnGpuEqualsExtractFeatures) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  for (const char* normalisation : {"none", "clahe-4-8"})
    for (cv::Size size : {cv::Size(7, 5), cv::Size(640, 480), cv::Size(1500, 1100), cv::Size(2001, 1501)}) {
      texture::FeatureParams p;
      p.device = gpu::Device::kCuda;
      p.normalisation = texture::parse_normalisation(normalisation);
      cv::Mat grey = test::random_texture(rng, size.width, size.height), bgr;
      cv::cvtColor(grey, bgr, cv::COLOR_GRAY2BGR);
      for (const cv::Mat& image : {grey, bgr})
        EXPECT_EQ(test::features_difference(texture::extract_on_gpu(image, p), texture::extract_features(image, p)), "")
            << normalisation << " " << size << " channels " << image.channels();
    }
}

// A JPEG decoded on the GPU and extracted there gives the features of the host's decode
// (decode_grey_reduced at the reduction the service asks for, then extract_features, put back in
// the file's pixels), bit for bit; one the GPU decoder does not take (progressive) gives nothing.
TEST(TextureGpu, AJpegDecodedOnTheGpuHasTheHostDecodesFeatures) {
  PRISM_NEED_GPU();
  texture::FeatureParams p;
  p.device = gpu::Device::kCuda;
  p.normalisation = texture::parse_normalisation("clahe-4-8");
  std::mt19937 rng(std::random_device{}());
  for (cv::Size size : {cv::Size(640, 480), cv::Size(2100, 1500), cv::Size(4000, 3000), cv::Size(8200, 4100)}) {
    test::JpegCase c;
    c.quality = 80;
    cv::Mat image;
    cv::resize(test::random_texture(rng, 500, 375), image, size, 0, 0, cv::INTER_CUBIC);
    const std::vector<uint8_t> jpeg = test::encode_jpeg(image, c);
    const image::DecodeHeader h = image::read_header(jpeg.data(), jpeg.size(), 1ull << 30, p.max_side);
    const image::ReducedGrey host = image::decode_grey_reduced(jpeg.data(), jpeg.size(), p.max_side);
    texture::Features want = texture::extract_features(host.grey, p);
    texture::to_original_pixels(want, int(host.width), int(host.height), host.reduction);
    std::string why;
    const std::optional<texture::Features> got = texture::extract_jpeg_on_gpu(
        jpeg.data(), jpeg.size(), int(h.width), int(h.height), h.decoded.reduction, p, &why);
    ASSERT_TRUE(got.has_value()) << size << ": " << why;
    EXPECT_EQ(test::features_difference(*got, want), "") << size << " at 1/" << h.decoded.reduction;
    EXPECT_GT(got->count(), 100) << size;
  }
  test::JpegCase progressive;
  progressive.progressive = true;
  const std::vector<uint8_t> jpeg = test::encode_jpeg_case(progressive);
  EXPECT_FALSE(texture::extract_jpeg_on_gpu(jpeg.data(), jpeg.size(), progressive.width, progressive.height, 1, p))
      << "a progressive JPEG is the host's";
}

// max_batch 1: nothing batched, each caller extracts on the GPU on its own thread, as alone.
TEST(TextureGpu, UnbatchedCallersExtractOnTheGpuAsAlone) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  texture::BatcherOptions o;
  o.max_batch = 1;
  texture::ExtractionBatcher batcher(gpu::Device::kCuda, o);
  EXPECT_FALSE(batcher.batching());
  EXPECT_TRUE(batcher.on_gpu());
  std::vector<cv::Mat> images;
  for (int i = 0; i < 12; ++i) images.push_back(test::random_texture(rng, i % 2 ? 640 : 1800, i % 2 ? 480 : 1200));
  texture::FeatureParams p;
  p.normalisation = texture::parse_normalisation("clahe-4-8");
  test::expect_batched_as_one_by_one(batcher, images, p);
  EXPECT_EQ(batcher.stats().batches, 0u);
}

// A lone request is never held (the wait is an hour), and a batch waits for an announced image
// only until its reservation is released.
TEST(TextureGpu, ABatchWaitsOnlyForAnnouncedImages) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  texture::BatcherOptions o;
  o.max_wait = std::chrono::hours(1);
  texture::ExtractionBatcher batcher(gpu::Device::kCuda, o);
  const cv::Mat image = test::random_texture(rng, 640, 480);
  texture::FeatureParams p;
  EXPECT_GT(batcher.reserve().extract(image, p).count(), 100);
  std::optional<texture::ExtractionBatcher::Reservation> other(batcher.reserve());
  auto waiting = std::async(std::launch::async, [&] { return batcher.reserve().extract(image, p); });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "a batch left without the image announced";
  other.reset();
  EXPECT_EQ(test::features_difference(waiting.get(), texture::extract_features(image,
                                                                               [] {
                                                                                 texture::FeatureParams c;
                                                                                 c.device = gpu::Device::kCuda;
                                                                                 return c;
                                                                               }())),
            "");
  EXPECT_EQ(batcher.stats().batches, 2u);
}

}  // namespace
}  // namespace prism
