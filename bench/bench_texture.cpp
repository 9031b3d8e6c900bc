// Texture identification end to end (GPU machine): enrolment throughput (SIFT + RootSIFT: cv::SIFT
// on all cores, and kernels/sift's CUDA path on the same threads; then durable gallery writes) and
// the latency of one 1:M search over a large gallery (query features + fused matching over every
// image + geometric verification of the shortlist), with the query's SIFT on the CPU and on the GPU.
//
//   bench_texture [GALLERY_IMAGES=100000] [DISTINCT=512]
//
// The gallery repeats DISTINCT fresh random textures (640x480) to GALLERY_IMAGES entries; the
// query is a re-captured (warped, blurred) copy of one of them.
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "bench_util.h"
#include "common/gpu.h"
#include "texture/gallery.h"
#include "texture/index.h"
#include "texture_cases.h"

using namespace prism;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int main(int argc, char** argv) {
  const int gallery_images = argc > 1 ? std::atoi(argv[1]) : 100000;
  const int distinct = argc > 2 ? std::atoi(argv[2]) : 512;
  std::string why;
  if (!gpu::available(&why)) {
    std::fprintf(stderr, "bench_texture: no GPU: %s\n", why.c_str());
    return 1;
  }
  std::mt19937 rng(11);
  std::vector<cv::Mat> images(distinct);
  for (auto& im : images) im = test::random_texture(rng, 640, 480);

  // Enrolment: features on all cores (each thread its own CUDA extractor on the GPU path), then one
  // durable (fsynced, renamed) gallery file each. The gallery is enrolled with cv::SIFT.
  texture::FeatureParams on_gpu;
  on_gpu.device = gpu::Device::kCuda;
  std::vector<texture::Features> features(distinct), gpu_features(distinct);
  cv::parallel_for_(cv::Range(0, 64), [&](const cv::Range& r) {  // the extractors' set-up, untimed
    for (int i = r.start; i < r.end; ++i) texture::extract_features(images[i % distinct], on_gpu);
  });
  auto t0 = Clock::now();
  cv::parallel_for_(cv::Range(0, distinct), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) gpu_features[i] = texture::extract_features(images[i], on_gpu);
  });
  const double gpu_extract_s = seconds_since(t0);
  t0 = Clock::now();
  cv::parallel_for_(cv::Range(0, distinct), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) features[i] = texture::extract_features(images[i]);
  });
  const double extract_s = seconds_since(t0);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "prism-bench-gallery";
  std::filesystem::remove_all(dir);
  texture::Gallery gallery = texture::Gallery::open(dir, true);
  t0 = Clock::now();
  for (int i = 0; i < distinct; ++i) gallery.add({"p" + std::to_string(i), "", 0, features[i]});
  const double write_s = seconds_since(t0);
  std::filesystem::remove_all(dir);
  double mean_features = 0;
  for (const auto& f : features) mean_features += f.count() / double(distinct);

  // A gallery of gallery_images entries (the distinct textures repeated).
  std::vector<texture::GalleryEntry> entries(gallery_images);
  for (int i = 0; i < gallery_images; ++i) entries[i] = {"p" + std::to_string(i), "", 0, features[i % distinct]};
  texture::TextureIndex index(texture::Device::kCuda);
  t0 = Clock::now();
  index.build(entries);
  const double build_s = seconds_since(t0);
  entries.clear();
  entries.shrink_to_fit();

  const int target = 7;
  cv::Mat query;
  cv::warpPerspective(images[target], query, cv::Mat(test::random_homography(rng, 640, 480)), images[target].size());
  cv::GaussianBlur(query, query, cv::Size(0, 0), 0.8);
  texture::SearchParams params;
  std::printf("device: %s, %d CPU threads\n", gpu::device_name(0).c_str(), cv::getNumThreads());
  std::printf("| stage | median |\n|---|---|\n");
  std::printf("| enrolment: features, cv::SIFT (%d 640x480 images, %.0f features each) | %.1f images/s |\n", distinct,
              mean_features, distinct / extract_s);
  std::printf("| enrolment: features, CUDA SIFT (same images and threads) | %.1f images/s |\n",
              distinct / gpu_extract_s);
  std::printf("| enrolment: durable gallery writes (fsync + rename) | %.1f entries/s |\n", distinct / write_s);
  std::printf("| index build (%d entries to GPU memory) | %.2f s |\n", gallery_images, build_s);
  bool found = true;
  for (const gpu::Device device : {gpu::Device::kCpu, gpu::Device::kCuda}) {
    texture::FeatureParams fp;
    fp.device = device;
    const char* name = device == gpu::Device::kCpu ? "cv::SIFT" : "CUDA SIFT";
    texture::SearchResult last;
    std::vector<double> total, feat, match, verify;
    for (int run = 0; run < 21; ++run) {
      const auto a = Clock::now();
      const texture::Features q = texture::extract_features(query, fp);
      const double f_ms = seconds_since(a) * 1e3;
      last = index.search(q, params);
      if (run == 0) continue;  // warm-up
      total.push_back(seconds_since(a) * 1e3);
      feat.push_back(f_ms);
      match.push_back(last.match_ms);
      verify.push_back(last.verify_ms);
    }
    const double m = bench::median(match);
    std::printf("| 1:M search over %d images, end to end, query SIFT: %s | %.2f ms |\n", gallery_images, name,
                bench::median(total));
    std::printf("|   query features (%s, 640x480) | %.2f ms |\n", name, bench::median(feat));
    std::printf("|   fused matching of all %d images | %.2f ms (%.2f M gallery images/s) |\n", gallery_images, m,
                gallery_images / m / 1e3);
    std::printf("|   verification of the %d-image shortlist (re-match + RANSAC) | %.2f ms |\n", params.shortlist,
                bench::median(verify));
    std::printf("|   result: %s, identified=%d, %d inliers (expected p%d or a repeat of it) | |\n",
                last.best.id.c_str(), int(last.identified), last.best.geometry.inliers, target);
    found = found && last.identified && std::atoi(last.best.id.c_str() + 1) % distinct == target;
  }
  return found ? 0 : 1;
}
