// The EMD CUDA path against the independent min-cost-flow reference and against the CPU path;
// the GPU cache and deduplication never change a result and count like the CPU's; emd::Tracker's
// CUDA path gives what its CPU path gives.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <opencv2/core.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>

#include "common/device_array.h"
#include "emd/emd_map.h"
#include "emd/objects.h"
#include "emd/tracker.h"
#include "emd_cases.h"
#include "emd_reference.h"
#include "prism_test.h"

namespace prism {
namespace {

using emd::GroundDistance;
using test::SignatureKind;

void check(cudaError_t e) { ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e); }

// Device copies of a host frame and its result.
struct DeviceFrame {
  gpu::DeviceArray<float> sig, out;
  DeviceFrame(const std::vector<float>& frame, int64_t pixels)
      : sig(gpu::device_copy(frame.data(), frame.size())), out(static_cast<size_t>(pixels)) {}
  std::vector<float> result(int64_t pixels) const {
    std::vector<float> r(pixels);
    check(cudaMemcpy(r.data(), out.data(), pixels * sizeof(float), cudaMemcpyDeviceToHost));
    return r;
  }
};

class EmdGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    PRISM_NEED_GPU();
    // Blocking: DeviceFrame's synchronous copies (legacy default stream) come before the work queued here.
    stream = gpu::Stream::create(cudaStreamDefault);
  }
  gpu::Stream stream;
};

// Per size: batches of problems sharing a target and a ground distance (one EMD map each), solved
// on the GPU, against the reference in double. Distances with Normalization::Flow; the reference
// gives cost and flow.
TEST_F(EmdGpu, MatchesTheMinCostFlowReferenceOnEverySize) {
  const int count = test::problems_per_size(4000), per_batch = 1000;  // per kind; the GPU suite: 25000 (1e5 per size)
  for (SignatureKind kind :
       {SignatureKind::Dense, SignatureKind::Sparse, SignatureKind::Counts, SignatureKind::Unequal}) {
    double worst = 0, worst_cpu = 0;
    std::string worst_what;
    int64_t total = 0;
    for (int n = 2; n <= emd::kMaxBins; ++n) {
      std::mt19937 rng(1000u * static_cast<uint32_t>(n) + static_cast<uint32_t>(kind));
      for (int done = 0; done < count; done += per_batch) {
        const int pixels = std::min(per_batch, count - done);
        const std::vector<float> cost =
            done % (2 * per_batch) == 0 ? test::random_cost(rng, n) : GroundDistance::abs_diff(n).values();
        const GroundDistance g(cost, n);
        std::vector<float> target =
            test::random_signature(rng, n, kind == SignatureKind::Unequal ? SignatureKind::Dense : kind);
        if (kind == SignatureKind::Sparse || kind == SignatureKind::Counts) target[rng() % n] += 1.f;  // never empty
        std::vector<float> frame;
        for (int p = 0; p < pixels; ++p) {
          auto s = test::random_signature(rng, n, kind);
          frame.insert(frame.end(), s.begin(), s.end());
        }
        emd::CudaEmdMap map(stream, g, target);
        DeviceFrame d(frame, pixels);
        map.compute(d.sig.data(), pixels, d.out.data());
        check(cudaStreamSynchronize(stream));
        const std::vector<float> got = d.result(pixels);
        std::mutex mu;
        cv::parallel_for_(cv::Range(0, pixels), [&](const cv::Range& r) {
          for (int p = r.start; p < r.end; ++p) {
            std::vector<double> a(frame.begin() + static_cast<int64_t>(p) * n,
                                  frame.begin() + static_cast<int64_t>(p + 1) * n);
            double flow = 0;
            const double c =
                test::emd_reference_cost(a, {target.begin(), target.end()}, {cost.begin(), cost.end()}, &flow);
            const double ref = flow > 0 ? c / flow : 0.0;
            // float output: its rounding (6e-8 relative) is inside the 1e-5 bar
            const double floor = 1e-6 * std::max(1.0, (double)g.view().max_cost);
            const double rel = std::abs(got[p] - ref) / std::max(std::abs(ref), floor);
            // the CPU path on the same problem, against the same reference
            const double on_cpu = emd::emd_cpu(frame.data() + static_cast<int64_t>(p) * n, target.data(), g);
            const double rel_cpu = std::abs(on_cpu - ref) / std::max(std::abs(ref), floor);
            std::lock_guard<std::mutex> l(mu);
            worst_cpu = std::max(worst_cpu, rel_cpu);
            if (rel > worst) {
              worst = rel;
              worst_what = std::to_string(n) + " bins " + test::kind_name(kind) + ": GPU " + std::to_string(got[p]) +
                           " reference " + std::to_string(ref);
            }
          }
        });
        total += pixels;
      }
    }
    std::cout << "  " << test::kind_name(kind) << ": " << total << " problems (" << count
              << " per size), worst relative error GPU " << worst << " (" << worst_what << "), CPU " << worst_cpu
              << "\n";
    EXPECT_LE(worst, 1e-5) << worst_what;
    EXPECT_LE(worst_cpu, 1e-9);
  }
}

