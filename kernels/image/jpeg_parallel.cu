// The CUDA path of jpeg_parallel.h: the phases of the CPU path (jpeg_parallel.cpp) as kernels on one
// stream, on the same per-thread functions (jpeg_huffman_pixel.h). Phase 1 is one CUDA block per
// group, its rounds separated by barriers; phases 2 and 3 one thread per group and per restart
// interval (phase 3 returns at once unless a group did not synchronise); the prefix sums are CUB's.
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cstring>

#include "common/gpu.h"
#include "image/jpeg_huffman_pixel.h"
#include "image/jpeg_parallel.h"
#include "image/jpeg_parallel_plan.h"

namespace prism::image::jpeg {
namespace {

constexpr int kThreads = 256;  // the per-subsequence and per-block kernels
constexpr size_t kTablesBytes = (sizeof(ScanTables) + 15) / 16 * 16;
static_assert(sizeof(ScanTables) % 4 == 0, "the tables are copied to shared memory in 32-bit words");

uint32_t blocks_for(uint64_t n, int threads) { return uint32_t((n + uint64_t(threads) - 1) / uint64_t(threads)); }

// The scan's tables copied into the block's shared memory (every thread takes part).
__device__ void load_tables(const ScanTables* global, ScanTables* shared) {
  const uint32_t* src = reinterpret_cast<const uint32_t*>(global);
  uint32_t* dst = reinterpret_cast<uint32_t*>(shared);
  for (uint32_t i = threadIdx.x; i < sizeof(ScanTables) / 4; i += blockDim.x) dst[i] = src[i];
  __syncthreads();
}

// Phase 1: one block per group of blockDim.x subsequences.
__global__ void __launch_bounds__(1024)
    sync_groups_kernel(ScanView v, const ScanTables* tables, SyncState* x, SeqResult* r, SyncState* boundary,
                       int max_rounds, uint32_t* status) {
  extern __shared__ uint4 smem[];
  ScanTables* t = reinterpret_cast<ScanTables*>(smem);
  SyncState* xs = reinterpret_cast<SyncState*>(reinterpret_cast<char*>(smem) + kTablesBytes);
  SeqResult* rs = reinterpret_cast<SeqResult*>(xs + blockDim.x);
  load_tables(tables, t);
  v.t = t;
  const uint32_t i = threadIdx.x, j = blockIdx.x * blockDim.x + i;
  const bool active = j < v.n_seq;
  SeqPlace p{};
  if (active) {
    p = place_of(v, j);
    xs[i] = guess_state(p);
  }
  bool dirty = active, converged = false;
  int round = 0;
  while (round < max_rounds) {
    ++round;
    if (dirty) rs[i] = decode_from(v, p, xs[i]);
    __syncthreads();
    SyncState next{};
    const bool changed = active && sync_adopt(v, j, i, xs, rs, &next);
    if (changed) xs[i] = next;  // only this thread reads xs[i]
    dirty = changed;
    if (!__syncthreads_or(changed)) {
      converged = true;
      break;
    }
  }
  if (active) {
    x[j] = xs[i];
    r[j] = rs[i];
    // the group's last: its exit as phase 2 of the next group reads it (resync_group)
    if (i + 1 == blockDim.x || j + 1 == v.n_seq) boundary[blockIdx.x] = rs[i].exit;
  }
  if (i == 0) {
    if (!converged) atomicOr(status, kStatusUnsynced);
    atomicMax(status + 1, uint32_t(round));
  }
}

// Phase 2: one thread per group from the second on.
__global__ void resync_kernel(ScanView v, uint32_t group, uint32_t n_groups, const SyncState* boundary, SyncState* x,
                              SeqResult* r, uint32_t* status) {
  const uint32_t g = blockIdx.x * blockDim.x + threadIdx.x + 1;
  if (g >= n_groups) return;
  const uint32_t first = g * group, end = min(first + group, v.n_seq);
  uint32_t resynced = 0;
  if (!resync_group(v, first, end, boundary[g - 1], x, r, &resynced)) atomicOr(status, kStatusUnsynced);
  if (resynced) atomicAdd(status + 2, resynced);
}

// Phase 3: one thread per restart interval, only where phase 1 or 2 did not synchronise.
__global__ void sequential_kernel(ScanView v, SyncState* x, SeqResult* r, const uint32_t* status) {
  const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= v.n_intervals || !(*status & kStatusUnsynced)) return;
  sequential_interval(v, k, x, r);
}

__global__ void counts_kernel(const SeqResult* r, uint32_t n, uint32_t* counts) {
  const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < n) counts[j] = r[j].blocks;
}

