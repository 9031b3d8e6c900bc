// poissonblend's solver on the GPU (both DST methods) against our CPU path and OpenCV 4.6's
// cv::seamlessClone on the same inputs: BGR frames in device memory for the GPU (the element's
// case), real images (PPM) when given, medians after warm-up. Prints a Markdown table.
//   bench_poisson [image.ppm] [gpu-iterations]
#include <cstdlib>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/photo.hpp>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "clone_cases.h"
#include "common/device_array.h"
#include "common/gpu.h"
#include "poisson/seamless_clone.h"

using namespace prism;
using bench::check;
using bench::median;
using bench::time_host_ms;

int main(int argc, char** argv) {
  const std::string image_path = argc > 1 ? argv[1] : "";
  const int iters = argc > 2 ? std::atoi(argv[2]) : 50;
  const std::string only = argc > 3 ? argv[3] : "";  // e.g. 2400x1552: that box alone
  std::string why;
  if (!gpu::available(&why)) {
    std::fprintf(stderr, "bench_poisson: no GPU (%s)\n", why.c_str());
    return 1;
  }
  cv::Mat photo = image_path.empty() ? cv::Mat() : test::read_ppm(image_path);
  struct Size {
    int w, h, dw, dh;
  };
  const Size sizes[] = {{154, 100, 1920, 1080},   {300, 194, 1920, 1080},  {592, 592, 1920, 1080},
                        {1024, 1024, 3840, 2160}, {1200, 776, 1920, 1080}, {2400, 1552, 3840, 2160}};
  std::printf(
      "device: %s; OpenCV %s with %d threads; GPU: %d iterations after warm-up, CUDA events; "
      "images: %s\n\n",
      gpu::device_name(0).c_str(), CV_VERSION, cv::getNumThreads(), iters,
      photo.empty() ? "random" : image_path.c_str());
  std::printf(
      "| box | into | GPU gemm ms | GPU fft ms | GPU replay ms | auto | CPU ms (ours) | OpenCV ms | "
      "OpenCV / GPU best | GPU vs OpenCV (box) |\n|---|---|---|---|---|---|---|---|---|---|\n");
  // Blocking: the synchronous uploads below (legacy default stream) come before the clones queued here.
  const gpu::Stream stream = gpu::Stream::create(cudaStreamDefault);
  poisson::CudaCloner gemm(stream, poisson::DstMethod::Gemm), fft(stream, poisson::DstMethod::Fft),
      replay(stream, poisson::DstMethod::Replay);
  const poisson::CudaCloner auto_cloner(stream);
  auto method_name = [](poisson::DstMethod m) {
    return m == poisson::DstMethod::Gemm ? "gemm" : m == poisson::DstMethod::Fft ? "fft" : "replay";
  };
  bench::GpuTimer timer;
  std::mt19937 rng(1);
  const bool gpu_only = std::getenv("PRISM_BENCH_GPU_ONLY") != nullptr;
  for (const Size& s : sizes) {
    if (!only.empty() && only != std::to_string(s.w) + "x" + std::to_string(s.h)) continue;
    test::CloneCase c =
        test::make_case("bench", s.w, s.h, cv::Size(s.dw, s.dh), cv::NORMAL_CLONE, 0, photo, photo, rng);
    cv::Mat host = c.dst.clone();
    poisson::CloneJob job = test::make_job(c, host);
    // device copies, pitched as the element's frames are (DeviceArray has no pitch: freed by hand below)
    uint8_t *d_dst, *d_src, *d_mask;
    size_t p_dst, p_src, p_mask;
    check(cudaMallocPitch((void**)&d_dst, &p_dst, c.dst.cols * 3, c.dst.rows));
    check(cudaMallocPitch((void**)&d_src, &p_src, c.src.cols * 3, c.src.rows));
    check(cudaMallocPitch((void**)&d_mask, &p_mask, c.mask.cols, c.mask.rows));
    check(cudaMemcpy2D(d_dst, p_dst, c.dst.data, c.dst.step, c.dst.cols * 3, c.dst.rows, cudaMemcpyHostToDevice));
    check(cudaMemcpy2D(d_src, p_src, c.src.data, c.src.step, c.src.cols * 3, c.src.rows, cudaMemcpyHostToDevice));
    check(cudaMemcpy2D(d_mask, p_mask, c.mask.data, c.mask.step, c.mask.cols, c.mask.rows, cudaMemcpyHostToDevice));
    poisson::CloneJob dj = job;
    dj.background.data = d_dst;
    dj.background.stride = (int64_t)p_dst;
    dj.overlay.data = d_src;
    dj.overlay.stride = (int64_t)p_src;
    dj.mask.data = d_mask;
    dj.mask.stride = (int64_t)p_mask;
    auto time_gpu = [&](poisson::CudaCloner& cl) {
      for (int i = 0; i < 3; i++) cl.clone(dj);  // warm-up (plans, matrices)
      check(cudaStreamSynchronize(stream));
      std::vector<double> t;
      for (int i = 0; i < iters; i++) t.push_back(timer.ms(stream, [&] { cl.clone(dj); }));
      return median(t);
    };
    const double g_gemm = time_gpu(gemm), g_fft = time_gpu(fft);
    // Replay costs O(n p) per row: timed where that stays under a few milliseconds.
    const bool replay_timed = poisson::CudaCloner::replay_cost(s.w, s.h) <= 2e9;
    const double g_replay = replay_timed ? time_gpu(replay) : 1e30;
    char replay_ms[32] = "-";
    if (replay_timed) std::snprintf(replay_ms, sizeof replay_ms, "%.3f", g_replay);
    const double g_best = std::min({g_gemm, g_fft, g_replay});
    const char* auto_name = method_name(auto_cloner.method_for(s.w, s.h));
    if (gpu_only) {  // quick look while tuning: no CPU references
      std::printf("| %dx%d | %dx%d | %.3f | %.3f | %s | %s | - | - | - | - |\n", s.w, s.h, s.dw, s.dh, g_gemm, g_fft,
                  replay_ms, auto_name);
      check(cudaFree(d_dst));
      check(cudaFree(d_src));
      check(cudaFree(d_mask));
      continue;
    }
    // correctness of what was timed: one fresh solve each way vs OpenCV
    const bool big = s.w * s.h > 1500 * 1000;
    const int cpu_iters = big ? 1 : 5;
    cv::Mat ours_cpu;
    const double t_cpu = time_host_ms(
        cpu_iters,
        [&] {
          ours_cpu = c.dst.clone();
          poisson::clone_cpu(test::make_job(c, ours_cpu));
        },
        false);  // no warm-up: OpenCV takes 80 s at 2400x1552
    cv::Mat ref;
    const double t_cv = time_host_ms(
        big ? 1 : 3, [&] { cv::seamlessClone(c.src, c.dst, c.mask, c.p, ref, c.mode); }, false);
    check(cudaMemcpy2D(d_dst, p_dst, c.dst.data, c.dst.step, c.dst.cols * 3, c.dst.rows, cudaMemcpyHostToDevice));
    poisson::CudaCloner& best = g_best == g_gemm ? gemm : g_best == g_fft ? fft : replay;
    best.clone(dj);
    check(cudaStreamSynchronize(stream));
    cv::Mat out(c.dst.size(), CV_8UC3);
    check(cudaMemcpy2D(out.data, out.step, d_dst, p_dst, out.cols * 3, out.rows, cudaMemcpyDeviceToHost));
    const cv::Rect roi(job.placement.dst.x, job.placement.dst.y, job.placement.dst.width, job.placement.dst.height);
    const test::CloneDiff d = test::compare(out(roi), ref(roi));
    const bool cpu_exact = test::compare(ours_cpu, ref).differing == 0;
    std::printf("| %dx%d | %dx%d | %.3f | %.3f | %s | %s | %.1f%s | %.1f | %.0fx | %s |\n", s.w, s.h, s.dw, s.dh,
                g_gemm, g_fft, replay_ms, auto_name, t_cpu, cpu_exact ? " (bit-exact)" : " (NOT exact)", t_cv,
                t_cv / g_best, d.str().c_str());
    std::fflush(stdout);
    check(cudaFree(d_dst));
    check(cudaFree(d_src));
    check(cudaFree(d_mask));
  }
  return 0;
}
