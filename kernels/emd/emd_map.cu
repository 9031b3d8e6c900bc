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
#include <algorithm>

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
  int n;
};

__global__ void begin_frame_kernel(DeviceTable t, long long pixels) {
  unsigned long long* c = t.counters;
  const bool flush = c[kFilled] + static_cast<unsigned long long>(pixels) > static_cast<unsigned long long>(t.entries);
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

__global__ void __launch_bounds__(kSolveThreads)
    solve_kernel(DeviceTable t, const float* target, const float* cost, float max_cost, Normalization norm) {
  __shared__ float s_cost[kMaxBins * kMaxBins];
  __shared__ float s_target[kMaxBins];
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
  for (int off = 16; off > 0; off >>= 1) pivots += __shfl_down_sync(0xffffffffu, pivots, off);
  if ((threadIdx.x & 31) == 0 && pivots) atomicAdd(&t.counters[kPivots], pivots);
}

// Every pixel solved on its own (dedup off): the reference for "the cache never changes a result".
__global__ void __launch_bounds__(kSolveThreads)
    direct_solve_kernel(const float* sig, long long pixels, int n, const float* target, const float* cost,
                        float max_cost, Normalization norm, float* out, unsigned long long* pivots_out) {
  __shared__ float s_cost[kMaxBins * kMaxBins];
  __shared__ float s_target[kMaxBins];
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
  for (int off = 16; off > 0; off >>= 1) pivots += __shfl_down_sync(0xffffffffu, pivots, off);
  if ((threadIdx.x & 31) == 0 && pivots) atomicAdd(pivots_out, pivots);
}

__global__ void gather_kernel(DeviceTable t, long long pixels, float* out) {
  const long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (p < pixels) out[p] = t.value[t.entry_of[p]];
}

}  // namespace

struct CudaEmdMap::Impl {
  cudaStream_t stream;
  GroundDistance ground;
  std::vector<float> target;
  EmdMapConfig config;
  gpu::DeviceArray<float> d_target, d_cost;
  gpu::DeviceArray<unsigned long long> d_counters;
  gpu::PinnedArray<unsigned long long> host_counters;
  // The table, sized by ensure(); `t` views these arrays for the kernels (passed by value).
  gpu::DeviceArray<unsigned int> slot, frame_of;
  gpu::DeviceArray<float> keys, value;
  gpu::DeviceArray<int> work, entry_of;
  DeviceTable t{};
  int64_t pixel_capacity = 0;
  unsigned int frame = 0;
  bool last_direct = false;
  int64_t last_pixels = 0;

  Impl(cudaStream_t s, GroundDistance g, std::vector<float> tg, EmdMapConfig c)
      : stream(s), ground(std::move(g)), target(std::move(tg)), config(c) {
    validate_target(target, ground.bins());
    t.n = ground.bins();
    d_target = gpu::device_copy(target.data(), target.size());
    d_cost = gpu::device_copy(ground.values().data(), ground.values().size());
    d_counters.resize(kCounters);
    t.counters = d_counters.data();
    PRISM_CUDA_CHECK(cudaMemset(t.counters, 0, kCounters * sizeof(unsigned long long)));
    host_counters.resize(kCounters);
    std::fill(host_counters.data(), host_counters.data() + kCounters, 0ull);
  }

  // The arrays free themselves; the stream's work on them must be done first (unchecked: a
  // destructor must not throw).
  ~Impl() { cudaStreamSynchronize(stream); }

  void free_table() {
    slot.reset();
    keys.reset();
    value.reset();
    frame_of.reset();
    work.reset();
    entry_of.reset();
    t.slot = nullptr;
    t.keys = nullptr;
    t.value = nullptr;
    t.frame_of = nullptr;
    t.work = nullptr;
    t.entry_of = nullptr;
    pixel_capacity = 0;
  }

  // Sized for `pixels` per frame; a larger frame reallocates (and so empties) the table.
  void ensure(int64_t pixels) {
    if (pixels <= pixel_capacity) return;
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
    free_table();                                // all of it before any new allocation: the table is replaced whole
    t.entries = config.cache_capacity + pixels;  // the cache plus one frame's new signatures
    t.slots = table_slots(t.entries);
    slot.resize(t.slots);
    keys.resize(static_cast<size_t>(t.entries) * t.n);
    value.resize(t.entries);
    frame_of.resize(t.entries);
    work.resize(t.entries);
    entry_of.resize(pixels);
    t.slot = slot.data();
    t.keys = keys.data();
    t.value = value.data();
    t.frame_of = frame_of.data();
    t.work = work.data();
    t.entry_of = entry_of.data();
    pixel_capacity = pixels;
    PRISM_CUDA_CHECK(cudaMemsetAsync(t.slot, 0, t.slots * sizeof(unsigned int), stream));
    PRISM_CUDA_CHECK(cudaMemsetAsync(t.counters, 0, kCounters * sizeof(unsigned long long), stream));
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
  }
  PRISM_CUDA_CHECK(cudaGetLastError());
  PRISM_CUDA_CHECK(cudaMemcpyAsync(m.host_counters.data(), m.t.counters, kCounters * sizeof(unsigned long long),
                                   cudaMemcpyDeviceToHost, s));
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
