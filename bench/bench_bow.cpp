// Bag-of-words speed (docs/benchmarks/bow.md): filter bank + visual words + pyramid histogram of a
// 1920x1080 frame on the GPU (frame in GPU memory, with the two kernels timed by events, and frame
// uploaded from the host) and on the CPU, OpenCV's dense filter2D bank for the filtering alone, and
// one k-means assignment pass over 300,000 x 32 samples with k = 500 (ours on the CPU against
// cv::kmeans limited to one iteration). Medians; all CPU figures on every core.
// Usage: bench_bow [runs]
#include <cuda_runtime_api.h>
#include <opencv2/core.hpp>
#include <opencv2/features2d.hpp>
#include <opencv2/imgproc.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "bench_util.h"
#include "bow/filter_bank.h"
#include "bow/gpu_histogram.h"
#include "bow/histogram.h"
#include "bow/kmeans.h"
#include "common/device_array.h"
#include "common/gpu.h"

using namespace prism;

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::atoi(argv[1]) : 20;
  std::mt19937 rng(7);
  cv::Mat frame(1080, 1920, CV_8UC1);
  cv::randu(frame, 0, 256);
  cv::GaussianBlur(frame, frame, cv::Size(0, 0), 2.0);
  cv::normalize(frame, frame, 0, 255, cv::NORM_MINMAX);
  const bow::FilterBank bank;
  const cv::Mat responses = bow::filter_responses(frame, bank);
  const int k = 500, d = bank.filters();
  cv::Mat samples(300000, d, CV_32F), dictionary(k, d, CV_32F);
  for (int i = 0; i < samples.rows; ++i) {
    const int p = int(rng() % (frame.total()));
    std::memcpy(samples.ptr<float>(i), responses.ptr<float>() + size_t(p) * d, sizeof(float) * d);
  }
  for (int c = 0; c < k; ++c) samples.row(int(rng() % samples.rows)).copyTo(dictionary.row(c));
  std::printf("device: %s; %d CPU threads; 1920x1080 frame, %d filters (sizes 3..31), k = %d, pyramid L = 2\n\n",
              gpu::device_name(0).c_str(), cv::getNumThreads(), d, k);
  std::printf("| stage | median ms | per second |\n|---|---|---|\n");
  auto row = [](const char* what, double ms, const char* unit) {
    std::printf("| %s | %.3f | %.1f %s |\n", what, ms, 1000.0 / ms, unit);
  };
  if (gpu::available()) {
    bow::GpuHistogrammer g(bank, dictionary, 2);
    const gpu::DeviceArray<uint8_t> device_frame = gpu::device_copy(frame.data, frame.total());
    std::vector<float> filter_ms, words_ms;
    row("GPU (ours): filter bank + words + histogram, frame in GPU memory",
        bench::time_host_ms(
            runs,
            [&] {
              g.histogram_device(device_frame.data(), size_t(frame.cols), frame.cols, frame.rows);
              float f = 0, w = 0;
              g.last_stage_ms(&f, &w);
              filter_ms.push_back(f);
              words_ms.push_back(w);
            },
            true),
        "frames");
    row("  of which the filter-bank kernel", bench::median(std::vector<double>(filter_ms.begin(), filter_ms.end())),
        "frames");
    row("  of which the words + counts kernel", bench::median(std::vector<double>(words_ms.begin(), words_ms.end())),
        "frames");
    row("GPU (ours): the same, frame uploaded from host memory",
        bench::time_host_ms(
            runs, [&] { g.histogram(frame); }, true),
        "frames");
  }
  const int cpu_runs = std::max(3, runs / 5);
  row("CPU (ours): filter bank + words + histogram",
      bench::time_host_ms(
          cpu_runs,
          [&] { bow::word_histogram(bow::visual_words(bow::filter_responses(frame, bank), dictionary), k, 2); }, false),
      "frames");
  row("CPU (ours): separable filter bank",
      bench::time_host_ms(
          cpu_runs, [&] { bow::filter_responses(frame, bank); }, false),
      "frames");
  {  // OpenCV's bag-of-words histogram from the same responses: BFMatcher nearest word + normalised counts
    const cv::Mat descriptors(int(frame.total()), d, CV_32F, const_cast<uchar*>(responses.data));
    cv::BOWImgDescriptorExtractor extractor(cv::DescriptorMatcher::create(cv::DescriptorMatcher::BRUTEFORCE));
    extractor.setVocabulary(dictionary);
    row("OpenCV BOWImgDescriptorExtractor: words + histogram of the frame's responses",
        bench::time_host_ms(
            1,
            [&] {
              cv::Mat h;
              extractor.compute(descriptors, h);
            },
            false),
        "frames");
  }
  cv::Mat f;
  frame.convertTo(f, CV_32F, 1.0 / 255);
  row("OpenCV filter2D, the 32 dense kernels",
      bench::time_host_ms(
          cpu_runs,
          [&] {
            cv::Mat out;
            for (int i = 0; i < d; ++i) cv::filter2D(f, out, CV_32F, bank.dense(i));
          },
          false),
      "frames");
  // One Lloyd iteration of our k-means (the seeding excluded): the median gap between progress calls.
  auto iteration_ms = [&](bool gpu) {
    bow::KMeansParams kp;
    kp.k = k;
    kp.max_iterations = 8;
    kp.tolerance = 0;
    std::vector<double> stamps;
    auto note = [&](int, double, int) {
      stamps.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count());
    };
    if (gpu) {
      const bow::KMeansResult r = bow::kmeans_cuda(samples, kp, note);
      std::printf("(GPU k-means: %lld of %lld assignments left by the FP16 screen to the exact scan, %.3f%%)\n",
                  (long long)r.rescanned, (long long)samples.rows * r.iterations,
                  100.0 * double(r.rescanned) / (double(samples.rows) * r.iterations));
    } else {
      bow::kmeans(samples, kp, note);
    }
    std::vector<double> gaps;
    for (size_t i = 1; i < stamps.size(); ++i) gaps.push_back(stamps[i] - stamps[i - 1]);
    return bench::median(gaps);
  };
  if (gpu::available()) row("GPU (ours): k-means iteration, 300,000 x 32, k = 500", iteration_ms(true), "iterations");
  row("CPU (ours): k-means iteration, 300,000 x 32, k = 500", iteration_ms(false), "iterations");
  {
    bow::KMeansParams kp;
    kp.k = k;
    kp.max_iterations = 0;  // the seeding alone (with the points' upload on the GPU)
    if (gpu::available())
      row("GPU (ours): k-means++ seeding, 300,000 x 32, k = 500",
          bench::time_host_ms(
              3, [&] { bow::kmeans_cuda(samples, kp); }, true),
          "runs");
    row("CPU (ours): k-means++ seeding, 300,000 x 32, k = 500",
        bench::time_host_ms(
            1, [&] { bow::kmeans_pp_seeds(samples, k, 1); }, false),
        "runs");
  }
  row("OpenCV cv::kmeans, 1 iteration, 300,000 x 32, k = 500",
      bench::time_host_ms(
          3,
          [&] {
            cv::Mat l, c;
            cv::kmeans(samples, k, l, cv::TermCriteria(cv::TermCriteria::COUNT, 1, 0), 1, cv::KMEANS_RANDOM_CENTERS, c);
          },
          false),
      "runs");
  return 0;
}
