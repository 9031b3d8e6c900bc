// The per-pixel EMD map (emdtracker's core) on the GPU against our CPU path and OpenCV's cv::EMD on
// all cores, on the same frames: a real photo (PPM) in grey, resized, spectralized (11x11 window
// histograms over N bins), EMD to the signature of a pixel of the frame under |i-j|.
//   cold          the first frame into an empty cache: every distinct signature solved
//   no dedup      every pixel solved (problems/s of the solver alone)
//   warm static   the same frame again: everything cached
//   warm noisy    a new frame each time, the photo plus Gaussian noise of sigma 0.5 grey levels
// GPU: medians of CUDA-event times per frame (spectralize excluded, reported separately).
// cv::EMD and our CPU path: a sample of the frame's pixels, extrapolated to the frame.
//   bench_emd image.ppm [frames]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "common/device_array.h"
#include "common/gpu.h"
#include "emd/emd_map.h"
#include "ppm.h"
#include "spectral/spectralize.h"

using namespace prism;
using bench::check;
using bench::median;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_emd image.ppm [frames]\n");
    return 2;
  }
  const int frames = argc > 2 ? std::atoi(argv[2]) : 20;
  std::string why;
  if (!gpu::available(&why)) {
    std::fprintf(stderr, "bench_emd: no GPU (%s)\n", why.c_str());
    return 1;
  }
  const cv::Mat photo = test::read_ppm(argv[1]);
  if (photo.empty()) {
    std::fprintf(stderr, "bench_emd: cannot read %s\n", argv[1]);
    return 1;
  }
  cv::Mat grey_photo;
  cv::cvtColor(photo, grey_photo, cv::COLOR_BGR2GRAY);
  std::printf("device: %s; OpenCV %s cv::EMD on %d threads; image %s; GPU: median of %d frames, CUDA events\n\n",
              gpu::device_name(0).c_str(), CV_VERSION, cv::getNumThreads(), argv[1], frames);
  std::printf(
      "| frame | cost | N | distinct (cold) | GPU cold ms (fps) | GPU no-dedup ms (Mproblems/s) | GPU warm static ms "
      "(fps) | GPU warm noisy ms (fps, hit rate) | spectralize ms | our CPU cold ms | cv::EMD frame ms "
      "(us/problem) | cold: cv::EMD / GPU | pivots/problem |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  // Blocking: the synchronous uploads below (legacy default stream) come before the work queued here.
  const gpu::Stream stream = gpu::Stream::create(cudaStreamDefault);
  bench::GpuTimer timer;
  auto gpu_ms = [&](auto&& f) { return timer.ms(stream, f); };
  for (const cv::Size size : {cv::Size(1280, 720), cv::Size(1920, 1080)}) {
    cv::Mat grey;
    cv::resize(grey_photo, grey, size, 0, 0, cv::INTER_AREA);
    const int64_t pixels = static_cast<int64_t>(size.area());
    // noisy copies of the frame
    std::vector<cv::Mat> noisy(frames);
    cv::RNG rng(1);
    for (auto& m : noisy) {
      cv::Mat f;
      grey.convertTo(f, CV_32F);
      cv::Mat noise(size, CV_32F);
      rng.fill(noise, cv::RNG::NORMAL, 0.0, 0.5);
      f += noise;
      f.convertTo(m, CV_8U);  // rounds and saturates
    }
    const gpu::DeviceArray<uint8_t> d_grey(pixels);
    for (const bool random_cost : {false, true})
      for (int n : {4, 8, 11, 16, 32}) {
        if (random_cost && size.width != 1920) continue;
        const spectral::SpectralizeParams sp{n, 11};
        const gpu::DeviceArray<float> d_sig(pixels * n), d_out(pixels);
        std::vector<float> sig(static_cast<size_t>(pixels) * n);
        spectral::spectralize_cpu(grey.data, size.width, size.height, static_cast<int64_t>(grey.step), sp, sig.data());
        // the target: the signature of a pixel in the middle of the frame
        const int64_t tp = (size.height / 2) * static_cast<int64_t>(size.width) + size.width / 2;
        const std::vector<float> target(sig.begin() + tp * n, sig.begin() + (tp + 1) * n);
        // |i-j| (the north-west corner start is already optimal for ordered 1-D bins under a convex
        // cost: no pivots) or a fixed random symmetric matrix (zero diagonal, 1..10): real pivoting
        std::vector<float> rc(static_cast<size_t>(n) * n, 0.f);
        cv::RNG crng(42);
        for (int i = 0; i < n; ++i)
          for (int j = i + 1; j < n; ++j) rc[i * n + j] = rc[j * n + i] = static_cast<float>(crng.uniform(1.0, 10.0));
        const emd::GroundDistance ground = random_cost ? emd::GroundDistance(rc, n) : emd::GroundDistance::abs_diff(n);
        check(cudaMemcpy(d_grey.data(), grey.data, pixels, cudaMemcpyHostToDevice));
        const double t_spec = median([&] {
          std::vector<double> t;
          for (int i = 0; i < frames; ++i)
            t.push_back(gpu_ms([&] {
              spectral::spectralize_cuda(d_grey.data(), size.width, size.height, size.width, sp, d_sig.data(), stream);
            }));
          return t;
        }());
        // cold: a fresh map (empty cache) per frame
        std::vector<double> cold, direct, warm, noisy_t;
        int64_t distinct = 0, pivots = 0;
        for (int i = 0; i < std::max(3, frames / 4); ++i) {
          emd::CudaEmdMap map(stream, ground, target);
          map.compute(d_sig.data(), pixels, d_out.data());  // allocates the table; not timed
          check(cudaStreamSynchronize(stream));
          map.clear_cache();
          cold.push_back(gpu_ms([&] { map.compute(d_sig.data(), pixels, d_out.data()); }));
          distinct = map.last_stats().solved;
          pivots = map.last_stats().pivots;
        }
        {
          emd::EmdMapConfig c;
          c.dedup = false;
          emd::CudaEmdMap map(stream, ground, target, c);
          for (int i = 0; i < 3; ++i)
            direct.push_back(gpu_ms([&] { map.compute(d_sig.data(), pixels, d_out.data()); }));
        }
        double hit_rate = 0;
        {
          emd::CudaEmdMap map(stream, ground, target);
          map.compute(d_sig.data(), pixels, d_out.data());
          for (int i = 0; i < frames; ++i)
            warm.push_back(gpu_ms([&] { map.compute(d_sig.data(), pixels, d_out.data()); }));
          // noisy: spectralize each noisy frame (not timed), then the map
          for (int i = 0; i < frames; ++i) {
            check(cudaMemcpy(d_grey.data(), noisy[i].data, pixels, cudaMemcpyHostToDevice));
            spectral::spectralize_cuda(d_grey.data(), size.width, size.height, size.width, sp, d_sig.data(), stream);
            noisy_t.push_back(gpu_ms([&] { map.compute(d_sig.data(), pixels, d_out.data()); }));
            check(cudaStreamSynchronize(stream));
            if (i >= 2) hit_rate += map.last_stats().hit_rate() / (frames - 2);
          }
        }
        // our CPU path, cold, whole frame (once)
        double t_cpu = 0;
        {
          emd::CpuEmdMap cpu(ground, target);
          std::vector<float> out(pixels);
          t_cpu = bench::time_host_ms(
              1, [&] { cpu.compute(sig.data(), pixels, out.data()); }, false);
        }
        // cv::EMD on all cores over a sample of the frame's pixels (cold: each pixel its own problem)
        const int sample = 20000;
        cv::Mat cost(n, n, CV_32F, const_cast<float*>(ground.values().data()));
        cv::Mat tsig(n, 1, CV_32F, const_cast<float*>(target.data()));
        const double sample_ms = bench::time_host_ms(
            1,
            [&] {
              cv::parallel_for_(cv::Range(0, sample), [&](const cv::Range& r) {
                for (int k = r.start; k < r.end; ++k) {
                  const int64_t p = (static_cast<int64_t>(k) * 7919) % pixels;
                  cv::Mat s(n, 1, CV_32F, sig.data() + p * n);
                  volatile float d = cv::EMD(s, tsig, cv::DIST_USER, cost);
                  (void)d;
                }
              });
            },
            false);
        const double us_per_problem = sample_ms * 1000.0 / sample;
        const double cv_frame_ms = us_per_problem * pixels / 1000.0;
        const double c_ms = median(cold), d_ms = median(direct), w_ms = median(warm), nz_ms = median(noisy_t);
        std::printf(
            "| %dx%d | %s | %d | %lld (%.0f%%) | %.2f (%.0f) | %.2f (%.0f) | %.3f (%.0f) | %.3f (%.0f, %.0f%%) | %.3f "
            "| "
            "%.0f | %.0f (%.2f) | %.0fx | %.2f |\n",
            size.width, size.height, random_cost ? "random" : "\\|i-j\\|", n, static_cast<long long>(distinct),
            100.0 * distinct / pixels, c_ms, 1000.0 / c_ms, d_ms, pixels / d_ms / 1000.0, w_ms, 1000.0 / w_ms, nz_ms,
            1000.0 / nz_ms, 100.0 * hit_rate, t_spec, t_cpu, cv_frame_ms, us_per_problem, cv_frame_ms / c_ms,
            distinct ? static_cast<double>(pivots) / distinct : 0.0);
        std::fflush(stdout);
      }
  }
  return 0;
}
