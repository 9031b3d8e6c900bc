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

}  // namespace prism::bench
