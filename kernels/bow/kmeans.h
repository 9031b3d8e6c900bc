// Bag-of-visual-words, stage 2: the dictionary. k-means over the filter-response vectors sampled from
// the training images (Lloyd's algorithm) with k-means++ seeding (Arthur & Vassilvitskii, SODA 2007).
//
// Deterministic for a given seed: the seeding draws from std::mt19937_64, ties go to the lower
// cluster index, the means are summed in point order in double, and the seeding's weights and the
// inertia in double over the fixed chunk/block tree of kmeans_pp.h (no order-dependent float
// atomics; the same bits on any thread count).
// A cluster left empty by an iteration is re-seeded with the point farthest from its own centre
// (taken from a cluster that keeps at least one point). Stops when no point changes cluster, when
// the inertia (sum of squared distances) falls by less than `tolerance` relatively, or after
// `max_iterations`.
#pragma once
#include <opencv2/core.hpp>

#include <cstdint>
#include <functional>
#include <vector>

namespace prism::bow {

struct KMeansParams {
  int k = 500;
  int max_iterations = 100;
  double tolerance = 1e-4;  // relative inertia decrease below which the iterations stop
  uint64_t seed = 1;
};

struct KMeansResult {
  cv::Mat centers;          // k x d, CV_32F
  std::vector<int> labels;  // per point
  int iterations = 0;       // Lloyd iterations run
  double inertia = 0;       // sum of squared distances to the assigned centres, after the last update
  int reseeded = 0;         // empty clusters re-seeded over all iterations
  bool converged = false;   // stopped by `tolerance` or no change, not by max_iterations
  int64_t rescanned = 0;    // kmeans_cuda: assignments the tensor cores' FP16 screen could not
                            // certify, found by an exact scan instead (of iterations x points)
};

// Called after each iteration (for progress).
using KMeansProgress = std::function<void(int iteration, double inertia, int changed)>;

// Nearest centre of each row of `points` (n x d, CV_32F) among `centers` (k x d, CV_32F), by squared
// Euclidean distance, ties to the lower index; `distances` (optional) gets the squared distance.
void nearest_centers(const cv::Mat& points, const cv::Mat& centers, std::vector<int>& labels,
                     std::vector<float>* distances = nullptr);

// k-means++ seeding (part of kmeans; exposed for tests).
cv::Mat kmeans_pp_seeds(const cv::Mat& points, int k, uint64_t seed);

// CPU path. `points`: n x d CV_32F with n >= k (std::invalid_argument otherwise).
KMeansResult kmeans(const cv::Mat& points, const KMeansParams& params, const KMeansProgress& progress = {});

#if defined(PRISM_HAVE_CUDA)
// The same on the GPU: the assignment (tensor cores, certified: see gpu_words.h), the means and
// the distances and the k-means++ seeding run on the device and give the CPU path's values
// (separately rounded float distances in dimension order; sums in point order in double, the
// seeding's in the fixed tree of kmeans_pp.h); the bookkeeping runs on the host. The same result as kmeans(), bit for
// bit. Throws gpu::CudaError without a usable sm_80 or newer GPU.
KMeansResult kmeans_cuda(const cv::Mat& points, const KMeansParams& params, const KMeansProgress& progress = {});
#endif

namespace detail {
// Lloyd's iterations over the three steps a device provides (shared by both paths).
// The points' indices grouped by label 0..k-1, in point order within a label (a stable counting
// sort, in parallel) into `order` (n ints).
void stable_order_by_label(const std::vector<int>& labels, int k, int* order);
// The seeding's random draws: the first point, and u[c] in [0, 1) for each further seed c.
int kmeans_pp_draws(uint64_t seed, int n, int k, std::vector<double>& u);
struct LloydSteps {
  virtual ~LloydSteps() = default;
  virtual cv::Mat seeds(const cv::Mat& points, int k, uint64_t seed);  // kmeans_pp_seeds
  virtual void assign(const cv::Mat& centers, std::vector<int>& labels, std::vector<float>& dist) = 0;
  virtual void update(const std::vector<int>& labels, const std::vector<int>& counts, cv::Mat& centers) = 0;
  virtual void assigned_distances(const cv::Mat& centers, const std::vector<int>& labels, std::vector<float>& dist) = 0;
};
KMeansResult lloyd(const cv::Mat& points, const KMeansParams& params, const KMeansProgress& progress,
                   LloydSteps& steps);
}  // namespace detail

}  // namespace prism::bow
