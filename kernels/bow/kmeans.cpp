#include "bow/kmeans.h"

#include "bow/kmeans_pp.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

namespace prism::bow {

namespace {

float squared_distance(const float* a, const float* b, int d) {
  float s = 0.f;
  for (int i = 0; i < d; ++i) {
    const float t = a[i] - b[i];
    s += t * t;
  }
  return s;
}

void check_points(const cv::Mat& m, const char* what) {
  if (m.empty() || m.type() != CV_32FC1 || !m.isContinuous())
    throw std::invalid_argument(std::string("kmeans: ") + what + " must be a continuous, non-empty CV_32FC1 matrix");
}

// kmeans_pp.h's fixed tree, blocks in parallel: each chunk's values summed in order into
// `chunk_sums`, each block's chunk sums in order into `block_sums`; returns the block sums summed in
// order. The seeding's draw walks the same sums; the inertia is the total.
template <class T>
double tree_sum(const T* values, int n, double* chunk_sums, double* block_sums) {
  constexpr int kChunksPerBlock = detail::kSeedBlock / detail::kSeedChunk;
  const int chunks = (n + detail::kSeedChunk - 1) / detail::kSeedChunk;
  const int blocks = (n + detail::kSeedBlock - 1) / detail::kSeedBlock;
  cv::parallel_for_(cv::Range(0, blocks), [&](const cv::Range& rg) {
    for (int b = rg.start; b < rg.end; ++b) {
      double block = 0;
      for (int q = b * kChunksPerBlock; q < std::min(chunks, (b + 1) * kChunksPerBlock); ++q) {
        double chunk = 0;
        for (int i = q * detail::kSeedChunk; i < std::min(n, (q + 1) * detail::kSeedChunk); ++i) chunk += values[i];
        chunk_sums[q] = chunk;
        block += chunk;
      }
      block_sums[b] = block;
    }
  });
  double total = 0;
  for (int b = 0; b < blocks; ++b) total += block_sums[b];
  return total;
}

}  // namespace

void nearest_centers(const cv::Mat& points, const cv::Mat& centers, std::vector<int>& labels,
                     std::vector<float>* distances) {
  check_points(points, "points");
  check_points(centers, "centers");
  if (points.cols != centers.cols) throw std::invalid_argument("kmeans: points and centers differ in dimension");
  const int n = points.rows, k = centers.rows, d = points.cols;
  labels.resize(n);
  if (distances) distances->resize(n);
  cv::parallel_for_(cv::Range(0, n), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) {
      const float* x = points.ptr<float>(i);
      int best = 0;
      float best_d = std::numeric_limits<float>::infinity();
      for (int c = 0; c < k; ++c) {
        const float dist = squared_distance(x, centers.ptr<float>(c), d);
        if (dist < best_d) best_d = dist, best = c;
      }
      labels[i] = best;
      if (distances) (*distances)[i] = best_d;
    }
  });
}

cv::Mat kmeans_pp_seeds(const cv::Mat& points, int k, uint64_t seed) {
  check_points(points, "points");
  const int n = points.rows, d = points.cols;
  if (k < 1 || k > n)
    throw std::invalid_argument("kmeans: k = " + std::to_string(k) + " needs 1 <= k <= points (" + std::to_string(n) +
                                ")");
  cv::Mat centers(k, d, CV_32F);
  // Each point's squared distance to the nearest seed so far (its weight), summed per chunk and
  // block as kmeans_pp.h prescribes.
  std::vector<double> u;
  int chosen = detail::kmeans_pp_draws(seed, n, k, u);
  const int chunks = (n + detail::kSeedChunk - 1) / detail::kSeedChunk;
  const int blocks = (n + detail::kSeedBlock - 1) / detail::kSeedBlock;
  std::vector<double> nearest(n, std::numeric_limits<double>::infinity()), chunk_sums(chunks), block_sums(blocks);
  for (int c = 0; c < k; ++c) {
    points.row(chosen).copyTo(centers.row(c));
    const float* centre = centers.ptr<float>(c);
    cv::parallel_for_(cv::Range(0, n), [&](const cv::Range& rg) {
      for (int i = rg.start; i < rg.end; ++i)
        nearest[i] = std::min(nearest[i], double(squared_distance(points.ptr<float>(i), centre, d)));
    });
    if (c + 1 == k) break;
    tree_sum(nearest.data(), n, chunk_sums.data(), block_sums.data());
    chosen = detail::kmeans_pp_pick(nearest.data(), chunk_sums.data(), block_sums.data(), n, u[c + 1], chosen);
  }
  return centers;
}

namespace {

// Lloyd's bookkeeping over the points in parallel, with the same result on any thread count: integer
// tallies are exact whatever the split, and the inertia is summed over kmeans_pp.h's fixed tree.
constexpr int kParts = 64;
int part_begin(int n, int part) { return int(int64_t(n) * part / kParts); }

int count_changed(const std::vector<int>& labels, const std::vector<int>& previous) {
  std::atomic<int> changed{0};
  cv::parallel_for_(cv::Range(0, kParts), [&](const cv::Range& r) {
    for (int part = r.start; part < r.end; ++part) {
      int local = 0;
      for (int i = part_begin(int(labels.size()), part); i < part_begin(int(labels.size()), part + 1); ++i)
        local += labels[i] != previous[i];
      changed += local;
    }
  });
  return changed;
}

// Per part (kParts contiguous ranges of the points) and label: how many points.
std::vector<int> part_counts(const std::vector<int>& labels, int k) {
  const int n = int(labels.size());
  std::vector<int> per_part(size_t(kParts) * k, 0);
  cv::parallel_for_(cv::Range(0, kParts), [&](const cv::Range& r) {
    for (int part = r.start; part < r.end; ++part)
      for (int i = part_begin(n, part); i < part_begin(n, part + 1); ++i) ++per_part[size_t(part) * k + labels[i]];
  });
  return per_part;
}

void count_labels(const std::vector<int>& labels, std::vector<int>& counts) {
  const int k = int(counts.size());
  const std::vector<int> per_part = part_counts(labels, k);
  std::fill(counts.begin(), counts.end(), 0);
  for (int part = 0; part < kParts; ++part)
    for (int c = 0; c < k; ++c) counts[c] += per_part[size_t(part) * k + c];
}

}  // namespace

