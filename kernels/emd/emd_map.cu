// CUDA path of the per-pixel EMD map (emd_map.h). Per frame, all on one stream:
//   begin_frame_kernel   decides on the device whether the cache must be emptied first (it would
//                        not hold this frame's new signatures) and resets the frame counters;
//   flush_kernel         empties the slot array when so decided (returns at once otherwise);
//   lookup_kernel        per pixel: hash, probe; a new signature claims a slot (atomicCAS), takes
//                        the next entry for its key and goes on the work list; pixels that find
//                        their signature count as duplicates (same frame) or cache hits;
//   solve_kernel         one problem per thread over the work list (transport_simplex.h, double);
//   gather_kernel        per pixel: its entry's distance.
// Slots hold 0 (empty), 1 (being written) or entry + 2; entries hold keys, values and the frame
// that brought them. A reader that meets a slot being written waits for it (independent thread
// scheduling, sm_70 and later, lets the writer in the same warp finish).
// The table grows on demand as CpuEmdMap's does (grown_entries, signature_table.h): the entries
// are copied to larger arrays at the same indices and rehash_kernel rebuilds the slots from them.
#include <algorithm>

#include <cub/warp/warp_reduce.cuh>

#include "common/device_array.h"
#include "common/gpu.h"
#include "emd/emd_map.h"
#include "emd/signature_table.h"

