// The 8-bit matcher's GPU kernels (mma.sync, wgmma, the plain reference) equal to the CPU path bit
// for bit: scores, distances and indices, single and batched queries, images with 0, 1, few and kSlot
// descriptors, slot lists, large batches and batches of more than 65,535 images.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/device_array.h"
#include "match/match.h"
#include "match_cases.h"
#include "prism_test.h"

namespace prism {
namespace {

template <class T>
gpu::DeviceArray<T> upload(const std::vector<T>& v) {
  return gpu::device_copy(v.data(), v.size());
}

template <class T>
void download(std::vector<T>& v, const gpu::DeviceArray<T>& d) {
  PRISM_CUDA_CHECK(cudaMemcpy(v.data(), d.data(), v.size() * sizeof(T), cudaMemcpyDeviceToHost));
}

// The scores-only kernels this device runs. On a compute capability 9.0 GPU (the GPU suite's H100
// and H200) that includes wgmma; elsewhere its absence is said, not hidden.
std::vector<match::GpuPath> scores_paths() {
  std::vector<match::GpuPath> paths = {match::GpuPath::kAuto, match::GpuPath::kMmaSync};
  if (match::gpu_path_available(match::GpuPath::kWgmma))
    paths.push_back(match::GpuPath::kWgmma);
  else
    std::printf("note: this GPU has no wgmma kernel (not compute capability 9.0): mma.sync only\n");
  return paths;
}
const char* path_name(match::GpuPath p) {
  return p == match::GpuPath::kWgmma ? "wgmma" : p == match::GpuPath::kMmaSync ? "mma.sync" : "auto";
}

// MatchU8Problem::norms for a case's gallery, with the rows past each slot's count poisoned (0, which
// would be everyone's nearest if it were read): the kernels must take |g|^2 only where it is real.
gpu::DeviceArray<int32_t> poisoned_norms(const test::MatchU8Case& c) {
  std::vector<int32_t> n(c.counts.size() * size_t(match::kSlot));
  match::u8_norms(c.gallery.data(), int(n.size()), n.data());
  for (size_t s = 0; s < c.counts.size(); ++s)
    std::fill(n.begin() + s * match::kSlot + c.counts[s], n.begin() + (s + 1) * match::kSlot, 0);
  return upload(n);
}

TEST(MatchU8Gpu, FusedKernelEqualsTheCpuPathBitForBit) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  struct Shape {
    int queries, query_rows;
    std::vector<int> counts, slots;
  };
  const std::vector<Shape> shapes = {
      {1, 768, {768, 0, 1, 2, 65, 700, 768, 128, 127, 129}, {}},  // one query; chunk edges at 128
      {3, 64, {5, 768, 2, 129, 300}, {}},                         // batched queries
      {5, 16, {64, 63, 768, 0}, {2, 0, 2, 1, 3, 2}},              // 80 rows (not whole warps); a slot list
      {1, 272, {768, 383, 640}, {1, 2, 0}},                       // rows past one block of 256
      {2, 768, {768, 64, 63, 65, 700, 0, 1}, {}},                 // wgmma: one block per query
      {3, 256, {768, 191, 2, 768}, {3, 1, 0, 2, 3}},              // wgmma: three queries in one block
      {1, 1040, {768, 640}, {}},                                  // wgmma: rows past one block of 768
  };
  for (const Shape& s : shapes) {
    const test::MatchU8Case c = test::make_match_u8_case(s.queries, s.query_rows, s.counts, s.slots, rng);
    const match::MatchU8Problem& p = c.problem;
    const size_t n_scores = size_t(p.queries()) * p.images, n_rows = size_t(p.images) * p.rows;
    std::vector<int> cs(n_scores), ci(n_rows);
    std::vector<int32_t> cb(n_rows), c2(n_rows);
    match::match_u8_cpu(p, {0.8f}, {cs.data(), cb.data(), c2.data(), ci.data()});
    int passes = 0;
    for (int v : cs) passes += v;
    EXPECT_GT(passes, 0);

    match::MatchU8Problem dp = p;
    const gpu::DeviceArray<uint8_t> dq = upload(c.query), dg = upload(c.gallery);
    const gpu::DeviceArray<int> dc = upload(c.counts), ds = upload(c.slots.empty() ? std::vector<int>{0} : c.slots);
    dp.query = dq.data();
    dp.gallery = dg.data();
    dp.counts = dc.data();
    dp.slots = c.slots.empty() ? nullptr : ds.data();
    // Scores are written, not added to: start from garbage.
    const gpu::DeviceArray<int> d_scores = upload(std::vector<int>(n_scores, 12345)), d_index = upload(ci);
    const gpu::DeviceArray<int32_t> d_best = upload(cb), d_second = upload(c2);
    PRISM_CUDA_CHECK(cudaMemset(d_index.data(), 0x7F, n_rows * sizeof(int)));
    PRISM_CUDA_CHECK(cudaMemset(d_best.data(), 0x7F, n_rows * sizeof(int32_t)));
    PRISM_CUDA_CHECK(cudaMemset(d_second.data(), 0x7F, n_rows * sizeof(int32_t)));
    const match::MatchU8Outputs dout{d_scores.data(), d_best.data(), d_second.data(), d_index.data()};
    for (int kernel = 0; kernel < 2; ++kernel) {
      SCOPED_TRACE(kernel == 0 ? "fused kernel" : "reference kernel");
      if (kernel == 0)
        match::match_u8_cuda(dp, {0.8f}, dout, nullptr);
      else
        match::match_u8_cuda_reference(dp, {0.8f}, dout, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<int> gs(n_scores), gi(n_rows);
      std::vector<int32_t> gb(n_rows), g2(n_rows);
      download(gs, d_scores);
      download(gi, d_index);
      download(gb, d_best);
      download(g2, d_second);
      EXPECT_EQ(gs, cs);
      for (size_t o = 0; o < n_rows; ++o) {
        ASSERT_EQ(gb[o], cb[o]) << "image " << o / p.rows << " row " << o % p.rows;
        ASSERT_EQ(g2[o], c2[o]) << "image " << o / p.rows << " row " << o % p.rows;
        ASSERT_EQ(gi[o], ci[o]) << "image " << o / p.rows << " row " << o % p.rows;
      }
    }
    // Scores alone take the index-free top-2 update, and each kernel, with |g|^2 computed or given:
    // the same scores.
    const gpu::DeviceArray<int32_t> d_norms = poisoned_norms(c);
    for (match::GpuPath path : scores_paths())
      for (const int32_t* norms : {static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(d_norms.data())}) {
        SCOPED_TRACE(std::string(path_name(path)) + (norms ? ", norms given" : ""));
        std::vector<int> only(n_scores, -1);
        PRISM_CUDA_CHECK(cudaMemset(d_scores.data(), 0x7F, n_scores * sizeof(int)));
        match::MatchU8Problem np = dp;
        np.norms = norms;
        match::match_u8_cuda(np, {0.8f}, {d_scores.data()}, nullptr, path);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        download(only, d_scores);
        EXPECT_EQ(only, cs);
      }
  }
}

// The wgmma kernel's persistent grid walks many images per block, double buffered: a batch of more
// images than the device has multiprocessors, with a slot list (and |g|^2 given or not), on every
// multiprocessor or a few (MatchU8Problem::grid_sms), scores equal to the CPU path's.
TEST(MatchU8Gpu, EveryKernelScoresALargeBatchAsTheCpuPath) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  std::vector<int> counts(180), slots(400);
  for (int& c : counts) c = rng() % 5 == 0 ? int(rng() % match::kSlot) : match::kSlot;
  for (int& s : slots) s = int(rng() % counts.size());
  const test::MatchU8Case c = test::make_match_u8_case(1, 768, counts, slots, rng);
  const match::MatchU8Problem& p = c.problem;
  std::vector<int> cs(p.images);
  match::match_u8_cpu(p, {0.8f}, {cs.data()});
  int passes = 0;
  for (int v : cs) passes += v;
  EXPECT_GT(passes, 0);
  match::MatchU8Problem dp = p;
  const gpu::DeviceArray<uint8_t> dq = upload(c.query), dg = upload(c.gallery);
  const gpu::DeviceArray<int> dc = upload(c.counts), ds = upload(c.slots),
                              d_scores = upload(std::vector<int>(p.images));
  dp.query = dq.data();
  dp.gallery = dg.data();
  dp.counts = dc.data();
  dp.slots = ds.data();
  const gpu::DeviceArray<int32_t> d_norms = poisoned_norms(c);
  for (match::GpuPath path : scores_paths())
    for (const int32_t* norms : {static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(d_norms.data())})
      for (int grid_sms : {0, 7}) {  // 7: the wgmma kernel's persistent grid of 7 blocks walks 57 images each
        SCOPED_TRACE(std::string(path_name(path)) + (norms ? ", norms given" : "") + ", grid_sms " +
                     std::to_string(grid_sms));
        PRISM_CUDA_CHECK(cudaMemset(d_scores.data(), 0x7F, p.images * sizeof(int)));
        match::MatchU8Problem np = dp;
        np.norms = norms;
        np.grid_sms = grid_sms;
        match::match_u8_cuda(np, {0.8f}, {d_scores.data()}, nullptr, path);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<int> gs(p.images);
        download(gs, d_scores);
        EXPECT_EQ(gs, cs);
      }
}

TEST(MatchU8Gpu, BadRequestsAreRefused) {
  PRISM_NEED_GPU();
  match::MatchU8Problem p;
  p.rows = 24;
  p.query_rows = 24;  // not a multiple of 16
  p.images = 1;
  int scores = 0;
  EXPECT_THROW(match::match_u8_cuda(p, {0.8f}, {}, nullptr), std::invalid_argument);
  EXPECT_THROW(match::match_u8_cuda(p, {0.8f}, {&scores}, nullptr), std::invalid_argument);
  // Per-row outputs come from the mma.sync kernel alone; forcing wgmma for them is refused.
  p.rows = p.query_rows = 16;
  int best = 0;
  EXPECT_THROW(match::match_u8_cuda(p, {0.8f}, {&scores, &best}, nullptr, match::GpuPath::kWgmma),
               std::invalid_argument);
  // cp.async reads 16 bytes at a time: a misaligned gallery or norms pointer is refused before any launch.
  alignas(16) static const uint8_t bytes[64] = {};
  p.gallery = bytes + 4;
  EXPECT_THROW(match::match_u8_cuda(p, {0.8f}, {&scores}, nullptr), std::invalid_argument);
  p.gallery = bytes;
  p.norms = reinterpret_cast<const int32_t*>(bytes + 8);
  EXPECT_THROW(match::match_u8_cuda(p, {0.8f}, {&scores}, nullptr), std::invalid_argument);
  p.norms = nullptr;
  p.grid_sms = -1;
  EXPECT_THROW(match::match_u8_cuda(p, {0.8f}, {&scores}, nullptr), std::invalid_argument);
}

// A batch of 70,000 gallery images: a grid with the images on y would stop at 65,535. Every kernel
// scores the one planted image as the CPU path does and every empty one 0.
TEST(MatchU8Gpu, BatchesOfMoreThan65535Images) {
  PRISM_NEED_GPU();
  const int images = 70000, rows = 64;
  std::mt19937 rng(std::random_device{}());
  std::vector<uint8_t> query = test::random_rootsift_u8(rows, rng);
  std::vector<uint8_t> last = test::random_rootsift_u8(match::kSlot, rng);
  for (int r = 0; r < rows; ++r)
    std::copy_n(&query[size_t(r) * match::kDim], match::kDim, &last[size_t(3 * r) * match::kDim]);
  std::vector<int> counts(images, 0);
  counts.back() = 200;  // the last image holds the query's 64 descriptors among random ones
  match::MatchU8Problem p;
  p.rows = p.query_rows = rows;
  p.images = 1;
  p.query = query.data();
  p.gallery = last.data();
  p.counts = &counts.back();
  int expected = -1;
  match::match_u8_cpu(p, {}, {&expected});
  ASSERT_GT(expected, 0);

  gpu::DeviceArray<uint8_t> dg(size_t(images) * match::kSlotBytes);
  PRISM_CUDA_CHECK(cudaMemset(dg.data(), 0, dg.bytes()));
  PRISM_CUDA_CHECK(
      cudaMemcpy(dg.data() + size_t(images - 1) * match::kSlotBytes, last.data(), last.size(), cudaMemcpyHostToDevice));
  const gpu::DeviceArray<uint8_t> dq = upload(query);
  const gpu::DeviceArray<int> dc = upload(counts);
  gpu::DeviceArray<int> ds(images);
  p.query = dq.data();
  p.gallery = dg.data();
  p.counts = dc.data();
  p.images = images;
  std::vector<int> scores(images);
  const auto check_scores = [&](const char* kernel) {
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << kernel;
    download(scores, ds);
    EXPECT_EQ(scores.back(), expected) << kernel;
    for (int i = 0; i + 1 < images; ++i) ASSERT_EQ(scores[i], 0) << kernel << ", image " << i;
  };
  for (const match::GpuPath path : scores_paths()) {
    PRISM_CUDA_CHECK(cudaMemset(ds.data(), 0xFF, ds.bytes()));  // the kernels write, not add
    match::match_u8_cuda(p, {}, {ds.data()}, nullptr, path);
    check_scores(path_name(path));
  }
  PRISM_CUDA_CHECK(cudaMemset(ds.data(), 0xFF, ds.bytes()));
  match::match_u8_cuda_reference(p, {}, {ds.data()}, nullptr);
  check_scores("reference");
}

}  // namespace
}  // namespace prism
