// Helpers shared by the benchmarks: medians, host timing, CUDA error exits (only where the CUDA
// headers are: CPU-only benchmarks include this too).
#pragma once
#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#define PRISM_BENCH_HAVE_CUDA_HEADERS 1
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#if defined(PRISM_HAVE_CUDA)
#include "common/device_array.h"
#endif

namespace prism::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median wall time of n calls of f in ms, after one untimed call when warm_up is set.
template <class F>
double time_host_ms(int n, F f, bool warm_up) {
  if (warm_up) f();
  std::vector<double> t;
  for (int i = 0; i < n; i++) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  return median(t);
}

#ifdef PRISM_BENCH_HAVE_CUDA_HEADERS
// Exits with the CUDA error's text.
inline void check(cudaError_t e) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
}
#endif

#if defined(PRISM_HAVE_CUDA)
// GPU time in ms of the work that f() queues on `stream` (0: the legacy default stream), between two
// timing events; waits for it.
class GpuTimer {
 public:
  GpuTimer() : begin_(gpu::Event::create(cudaEventDefault)), end_(gpu::Event::create(cudaEventDefault)) {}
  template <class F>
  double ms(cudaStream_t stream, F&& f) {
    PRISM_CUDA_CHECK(cudaEventRecord(begin_, stream));
    f();
    PRISM_CUDA_CHECK(cudaEventRecord(end_, stream));
    PRISM_CUDA_CHECK(cudaEventSynchronize(end_));
    float ms = 0;
    PRISM_CUDA_CHECK(cudaEventElapsedTime(&ms, begin_, end_));
    return ms;
  }

 private:
  gpu::Event begin_, end_;
};
#endif

}  // namespace prism::bench