namespace prism::emd {
namespace {

enum Counter { kSolved, kDuplicates, kHits, kPivots, kFlushed, kFilled, kWork, kCounters };

struct DeviceTable {
  unsigned int* slot;            // [slots]
  float* keys;                   // [entries][n]
  float* value;                  // [entries]
  unsigned int* frame_of;        // [entries]
  int* work;                     // [entries]
  int* entry_of;                 // [pixels]
  unsigned long long* counters;  // [kCounters]
  int64_t slots, entries;
  int64_t capacity;  // EmdMapConfig::cache_capacity
  int n;
};

// Flush when full: more than the capacity cached (CpuEmdMap's rule). The host sized the table for
// the cache and this frame; the second test only guards memory should that ever be wrong.
__global__ void begin_frame_kernel(DeviceTable t, long long pixels) {
  unsigned long long* c = t.counters;
  const bool flush = c[kFilled] > static_cast<unsigned long long>(t.capacity) ||
                     c[kFilled] + static_cast<unsigned long long>(pixels) > static_cast<unsigned long long>(t.entries);
  c[kFlushed] = flush && c[kFilled] > 0 ? 1 : 0;
  if (flush) c[kFilled] = 0;
  c[kSolved] = c[kDuplicates] = c[kHits] = c[kPivots] = 0;
  c[kWork] = 0;
}

// Empties the slots when begin_frame_kernel decided so (or always).
__global__ void flush_kernel(DeviceTable t, bool always) {
  if (!always && t.counters[kFlushed] == 0) return;
  for (int64_t s = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; s < t.slots;
       s += static_cast<int64_t>(gridDim.x) * blockDim.x)
    t.slot[s] = 0;
}

// After the table grew: the slots (all empty) rebuilt from the entries kept at their indices. The
// keys are distinct, so each takes the first empty slot of its probe sequence.
__global__ void rehash_kernel(DeviceTable t) {
  const unsigned long long filled = t.counters[kFilled];
  const int64_t count = filled < static_cast<unsigned long long>(t.entries) ? static_cast<int64_t>(filled) : t.entries;
  const uint64_t mask = static_cast<uint64_t>(t.slots - 1);
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t slot = signature_hash(t.keys + e * t.n, t.n) & mask;
    while (atomicCAS(&t.slot[slot], 0u, static_cast<unsigned int>(e) + 2u) != 0u) slot = (slot + 1) & mask;
  }
}

__global__ void lookup_kernel(DeviceTable t, const float* sig, long long pixels, unsigned int frame) {
  const long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  int category = -1;  // 0 solved, 1 duplicate, 2 hit
  if (p < pixels) {
    const int n = t.n;
    const float* s = sig + p * n;
    const uint64_t mask = static_cast<uint64_t>(t.slots - 1);
    uint64_t slot = signature_hash(s, n) & mask;
    for (;;) {
      unsigned int st = *static_cast<volatile unsigned int*>(&t.slot[slot]);
      if (st == 0) {
        st = atomicCAS(&t.slot[slot], 0u, 1u);
        if (st == 0) {  // ours: a new signature
          const int e = static_cast<int>(atomicAdd(&t.counters[kFilled], 1ull));
          float* key = t.keys + static_cast<int64_t>(e) * n;
          for (int i = 0; i < n; ++i) key[i] = canonical_bin(s[i]);
          t.frame_of[e] = frame;
          __threadfence();
          atomicExch(&t.slot[slot], static_cast<unsigned int>(e) + 2u);
          t.work[atomicAdd(&t.counters[kWork], 1ull)] = e;
          t.entry_of[p] = e;
          category = 0;
          break;
        }
      }
      while (st == 1) st = *static_cast<volatile unsigned int*>(&t.slot[slot]);
      __threadfence();
      const int e = static_cast<int>(st - 2u);
      if (same_signature(t.keys + static_cast<int64_t>(e) * n, s, n)) {
        t.entry_of[p] = e;
        category = *static_cast<volatile unsigned int*>(&t.frame_of[e]) == frame ? 1 : 2;
        break;
      }
      slot = (slot + 1) & mask;
    }
  }
  // One atomic per warp and category.
  const int lane = threadIdx.x & 31;
  for (int k = 0; k < 3; ++k) {
    const unsigned m = __ballot_sync(0xffffffffu, category == k);
    if (lane == 0 && m) atomicAdd(&t.counters[kSolved + k], static_cast<unsigned long long>(__popc(m)));
  }
}

constexpr int kSolveThreads = 128;
using PivotSum = cub::WarpReduce<unsigned long long>;

__global__ void __launch_bounds__(kSolveThreads)
    solve_kernel(DeviceTable t, const float* target, const float* cost, float max_cost, Normalization norm) {
  __shared__ float s_cost[kMaxBins * kMaxBins];
  __shared__ float s_target[kMaxBins];
  __shared__ PivotSum::TempStorage pivot_sum[kSolveThreads / 32];
  const int n = t.n;
  for (int i = threadIdx.x; i < n * n; i += blockDim.x) s_cost[i] = cost[i];
  for (int i = threadIdx.x; i < n; i += blockDim.x) s_target[i] = target[i];
  __syncthreads();
  const long long w = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  unsigned long long pivots = 0;
  if (w < static_cast<long long>(t.counters[kWork])) {
    const int e = t.work[w];
    Stats st;
    const CostMatrix c{s_cost, n, max_cost};
    const double d = earth_movers_distance<double>(t.keys + static_cast<int64_t>(e) * n, s_target, c, norm, &st);
    t.value[e] = static_cast<float>(d);
    pivots = static_cast<unsigned long long>(st.pivots);
  }
  pivots = PivotSum(pivot_sum[threadIdx.x / 32]).Sum(pivots);  // lane 0's is the warp's
  if ((threadIdx.x & 31) == 0 && pivots) atomicAdd(&t.counters[kPivots], pivots);
}

// Every pixel solved on its own (dedup off): the reference for "the cache never changes a result".
__global__ void __launch_bounds__(kSolveThreads)
    direct_solve_kernel(const float* sig, long long pixels, int n, const float* target, const float* cost,
                        float max_cost, Normalization norm, float* out, unsigned long long* pivots_out) {
  __shared__ float s_cost[kMaxBins * kMaxBins];
  __shared__ float s_target[kMaxBins];
  __shared__ PivotSum::TempStorage pivot_sum[kSolveThreads / 32];
  for (int i = threadIdx.x; i < n * n; i += blockDim.x) s_cost[i] = cost[i];
  for (int i = threadIdx.x; i < n; i += blockDim.x) s_target[i] = target[i];
  __syncthreads();
  const long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  unsigned long long pivots = 0;
  if (p < pixels) {
    Stats st;
    const CostMatrix c{s_cost, n, max_cost};
    out[p] = static_cast<float>(earth_movers_distance<double>(sig + p * n, s_target, c, norm, &st));
    pivots = static_cast<unsigned long long>(st.pivots);
  }
  pivots = PivotSum(pivot_sum[threadIdx.x / 32]).Sum(pivots);
  if ((threadIdx.x & 31) == 0 && pivots) atomicAdd(pivots_out, pivots);
}

__global__ void gather_kernel(DeviceTable t, long long pixels, float* out) {
  const long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (p < pixels) out[p] = t.value[t.entry_of[p]];
}

}  // namespace

// Entries are indexed by int and stored in a slot as entry + 2 (unsigned).
constexpr int64_t kMaxEntries = (int64_t{1} << 31) - 3;

struct CudaEmdMap::Impl {
  cudaStream_t stream;
  GroundDistance ground;
  std::vector<float> target;
  EmdMapConfig config;
  gpu::DeviceArray<float> d_target, d_cost;
  gpu::DeviceArray<unsigned long long> d_counters;
  gpu::PinnedArray<unsigned long long> host_counters;
  // The table, grown by ensure(); `t` views these arrays for the kernels (passed by value).
  gpu::DeviceArray<unsigned int> slot, frame_of;
  gpu::DeviceArray<float> keys, value;
  gpu::DeviceArray<int> work, entry_of;  // per frame: [pixels]
  DeviceTable t{};
  int64_t pixel_capacity = 0;
  unsigned int frame = 0;
  bool last_direct = false;
  int64_t last_pixels = 0;
  // What the host knows of the signatures cached on the device: `cached` is exact when
  // `cached_exact`, else an upper bound. The counters of the last frame come back into
  // host_counters, `counters_back` recorded after them.
  gpu::Event counters_back;
  int64_t cached = 0;
  bool cached_exact = true;