// A static scene with sensor noise: frames whose signatures repeat within and across frames.
std::vector<float> noisy_scene(std::mt19937& rng, int n, int pixels, int distinct, int noisy_every) {
  std::vector<std::vector<float>> pool;
  for (int i = 0; i < distinct; ++i) pool.push_back(test::random_signature(rng, n, SignatureKind::Counts));
  std::vector<float> f;
  for (int p = 0; p < pixels; ++p) {
    auto s = pool[(p * 7919) % distinct];
    if (noisy_every && rng() % noisy_every == 0) {  // one count moves to a neighbouring bin
      const int i = static_cast<int>(rng() % n);
      if (s[i] > 0) {
        s[i] -= 1;
        s[(i + 1) % n] += 1;
      }
    }
    f.insert(f.end(), s.begin(), s.end());
  }
  return f;
}

TEST_F(EmdGpu, CacheNeverChangesAResultAndCountsLikeTheCpu) {
  for (int n : {4, 11, 32}) {
    const int pixels = 60000;
    std::mt19937 rng(77 + n);
    std::vector<float> target = test::random_signature(rng, n, SignatureKind::Counts);
    emd::EmdMapConfig direct;
    direct.dedup = false;
    emd::EmdMapConfig cached;
    cached.cache_capacity = 20000;
    emd::CudaEmdMap gpu_direct(stream, GroundDistance::abs_diff(n), target, direct);
    emd::CudaEmdMap gpu(stream, GroundDistance::abs_diff(n), target, cached);
    emd::CpuEmdMap cpu(GroundDistance::abs_diff(n), target, cached);
    for (int f = 0; f < 6; ++f) {
      const std::vector<float> frame = noisy_scene(rng, n, pixels, 5000, f == 0 ? 0 : 4);
      DeviceFrame a(frame, pixels), b(frame, pixels);
      gpu_direct.compute(a.sig.data(), pixels, a.out.data());
      gpu.compute(b.sig.data(), pixels, b.out.data());
      check(cudaStreamSynchronize(stream));
      const std::vector<float> want = a.result(pixels), got = b.result(pixels);
      std::vector<float> on_cpu(pixels);
      const emd::FrameStats cs = cpu.compute(frame.data(), pixels, on_cpu.data());
      const emd::FrameStats gs = gpu.last_stats();
      ASSERT_EQ(std::memcmp(want.data(), got.data(), pixels * sizeof(float)), 0) << n << " bins, frame " << f;
      int64_t differ = 0;
      double worst = 0;
      for (int p = 0; p < pixels; ++p) {
        if (got[p] != on_cpu[p]) ++differ;
        worst = std::max(worst, std::abs((double)got[p] - on_cpu[p]) / std::max(1e-6, (double)std::abs(on_cpu[p])));
      }
      EXPECT_LE(worst, 1e-6) << n << " bins, frame " << f << ": GPU vs CPU";
      EXPECT_EQ(gs.solved, cs.solved) << n << " bins, frame " << f;
      EXPECT_EQ(gs.duplicates, cs.duplicates);
      EXPECT_EQ(gs.cache_hits, cs.cache_hits);
      EXPECT_EQ(gs.flushed, cs.flushed);
      std::cout << "  " << n << " bins, frame " << f << ": solved " << gs.solved << ", duplicates " << gs.duplicates
                << ", hits " << gs.cache_hits << (gs.flushed ? " (flushed)" : "") << ", pivots " << gs.pivots
                << "; GPU vs CPU: " << differ << " values differ, worst relative " << worst << "\n";
    }
  }
}

