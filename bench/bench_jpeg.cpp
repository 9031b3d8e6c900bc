// The parallel JPEG decoder on the GPU (image::jpeg::CudaJpegDecoder) against libjpeg-turbo on one
// core (image::decode_grey_reduced, what the texture service runs today), on a 4000x3000 q80 4:2:0
// JPEG of a phone photo's size (a textured synthetic image, about 2 MB) decoded to 2000x1500 grey.
// Prints a Markdown table of medians; the GPU decode is checked equal to libjpeg's first.
//   bench_jpeg [iterations] [file.jpg]   (a file: that JPEG instead, at the reduction service uses)
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "common/device_array.h"
#include "common/gpu.h"
#include "image/decode.h"
#include "image/jpeg_parallel.h"
#include "image/jpeg_parse.h"
#include "jpeg_cases.h"

using prism::bench::median;
namespace jpeg = prism::image::jpeg;

namespace {

double ms_since(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
}

// A photo-like 4000x3000 image: smooth shapes with fine texture (noise of a few grey levels).
std::vector<uint8_t> photo_sized_jpeg() {
  prism::test::JpegCase c;
  c.width = 4000;
  c.height = 3000;
  c.quality = 80;
  c.smooth = true;
  cv::Mat img = prism::test::jpeg_case_image(c);
  cv::Mat noise(img.size(), img.type());
  cv::RNG rng(3);
  rng.fill(noise, cv::RNG::NORMAL, 0, 9);
  cv::add(img, noise, img, cv::noArray(), img.type());
  return prism::test::encode_jpeg(img, c);
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(5, std::atoi(argv[1])) : 100;
  std::string why;
  if (!prism::gpu::available(&why)) {
    std::printf("no GPU (%s): nothing to measure\n", why.c_str());
    return 0;
  }
  const std::vector<uint8_t> b = argc > 2 ? prism::test::read_file_bytes(argv[2]) : photo_sized_jpeg();
  const std::optional<jpeg::JpegLayout> layout = jpeg::parse_jpeg(b.data(), b.size(), &why);
  if (!layout) {
    std::printf("not handled: %s\n", why.c_str());
    return 1;
  }
  const int reduction = prism::image::jpeg_reduced_size(layout->width, layout->height, 1024).reduction;
  std::printf("%ux%u, %zu bytes, %d components, restart interval %u, decoded at 1/%d\n\n", layout->width,
              layout->height, b.size(), layout->components, layout->restart_interval, reduction);

  prism::gpu::Stream stream = prism::gpu::Stream::create();
  jpeg::CudaJpegDecoder dec;
  jpeg::DeviceGrey out;
  jpeg::ParallelStats stats;
  if (!dec.decode_grey(b.data(), b.size(), reduction, &out, stream, &why, &stats)) {
    std::printf("GPU decode failed: %s\n", why.c_str());
    return 1;
  }
  const prism::image::ReducedGrey ref = prism::image::decode_grey_reduced(b.data(), b.size(), 1024);
  cv::Mat got(out.height, out.width, CV_8UC1);
  prism::bench::check(cudaMemcpy(got.data, out.pixels.data(), got.total(), cudaMemcpyDeviceToHost));
  const bool equal = got.size() == ref.grey.size() && cv::norm(got, ref.grey, cv::NORM_INF) == 0;
  std::printf(
      "GPU decode equal to libjpeg-turbo's: %s (%u subsequences, %d rounds at most, %u re-decoded by "
      "phase 2, sequential fallback %s)\n\n",
      equal ? "yes" : "NO", stats.subsequences, stats.rounds, stats.resynced, stats.sequential ? "yes" : "no");

  // GPU: the whole call (parse, unstuff, upload, kernels, the final sync), and the device time of the
  // stream's work between two events around it.
  std::vector<double> wall, device, host_only, cpu_parallel, libjpeg;
  cudaEvent_t e0, e1;
  prism::bench::check(cudaEventCreate(&e0));
  prism::bench::check(cudaEventCreate(&e1));
  for (int i = 0; i < iterations; ++i) {
    prism::bench::check(cudaEventRecord(e0, stream));
    const auto a = std::chrono::steady_clock::now();
    dec.decode_grey(b.data(), b.size(), reduction, &out, stream);
    wall.push_back(ms_since(a));
    prism::bench::check(cudaEventRecord(e1, stream));
    prism::bench::check(cudaEventSynchronize(e1));
    float ms = 0;
    prism::bench::check(cudaEventElapsedTime(&ms, e0, e1));
    device.push_back(ms);
  }
  std::vector<uint8_t> staging(jpeg::unstuffed_capacity(*layout, b.size(), 256));
  std::vector<jpeg::Interval> intervals(size_t(layout->intervals()));
  for (int i = 0; i < iterations; ++i) {
    const auto a = std::chrono::steady_clock::now();
    const std::optional<jpeg::JpegLayout> l = jpeg::parse_jpeg(b.data(), b.size());
    uint32_t n_seq = 0;
    size_t used = 0;
    jpeg::unstuff_scan_into(*l, b.data(), b.size(), 256, staging.data(), intervals.data(), &n_seq, &used);
    host_only.push_back(ms_since(a));
  }
  const int cpu_runs = std::max(3, iterations / 10);
  for (int i = 0; i < cpu_runs; ++i) {
    auto a = std::chrono::steady_clock::now();
    const prism::image::ReducedGrey g = prism::image::decode_grey_reduced(b.data(), b.size(), 1024);
    libjpeg.push_back(ms_since(a));
    a = std::chrono::steady_clock::now();
    const std::optional<cv::Mat> p = jpeg::decode_grey_parallel(b.data(), b.size(), reduction);
    cpu_parallel.push_back(ms_since(a));
  }
  std::printf("| decode to %dx%d grey | median ms | runs |\n|---|---|---|\n", out.width, out.height);
  std::printf("| GPU, whole call (host parse + unstuff, upload, kernels, sync) | %.2f | %d |\n", median(wall),
              iterations);
  std::printf("| GPU, stream time between events around the call | %.2f | %d |\n", median(device), iterations);
  std::printf("| host part alone (parse + unstuff, one core) | %.2f | %d |\n", median(host_only), iterations);
  std::printf("| libjpeg-turbo, one core (decode_grey_reduced) | %.2f | %d |\n", median(libjpeg), cpu_runs);
  std::printf("| the parallel algorithm on the CPU, one core | %.2f | %d |\n", median(cpu_parallel), cpu_runs);
  return equal ? 0 : 1;
}