  Impl(cudaStream_t s, GroundDistance g, std::vector<float> tg, EmdMapConfig c)
      : stream(s), ground(std::move(g)), target(std::move(tg)), config(c) {
    validate_target(target, ground.bins());
    t.n = ground.bins();
    t.capacity = config.cache_capacity;
    d_target = gpu::device_copy(target.data(), target.size());
    d_cost = gpu::device_copy(ground.values().data(), ground.values().size());
    d_counters.resize(kCounters);
    t.counters = d_counters.data();
    PRISM_CUDA_CHECK(cudaMemset(t.counters, 0, kCounters * sizeof(unsigned long long)));
    host_counters.resize(kCounters);
    std::fill(host_counters.data(), host_counters.data() + kCounters, 0ull);
    counters_back = gpu::Event::create();
  }

  // The arrays free themselves; the stream's work on them must be done first (unchecked: a
  // destructor must not throw).
  ~Impl() { cudaStreamSynchronize(stream); }

  // Whether the last frame's counters are back in host_counters, without waiting.
  bool counters_are_back() {
    const cudaError_t e = cudaEventQuery(counters_back);
    if (e == cudaErrorNotReady) {
      if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();  // not an error: not sticky
      return false;
    }
    PRISM_CUDA_CHECK(e);
    return true;
  }

  // Entries the next frame of `pixels` needs: the device flushes when more than the capacity are
  // cached, so an exact count over it needs only the frame; a bound might not be over it.
  int64_t needed(int64_t pixels) const {
    const int64_t c =
        cached_exact ? (cached > config.cache_capacity ? 0 : cached) : std::min(cached, config.cache_capacity);
    return c + pixels;
  }

