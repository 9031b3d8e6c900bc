// Per-pixel Earth Mover's Distance between every pixel's signature (a histogram of n <= 32 bins)
// and one target signature, with a frame-to-frame result cache and in-frame deduplication: a
// fixed camera sees mostly the same signatures, so most pixels are looked up, not solved.
//
// Signature frames are float [pixels][n], contiguous. Results are float distances
// (transport_simplex.h: Rubner's normalisation by default; +infinity where exactly one signature
// is empty). The cache is keyed by the exact bits of the signature, so it never changes a result:
// the solver is deterministic and a key is only ever solved once while it is cached.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "emd/transport_simplex.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::emd {

// A validated ground-distance matrix (n x n, finite, non-negative, 2 <= n <= 32).
class GroundDistance {
 public:
  // Throws std::invalid_argument naming the first bad entry.
  GroundDistance(std::vector<float> cost, int n);
  static GroundDistance abs_diff(int n);      // |i - j|
  static GroundDistance squared_diff(int n);  // (i - j)^2
  // |w_i - w_j| for band centre wavelengths (any unit).
  static GroundDistance from_wavelengths(const std::vector<double>& wavelengths);
  // A text file of n lines of n numbers (whitespace or commas; '#' starts a comment). Errors name
  // the file and line.
  static GroundDistance load(const std::string& path);

  int bins() const { return n_; }
  const std::vector<float>& values() const { return cost_; }
  CostMatrix view() const { return {cost_.data(), n_, max_cost_}; }

 private:
  std::vector<float> cost_;
  int n_;
  float max_cost_;
};

// What a frame cost.
struct FrameStats {
  int64_t pixels = 0;
  int64_t solved = 0;      // distinct signatures new to the cache: problems solved this frame
  int64_t duplicates = 0;  // pixels whose signature another pixel of this frame brought in
  int64_t cache_hits = 0;  // pixels whose signature was cached from an earlier frame
  int64_t pivots = 0;      // simplex pivots of the solved problems
  bool flushed = false;    // the cache was emptied before this frame (it would not have fit)
  double dedup_ratio() const { return pixels ? 1.0 - double(solved + cache_hits) / double(pixels) : 0.0; }
  double hit_rate() const { return pixels ? double(cache_hits) / double(pixels) : 0.0; }
};

struct EmdMapConfig {
  Normalization normalization = Normalization::Flow;
  // Signatures kept from earlier frames (0: no cache across frames; in-frame deduplication still
  // applies unless dedup is false). When more than cache_capacity are cached at the start of a
  // frame, the cache is emptied first (policy "flush when full": cheap, no per-entry ages, and a
  // fixed camera refills it in one frame). The table is not allocated for the capacity up front:
  // it starts at two frames' signatures and doubles when the cache and a frame would not fit
  // (keeping what is cached), up to this many plus one frame's pixels; a static scene never grows
  // it after its first frames.
  int64_t cache_capacity = 1 << 21;
  bool dedup = true;
};

// The cache table could not grow (memory ran out, or more entries than the table can index):
// lower cache_capacity. what() says how many signatures and bytes were asked for.
class CacheMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The CPU path (threads over pixels for the solves).
class CpuEmdMap {
 public:
  CpuEmdMap(GroundDistance ground, std::vector<float> target, EmdMapConfig config = {});
  ~CpuEmdMap();
  // Throws CacheMemoryError when the table must grow and cannot.
  FrameStats compute(const float* signatures, int64_t pixels, float* distances);
  void clear_cache();
  // Bytes held for the table and the per-frame lists (what the cache costs in memory now).
  int64_t reserved_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

#if defined(PRISM_HAVE_CUDA)
// The CUDA path: the same function as CpuEmdMap, on device frames. The cache is an open-
// addressing table in device memory (signature_table.h); a frame is one lookup/insert kernel
// (new signatures claim a slot and go on a work list), one solve kernel over the work list (one
// problem per thread, the transportation simplex of transport_simplex.h in double, tableau in
// registers and local memory, cost matrix and target in shared memory) and one gather kernel.
// Whether the cache must be emptied is decided on the device, so a frame has no host sync.
class CudaEmdMap {
 public:
  CudaEmdMap(cudaStream_t stream, GroundDistance ground, std::vector<float> target, EmdMapConfig config = {});
  ~CudaEmdMap();
  CudaEmdMap(const CudaEmdMap&) = delete;
  CudaEmdMap& operator=(const CudaEmdMap&) = delete;
  // signatures: device [pixels][n] floats; distances: device [pixels]. Asynchronous on the stream.
  // Buffers grow on the first frame of a larger size, and the table (as CpuEmdMap's, to the same
  // sizes) when the cache and a frame might not fit: the host knows how many signatures are cached
  // once the previous frame's counters are back (the caller synchronised; emdtracker does every
  // frame), else it assumes the worst and synchronises only if that would not fit. Growing
  // synchronises the stream once. Throws CacheMemoryError when the table cannot grow.
  void compute(const float* signatures, int64_t pixels, float* distances);
  // The last frame's statistics, valid once the stream has been synchronised.
  FrameStats last_stats() const;
  void clear_cache();
  // Device bytes held for the table and the per-frame lists.
  int64_t reserved_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
#endif

// One problem on the CPU, in double: the reference path for the element and the tests.
double emd_cpu(const float* a, const float* b, const GroundDistance& ground, Normalization norm = Normalization::Flow,
               Stats* stats = nullptr);

// Numbers separated by whitespace, commas or semicolons; '#' starts a comment to the end of its
// line. Throws std::invalid_argument "<where>: '<token>' is not a number".
std::vector<float> parse_numbers(const std::string& text, const std::string& where);

// Validates a target signature for `bins` bins: finite, non-negative, not all zero. Throws
// std::invalid_argument saying what is wrong.
void validate_target(const std::vector<float>& target, int bins);

}  // namespace prism::emd
