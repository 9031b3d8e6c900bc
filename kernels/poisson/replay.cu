// Replay: OpenCV's float DFTs replayed on the GPU operation for operation (opencv_dft.h), bit-exact
// with OpenCV. ReplayPass runs one pass (the odd extensions of rows, pruned to the outputs wanted);
// ReplaySolve chains OpenCV's four passes with its float division and truncation, the whole solve
// for small and thin boxes; dst_solve.cu uses ReplayPass for the exact low frequencies.
#include <cuda_pipeline.h>

#include <algorithm>
#include <vector>

#include "poisson/seamless_clone_internal.cuh"

namespace prism::poisson::detail {

namespace {

// Generic stages of at least this radix are not summed inside dft_head_kernel (one row per block,
// where the few threads that own the wanted outputs each walk h = radix/2 terms while the rest of
// the block idles, and the twiddles they read differ per thread) but split out to long_stage_kernel,
// where the 32 lanes of a warp are 32 transforms sharing each twiddle (2400x1552: radix 2399, 1199
// terms per output). A version computing the long stage's inputs inside long_stage_kernel (no pairs
// buffer) measured slower, its gathers from the input being latency-bound (docs/benchmarks/poisson.md,
// "How the exact low frequencies work").
constexpr int kLongRadix = 64;

// Which stages one dft_head_kernel launch runs. Whole pass: first = 0, stop = none. Split at a long
// stage L: the launch before it runs stages [0, L) and L's pairs (written to pairs_out/first_out
// instead of summed), the launch after it (if L is not the last stage) reads L's wanted outputs
// from `compact` and runs stages (L, end).
struct HeadRange {
  int first = 0;
  int stop = ocvdft::kMaxStages;
  float4* pairs_out = nullptr;          // [transform][pair][p - 1]: a, b
  ocvdft::Cf* first_out = nullptr;      // [transform][pair] the butterfly's v[0]
  const ocvdft::Cf* compact = nullptr;  // [transform][block][kept], stage first-1's outputs
  int compact_blocks = 0, compact_kept = 0, compact_n = 0;
  float inverse_scale = 0.f;  // > 0: OpenCV's inverse with DFT_SCALE (opencv_dft.h)
};

constexpr int kHeadThreads = 256;

// One block per transform (r = blockIdx.x of channel c = blockIdx.y): OpenCV's forward DFT of the
// row's odd extension in shared memory, stage by stage (ocvdft::run_host in parallel), every
// stage pruned below `prune`; writes the imaginary parts of outputs 1..count to
// out[(c * rows + r) * count + k - 1]. `range` splits the pass around a long stage.
__global__ void __launch_bounds__(kHeadThreads)
    dft_head_kernel(ocvdft::Plan plan, const int* __restrict__ slot, const ocvdft::Cf* __restrict__ wave,
                    HeadRange range, RowSource src, int prune, float* out, int count) {
  using ocvdft::Cf;
  extern __shared__ Cf head_smem[];
  const int n0 = plan.n0, r = blockIdx.x, c = blockIdx.y, len = src.length;
  const int64_t transform = static_cast<int64_t>(c) * gridDim.x + r;
  Cf* row = head_smem;
  Cf* staging = row + n0;
  if (range.first == 0) {
    // The extension [0, x, 0, -rev x] read in order (coalesced) and scattered to the permuted slots.
    // The inverse conjugates its input (imaginary parts -0).
    const float* x = src.data + c * src.channel_stride + r * src.row_stride;
    const float im = range.inverse_scale > 0.f ? -0.f : 0.f;
#pragma unroll 4  // (several loads in flight per thread)
    for (int k = threadIdx.x; k < len; k += blockDim.x) {
      const float v = x[k * src.elem_stride];
      row[slot[k + 1]] = {v, im};
      row[slot[2 * len + 1 - k]] = {-v, im};
    }
    if (threadIdx.x == 0) row[slot[0]] = row[slot[len + 1]] = Cf{0.f, im};
  } else {  // the positions below compact_kept of every block; the others are never read for a kept output
    const int kept = range.compact_kept, values = range.compact_blocks * kept;
    const Cf* in = range.compact + transform * values;
    for (int i = threadIdx.x; i < values; i += blockDim.x) row[(i / kept) * range.compact_n + i % kept] = in[i];
  }
  __syncthreads();
  for (int s = range.first; s < plan.num_stages; ++s) {
    const ocvdft::Stage st = plan.stages[s];
    const int blocks = n0 / st.n;
    if (!ocvdft::is_generic(st)) {
      const int cols = min(st.nx, prune);  // (columns j >= prune feed no kept output)
      for (int t = threadIdx.x; t < blocks * cols; t += blockDim.x) {
        const int j = t % cols;
        Cf* v = row + (t / cols) * st.n + j;
        switch (st.radix) {
          case 2: ocvdft::radix2(v, st.nx, j, st.dw0, wave); break;
          case 3: ocvdft::radix3(v, st.nx, j, st.dw0, wave); break;
          case 4: ocvdft::radix4(v, st.nx, j, st.dw0, wave); break;
          default: ocvdft::radix5(v, st.nx, j, st.dw0, wave); break;
        }
      }
      __syncthreads();
      continue;
    }
    const int h = (st.radix - 1) / 2, cols = min(st.nx, prune), pairs = blocks * cols, kept = min(st.n, prune);
    if (s == range.stop) {  // the long stage: its a[], b[] and v[0] go to long_stage_kernel
      float4* pairs_out = range.pairs_out + transform * pairs * h;
#pragma unroll 4
      for (int t = threadIdx.x; t < pairs * h; t += blockDim.x) {
        const int pair = t / h, p = t % h + 1, j = pair % cols;
        Cf a, b;
        ocvdft::generic_pair(row + (pair / cols) * st.n + j, st, j, p, wave, a, b);
        pairs_out[t] = make_float4(a.re, a.im, b.re, b.im);
      }
      for (int pair = threadIdx.x; pair < pairs; pair += blockDim.x)
        range.first_out[transform * pairs + pair] = row[(pair / cols) * st.n + pair % cols];
      return;
    }
    // a[p-1] and b[p-1] of every (block, column) pair, in place of v[p nx] and v[n - p nx].
    for (int t = threadIdx.x; t < pairs * h; t += blockDim.x) {
      const int pair = t / h, p = t % h + 1, j = pair % cols;
      Cf* v = row + (pair / cols) * st.n + j;
      Cf a, b;
      ocvdft::generic_pair(v, st, j, p, wave, a, b);
      v[st.nx * p] = a;
      v[st.n - st.nx * p] = b;
    }
    __syncthreads();
    // Item p = 0 of a pair: the running sum (v[0]); p >= 1: outputs p nx and n - p nx where kept.
    for (int t = threadIdx.x; t < pairs * (h + 1); t += blockDim.x) {
      const int pair = t / (h + 1), p = t % (h + 1), j = pair % cols, blk = pair / cols;
      const Cf* v = row + blk * st.n + j;
      Cf* stage_out = staging + blk * kept + j;
      const int lo = st.nx * p, hi = st.n - st.nx * p;
      if (p == 0) {
        stage_out[0] = ocvdft::generic_sum(v[0], h, v + st.nx, v + st.n - st.nx, st.nx, -st.nx);
      } else if (j + lo < kept || j + hi < kept) {
        Cf s0, s1;
        ocvdft::generic_output(v[0], st, p, n0, wave, v + st.nx, v + st.n - st.nx, st.nx, -st.nx, s0, s1);
        if (j + lo < kept) stage_out[lo] = s0;
        if (j + hi < kept) stage_out[hi] = s1;
      }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < blocks * kept; t += blockDim.x) row[(t / kept) * st.n + t % kept] = staging[t];
    __syncthreads();
  }
  float* o = out + transform * count;
  for (int k = threadIdx.x; k < count; k += blockDim.x)
    o[k] = range.inverse_scale > 0.f ? ocvdft::inverse_output_im(row[k + 1].im, range.inverse_scale) : row[k + 1].im;
}

constexpr int kLongChunk = 32;     // terms staged in shared memory at a time (two chunks in flight)
constexpr int kLongGroup = 4;      // outputs p per thread: a[q], b[q] read once for four sums
constexpr int kLongThreads = 256;  // warp 0: the running sum; warps 1..7: up to 28 outputs p
constexpr int kLongMaxP = (kLongThreads / 32 - 1) * kLongGroup;

// Chunk q0's a[q], b[q] of 32 transforms and its twiddles, copied to shared memory asynchronously
// (cp.async: no registers held, the copy of chunk c + 1 runs during the arithmetic of chunk c).
__device__ void long_fetch(const LongStage& L, const float4* pairs_in, const ocvdft::Cf* tw_table, int t0, int pair,
                           int q0, float4* tile, float4* tw_tile) {
  const int chunk = min(kLongChunk, L.h - q0);
  for (int i = threadIdx.x; i < 32 * kLongChunk; i += kLongThreads) {
    const int lane = i / kLongChunk, q = i % kLongChunk;
    if (q < chunk && t0 + lane < L.transforms)
      __pipeline_memcpy_async(&tile[q * 33 + lane],
                              &pairs_in[(static_cast<int64_t>(t0 + lane) * L.pairs + pair) * L.h + q0 + q],
                              sizeof(float4));
  }
  const float4* tw_src = reinterpret_cast<const float4*>(tw_table + static_cast<int64_t>(q0) * L.tw_width);
  for (int i = threadIdx.x; i < chunk * L.tw_width / 2; i += kLongThreads)
    __pipeline_memcpy_async(&tw_tile[i], &tw_src[i], sizeof(float4));
  __pipeline_commit();
}

// Block: 32 transforms (lanes) x warps over the outputs of pair blockIdx.y: warp 0 the running sum
// (p = 0), warp w >= 1 outputs p = 1 + 4(w - 1) .. + 3. Per chunk of terms q, a[q], b[q] of the 32
// transforms (coalesced) and the twiddles of every (q, p) (tw_table, made on the host) go to shared
// memory; each term of a sum then reads one float4 of its lane and twiddles common to the warp. The
// sums run in OpenCV's order, so the results are bit-identical to dft_head_kernel's. Outputs
// j + n - nx p are never wanted for a long stage (checked on the host).
__global__ void __launch_bounds__(kLongThreads)
    long_stage_kernel(LongStage L, const ocvdft::Cf* __restrict__ tw_table, const float4* __restrict__ pairs_in,
                      const ocvdft::Cf* __restrict__ first_in, ocvdft::Cf* compact, float* out) {
  using ocvdft::Cf;
  __shared__ float4 tile[2][kLongChunk * 33];                // [q][lane] a, b; padded against bank conflicts
  __shared__ float4 tw_tile[2][kLongChunk * kLongMaxP / 2];  // [q][p - 1] twiddles, two per float4
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int pair = blockIdx.y, j = pair % L.cols, blk = pair / L.cols;
  const int t0 = blockIdx.x * 32, transform = t0 + lane;
  const bool live = transform < L.transforms;
  const int p_first = warp == 0 ? 0 : 1 + (warp - 1) * kLongGroup;
  const bool computes = p_first <= L.p_max;
  const Cf v0 = live ? first_in[static_cast<int64_t>(transform) * L.pairs + pair] : Cf{0.f, 0.f};
  Cf s[kLongGroup];
#pragma unroll
  for (int g = 0; g < kLongGroup; ++g) s[g] = v0;
  long_fetch(L, pairs_in, tw_table, t0, pair, 0, tile[0], tw_tile[0]);
  for (int q0 = 0, buf = 0; q0 < L.h; q0 += kLongChunk, buf ^= 1) {
    const int chunk = min(kLongChunk, L.h - q0);
    if (q0 + kLongChunk < L.h) {
      long_fetch(L, pairs_in, tw_table, t0, pair, q0 + kLongChunk, tile[buf ^ 1], tw_tile[buf ^ 1]);
      __pipeline_wait_prior(1);
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();  // chunk q0 is in shared memory for every thread
    if (computes) {
      const float4* ab_q = tile[buf] + lane;
      if (warp == 0) {
#pragma unroll 8
        for (int q = 0; q < chunk; ++q) {
          const float4 ab = ab_q[q * 33];
          ocvdft::generic_sum_term(s[0], Cf{ab.x, ab.y}, Cf{ab.z, ab.w});
        }
      } else {
        const Cf* twq = reinterpret_cast<const Cf*>(tw_tile[buf]) + p_first - 1;
#pragma unroll 2
        for (int q = 0; q < chunk; ++q, twq += L.tw_width) {
          const float4 ab = ab_q[q * 33];
          const Cf a{ab.x, ab.y}, b{ab.z, ab.w};
          Cf unused;
#pragma unroll
          for (int g = 0; g < kLongGroup; ++g) ocvdft::generic_term<false>(twq[g], a, b, s[g], unused);
        }
      }
    }
    __syncthreads();  // before the next iteration's copy overwrites this buffer
  }
  if (!live || !computes) return;
#pragma unroll  // (a loop with a variable bound would put s[] in local memory)
  for (int g = 0; g < kLongGroup; ++g) {
    const int p = p_first + g, pos = j + L.st.nx * p;  // position in the block
    if ((warp == 0 && g > 0) || p > L.p_max || !L.wanted(pos)) continue;
    if (L.last)
      out[static_cast<int64_t>(transform) * L.count + pos - 1] = s[g].im;
    else
      compact[(static_cast<int64_t>(transform) * L.blocks + blk) * L.kept + pos] = s[g];
  }
}

// The device's opt-in shared memory limit, granted to dft_head_kernel once per process.
int head_smem_limit() {
  static const int limit = [] {
    int dev = 0, bytes = 0;
    PRISM_CUDA_CHECK(cudaGetDevice(&dev));
    PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    PRISM_CUDA_CHECK(cudaFuncSetAttribute(dft_head_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return bytes;
  }();
  return limit;
}

// Replay: OpenCV's division by the eigenvalues, in float as OpenCV writes it, the column pass's
// [3][N][M] output read back in rows: q[c][k][i] = b[c][i][k] / (fx[i] + fy[k] - 4).
__global__ void divide_replay_kernel(const float* b, int N, int M, const float* fx, const float* fy, float* q) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y, c = blockIdx.z;
  if (i >= N) return;
  const float d = __fsub_rn(__fadd_rn(fx[i], fy[k]), 4.f);
  q[(static_cast<int64_t>(c) * M + k) * N + i] = __fdiv_rn(b[(static_cast<int64_t>(c) * N + i) * M + k], d);
}

// Replay: the inverse column pass's floats u[c][i][j] truncated into the box's interior.
__global__ void output_replay_kernel(const float* u, Geometry g, PackedImage bg) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
  const int N = g.W - 2, M = g.H - 2;
  if (i >= N || j >= M) return;
  uint8_t* px =
      bg.data + static_cast<int64_t>(g.dy + 1 + j) * bg.stride + static_cast<int64_t>(g.dx + 1 + i) * bg.channels;
  for (int c = 0; c < 3; ++c)
    px[detail::channel_offset(bg, c)] = detail::to_u8_truncate(u[(static_cast<int64_t>(c) * N + i) * M + j]);
}

}  // namespace

bool ReplayPass::prepare(int length, int rows, int channels, int count, bool inverse) {
  const int n0 = 2 * length + 2;
  inverse_scale_ = inverse ? ocvdft::inverse_scale(n0) : 0.f;
  rows_ = rows;
  channels_ = channels;
  count_ = count;
  prune_ = count + 1;
  std::vector<int> perm;
  std::vector<ocvdft::Cf> wave;
  plan_ = ocvdft::make_plan(n0, perm, wave);
  for (int s = 0; s < plan_.num_stages && !inverse; ++s) {  // (the inverse passes are never pruned enough)
    const ocvdft::Stage& st = plan_.stages[s];
    if (!ocvdft::is_generic(st)) continue;
    // Split when long, its v[n - nx p] outputs are all unwanted, and at most kLongMaxP outputs p
    // per column are.
    const int h = (st.radix - 1) / 2, kept = std::min(st.n, prune_);
    if (st.radix >= kLongRadix && st.nx * (h + 1) >= kept && (prune_ - 1) / st.nx <= kLongMaxP) split_ = s;
    break;
  }
  before_ = HeadLayout::of(plan_, prune_, 0, split_ < 0 ? ocvdft::kMaxStages : split_);
  after_ = HeadLayout::of(plan_, prune_, split_ + 1, ocvdft::kMaxStages);
  const int limit = head_smem_limit();
  if (before_.bytes(n0) > static_cast<size_t>(limit) || after_.bytes(n0) > static_cast<size_t>(limit)) return false;
  std::vector<int> slot(n0);  // the work position of each extension element
  for (int i = 0; i < n0; ++i) slot[perm[i]] = i;
  slot_ = device_copy(slot);
  wave_ = device_copy(wave);
  if (split_ >= 0) {
    const ocvdft::Stage& st = plan_.stages[split_];
    LongStage& L = long_;
    L.st = st;
    L.n0 = n0;
    L.h = (st.radix - 1) / 2;
    L.cols = std::min(st.nx, prune_);
    L.blocks = n0 / st.n;
    L.pairs = L.blocks * L.cols;
    L.kept = std::min(st.n, prune_);
    L.transforms = rows * channels;
    L.count = count;
    L.last = split_ == plan_.num_stages - 1;
    while (L.p_max < L.h && L.wanted(st.nx * (L.p_max + 1))) ++L.p_max;
    L.tw_width = (L.p_max + kLongGroup - 1) / kLongGroup * kLongGroup;
    // generic_output's twiddle for term q of output p: wave[(n0 / radix) p (q + 1) mod n0]
    std::vector<ocvdft::Cf> tw(std::max(1, L.h * L.tw_width), ocvdft::Cf{0.f, 0.f});
    for (int q = 0; q < L.h; ++q)
      for (int p = 1; p <= L.p_max; ++p)
        tw[static_cast<size_t>(q) * L.tw_width + p - 1] = wave[static_cast<int64_t>(n0 / st.radix) * p * (q + 1) % n0];
    tw_ = device_copy(tw);
    pairs_.resize(static_cast<size_t>(L.transforms) * L.pairs * L.h);
    firsts_.resize(static_cast<size_t>(L.transforms) * L.pairs);
    if (!L.last) compact_.resize(static_cast<size_t>(L.transforms) * L.blocks * L.kept);
  }
  return true;
}

void ReplayPass::enqueue(const RowSource& src, float* out, cudaStream_t stream) const {
  const int n0 = plan_.n0;
  const dim3 grid(rows_, channels_);
  if (split_ < 0) {
    HeadRange whole;
    whole.inverse_scale = inverse_scale_;
    dft_head_kernel<<<grid, kHeadThreads, before_.bytes(n0), stream>>>(plan_, slot_.data(), wave_.data(), whole, src,
                                                                       prune_, out, count_);
    return;
  }
  HeadRange before;
  before.stop = split_;
  before.pairs_out = pairs_.data();
  before.first_out = firsts_.data();
  dft_head_kernel<<<grid, kHeadThreads, before_.bytes(n0), stream>>>(plan_, slot_.data(), wave_.data(), before, src,
                                                                     prune_, out, count_);
  const LongStage& L = long_;
  long_stage_kernel<<<dim3((L.transforms + 31) / 32, L.pairs), kLongThreads, 0, stream>>>(
      L, tw_.data(), pairs_.data(), firsts_.data(), compact_.data(), out);
  if (L.last) return;
  HeadRange after;
  after.first = split_ + 1;
  after.compact = compact_.data();
  after.compact_blocks = L.blocks;
  after.compact_kept = L.kept;
  after.compact_n = L.st.n;
  dft_head_kernel<<<grid, kHeadThreads, after_.bytes(n0), stream>>>(plan_, slot_.data(), wave_.data(), after, src,
                                                                    prune_, out, count_);
}

bool ReplaySolve::prepare(int N, int M) {
  if (!fwd_rows.prepare(N, M, 3, N) || !fwd_cols.prepare(M, N, 3, M) || !inv_rows.prepare(N, M, 3, N, true) ||
      !inv_cols.prepare(M, N, 3, M, true))
    return false;
  const size_t plane = static_cast<size_t>(3) * M * N;
  pass_rows.resize(plane);
  pass_cols.resize(plane);
  quotient.resize(plane);
  return true;
}

void ReplaySolve::solve(const float* rhs, const float* fx, const float* fy, const Geometry& g, const PackedImage& bg,
                        cudaStream_t s) {
  const int N = g.W - 2, M = g.H - 2;
  const dim3 pix_block(32, 8), pix_grid((N + 31) / 32, (M + 7) / 8);
  const int64_t plane = static_cast<int64_t>(M) * N;
  // dst_opencv's passes: rows of [3][M][N] planes, then their columns into [3][N][M].
  fwd_rows.enqueue(RowSource{rhs, plane, N, 1, N}, pass_rows.data(), s);
  fwd_cols.enqueue(RowSource{pass_rows.data(), plane, 1, N, M}, pass_cols.data(), s);
  divide_replay_kernel<<<dim3((N + 127) / 128, M, 3), 128, 0, s>>>(pass_cols.data(), N, M, fx, fy, quotient.data());
  inv_rows.enqueue(RowSource{quotient.data(), plane, N, 1, N}, pass_rows.data(), s);
  inv_cols.enqueue(RowSource{pass_rows.data(), plane, 1, N, M}, pass_cols.data(), s);
  output_replay_kernel<<<pix_grid, pix_block, 0, s>>>(pass_cols.data(), g, bg);
}

std::vector<float> replay_odd_extension_gpu(const std::vector<float>& rows, int length, int count) {
  const int n = static_cast<int>(rows.size() / length);
  ReplayPass pass;
  if (!pass.prepare(length, n, 1, count)) return {};
  const DeviceArray<float> in = device_copy(rows);
  DeviceArray<float> out(static_cast<size_t>(n) * count);
  std::vector<float> result(static_cast<size_t>(n) * count);
  pass.enqueue(RowSource{in.data(), 0, length, 1, length}, out.data(), nullptr);
  PRISM_CUDA_CHECK(cudaGetLastError());
  PRISM_CUDA_CHECK(cudaMemcpy(result.data(), out.data(), result.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return result;
}

}  // namespace prism::poisson::detail