  // Room for a frame of `pixels`: the per-frame lists and the table (grown as CpuEmdMap's). Waits
  // for the stream only when something must be reallocated or the host's bound says the table
  // might not hold the frame.
  void ensure(int64_t pixels) {
    if (!cached_exact && counters_are_back()) {
      cached = static_cast<int64_t>(host_counters[kFilled]);
      cached_exact = true;
    }
    if (pixels <= pixel_capacity && needed(pixels) <= t.entries) return;
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));  // nothing in flight uses the arrays below
    if (!cached_exact) {                              // the last frame's counters are back now
      cached = static_cast<int64_t>(host_counters[kFilled]);
      cached_exact = true;
    }
    if (pixels > pixel_capacity) {
      work.reset();
      entry_of.reset();
      t.work = t.entry_of = nullptr;
      pixel_capacity = 0;
      try {
        work.resize(pixels);
        entry_of.resize(pixels);
      } catch (const gpu::CudaError&) {
        throw CacheMemoryError(cache_table_error(pixels, 8.0 * pixels));
      }
      t.work = work.data();
      t.entry_of = entry_of.data();
      pixel_capacity = pixels;
    }
    const int64_t need = needed(pixels);
    if (need > t.entries) grow(grown_entries(t.entries, need, pixels, config.cache_capacity + pixels));
  }

  // The table at `entries` signatures: new arrays, the entries copied at their indices, the slots
  // rebuilt, then the old arrays freed (the stream is idle when this is called, and again after).
  void grow(int64_t entries) {
    const int64_t slots = table_slots(entries);
    const int n = t.n;
    if (entries > kMaxEntries)
      throw CacheMemoryError(cache_table_error(entries, double(entries) * (n * 4.0 + 12) + slots * 4.0));
    gpu::DeviceArray<unsigned int> slot2, frame_of2;
    gpu::DeviceArray<float> keys2, value2;
    try {
      slot2.resize(slots);
      keys2.resize(static_cast<size_t>(entries) * n);
      value2.resize(entries);
      frame_of2.resize(entries);
    } catch (const gpu::CudaError&) {
      throw CacheMemoryError(cache_table_error(entries, double(entries) * (n * 4.0 + 8) + slots * 4.0));
    }
    const int64_t kept = t.entries;  // 0 on the first frame
    if (kept > 0) {
      PRISM_CUDA_CHECK(
          cudaMemcpyAsync(keys2.data(), t.keys, kept * n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      PRISM_CUDA_CHECK(cudaMemcpyAsync(value2.data(), t.value, kept * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      PRISM_CUDA_CHECK(
          cudaMemcpyAsync(frame_of2.data(), t.frame_of, kept * sizeof(unsigned int), cudaMemcpyDeviceToDevice, stream));
    }
    PRISM_CUDA_CHECK(cudaMemsetAsync(slot2.data(), 0, slots * sizeof(unsigned int), stream));
    std::swap(slot, slot2);
    std::swap(keys, keys2);
    std::swap(value, value2);
    std::swap(frame_of, frame_of2);
    t.slot = slot.data();
    t.keys = keys.data();
    t.value = value.data();
    t.frame_of = frame_of.data();
    t.slots = slots;
    t.entries = entries;
    if (kept > 0) rehash_kernel<<<1024, 256, 0, stream>>>(t);
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));  // before the old arrays (now in *2) are freed
  }
};

CudaEmdMap::CudaEmdMap(cudaStream_t stream, GroundDistance ground, std::vector<float> target, EmdMapConfig config)
    : impl_(std::make_unique<Impl>(stream, std::move(ground), std::move(target), config)) {}
CudaEmdMap::~CudaEmdMap() = default;

void CudaEmdMap::clear_cache() {
  Impl& m = *impl_;
  if (!m.t.slot) return;
  PRISM_CUDA_CHECK(cudaMemsetAsync(m.t.slot, 0, m.t.slots * sizeof(unsigned int), m.stream));
  PRISM_CUDA_CHECK(cudaMemsetAsync(m.t.counters, 0, kCounters * sizeof(unsigned long long), m.stream));
  m.cached = 0;
  m.cached_exact = true;
}

int64_t CudaEmdMap::reserved_bytes() const {
  const Impl& m = *impl_;
  return static_cast<int64_t>(m.slot.bytes() + m.frame_of.bytes() + m.keys.bytes() + m.value.bytes() + m.work.bytes() +
                              m.entry_of.bytes());
}

void CudaEmdMap::compute(const float* sig, int64_t pixels, float* out) {
  Impl& m = *impl_;
  m.last_pixels = pixels;
  if (pixels <= 0) return;
  const GroundDistance& g = m.ground;
  cudaStream_t s = m.stream;
  const unsigned blocks = static_cast<unsigned>((pixels + 255) / 256);
  if (!m.config.dedup) {
    m.last_direct = true;
    PRISM_CUDA_CHECK(cudaMemsetAsync(m.t.counters, 0, kCounters * sizeof(unsigned long long), s));
    direct_solve_kernel<<<static_cast<unsigned>((pixels + kSolveThreads - 1) / kSolveThreads), kSolveThreads, 0, s>>>(
        sig, pixels, g.bins(), m.d_target.data(), m.d_cost.data(), g.view().max_cost, m.config.normalization, out,
        m.t.counters + kPivots);
  } else {
    m.last_direct = false;
    m.ensure(pixels);
    ++m.frame;
    begin_frame_kernel<<<1, 1, 0, s>>>(m.t, pixels);
    flush_kernel<<<1024, 256, 0, s>>>(m.t, false);
    lookup_kernel<<<blocks, 256, 0, s>>>(m.t, sig, pixels, m.frame);
    solve_kernel<<<static_cast<unsigned>((pixels + kSolveThreads - 1) / kSolveThreads), kSolveThreads, 0, s>>>(
        m.t, m.d_target.data(), m.d_cost.data(), g.view().max_cost, m.config.normalization);
    gather_kernel<<<blocks, 256, 0, s>>>(m.t, pixels, out);
    if (m.config.cache_capacity == 0) {  // no cache across frames: the next frame starts empty
      flush_kernel<<<1024, 256, 0, s>>>(m.t, true);
      PRISM_CUDA_CHECK(cudaMemsetAsync(m.t.counters + kFilled, 0, sizeof(unsigned long long), s));
    }
    // Until the counters are back, at most the cache (as the device decides it) plus this frame.
    m.cached = std::min(m.cached, m.config.cache_capacity) + pixels;
    m.cached_exact = false;
  }
  PRISM_CUDA_CHECK(cudaGetLastError());
  PRISM_CUDA_CHECK(cudaMemcpyAsync(m.host_counters.data(), m.t.counters, kCounters * sizeof(unsigned long long),
                                   cudaMemcpyDeviceToHost, s));
  PRISM_CUDA_CHECK(cudaEventRecord(m.counters_back, s));
}

FrameStats CudaEmdMap::last_stats() const {
  const Impl& m = *impl_;
  const unsigned long long* c = m.host_counters.data();
  FrameStats f;
  f.pixels = m.last_pixels;
  f.pivots = static_cast<int64_t>(c[kPivots]);
  if (m.last_direct) {
    f.solved = m.last_pixels;
    return f;
  }
  f.solved = static_cast<int64_t>(c[kSolved]);
  f.duplicates = static_cast<int64_t>(c[kDuplicates]);
  f.cache_hits = static_cast<int64_t>(c[kHits]);
  f.flushed = c[kFlushed] != 0;
  return f;
}

}  // namespace prism::emd
