// Gallery images searched per second. On the CPU (any machine): the FP16 match_cpu and the 8-bit
// match_u8_cpu on each instruction path this CPU has, in ms per gallery image per query of 768
// descriptors. On the GPU (when there is one): the 8-bit tensor-core matchers (one query of 768
// RootSIFT descriptors, and batches of queries) against OpenCV's CPU
// BFMatcher::knnMatch(k=2) on the same descriptors. The 8-bit gallery is the FP16 one quantised
// (half_to_u8), so both see the same descriptors. PyTorch matmul + topk on the same GPU is measured
// by tools/bench_match_torch.py in the same run.
// Usage: bench_match [gallery_images] [cpu_images] (defaults 8192 and 32).
#include <cuda_runtime_api.h>

#include <opencv2/core.hpp>
#include <opencv2/features2d.hpp>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "common/device_array.h"
#include "common/gpu.h"
#include "match/match.h"
#include "match_cases.h"

using namespace prism;

namespace {

constexpr int Q = match::kSlot, D = match::kDim;

// ms per gallery image per query of Q rows, on the CPU.
void bench_cpu(const std::vector<uint16_t>& gallery, const std::vector<uint8_t>& gallery_u8,
               const std::vector<uint16_t>& query, const std::vector<uint8_t>& query_u8, int images) {
  std::vector<int> counts(images, Q), scores(images);
  std::printf("CPU: %d threads (OpenCV), %d gallery images x %d descriptors, one query of %d\n\n", cv::getNumThreads(),
              images, Q, Q);
  std::printf("| CPU matcher | path | ms per gallery image per query | gallery images/s |\n|---|---|---|---|\n");
  match::MatchProblem p;
  p.query = query.data();
  p.rows = p.query_rows = Q;
  p.gallery = gallery.data();
  p.counts = counts.data();
  p.images = images;
  const double fp16_ms = bench::time_host_ms(
      3, [&] { match::match_cpu(p, {0.8f}, {scores.data()}); }, true);
  std::printf("| match_cpu (FP16) | float | %.3f | %.0f |\n", fp16_ms / images, images / (fp16_ms / 1e3));
  match::MatchU8Problem pu;
  pu.query = query_u8.data();
  pu.rows = pu.query_rows = Q;
  pu.gallery = gallery_u8.data();
  pu.counts = counts.data();
  pu.images = images;
  for (match::CpuPath path : {match::CpuPath::kAvx512Vnni, match::CpuPath::kAvx2, match::CpuPath::kScalar}) {
    if (!match::cpu_path_available(path)) {
      std::printf("| match_u8_cpu (8-bit) | %s | not available on this CPU | |\n", match::cpu_path_name(path));
      continue;
    }
    const int n = path == match::CpuPath::kScalar ? std::max(1, images / 8) : images;  // scalar: fewer images
    pu.images = n;
    const double ms = bench::time_host_ms(
        3, [&] { match::match_u8_cpu(pu, {0.8f}, {scores.data()}, path); }, true);
    std::printf("| match_u8_cpu (8-bit) | %s | %.3f | %.0f (%.1fx FP16) |\n", match::cpu_path_name(path), ms / n,
                n / (ms / 1e3), fp16_ms / images / (ms / n));
  }
  std::printf("\n");
}

template <class Run>
void time_gpu(const char* name, int images, Run run) {
  bench::GpuTimer timer;
  for (int batch : {1, 2, 8}) {
    std::vector<double> t;
    for (int i = 0; i < 12; ++i) {
      const double ms = timer.ms(nullptr, [&] { run(batch); });
      if (i >= 2) t.push_back(ms);
    }
    const double ms = bench::median(t);
    const double per_s = double(images) * batch / (ms / 1e3);
    std::printf("| %s | %d | %.3f | %.0f | %.1f |\n", name, batch, ms, per_s, per_s * 2.0 * Q * Q * D / 1e12);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int images = argc > 1 ? std::atoi(argv[1]) : 8192;
  const int cpu_images = argc > 2 ? std::atoi(argv[2]) : 32;
  std::mt19937 rng(1);
  // RootSIFT of sparse non-negative SIFT-like vectors, as in the tests
  const std::vector<uint16_t> gallery = test::random_rootsift(images * Q, rng);
  const int max_batch = 8;
  const std::vector<uint16_t> queries = test::random_rootsift(max_batch * Q, rng);
  std::vector<uint8_t> gallery_u8(gallery.size()), queries_u8(queries.size());
  for (size_t i = 0; i < gallery.size(); ++i) gallery_u8[i] = match::half_to_u8(gallery[i]);
  for (size_t i = 0; i < queries.size(); ++i) queries_u8[i] = match::half_to_u8(queries[i]);
  std::vector<int> counts(images, Q);

  bench_cpu(gallery, gallery_u8, queries, queries_u8, std::min(cpu_images, images));
  std::string why;
  if (!gpu::available(&why)) {
    std::printf("no GPU (%s): the GPU part is skipped\n", why.c_str());
    return 0;
  }

  cudaDeviceProp prop{};
  bench::check(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s; gallery %d images x %d RootSIFT descriptors (FP16 %.0f MB, 8-bit %.0f MB); query %d\n\n",
              prop.name, images, Q, gallery.size() * 2 / 1e6, gallery.size() / 1e6, Q);
  const gpu::DeviceArray<uint8_t> dg8 = gpu::device_copy(gallery_u8.data(), gallery_u8.size());
  const gpu::DeviceArray<uint8_t> dq8 = gpu::device_copy(queries_u8.data(), queries_u8.size());
  const gpu::DeviceArray<int> dc = gpu::device_copy(counts.data(), counts.size());
  const gpu::DeviceArray<int> ds(size_t(max_batch) * images);

  std::printf(
      "| method | queries per launch | median ms | gallery images/s (per query) | TOPS |\n|---|---|---|---|---|\n");
  // The 8-bit kernels, each forced (kAuto takes wgmma here on an H100 or H200); the last with |g|^2
  // kept beside the gallery, as the index's GPU tier keeps them (MatchU8Problem::norms).
  std::vector<int32_t> norms(gallery_u8.size() / match::kDim);
  match::u8_norms(gallery_u8.data(), int(norms.size()), norms.data());
  const gpu::DeviceArray<int32_t> dn = gpu::device_copy(norms.data(), norms.size());
  struct U8Path {
    match::GpuPath path;
    const int32_t* norms;
    const char* name;
  };
  const U8Path u8_paths[] = {
      {match::GpuPath::kMmaSync, nullptr, "fused mma.sync m16n8k32 u8 top-2 (ours)"},
      {match::GpuPath::kWgmma, nullptr, "fused wgmma m64n64k32 u8 top-2, whole query per block (ours)"},
      {match::GpuPath::kWgmma, dn.data(), "the same wgmma, with |g|^2 kept beside the gallery (ours, the index)"}};
  for (const auto& [path, gnorms, name] : u8_paths) {
    if (!match::gpu_path_available(path)) {
      std::printf("| %s | - | not on this GPU | | |\n", name);
      continue;
    }
    time_gpu(name, images, [&, path = path, gnorms = gnorms](int batch) {
      match::MatchU8Problem p;
      p.norms = gnorms;
      p.query = dq8.data();
      p.rows = batch * Q;
      p.query_rows = Q;
      p.gallery = dg8.data();
      p.counts = dc.data();
      p.images = images;
      match::match_u8_cuda(p, {0.8f}, {ds.data()}, nullptr, path);  // writes the scores (its memset is timed)
    });
  }

  // OpenCV CPU BFMatcher knnMatch k=2 (L2, float32) on the same descriptors, a few images.
  const int bf_images = 8;
  cv::Mat qf(Q, D, CV_32F);
  for (int i = 0; i < Q * D; ++i) qf.at<float>(i / D, i % D) = match::half_to_float(queries[i]);
  std::vector<cv::Mat> gf(bf_images);
  for (int b = 0; b < bf_images; ++b) {
    gf[b].create(Q, D, CV_32F);
    for (int i = 0; i < Q * D; ++i)
      gf[b].at<float>(i / D, i % D) = match::half_to_float(gallery[size_t(b) * Q * D + i]);
  }
  cv::BFMatcher bf(cv::NORM_L2);
  const double cpu_ms = bench::time_host_ms(
      3,
      [&] {
        for (int b = 0; b < bf_images; ++b) {
          std::vector<std::vector<cv::DMatch>> knn;
          bf.knnMatch(qf, gf[b], knn, 2);
        }
      },
      true);
  const double cpu_per_s = bf_images / (cpu_ms / 1e3);
  std::printf("| OpenCV %s BFMatcher::knnMatch k=2, CPU, %d threads | 1 | %.1f (%d images) | %.0f | %.3f |\n",
              CV_VERSION, cv::getNumThreads(), cpu_ms, bf_images, cpu_per_s, cpu_per_s * 2.0 * Q * Q * D / 1e12);
  return 0;
}