TEST_F(EmdGpu, NoDeviceAllocationPerFrame) {
  const int n = 11, pixels = 100000;
  std::mt19937 rng(3);
  std::vector<float> target = test::random_signature(rng, n, SignatureKind::Counts);
  emd::CudaEmdMap gpu(stream, GroundDistance::abs_diff(n), target);
  const std::vector<float> frame = noisy_scene(rng, n, pixels, 3000, 2);
  DeviceFrame d(frame, pixels);
  gpu.compute(d.sig.data(), pixels, d.out.data());
  check(cudaStreamSynchronize(stream));
  size_t free0 = 0, total = 0, free1 = 0;
  check(cudaMemGetInfo(&free0, &total));
  for (int i = 0; i < 20; ++i) gpu.compute(d.sig.data(), pixels, d.out.data());
  check(cudaStreamSynchronize(stream));
  check(cudaMemGetInfo(&free1, &total));
  EXPECT_EQ(free0, free1);
}

// The table grows on demand as the CPU's does: 64x64 frames with the default cache reserve about
// 1 MB (the whole 2^21-signature table was allocated up front); frames of new signatures grow it
// at the same frames as the CPU's, keeping the cache (the counts equal the CPU's), and results
// never change. Then the same frames queued without a sync in between (the host knows only a bound
// of what is cached): still the direct results.
TEST_F(EmdGpu, TableGrowsOnDemandLikeTheCpu) {
  {
    const int n = 11, pixels = 64 * 64;
    std::mt19937 rng(5);
    const std::vector<float> target = test::random_signature(rng, n, SignatureKind::Counts);
    emd::CudaEmdMap gpu(stream, GroundDistance::abs_diff(n), target);
    const std::vector<float> frame = noisy_scene(rng, n, pixels, 300, 0);
    DeviceFrame d(frame, pixels);
    int64_t first = 0;
    for (int f = 0; f < 5; ++f) {
      gpu.compute(d.sig.data(), pixels, d.out.data());
      check(cudaStreamSynchronize(stream));
      if (f == 0) first = gpu.reserved_bytes();
      EXPECT_EQ(gpu.reserved_bytes(), first) << "frame " << f;
    }
    std::cout << "  64x64, default cache: " << first << " device bytes reserved\n";
    EXPECT_GT(first, 0);
    EXPECT_LT(first, 2 << 20);
  }
  const int n = 6, pixels = 1500, capacity = 20000, frames = 30;
  std::mt19937 rng(11);
  const std::vector<float> target = test::random_signature(rng, n, SignatureKind::Counts);
  emd::EmdMapConfig direct;
  direct.dedup = false;
  emd::EmdMapConfig cached;
  cached.cache_capacity = capacity;
  std::vector<std::vector<float>> host(frames);
  for (int f = 0; f < frames; ++f) {
    if (f > 0 && f % 4 == 0) {
      host[f] = host[0];  // the first frame again
      continue;
    }
    for (int p = 0; p < pixels; ++p) {
      const std::vector<float> sig = test::random_signature(rng, n, SignatureKind::Dense);
      host[f].insert(host[f].end(), sig.begin(), sig.end());
    }
  }
  std::vector<std::unique_ptr<DeviceFrame>> d;
  for (const auto& h : host) d.push_back(std::make_unique<DeviceFrame>(h, pixels));
  emd::CudaEmdMap gpu_direct(stream, GroundDistance::abs_diff(n), target, direct);
  emd::CudaEmdMap gpu(stream, GroundDistance::abs_diff(n), target, cached);
  emd::CpuEmdMap cpu(GroundDistance::abs_diff(n), target, cached);
  int cpu_growths = 0, gpu_growths = 0;
  int64_t cpu_bytes = 0, gpu_bytes = 0;
  std::vector<float> on_cpu(pixels);
  for (int f = 0; f < frames; ++f) {
    gpu_direct.compute(d[f]->sig.data(), pixels, d[f]->out.data());
    check(cudaStreamSynchronize(stream));
    const std::vector<float> want = d[f]->result(pixels);
    gpu.compute(d[f]->sig.data(), pixels, d[f]->out.data());
    check(cudaStreamSynchronize(stream));
    const std::vector<float> got = d[f]->result(pixels);
    const emd::FrameStats cs = cpu.compute(host[f].data(), pixels, on_cpu.data());
    const emd::FrameStats gs = gpu.last_stats();
    ASSERT_EQ(std::memcmp(want.data(), got.data(), pixels * sizeof(float)), 0) << "frame " << f;
    EXPECT_EQ(gs.solved, cs.solved) << "frame " << f;
    EXPECT_EQ(gs.duplicates, cs.duplicates) << "frame " << f;
    EXPECT_EQ(gs.cache_hits, cs.cache_hits) << "frame " << f;
    EXPECT_EQ(gs.flushed, cs.flushed) << "frame " << f;
    cpu_growths += cpu.reserved_bytes() != cpu_bytes;
    gpu_growths += gpu.reserved_bytes() != gpu_bytes;
    EXPECT_EQ(cpu.reserved_bytes() != cpu_bytes, gpu.reserved_bytes() != gpu_bytes) << "frame " << f;
    cpu_bytes = cpu.reserved_bytes();
    gpu_bytes = gpu.reserved_bytes();
  }
  EXPECT_EQ(gpu_growths, 4);  // 3000 -> 6000 -> 12000 -> 21500 entries
  EXPECT_EQ(cpu_growths, 4);
  // Queued back to back on a fresh map: the host assumes the worst until the counters are back.
  emd::CudaEmdMap queued(stream, GroundDistance::abs_diff(n), target, cached);
  std::vector<gpu::DeviceArray<float>> outs;
  for (int f = 0; f < frames; ++f) {
    outs.emplace_back(static_cast<size_t>(pixels));
    queued.compute(d[f]->sig.data(), pixels, outs.back().data());
  }
  check(cudaStreamSynchronize(stream));
  for (int f = 0; f < frames; ++f) {
    gpu_direct.compute(d[f]->sig.data(), pixels, d[f]->out.data());
    check(cudaStreamSynchronize(stream));
    std::vector<float> got(pixels);
    check(cudaMemcpy(got.data(), outs[f].data(), pixels * sizeof(float), cudaMemcpyDeviceToHost));
    ASSERT_EQ(std::memcmp(d[f]->result(pixels).data(), got.data(), pixels * sizeof(float)), 0) << "queued frame " << f;
  }
}

