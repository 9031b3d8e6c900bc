// Gallery images searched per second: the fused tensor-core matcher (one query of 768 RootSIFT
// descriptors, and batches of queries) against OpenCV's CPU BFMatcher::knnMatch(k=2) on the same
// descriptors. PyTorch matmul + topk on the same GPU is measured by tools/bench_match_torch.py in
// the same run. Usage: bench_match [gallery_images] (default 8192).
#include <cuda_runtime_api.h>

#include <opencv2/core.hpp>
#include <opencv2/features2d.hpp>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "common/device_array.h"
#include "match/match.h"
#include "match_cases.h"

using namespace prism;

int main(int argc, char** argv) {
  const int images = argc > 1 ? std::atoi(argv[1]) : 8192;
  const int Q = match::kSlot, D = match::kDim;
  std::mt19937 rng(1);
  // RootSIFT of sparse non-negative SIFT-like vectors, as in the tests
  const std::vector<uint16_t> gallery = test::random_rootsift(images * Q, rng);
  const int max_batch = 8;
  const std::vector<uint16_t> queries = test::random_rootsift(max_batch * Q, rng);
  std::vector<int> counts(images, Q);

  cudaDeviceProp prop{};
  bench::check(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s; gallery %d images x %d RootSIFT descriptors (FP16, %.0f MB); query %d descriptors\n\n",
              prop.name, images, Q, gallery.size() * 2 / 1e6, Q);
  const gpu::DeviceArray<uint16_t> dg = gpu::device_copy(gallery.data(), gallery.size());
  const gpu::DeviceArray<uint16_t> dq = gpu::device_copy(queries.data(), queries.size());
  const gpu::DeviceArray<int> dc = gpu::device_copy(counts.data(), counts.size());
  const gpu::DeviceArray<int> ds(size_t(max_batch) * images);
  cudaEvent_t e0, e1;
  bench::check(cudaEventCreate(&e0));
  bench::check(cudaEventCreate(&e1));

  std::printf(
      "| method | queries per launch | median ms | gallery images/s (per query) | TFLOP/s |\n|---|---|---|---|---|\n");
  for (int batch : {1, 2, 8}) {
    match::MatchProblem p;
    p.query = dq.data();
    p.rows = batch * Q;
    p.query_rows = Q;
    p.gallery = dg.data();
    p.counts = dc.data();
    p.images = images;
    std::vector<double> t;
    for (int i = 0; i < 12; ++i) {
      bench::check(cudaMemsetAsync(ds.data(), 0, size_t(batch) * images * sizeof(int)));
      bench::check(cudaEventRecord(e0));
      match::match_cuda(p, {0.8f}, {ds.data()}, nullptr);
      bench::check(cudaEventRecord(e1));
      bench::check(cudaEventSynchronize(e1));
      float ms = 0;
      bench::check(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 2) t.push_back(ms);
    }
    const double ms = bench::median(t);
    const double per_s = double(images) * batch / (ms / 1e3);
    std::printf("| fused mma.sync top-2 (ours) | %d | %.3f | %.0f | %.1f |\n", batch, ms, per_s,
                per_s * 2.0 * Q * Q * D / 1e12);
  }

  // OpenCV CPU BFMatcher knnMatch k=2 (L2, float32) on the same descriptors, a few images.
  const int cpu_images = 8;
  cv::Mat qf(Q, D, CV_32F);
  for (int i = 0; i < Q * D; ++i) qf.at<float>(i / D, i % D) = match::half_to_float(queries[i]);
  std::vector<cv::Mat> gf(cpu_images);
  for (int b = 0; b < cpu_images; ++b) {
    gf[b].create(Q, D, CV_32F);
    for (int i = 0; i < Q * D; ++i)
      gf[b].at<float>(i / D, i % D) = match::half_to_float(gallery[size_t(b) * Q * D + i]);
  }
  cv::BFMatcher bf(cv::NORM_L2);
  const double cpu_ms = bench::time_host_ms(
      3,
      [&] {
        for (int b = 0; b < cpu_images; ++b) {
          std::vector<std::vector<cv::DMatch>> knn;
          bf.knnMatch(qf, gf[b], knn, 2);
        }
      },
      true);
  const double cpu_per_s = cpu_images / (cpu_ms / 1e3);
  std::printf("| OpenCV %s BFMatcher::knnMatch k=2, CPU, %d threads | 1 | %.1f (%d images) | %.0f | %.3f |\n",
              CV_VERSION, cv::getNumThreads(), cpu_ms, cpu_images, cpu_per_s, cpu_per_s * 2.0 * Q * Q * D / 1e12);
  return 0;
}
