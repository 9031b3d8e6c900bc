// SIFT extraction time: kernels/sift's CUDA path against OpenCV 4.6's cv::SIFT on all cores of the
// same machine, at the sizes texture identification sees (a 640x480 query; a 1080p frame after the
// project's shrink to 1024 px), with the strongest 768 kept as `prism texture` does; then
// enrolment throughput: a stream of different images through one extractor, and through several
// extractors on their own threads and streams.
//
// Usage: bench_sift [IMAGE.ppm] [RUNS]   (the image is scaled to each size; default: a random texture)
#include <opencv2/core.hpp>
#include <opencv2/features2d.hpp>
#include <opencv2/imgproc.hpp>

#include <atomic>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "common/gpu.h"
#include "ppm.h"
#include "sift/sift.h"
#include "texture/features.h"
#include "texture_cases.h"

using namespace prism;

int main(int argc, char** argv) {
  std::string why;
  if (!gpu::available(&why)) {
    std::printf("bench_sift: no GPU (%s)\n", why.c_str());
    return 1;
  }
  const int runs = argc > 2 ? std::atoi(argv[2]) : 50;
  std::mt19937 rng(1);
  cv::Mat source;
  if (argc > 1 && std::string(argv[1]) != "-") {
    cv::Mat bgr = test::read_ppm(argv[1]);
    if (bgr.empty()) {
      std::fprintf(stderr, "bench_sift: cannot read %s\n", argv[1]);
      return 1;
    }
    cv::cvtColor(bgr, source, cv::COLOR_BGR2GRAY);
  } else {
    source = test::random_texture(rng, 1920, 1080);
  }
  std::printf("device: %s; OpenCV %s with %d threads\n\n", gpu::device_name(0).c_str(), CV_VERSION,
              cv::getNumThreads());
  std::printf(
      "| image | keypoints | CUDA SIFT ms (median of %d) | cv::SIFT ms, all cores | speed-up "
      "|\n|---|---|---|---|---|\n",
      runs);
  sift::Params params;
  params.nfeatures = 768;
  sift::CudaExtractor extractor(params);
  cv::Ptr<cv::SIFT> cv_sift = cv::SIFT::create(768);
  std::vector<std::pair<cv::Size, sift::CudaExtractor::Timings>> stages;
  for (const cv::Size size : {cv::Size(640, 480), cv::Size(1024, 576)}) {
    cv::Mat grey;
    cv::resize(source, grey, size, 0, 0, cv::INTER_AREA);
    size_t count = 0;
    const double gpu_ms = bench::time_host_ms(
        runs, [&] { count = extractor.detect_and_compute(grey).keypoints.size(); }, true);
    std::vector<cv::KeyPoint> kps;
    cv::Mat desc;
    const double cv_ms = bench::time_host_ms(
        std::max(5, runs / 5), [&] { cv_sift->detectAndCompute(grey, cv::noArray(), kps, desc); }, true);
    std::printf("| %dx%d%s | %zu | %.3f | %.2f | %.1fx |\n", size.width, size.height,
                size.width == 1024 ? " (1080p shrunk)" : "", count, gpu_ms, cv_ms, cv_ms / gpu_ms);
    const auto& t = extractor.last_timings();
    stages.push_back({size, t});
  }
  std::printf("\nStages of the last call (host ms): pyramid + extrema | orientations | selection | descriptors\n");
  for (const auto& [size, t] : stages)
    std::printf("  %dx%d: %.3f | %.3f | %.3f | %.3f\n", size.width, size.height, t.pyramid, t.orientation, t.select,
                t.descriptors);

  // Enrolment: 64 different 640x480 textures, round and round.
  std::vector<cv::Mat> images;
  for (int i = 0; i < 64; ++i) images.push_back(test::random_texture(rng, 640, 480));
  std::printf("\n| enrolment, 640x480 textures | images/s |\n|---|---|\n");
  for (int threads : {1, 2, 4, 8}) {
    std::vector<sift::CudaExtractor> ex;
    for (int t = 0; t < threads; ++t) ex.emplace_back(params);
    for (auto& e : ex) e.detect_and_compute(images[0]);  // allocate
    const int total = 64 * 8;
    std::atomic<int> next{0};
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (int i; (i = next++) < total;) ex[t].detect_and_compute(images[i % images.size()]);
      });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("| %d extractor%s on %d thread%s | %.0f |\n", threads, threads > 1 ? "s" : "", threads,
                threads > 1 ? "s" : "", total / s);
  }
  // Batched: 64 images per call (detect_and_compute_batch, every kernel over the whole batch).
  for (int threads : {1, 2, 4, 8}) {
    std::vector<sift::CudaExtractor> ex;
    for (int t = 0; t < threads; ++t) ex.emplace_back(params);
    for (auto& e : ex) e.detect_and_compute_batch(images);  // allocate
    if (threads == 1) {
      const auto& t = ex[0].last_timings();
      std::printf(
          "|   (one batch of 64, host ms: pyramid + extrema %.2f, orientations %.2f, selection %.2f, "
          "descriptors %.2f) | |\n",
          t.pyramid, t.orientation, t.select, t.descriptors);
    }
    const int rounds = 16;
    std::atomic<int> next{0};
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        while (next++ < rounds) ex[t].detect_and_compute_batch(images);
      });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("| batches of 64, %d extractor%s on %d thread%s | %.0f |\n", threads, threads > 1 ? "s" : "", threads,
                threads > 1 ? "s" : "", rounds * 64 / s);
  }
  {
    // What enrolment calls: texture::extract_features_batch (RootSIFT, 8-bit; its own extractors).
    texture::FeatureParams fp;
    fp.device = gpu::Device::kCuda;
    std::vector<cv::Mat> many;
    for (int r = 0; r < 8; ++r) many.insert(many.end(), images.begin(), images.end());
    texture::extract_features_batch(images, fp);  // allocate
    const auto start = std::chrono::steady_clock::now();
    texture::extract_features_batch(many, fp);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("| texture::extract_features_batch (RootSIFT, 8-bit), %zu images | %.0f |\n", many.size(),
                many.size() / s);
  }
  {
    const int total = 64;
    const auto start = std::chrono::steady_clock::now();
    std::vector<cv::KeyPoint> kps;
    cv::Mat desc;
    for (int i = 0; i < total; ++i) cv_sift->detectAndCompute(images[i], cv::noArray(), kps, desc);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("| cv::SIFT, all cores | %.0f |\n", total / s);
  }
  return 0;
}