// Phase 4.
__global__ void verify_kernel(ScanView v, const SeqResult* r, const uint32_t* start, uint32_t* status) {
  const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < v.n_seq && !verify_seq(v, j, r, start)) atomicOr(status, kStatusCorrupt);
}

// Phase 5.
__global__ void write_kernel(ScanView v, const ScanTables* tables, const SyncState* x, const uint32_t* start,
                             int16_t* coef, int32_t* dc, const uint32_t* status) {
  extern __shared__ uint4 smem[];
  ScanTables* t = reinterpret_cast<ScanTables*>(smem);
  if (*status & kStatusCorrupt) return;  // the same for the whole grid
  load_tables(tables, t);
  v.t = t;
  const uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < v.n_seq) write_seq(v, j, x, start, coef, dc);
}

// Phase 6: one thread per block of the first component.
__global__ void idct_kernel(const ScanTables* tables, uint32_t mcus_x, uint64_t y_blocks, int reduction,
                            uint64_t interval_y_blocks, int16_t* coef, const uint32_t* dc_sum, uint8_t* out,
                            uint32_t out_w, uint32_t out_h, uint32_t* status) {
  const uint64_t d = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= y_blocks || (*status & kStatusCorrupt)) return;
  uint32_t bx = 0, by = 0;
  y_block_place(d, *tables, mcus_x, bx, by);
  const int k = 8 / reduction;
  if (uint64_t(bx) * k >= out_w || uint64_t(by) * k >= out_h) return;
  int16_t local[64];
  int16_t* c = local;
  if (coef) {
    c = coef + d * 64;
  } else {
    local[0] = 0;
  }
  if (!idct_block(c, dc_value(dc_sum, d, interval_y_blocks), tables->quant, reduction, bx, by, out, out_w, out_w,
                  out_h))
    atomicOr(status, kStatusRange);
}

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

}  // namespace

CudaJpegDecoder::CudaJpegDecoder(const ParallelParams& params) : params_(params) {}