// The on-target mask's words on the GPU equal the CPU's bit for bit (bits and minima), at widths
// around the 32-pixel word, with NaN and +infinity pixels.
TEST_F(EmdGpu, MaskIsTheCpuMask) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.f, 3.f);
  for (const int W : {1, 31, 32, 33, 100, 768}) {
    const int H = 13, wpr = emd::mask_words_per_row(W);
    std::vector<float> d(static_cast<size_t>(W) * H);
    for (size_t i = 0; i < d.size(); ++i) d[i] = i % 17 == 0 ? NAN : i % 23 == 0 ? INFINITY : u(rng);
    std::vector<emd::MaskWord> want(static_cast<size_t>(wpr) * H), got(want.size());
    emd::make_mask_cpu(d.data(), W, H, 1.f, want.data());
    gpu::DeviceArray<float> d_d(d.size());
    gpu::DeviceArray<emd::MaskWord> d_m(want.size());
    check(cudaMemcpy(d_d.data(), d.data(), d_d.bytes(), cudaMemcpyHostToDevice));
    emd::make_mask_cuda(d_d.data(), W, H, 1.f, d_m.data(), stream);
    check(cudaStreamSynchronize(stream));
    check(cudaMemcpy(got.data(), d_m.data(), d_m.bytes(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_TRUE(got[i].bits == want[i].bits &&
                  std::memcmp(&got[i].min_distance, &want[i].min_distance, sizeof(float)) == 0)
          << "width " << W << " word " << i;
  }
}

// emd::Tracker on the GPU against itself on the CPU, frame by frame: heat maps with the boxes
// drawn (bit for bit), detections, track ids and statistics; the target learned in frame 1.
TEST_F(EmdGpu, TrackerCudaPathIsItsCpuPath) {
  const int W = 96, H = 72, frames = 5;
  const int64_t stride = W + 8, out_stride = 4 * W + 16, min_area = 30;
  for (const int64_t cache : {int64_t{3000}, int64_t{0}, int64_t{-1}}) {  // -1: dedup off
    emd::TrackerConfig c;
    c.target_rect = "33,28,12,12";
    c.target_frame = 1;
    c.map.cache_capacity = cache < 0 ? 3000 : cache;
    c.map.dedup = cache >= 0;
    const emd::Tracker::Shape shape{W, H, 0, false};
    emd::Tracker cpu, gpu;
    cpu.configure(c, shape);
    gpu.configure(c, shape, stream);
    emd::Tracker::FrameParams p;
    p.threshold = 0.5f;
    p.opacity = 0.7f;
    gpu::DeviceArray<uint8_t> d_in(static_cast<size_t>(stride) * H), d_out(static_cast<size_t>(out_stride) * H);
    for (int f = 0; f < frames; ++f) {
      const std::vector<uint8_t> grey = test::tracker_scene(W, H, stride, f);
      std::vector<uint8_t> want(static_cast<size_t>(out_stride) * H, 0), got = want;
      cpu.process_cpu({grey.data(), stride, {}}, {want.data(), out_stride}, p);
      emd::ObjectParams op;
      op.min_area = min_area;
      const emd::Tracker::Result a = cpu.end_frame(op, {});
      if (!a.detections.empty()) cpu.draw_boxes_cpu(a.detections, want.data(), out_stride);

      check(cudaMemcpy(d_in.data(), grey.data(), grey.size(), cudaMemcpyHostToDevice));
      check(cudaMemset(d_out.data(), 0, d_out.bytes()));
      gpu.process_cuda({d_in.data(), stride, {}}, {d_out.data(), out_stride}, p);
      check(cudaStreamSynchronize(stream));
      const emd::Tracker::Result b = gpu.end_frame(op, {});
      if (!b.detections.empty()) gpu.draw_boxes_cuda(b.detections, d_out.data(), out_stride);
      check(cudaMemcpy(got.data(), d_out.data(), got.size(), cudaMemcpyDeviceToHost));

      const std::string where = "cache " + std::to_string(cache) + " frame " + std::to_string(f);
      EXPECT_EQ(b.frame, a.frame);
      EXPECT_EQ(b.solved, a.solved) << where;
      EXPECT_TRUE(got == want) << where << ": the heat maps differ";
      ASSERT_EQ(b.detections.size(), a.detections.size()) << where;
      for (size_t k = 0; k < a.detections.size(); ++k) {
        const emd::Detection &x = a.detections[k], &y = b.detections[k];
        EXPECT_TRUE(x.x == y.x && x.y == y.y && x.w == y.w && x.h == y.h && x.track_id == y.track_id &&
                    x.pixels == y.pixels && x.distance == y.distance)
            << where << " detection " << k;
      }
      EXPECT_EQ(b.stats.solved, a.stats.solved) << where;
      EXPECT_EQ(b.stats.duplicates, a.stats.duplicates) << where;
      EXPECT_EQ(b.stats.cache_hits, a.stats.cache_hits) << where;
      EXPECT_EQ(b.stats.flushed, a.stats.flushed) << where;
      if (f >= 1) {
        EXPECT_FALSE(a.detections.empty()) << where;
      }
    }
  }
}

// Tensor input (packed f32: used in place) with a given target and the distance map out.
TEST_F(EmdGpu, TrackerCudaDistanceMapIsItsCpuPath) {
  const int W = 40, H = 24, n = 6;
  tensor::FrameLayout layout;
  layout.dtype = tensor::DType::F32;
  layout.width = W;
  layout.height = H;
  layout.channels = n;
  layout.row_bytes = layout.packed_row_bytes();
  std::mt19937 rng(11);
  std::vector<float> frame(static_cast<size_t>(W) * H * n);
  for (float& v : frame) v = static_cast<float>(rng() % 8);
  emd::TrackerConfig c;
  c.target = "5 10 20 10 5 1";
  const emd::Tracker::Shape shape{W, H, n, true};
  emd::Tracker cpu, gpu;
  cpu.configure(c, shape);
  gpu.configure(c, shape, stream);
  const int64_t out_stride = 4 * W + 12;
  std::vector<uint8_t> want(static_cast<size_t>(out_stride) * H, 0), got = want;
  cpu.process_cpu({reinterpret_cast<const uint8_t*>(frame.data()), layout.row_bytes, layout}, {want.data(), out_stride},
                  {});
  const gpu::DeviceArray<float> d_in = gpu::device_copy(frame.data(), frame.size());
  gpu::DeviceArray<uint8_t> d_out(want.size());
  check(cudaMemset(d_out.data(), 0, d_out.bytes()));
  gpu.process_cuda({reinterpret_cast<const uint8_t*>(d_in.data()), layout.row_bytes, layout},
                   {d_out.data(), out_stride}, {});
  check(cudaStreamSynchronize(stream));
  check(cudaMemcpy(got.data(), d_out.data(), got.size(), cudaMemcpyDeviceToHost));
  const emd::Tracker::Result a = cpu.end_frame({}, {}), b = gpu.end_frame({}, {});
  EXPECT_TRUE(a.solved && b.solved);
  EXPECT_EQ(b.stats.solved, a.stats.solved);
  int64_t differ = 0;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      float u, v;
      std::memcpy(&u, &want[y * out_stride + 4 * x], 4);
      std::memcpy(&v, &got[y * out_stride + 4 * x], 4);
      differ += u != v;
    }
  EXPECT_EQ(differ, 0);
}

}  // namespace
}  // namespace prism
