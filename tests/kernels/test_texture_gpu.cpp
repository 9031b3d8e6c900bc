// Texture identification on the GPU against the CPU path: ratio-test scores over a gallery of fresh
// random textures, search and verify decisions, and a batch of more than 65,535 gallery images.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <random>

#include "match_cases.h"
#include "prism_test.h"
#include "texture/index.h"
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

TEST(TextureGpu, BatchesOfMoreThan65535Images) {
  PRISM_NEED_GPU();
  const int images = 70000;  // gridDim.y would stop at 65,535
  std::mt19937 rng(std::random_device{}());
  const std::vector<uint16_t> query = test::random_rootsift(64, rng);
  const size_t slot = size_t(match::kSlot) * match::kDim;
  uint16_t *dq = nullptr, *dg = nullptr;
  int *dc = nullptr, *ds = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dg), size_t(images) * slot * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dq), query.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dc), images * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&ds), images * sizeof(int)), cudaSuccess);
  cudaMemset(dg, 0, size_t(images) * slot * 2);
  cudaMemset(ds, 0, images * sizeof(int));
  std::vector<int> counts(images, 0);
  counts.back() = 200;  // the last image holds the query's 64 descriptors among random ones
  std::vector<uint16_t> last = test::random_rootsift(match::kSlot, rng);
  for (int r = 0; r < 64; ++r) std::copy_n(&query[size_t(r) * match::kDim], match::kDim, &last[size_t(3 * r) * match::kDim]);
  cudaMemcpy(dg + size_t(images - 1) * slot, last.data(), slot * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dq, query.data(), query.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dc, counts.data(), images * sizeof(int), cudaMemcpyHostToDevice);
  match::MatchProblem p;
  p.query = dq;
  p.rows = p.query_rows = 64;
  p.gallery = dg;
  p.counts = dc;
  p.images = images;
  match::match_cuda(p, {}, {ds}, nullptr);
  std::vector<int> scores(images);
  ASSERT_EQ(cudaMemcpy(scores.data(), ds, images * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(scores.back(), 64);
  for (int i = 0; i + 1 < images; ++i) ASSERT_EQ(scores[i], 0) << i;
  cudaFree(dg);
  cudaFree(dq);
  cudaFree(dc);
  cudaFree(ds);
}

}  // namespace
}  // namespace prism
