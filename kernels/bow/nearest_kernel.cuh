// The nearest-centre kernel of k-means on the GPU (gpu_kmeans.cu): the CPU path's nearest_centers,
// bit for bit. (The per-frame words use tensor cores instead: gpu_histogram.cu.)
#pragma once
#include <cstdint>

namespace prism::bow {

// Nearest centre per point (row of `points`, n x d); the centres (k x d) staged in shared memory
// (k * d floats of dynamic shared memory). The distance is the CPU path's: t = x - c, s += t * t,
// each rounded on its own (no FMA), in dimension order; ties go to the lower index. `distances`
// (optional) gets the squared distance. kExact: d == kMaxDim, no bounds in the inner loop.
template <int kMaxDim, bool kExact>
__global__ void nearest_kernel(const float* points, int n, int d_runtime, const float* centers, int k, int* labels,
                               float* distances) {
  const int d = kExact ? kMaxDim : d_runtime;
  extern __shared__ float shared_centers[];
  for (int i = threadIdx.x; i < k * d; i += blockDim.x) shared_centers[i] = centers[i];
  __syncthreads();
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= n) return;
  float v[kMaxDim];
#pragma unroll
  for (int j = 0; j < kMaxDim; ++j) v[j] = j < d ? points[static_cast<int64_t>(p) * d + j] : 0.f;
  int best = 0;
  float best_d = INFINITY;
  for (int c = 0; c < k; ++c) {
    const float* centre = shared_centers + c * d;
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxDim; ++j) {
      if (j < d) {
        const float diff = __fsub_rn(v[j], centre[j]);
        s = __fadd_rn(s, __fmul_rn(diff, diff));
      }
    }
    if (s < best_d) best_d = s, best = c;
  }
  labels[p] = best;
  if (distances) distances[p] = best_d;
}

}  // namespace prism::bow
