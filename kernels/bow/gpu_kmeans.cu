// k-means on the GPU (kmeans.h): the k-means++ seeding and Lloyd's steps as kernels, the
// bookkeeping (changed labels, empty clusters, convergence) on the host in detail::lloyd, shared
// with the CPU path.
// - seeding: seed_weights_kernel and seed_pick_kernel per seed, the CPU's sums and draw;
// - assign: GpuWords in its exact mode, the tensor-core matrix product plus a fused argmin, with
//   the FP16 screen certified and near ties re-scanned exactly, so labels and distances are the
//   CPU's nearest_centers' own, bit for bit;
// - update: the points sorted by label on the host (a stable counting sort, in parallel), then one warp per
//   cluster sums its members in point order in double - the CPU's order, so the same bits - and
//   divides by the count;
// - distances to the assigned centres, as the CPU computes them.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "bow/kmeans.h"
#include "bow/gpu_words.h"
#include "bow/kmeans_pp.h"
#include "common/device_array.h"
#include "common/gpu.h"

namespace prism::bow {

namespace {

// One warp per cluster, lanes over dimensions: eight members' rows are loaded ahead of the
// in-order double sum, which is the CPU's (s += x in point order), so the means are its bits.
__global__ void update_kernel(const float* points, int d, const int* order, const int* offsets, int k, float* centers) {
  const int c = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (c >= k) return;
  const int begin = offsets[c], end = offsets[c + 1];
  for (int j = lane; j - lane < d; j += 32) {
    double s = 0.0;
    for (int i = begin; i < end; i += 8) {
      float v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u)
        v[u] = i + u < end && j < d ? points[static_cast<int64_t>(order[i + u]) * d + j] : 0.f;
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (i + u < end) s += v[u];
    }
    if (j < d) centers[c * d + j] = float(s / (end - begin));
  }
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

// The points dimension-major, as the words and seeding kernels read them.
__global__ void transpose_kernel(const float* points, int n, int d, float* planes) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  for (int j = 0; j < d; ++j) planes[static_cast<int64_t>(j) * n + i] = points[static_cast<int64_t>(i) * d + j];
}

// k-means++ on the device, one launch pair per seed and no host sync until the end (kmeans_pp.h):
// each point's weight becomes min(weight, its float distance to the newest seed) in double, and
// each block of 1024 points sums them per chunk and block in order; one thread then walks the
// sums to the next seed with the CPU's code.
__global__ void __launch_bounds__(detail::kSeedBlock)
    seed_weights_kernel(const float* planes, int n, int d, const int* chosen, bool first, double* weights,
                        double* chunk_sums, double* block_sums) {
  constexpr int kChunksPerBlock = detail::kSeedBlock / detail::kSeedChunk;
  __shared__ float centre[64];
  __shared__ double w[kChunksPerBlock * (detail::kSeedChunk + 1)];  // padded rows: the chunk sums read distinct banks
  __shared__ double sums[kChunksPerBlock];
  const int seed = *chosen;
  if (threadIdx.x < d) centre[threadIdx.x] = planes[static_cast<int64_t>(threadIdx.x) * n + seed];
  __syncthreads();
  const int i = blockIdx.x * detail::kSeedBlock + threadIdx.x;
  double v = 0;
  if (i < n) {
    float s = 0.f;
    for (int j = 0; j < d; ++j) {
      const float diff = __fsub_rn(planes[static_cast<int64_t>(j) * n + i], centre[j]);
      s = __fadd_rn(s, __fmul_rn(diff, diff));
    }
    const double before = first ? INFINITY : weights[i], now = double(s);
    v = now < before ? now : before;  // std::min's choice on the CPU, NaN included
    weights[i] = v;
  }
  w[(threadIdx.x / detail::kSeedChunk) * (detail::kSeedChunk + 1) + threadIdx.x % detail::kSeedChunk] = v;
  __syncthreads();
  const int chunks = (n + detail::kSeedChunk - 1) / detail::kSeedChunk, q = blockIdx.x * kChunksPerBlock + threadIdx.x;
  if (threadIdx.x < kChunksPerBlock && q < chunks) {
    double sum = 0;
    for (int e = 0; e < detail::kSeedChunk && q * detail::kSeedChunk + e < n; ++e)
      sum += w[threadIdx.x * (detail::kSeedChunk + 1) + e];
    sums[threadIdx.x] = sum;
    chunk_sums[q] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double block = 0;
    for (int e = 0; e < kChunksPerBlock && blockIdx.x * kChunksPerBlock + e < chunks; ++e) block += sums[e];
    block_sums[blockIdx.x] = block;
  }
}

// The draw with kmeans_pp.h's code, one thread walking each level after the block stages it in
// shared memory (a lone thread's chain of dependent global loads would be latency-bound).
constexpr int kPickThreads = 1024, kPickStagedBlocks = 4096;  // block sums staged for n <= 4M points
__global__ void __launch_bounds__(kPickThreads)
    seed_pick_kernel(const double* weights, const double* chunk_sums, const double* block_sums, int n, const double* u,
                     const int* previous, int* next) {
  __shared__ double staged_blocks[kPickStagedBlocks];
  __shared__ double staged_chunks[detail::kSeedBlock / detail::kSeedChunk];
  __shared__ double staged_weights[detail::kSeedBlock];
  __shared__ double acc, target;
  __shared__ int block;
  const int blocks = (n + detail::kSeedBlock - 1) / detail::kSeedBlock;
  const bool stage = blocks <= kPickStagedBlocks;
  if (stage)
    for (int b = threadIdx.x; b < blocks; b += blockDim.x) staged_blocks[b] = block_sums[b];
  __syncthreads();
  if (threadIdx.x == 0) block = detail::kmeans_pp_block(stage ? staged_blocks : block_sums, blocks, *u, &acc, &target);
  __syncthreads();
  if (block < 0) {
    if (threadIdx.x == 0) *next = (*previous + 1) % n;
    return;
  }
  const int first = block * detail::kSeedBlock, count = min(n - first, detail::kSeedBlock);
  if (threadIdx.x < (count + detail::kSeedChunk - 1) / detail::kSeedChunk)
    staged_chunks[threadIdx.x] = chunk_sums[block * (detail::kSeedBlock / detail::kSeedChunk) + threadIdx.x];
  if (threadIdx.x < count) staged_weights[threadIdx.x] = weights[first + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    const int i = detail::kmeans_pp_in_block(staged_chunks, staged_weights, count, acc, target);
    *next = i >= 0 ? first + i : detail::kmeans_pp_fallback(weights, n, *previous);
  }
}

class GpuSteps : public detail::LloydSteps {
 public:
  GpuSteps(const cv::Mat& points, int k) : n_(points.rows), d_(points.cols), k_(k) {
    if (d_ > 64) throw std::invalid_argument("kmeans_cuda: at most 64 dimensions");
    int device = 0, major = 0;
    PRISM_CUDA_CHECK(cudaGetDevice(&device));
    PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major < 8) throw gpu::CudaError("kmeans_cuda: needs an sm_80 or newer GPU (mma.sync); use the CPU");
    stream_ = gpu::Stream::create();
    words_ = std::make_unique<GpuWords>(k_, d_, true, stream_);
    d_points_.resize(size_t(n_) * d_);
    d_planes_.resize(size_t(n_) * d_);
    d_centers_.resize(size_t(k_) * d_);
    d_labels_.resize(n_);
    d_dist_.resize(n_);
    d_order_.resize(n_);
    d_offsets_.resize(k_ + 1);
    h_labels_.resize(n_);
    h_dist_.resize(n_);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_points_.data(), points.ptr<float>(), sizeof(float) * n_ * d_,
                                     cudaMemcpyHostToDevice, stream_));
    transpose_kernel<<<(n_ + 255) / 256, 256, 0, stream_>>>(d_points_.data(), n_, d_, d_planes_.data());
    PRISM_CUDA_CHECK(cudaGetLastError());
  }

  void assign(const cv::Mat& centers, std::vector<int>& labels, std::vector<float>& dist) override {
    words_->set_dictionary(centers);
    GpuWords::Outputs out;
    out.words = d_labels_.data();
    out.distances = d_dist_.data();
    words_->assign(d_planes_.data(), n_, n_, 1, out);
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(h_labels_.data(), d_labels_.data(), sizeof(int) * n_, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(h_dist_.data(), d_dist_.data(), sizeof(float) * n_, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    labels.assign(h_labels_.data(), h_labels_.data() + n_);
    dist.assign(h_dist_.data(), h_dist_.data() + n_);
  }

  void update(const std::vector<int>& labels, const std::vector<int>& counts, cv::Mat& centers) override {
    offsets_.assign(k_ + 1, 0);
    for (int c = 0; c < k_; ++c) offsets_[c + 1] = offsets_[c] + counts[c];
    detail::stable_order_by_label(labels, k_, h_labels_.data());  // (pinned staging for the upload)
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(d_order_.data(), h_labels_.data(), sizeof(int) * n_, cudaMemcpyHostToDevice, stream_));
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(d_offsets_.data(), offsets_.data(), sizeof(int) * (k_ + 1), cudaMemcpyHostToDevice, stream_));
    update_kernel<<<(k_ + 3) / 4, 128, 0, stream_>>>(d_points_.data(), d_, d_order_.data(), d_offsets_.data(), k_,
                                                     d_centers_.data());
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cudaMemcpyAsync(centers.ptr<float>(), d_centers_.data(), sizeof(float) * k_ * d_,
                                     cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    // The labels after re-seeding, for assigned_distances (h_labels_ is free again after the sync).
    std::copy(labels.begin(), labels.end(), h_labels_.data());
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(d_labels_.data(), h_labels_.data(), sizeof(int) * n_, cudaMemcpyHostToDevice, stream_));
  }

  void assigned_distances(const cv::Mat&, const std::vector<int>&, std::vector<float>& dist) override {
    // d_centers_ and d_labels_ hold what update() just used.
    assigned_distance_kernel<<<(n_ + 127) / 128, 128, 0, stream_>>>(d_points_.data(), n_, d_, d_centers_.data(),
                                                                    d_labels_.data(), d_dist_.data());
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(h_dist_.data(), d_dist_.data(), sizeof(float) * n_, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    dist.assign(h_dist_.data(), h_dist_.data() + n_);
  }

  int64_t rescanned() const { return words_->rescanned(); }

  cv::Mat seeds(const cv::Mat& points, int k, uint64_t seed) override {
    std::vector<double> u;
    std::vector<int> chosen(k);
    chosen[0] = detail::kmeans_pp_draws(seed, n_, k, u);
    const int blocks = (n_ + detail::kSeedBlock - 1) / detail::kSeedBlock;
    // Scratch for this call only (seeding runs once per k-means).
    gpu::DeviceArray<double> weights(n_), chunk_sums((n_ + detail::kSeedChunk - 1) / detail::kSeedChunk),
        block_sums(blocks), d_u(k);
    gpu::DeviceArray<int> d_chosen(k);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_u.data(), u.data(), sizeof(double) * k, cudaMemcpyHostToDevice, stream_));
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_chosen.data(), chosen.data(), sizeof(int), cudaMemcpyHostToDevice, stream_));
    for (int c = 0; c < k; ++c) {
      seed_weights_kernel<<<blocks, detail::kSeedBlock, 0, stream_>>>(
          d_planes_.data(), n_, d_, d_chosen.data() + c, c == 0, weights.data(), chunk_sums.data(), block_sums.data());
      if (c + 1 == k) break;
      seed_pick_kernel<<<1, kPickThreads, 0, stream_>>>(weights.data(), chunk_sums.data(), block_sums.data(), n_,
                                                        d_u.data() + c + 1, d_chosen.data() + c,
                                                        d_chosen.data() + c + 1);
    }
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cudaMemcpyAsync(chosen.data(), d_chosen.data(), sizeof(int) * k, cudaMemcpyDeviceToHost, stream_));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cv::Mat centers(k, d_, CV_32F);
    for (int c = 0; c < k; ++c) points.row(chosen[c]).copyTo(centers.row(c));
    return centers;
  }

 private:
  int n_, d_, k_;
  gpu::Stream stream_;  // declared first: destroyed after everything that works on it
  std::unique_ptr<GpuWords> words_;
  gpu::DeviceArray<float> d_points_, d_planes_, d_centers_, d_dist_;
  gpu::PinnedArray<int> h_labels_;
  gpu::PinnedArray<float> h_dist_;
  gpu::DeviceArray<int> d_labels_, d_order_, d_offsets_;
  std::vector<int> offsets_;
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
