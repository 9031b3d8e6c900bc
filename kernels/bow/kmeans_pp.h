// The k-means++ draw (Arthur & Vassilvitskii, SODA 2007), shared by the CPU path (kmeans.cpp) and
// the GPU path (gpu_kmeans.cu) so that both pick the same points: the D^2 weights are summed in
// chunks of 32 points and blocks of 32 chunks, each sum in order in double, and the draw walks
// those sums. (One sequential sum over all points could not be parallelised; this fixed tree can,
// and gives the same bits on any thread count or device.)
#pragma once
#include "common/hostdevice.h"

namespace prism::bow::detail {

constexpr int kSeedChunk = 32;               // points per chunk
constexpr int kSeedBlock = 32 * kSeedChunk;  // points per block

// The draw walks three levels; the GPU runs each level on data it first stages in shared memory.
// Level 1: the block holding the draw, with `acc` the sum of the blocks before it and `target`
// u * total; -1 when every weight is zero (all points on seeds).
PRISM_HD int kmeans_pp_block(const double* block_sums, int blocks, double u, double* acc, double* target) {
  double total = 0;
  for (int b = 0; b < blocks; ++b) total += block_sums[b];
  if (!(total > 0)) return -1;
  *target = u * total;
  *acc = 0;
  int b = 0;
  for (; b < blocks - 1 && !(*acc + block_sums[b] > *target); ++b) *acc += block_sums[b];
  return b;
}

// Levels 2 and 3, inside that block (its chunk sums, and the weights of its `count` points): the
// first point of non-zero weight at which the running sum exceeds the target; the chunk's last
// point of non-zero weight if rounding left the target past its end; -1 if the chunk has none.
PRISM_HD int kmeans_pp_in_block(const double* chunk_sums, const double* weights, int count, double acc, double target) {
  const int chunks = (count + kSeedChunk - 1) / kSeedChunk;
  int q = 0;
  for (; q < chunks - 1 && !(acc + chunk_sums[q] > target); ++q) acc += chunk_sums[q];
  const int end = (q + 1) * kSeedChunk < count ? (q + 1) * kSeedChunk : count;
  int last = -1;
  for (int i = q * kSeedChunk; i < end; ++i)
    if (weights[i] > 0) {
      last = i;
      acc += weights[i];
      if (acc > target) return i;
    }
  return last;
}

// The last point of non-zero weight (a chunk of zero weights is reached only through rounding at
// its edge), else the point after `previous`.
PRISM_HD int kmeans_pp_fallback(const double* weights, int n, int previous) {
  for (int i = n - 1; i >= 0; --i)
    if (weights[i] > 0) return i;
  return (previous + 1) % n;
}

// The next seed, from the points' weights and their chunk and block sums.
PRISM_HD int kmeans_pp_pick(const double* weights, const double* chunk_sums, const double* block_sums, int n, double u,
                            int previous) {
  double acc = 0, target = 0;
  const int b = kmeans_pp_block(block_sums, (n + kSeedBlock - 1) / kSeedBlock, u, &acc, &target);
  if (b < 0) return (previous + 1) % n;
  const int first = b * kSeedBlock, count = n - first < kSeedBlock ? n - first : kSeedBlock;
  const int i = kmeans_pp_in_block(chunk_sums + b * (kSeedBlock / kSeedChunk), weights + first, count, acc, target);
  return i >= 0 ? first + i : kmeans_pp_fallback(weights, n, previous);
}

}  // namespace prism::bow::detail