namespace detail {

void stable_order_by_label(const std::vector<int>& labels, int k, int* order) {
  const int n = int(labels.size());
  std::vector<int> next = part_counts(labels, k);  // per part and label: the count, then the next slot
  for (int c = 0, start = 0; c < k; ++c)
    for (int part = 0; part < kParts; ++part) {
      const int count = next[size_t(part) * k + c];
      next[size_t(part) * k + c] = start;
      start += count;
    }
  cv::parallel_for_(cv::Range(0, kParts), [&](const cv::Range& r) {
    for (int part = r.start; part < r.end; ++part)
      for (int i = part_begin(n, part); i < part_begin(n, part + 1); ++i)
        order[next[size_t(part) * k + labels[i]]++] = i;
  });
}

int kmeans_pp_draws(uint64_t seed, int n, int k, std::vector<double>& u) {
  std::mt19937_64 rng(seed);
  const int first = int(rng() % uint64_t(n));
  u.assign(k, 0.0);
  for (int c = 1; c < k; ++c) u[c] = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  return first;
}

cv::Mat LloydSteps::seeds(const cv::Mat& points, int k, uint64_t seed) { return kmeans_pp_seeds(points, k, seed); }

KMeansResult lloyd(const cv::Mat& points, const KMeansParams& params, const KMeansProgress& progress,
                   LloydSteps& steps) {
  const int n = points.rows, k = params.k;
  KMeansResult r;
  r.centers = steps.seeds(points, k, params.seed);
  std::vector<int> labels(n, -1), previous;
  std::vector<float> dist;
  std::vector<int> counts(k);
  std::vector<double> tree_chunks, tree_blocks;
  double last_inertia = std::numeric_limits<double>::infinity();
  for (int it = 1; it <= params.max_iterations; ++it) {
    previous = labels;
    steps.assign(r.centers, labels, dist);
    int changed = count_changed(labels, previous);

    // Empty clusters take the point farthest from its centre, from a cluster that keeps one.
    count_labels(labels, counts);
    for (int c = 0; c < k; ++c) {
      if (counts[c] > 0) continue;
      int far = -1;
      for (int i = 0; i < n; ++i)
        if (counts[labels[i]] > 1 && (far < 0 || dist[i] > dist[far])) far = i;
      if (far < 0) break;  // cannot happen with n >= k
      --counts[labels[far]];
      labels[far] = c;
      dist[far] = 0.f;
      counts[c] = 1;
      ++r.reseeded;
      ++changed;
    }
    steps.update(labels, counts, r.centers);
    steps.assigned_distances(r.centers, labels, dist);
    tree_chunks.resize((n + detail::kSeedChunk - 1) / detail::kSeedChunk);
    tree_blocks.resize((n + detail::kSeedBlock - 1) / detail::kSeedBlock);
    // The same whatever computed the distances, on any thread count.
    const double inertia = tree_sum(dist.data(), n, tree_chunks.data(), tree_blocks.data());
    r.iterations = it;
    r.inertia = inertia;
    if (progress) progress(it, inertia, changed);
    if (changed == 0 || (std::isfinite(last_inertia) && last_inertia - inertia <= params.tolerance * last_inertia)) {
      r.converged = true;
      break;
    }
    last_inertia = inertia;
  }
  r.labels = std::move(labels);
  return r;
}

}  // namespace detail

namespace {

class CpuSteps : public detail::LloydSteps {
 public:
  explicit CpuSteps(const cv::Mat& points) : points_(points) {}
  void assign(const cv::Mat& centers, std::vector<int>& labels, std::vector<float>& dist) override {
    nearest_centers(points_, centers, labels, &dist);
  }
  // Means in point order, in double: the same sums whatever the thread count.
  void update(const std::vector<int>& labels, const std::vector<int>& counts, cv::Mat& centers) override {
    const int d = points_.cols, k = centers.rows;
    sums_.assign(size_t(k) * d, 0.0);
    for (int i = 0; i < points_.rows; ++i) {
      const float* x = points_.ptr<float>(i);
      double* s = &sums_[size_t(labels[i]) * d];
      for (int j = 0; j < d; ++j) s[j] += x[j];
    }
    for (int c = 0; c < k; ++c) {
      float* centre = centers.ptr<float>(c);
      for (int j = 0; j < d; ++j) centre[j] = float(sums_[size_t(c) * d + j] / counts[c]);
    }
  }
  void assigned_distances(const cv::Mat& centers, const std::vector<int>& labels, std::vector<float>& dist) override {
    dist.resize(points_.rows);
    cv::parallel_for_(cv::Range(0, points_.rows), [&](const cv::Range& r) {
      for (int i = r.start; i < r.end; ++i)
        dist[i] = squared_distance(points_.ptr<float>(i), centers.ptr<float>(labels[i]), points_.cols);
    });
  }

 private:
  const cv::Mat& points_;
  std::vector<double> sums_;
};

}  // namespace

KMeansResult kmeans(const cv::Mat& points, const KMeansParams& params, const KMeansProgress& progress) {
  check_points(points, "points");
  CpuSteps steps(points);
  return detail::lloyd(points, params, progress, steps);
}

}  // namespace prism::bow