bool CudaJpegDecoder::decode_grey(const uint8_t* data, size_t size, int reduction, DeviceGrey* out, cudaStream_t stream,
                                  std::string* why, ParallelStats* stats) {
  ParallelStats local;
  ParallelStats& st = stats ? *stats : local;
  st = ParallelStats();
  std::string reason;
  std::string* w = why ? why : &reason;
  const std::optional<JpegLayout> layout = parse_jpeg(data, size, w);
  if (!layout) return false;
  if (!check_plan(*layout, size, reduction, params_, w)) return false;
  if (!unstuff_sizes_ok(*layout, size, params_.seq_bits, w)) return false;  // before any buffer is sized

  // Host: the tables, the intervals and the unstuffed data, staged in pinned memory.
  const uint64_t n_intervals = layout->intervals();
  const size_t intervals_at = kTablesBytes, bytes_at = align16(intervals_at + n_intervals * sizeof(Interval));
  const size_t capacity = bytes_at + unstuffed_capacity(*layout, size, params_.seq_bits);
  staging_.reserve(capacity);
  std::memcpy(staging_.data(), &layout->tables, sizeof(ScanTables));
  uint32_t n_seq = 0;
  size_t used = 0;
  if (!unstuff_scan_into(*layout, data, size, params_.seq_bits, staging_.data() + bytes_at,
                         reinterpret_cast<Interval*>(staging_.data() + intervals_at), &n_seq, &used, w))
    return false;
  const size_t upload = bytes_at + used;
  st.subsequences = n_seq;
  st.intervals = uint32_t(n_intervals);

  // Device buffers, grown as needed.
  const uint64_t y_blocks = layout->y_blocks();
  const OutputPlan plan = output_plan(*layout, reduction);
  input_.reserve(upload);
  entries_.reserve(n_seq);
  results_.reserve(n_seq);
  boundary_.reserve(blocks_for(n_seq, params_.group));
  counts_.reserve(n_seq);
  starts_.reserve(n_seq);
  if (reduction != 8) coef_.reserve(y_blocks * 64);
  dc_.reserve(y_blocks);
  dc_sum_.reserve(y_blocks);
  status_.reserve(4);
  status_host_.reserve(4);
  size_t scan_bytes = 0, dc_bytes = 0;
  PRISM_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, counts_.data(), starts_.data(), int(n_seq)));
  PRISM_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, dc_bytes, reinterpret_cast<uint32_t*>(dc_.data()),
                                                 dc_sum_.data(), int(y_blocks)));
  scan_temp_.reserve(std::max(scan_bytes, dc_bytes));
  out->pixels.reserve(uint64_t(plan.width) * plan.height);
  out->width = int(plan.width);
  out->height = int(plan.height);

  // What a failure leaves queued is waited for before the error leaves: the next call's host writes
  // into staging_ must not race this call's upload from it.
  try {
    PRISM_CUDA_CHECK(cudaMemcpyAsync(input_.data(), staging_.data(), upload, cudaMemcpyHostToDevice, stream));
    PRISM_CUDA_CHECK(cudaMemsetAsync(status_.data(), 0, 4 * sizeof(uint32_t), stream));
    int16_t* coef = reduction == 8 ? nullptr : coef_.data();
    if (coef) PRISM_CUDA_CHECK(cudaMemsetAsync(coef, 0, y_blocks * 64 * sizeof(int16_t), stream));

    const ScanTables* tables = reinterpret_cast<const ScanTables*>(input_.data());
    ScanView v =
        scan_view(*layout, input_.data() + bytes_at, reinterpret_cast<const Interval*>(input_.data() + intervals_at),
                  uint32_t(n_intervals), n_seq, params_.seq_bits);
    v.t = tables;
    const uint32_t group = uint32_t(params_.group), n_groups = blocks_for(n_seq, params_.group);
    const int max_rounds = params_.max_rounds > 0 ? params_.max_rounds : params_.group + 1;
    uint32_t* status = status_.data();

    sync_groups_kernel<<<n_groups, group, kTablesBytes + group*(sizeof(SyncState) + sizeof(SeqResult)), stream>>>(
        v, tables, entries_.data(), results_.data(), boundary_.data(), max_rounds, status);
    PRISM_CUDA_CHECK(cudaGetLastError());  // not the next kernels on its unwritten results
    if (n_groups > 1)
      resync_kernel<<<blocks_for(n_groups - 1, 128), 128, 0, stream>>>(v, group, n_groups, boundary_.data(),
                                                                       entries_.data(), results_.data(), status);
    sequential_kernel<<<blocks_for(n_intervals, 128), 128, 0, stream>>>(v, entries_.data(), results_.data(), status);
    counts_kernel<<<blocks_for(n_seq, kThreads), kThreads, 0, stream>>>(results_.data(), n_seq, counts_.data());
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(scan_temp_.data(), scan_bytes, counts_.data(), starts_.data(),
                                                   int(n_seq), stream));
    verify_kernel<<<blocks_for(n_seq, kThreads), kThreads, 0, stream>>>(v, results_.data(), starts_.data(), status);
    write_kernel<<<blocks_for(n_seq, kThreads), kThreads, kTablesBytes, stream>>>(
        v, tables, entries_.data(), starts_.data(), coef, dc_.data(), status);
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cub::DeviceScan::InclusiveSum(scan_temp_.data(), dc_bytes, reinterpret_cast<uint32_t*>(dc_.data()),
                                                   dc_sum_.data(), int(y_blocks), stream));
    idct_kernel<<<blocks_for(y_blocks, kThreads), kThreads, 0, stream>>>(
        tables, layout->mcus_x, y_blocks, reduction, plan.interval_y_blocks, coef, dc_sum_.data(), out->pixels.data(),
        plan.width, plan.height, status);
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(status_host_.data(), status, 3 * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    cudaStreamSynchronize(stream);
    throw;
  }
  st.status = status_host_[0];
  st.rounds = int(status_host_[1]);
  st.resynced = status_host_[2];
  st.sequential = (st.status & kStatusUnsynced) != 0;
  if (st.status & kStatusCorrupt) {
    *w = "the entropy-coded data does not decode to the image's blocks (damaged, or not as libjpeg reads it)";
    return false;
  }
  if (st.status & kStatusRange) {
    *w = "coefficients out of the range where libjpeg-turbo's SIMD inverse DCT is its C one (damaged data)";
    return false;
  }
  return true;
}

}  // namespace prism::image::jpeg
