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
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s; gallery %d images x %d RootSIFT descriptors (FP16, %.0f MB); query %d descriptors\n\n",
              prop.name, images, Q, gallery.size() * 2 / 1e6, Q);
  uint16_t *dg = nullptr, *dq = nullptr;
  int *dc = nullptr, *ds = nullptr;
  bench::check(cudaMalloc(reinterpret_cast<void**>(&dg), gallery.size() * 2));
  bench::check(cudaMalloc(reinterpret_cast<void**>(&dq), queries.size() * 2));
  bench::check(cudaMalloc(reinterpret_cast<void**>(&dc), counts.size() * sizeof(int)));
  bench::check(cudaMalloc(reinterpret_cast<void**>(&ds), size_t(max_batch) * images * sizeof(int)));
  cudaMemcpy(dg, gallery.data(), gallery.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dq, queries.data(), queries.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dc, counts.data(), counts.size() * sizeof(int), cudaMemcpyHostToDevice);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);

  std::printf(
      "| method | queries per launch | median ms | gallery images/s (per query) | TFLOP/s |\n|---|---|---|---|---|\n");
  for (int batch : {1, 2, 8}) {
    match::MatchProblem p;
    p.query = dq;
    p.rows = batch * Q;
    p.query_rows = Q;
    p.gallery = dg;
    p.counts = dc;
    p.images = images;
    std::vector<double> t;
    for (int i = 0; i < 12; ++i) {
      cudaMemsetAsync(ds, 0, size_t(batch) * images * sizeof(int));
      cudaEventRecord(e0);
      match::match_cuda(p, {0.8f}, {ds}, nullptr);
      cudaEventRecord(e1);
      bench::check(cudaEventSynchronize(e1));
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
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
