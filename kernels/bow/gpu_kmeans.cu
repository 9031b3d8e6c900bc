// k-means on the GPU (kmeans.h): Lloyd's steps as kernels, the bookkeeping (changed labels, empty
// clusters, convergence) on the host in detail::lloyd, shared with the CPU path.
// - assign: GpuWords in its exact mode, the tensor-core matrix product plus a fused argmin, with
//   the FP16 screen certified and near ties re-scanned exactly, so labels and distances are the
//   CPU's nearest_centers' own, bit for bit;
// - update: the points sorted by label on the host (a counting sort, stable), then one thread per
//   (cluster, dimension) sums its members in point order in double - the CPU's order, so the same
//   bits - and divides by the count;
// - distances to the assigned centres, as the CPU computes them.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "bow/kmeans.h"
#include "bow/gpu_words.h"
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
    int device = 0, major = 0;
    PRISM_CUDA_CHECK(cudaGetDevice(&device));
    PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major < 8) throw gpu::CudaError("kmeans_cuda: needs an sm_80 or newer GPU (mma.sync); use the CPU");
    PRISM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    words_ = std::make_unique<GpuWords>(k_, d_, true, stream_);
    d_points_ = gpu::device_alloc<float>(size_t(n_) * d_);
    d_planes_ = gpu::device_alloc<float>(size_t(n_) * d_);
    d_centers_ = gpu::device_alloc<float>(size_t(k_) * d_);
    d_labels_ = gpu::device_alloc<int>(n_);
    d_dist_ = gpu::device_alloc<float>(n_);
    d_order_ = gpu::device_alloc<int>(n_);
    d_offsets_ = gpu::device_alloc<int>(k_ + 1);
    PRISM_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&h_labels_), sizeof(int) * n_));
    PRISM_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&h_dist_), sizeof(float) * n_));
    PRISM_CUDA_CHECK(cudaMemcpy(d_points_, points.ptr<float>(), sizeof(float) * n_ * d_, cudaMemcpyHostToDevice));
    cv::Mat planes;  // dimension-major, as the words kernel reads its vectors
    cv::transpose(points, planes);
    PRISM_CUDA_CHECK(cudaMemcpy(d_planes_, planes.ptr<float>(), sizeof(float) * n_ * d_, cudaMemcpyHostToDevice));
  }
  ~GpuSteps() override {
    words_.reset();
    for (void* p : {(void*)d_points_, (void*)d_planes_, (void*)d_centers_, (void*)d_labels_, (void*)d_dist_,
                    (void*)d_order_, (void*)d_offsets_})
      cudaFree(p);
    cudaFreeHost(h_labels_);
    cudaFreeHost(h_dist_);
    cudaStreamDestroy(stream_);
  }

  void assign(const cv::Mat& centers, std::vector<int>& labels, std::vector<float>& dist) override {
    words_->set_dictionary(centers);
    GpuWords::Outputs out;
    out.words = d_labels_;
    out.distances = d_dist_;
    words_->assign(d_planes_, n_, n_, 1, out);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(h_labels_, d_labels_, sizeof(int) * n_, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaMemcpyAsync(h_dist_, d_dist_, sizeof(float) * n_, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    labels.assign(h_labels_, h_labels_ + n_);
    dist.assign(h_dist_, h_dist_ + n_);
  }

  void update(const std::vector<int>& labels, const std::vector<int>& counts, cv::Mat& centers) override {
    offsets_.assign(k_ + 1, 0);
    for (int c = 0; c < k_; ++c) offsets_[c + 1] = offsets_[c] + counts[c];
    order_.resize(n_);
    next_.assign(offsets_.begin(), offsets_.end() - 1);
    for (int i = 0; i < n_; ++i) order_[next_[labels[i]]++] = i;  // stable: point order within a cluster
    std::copy(order_.begin(), order_.end(), h_labels_);  // (pinned staging for the uploads)
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_order_, h_labels_, sizeof(int) * n_, cudaMemcpyHostToDevice, stream_));
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_offsets_, offsets_.data(), sizeof(int) * (k_ + 1), cudaMemcpyHostToDevice, stream_));
    update_kernel<<<(k_ * d_ + 127) / 128, 128, 0, stream_>>>(d_points_, d_, d_order_, d_offsets_, k_, d_centers_);
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cudaMemcpyAsync(centers.ptr<float>(), d_centers_, sizeof(float) * k_ * d_, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    // The labels after re-seeding, for assigned_distances (h_labels_ is free again after the sync).
    std::copy(labels.begin(), labels.end(), h_labels_);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_labels_, h_labels_, sizeof(int) * n_, cudaMemcpyHostToDevice, stream_));
  }

  void assigned_distances(const cv::Mat&, const std::vector<int>&, std::vector<float>& dist) override {
    // d_centers_ and d_labels_ hold what update() just used.
    assigned_distance_kernel<<<(n_ + 127) / 128, 128, 0, stream_>>>(d_points_, n_, d_, d_centers_, d_labels_, d_dist_);
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cudaMemcpyAsync(h_dist_, d_dist_, sizeof(float) * n_, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    dist.assign(h_dist_, h_dist_ + n_);
  }

  int64_t rescanned() const { return words_->rescanned(); }

 private:
  int n_, d_, k_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<GpuWords> words_;
  float *d_points_ = nullptr, *d_planes_ = nullptr, *d_centers_ = nullptr, *d_dist_ = nullptr;
  int* h_labels_ = nullptr;  // pinned
  float* h_dist_ = nullptr;  // pinned
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
  KMeansResult r = detail::lloyd(points, params, progress, steps);
  r.rescanned = steps.rescanned();
  return r;
}

}  // namespace prism::bow
