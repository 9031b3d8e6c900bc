// k-means on the GPU (kmeans.h): Lloyd's steps as kernels, the bookkeeping (changed labels, empty
// clusters, convergence) on the host in detail::lloyd, shared with the CPU path.
// - assign: nearest_kernel (the CPU's float arithmetic) writes labels and distances;
// - update: the points sorted by label on the host (a counting sort, stable), then one thread per
//   (cluster, dimension) sums its members in point order in double - the CPU's order, so the same
//   bits - and divides by the count;
// - distances to the assigned centres, as the CPU computes them.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "bow/kmeans.h"
#include "bow/nearest_kernel.cuh"
#include "common/gpu.h"

namespace prism::bow {

namespace {

__global__ void update_kernel(const float* points, int d, const int* order, const int* offsets, int k, float* centers) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= k * d) return;
  const int c = t / d, j = t % d;
  double s = 0.0;
  for (int i = offsets[c]; i < offsets[c + 1]; ++i) s += points[static_cast<int64_t>(order[i]) * d + j];
  const int count = offsets[c + 1] - offsets[c];
  centers[t] = float(s / count);
}

__global__ void assigned_distance_kernel(const float* points, int n, int d, const float* centers, const int* labels,
                                         float* distances) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= n) return;
  const float* x = points + static_cast<int64_t>(p) * d;
  const float* c = centers + static_cast<int64_t>(labels[p]) * d;
  float s = 0.f;
  for (int j = 0; j < d; ++j) {
    const float diff = __fsub_rn(x[j], c[j]);
    s = __fadd_rn(s, __fmul_rn(diff, diff));
  }
  distances[p] = s;
}

class GpuSteps : public detail::LloydSteps {
 public:
  GpuSteps(const cv::Mat& points, int k) : n_(points.rows), d_(points.cols), k_(k) {
    if (d_ > 64) throw std::invalid_argument("kmeans_cuda: at most 64 dimensions");
    smem_ = sizeof(float) * size_t(k_) * d_;
    int device = 0, smem_max = 0;
    PRISM_CUDA_CHECK(cudaGetDevice(&device));
    PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (smem_ > size_t(smem_max)) throw std::invalid_argument("kmeans_cuda: k x d does not fit in shared memory");
    PRISM_CUDA_CHECK(cudaFuncSetAttribute(nearest_kernel<32, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_)));
    PRISM_CUDA_CHECK(cudaFuncSetAttribute(nearest_kernel<64, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_)));
    PRISM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    d_points_ = gpu::device_alloc<float>(size_t(n_) * d_);
    d_centers_ = gpu::device_alloc<float>(size_t(k_) * d_);
    d_labels_ = gpu::device_alloc<int>(n_);
    d_dist_ = gpu::device_alloc<float>(n_);
    d_order_ = gpu::device_alloc<int>(n_);
    d_offsets_ = gpu::device_alloc<int>(k_ + 1);
    PRISM_CUDA_CHECK(cudaMemcpy(d_points_, points.ptr<float>(), sizeof(float) * n_ * d_, cudaMemcpyHostToDevice));
  }
  ~GpuSteps() override {
    for (void* p : {(void*)d_points_, (void*)d_centers_, (void*)d_labels_, (void*)d_dist_, (void*)d_order_, (void*)d_offsets_})
      cudaFree(p);
    cudaStreamDestroy(stream_);
  }

  void assign(const cv::Mat& centers, std::vector<int>& labels, std::vector<float>& dist) override {
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_centers_, centers.ptr<float>(), smem_, cudaMemcpyHostToDevice, stream_));
    const int blocks = (n_ + 127) / 128;
    if (d_ == 32) nearest_kernel<32, true><<<blocks, 128, smem_, stream_>>>(d_points_, n_, d_, d_centers_, k_, d_labels_, d_dist_);
    else nearest_kernel<64, false><<<blocks, 128, smem_, stream_>>>(d_points_, n_, d_, d_centers_, k_, d_labels_, d_dist_);
    PRISM_CUDA_CHECK(cudaGetLastError());
    labels.resize(n_);
    dist.resize(n_);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(labels.data(), d_labels_, sizeof(int) * n_, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaMemcpyAsync(dist.data(), d_dist_, sizeof(float) * n_, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void update(const std::vector<int>& labels, const std::vector<int>& counts, cv::Mat& centers) override {
    offsets_.assign(k_ + 1, 0);
    for (int c = 0; c < k_; ++c) offsets_[c + 1] = offsets_[c] + counts[c];
    order_.resize(n_);
    next_.assign(offsets_.begin(), offsets_.end() - 1);
    for (int i = 0; i < n_; ++i) order_[next_[labels[i]]++] = i;  // stable: point order within a cluster
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_order_, order_.data(), sizeof(int) * n_, cudaMemcpyHostToDevice, stream_));
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_offsets_, offsets_.data(), sizeof(int) * (k_ + 1), cudaMemcpyHostToDevice, stream_));
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_labels_, labels.data(), sizeof(int) * n_, cudaMemcpyHostToDevice, stream_));
    update_kernel<<<(k_ * d_ + 127) / 128, 128, 0, stream_>>>(d_points_, d_, d_order_, d_offsets_, k_, d_centers_);
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cudaMemcpyAsync(centers.ptr<float>(), d_centers_, smem_, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void assigned_distances(const cv::Mat&, const std::vector<int>&, std::vector<float>& dist) override {
    // d_centers_ and d_labels_ hold what update() just used.
    assigned_distance_kernel<<<(n_ + 127) / 128, 128, 0, stream_>>>(d_points_, n_, d_, d_centers_, d_labels_, d_dist_);
    PRISM_CUDA_CHECK(cudaGetLastError());
    dist.resize(n_);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(dist.data(), d_dist_, sizeof(float) * n_, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  int n_, d_, k_;
  size_t smem_ = 0;
  cudaStream_t stream_ = nullptr;
  float *d_points_ = nullptr, *d_centers_ = nullptr, *d_dist_ = nullptr;
  int *d_labels_ = nullptr, *d_order_ = nullptr, *d_offsets_ = nullptr;
  std::vector<int> offsets_, order_, next_;
};

}  // namespace

KMeansResult kmeans_cuda(const cv::Mat& points, const KMeansParams& params, const KMeansProgress& progress) {
  std::string why;
  if (!gpu::available(&why)) throw gpu::CudaError("kmeans_cuda: " + why);
  if (points.empty() || points.type() != CV_32FC1 || !points.isContinuous())
    throw std::invalid_argument("kmeans: points must be a continuous, non-empty CV_32FC1 matrix");
  if (params.k < 1 || params.k > points.rows)
    throw std::invalid_argument("kmeans: k = " + std::to_string(params.k) + " needs 1 <= k <= points (" +
                                std::to_string(points.rows) + ")");
  GpuSteps steps(points, params.k);
  return detail::lloyd(points, params, progress, steps);
}

}  // namespace prism::bow
