// CUDA path of the seamless clone.
//
// The RHS (OpenCV's float expressions, poisson_pixel.h) is computed in one kernel per job from the
// background, the overlay and the eroded mask. Then, chosen per box size by measurement:
//  - Replay: OpenCV's own float solve, its four DFT passes replayed operation for operation
//    (opencv_dft.h; ReplayPass below), the division and truncation as OpenCV writes them: bit-exact,
//    but a generic butterfly costs O(p) per output for a prime factor p of 2n+2, so it serves small
//    and thin boxes (where the solution sits on integers and only OpenCV's roundings truncate alike).
// Otherwise the DST-I pair is computed in double precision, with OpenCV's float roundings replayed
// for the lowest frequencies of the forward passes and spliced in (below: those are what moves
// OpenCV's answer; a plain double solve differs on up to ~0.3% of values). Two ways:
//  - Gemm: the DST-I as a dense matrix S (S_ij = sin(pi (i+1)(j+1) / (n+1))): Y = S_M X S_N by
//    strided-batched DGEMMs over the three channels (FP64 tensor cores on Hopper; exact IEEE).
//    S's rows mirror (S_{n-1-j,k} = (-1)^k S_jk), so each axis is first folded into sums
//    x_j + x_{n-1-j} (even outputs) and differences x_j - x_{n-1-j} (odd outputs) and transformed
//    by two half-size matrices E and O: half the flops (the even/odd split of fast DST algorithms,
//    e.g. Rao & Yip, "Discrete Cosine Transform", ch. 4). The spectrum stays in this split order;
//    the inverse applies E^T and O^T and the output kernel unfolds.
//  - Fft: the DST-I as the imaginary part of the real FFT of the odd extension [0, x, 0, -rev x]
//    (as OpenCV does), cuFFT D2Z batched over rows; transposes between the axes are fused into the
//    kernels that read the spectra, and the eigenvalue division is fused into the extension.
// Buffers, plans and matrices are made per box size the first time it is seen and cached.
// Auto: Replay where cheap or thin, then by box size on GPUs with full-rate FP64, Fft elsewhere
// (solver_for).
#include <cublas_v2.h>
#include <cuda_pipeline.h>
#include <cufft.h>

#include <algorithm>
#include <cmath>
#include <list>
#include <string>
#include <vector>

#include "common/device_array.h"
#include "common/gpu.h"
#include "poisson/opencv_dft.h"
#include "poisson/poisson_pixel.h"
#include "poisson/seamless_clone.h"

namespace prism::poisson {

using detail::Geometry;

namespace {

using gpu::DeviceArray;
using gpu::PinnedArray;

void check_cufft(cufftResult r, const char* what) {
  if (r != CUFFT_SUCCESS) throw gpu::CudaError(std::string(what) + " failed: cufftResult " + std::to_string(r));
}
void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw gpu::CudaError(std::string(what) + " failed: " + cublasGetStatusString(s));
}

// A device copy of a host vector (set-up only: synchronous).
template <class T>
DeviceArray<T> device_copy(const std::vector<T>& host) {
  return gpu::device_copy(host.data(), host.size());
}

// A cuFFT plan, destroyed with its owner.
class FftPlan {
 public:
  FftPlan() = default;
  ~FftPlan() {
    if (made_) cufftDestroy(plan_);
  }
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;
  // Batched 1-D D2Z transforms of `length` doubles (input rows `length` apart, output rows `out_dist`
  // complex values apart).
  void make_d2z(int length, int out_dist, int batch, cudaStream_t stream, const char* what) {
    check_cufft(cufftPlanMany(&plan_, 1, &length, nullptr, 1, length, nullptr, 1, out_dist, CUFFT_D2Z, batch), what);
    made_ = true;
    check_cufft(cufftSetStream(plan_, stream), "cufftSetStream");
  }
  cufftHandle get() const { return plan_; }

 private:
  cufftHandle plan_ = 0;
  bool made_ = false;
};

// A cuBLAS handle, destroyed with its owner.
class BlasHandle {
 public:
  BlasHandle() { check_cublas(cublasCreate(&handle_), "cublasCreate"); }
  ~BlasHandle() { cublasDestroy(handle_); }
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

constexpr int kErodeBx = 32, kErodeBy = 8;

// Step 4: 7x7 minimum of the mask over the box, zeros outside it (shared-memory tile with halo).
__global__ void erode_kernel(MaskView mask, Geometry g, uint8_t* eroded) {
  __shared__ uint8_t tile[kErodeBy + 6][kErodeBx + 6];
  const int x0 = blockIdx.x * kErodeBx - 3, y0 = blockIdx.y * kErodeBy - 3;
  for (int k = threadIdx.y * kErodeBx + threadIdx.x; k < (kErodeBx + 6) * (kErodeBy + 6); k += kErodeBx * kErodeBy) {
    const int tx = k % (kErodeBx + 6), ty = k / (kErodeBx + 6);
    const int x = x0 + tx, y = y0 + ty;
    tile[ty][tx] = (x >= 0 && y >= 0 && x < g.W && y < g.H) ? detail::mask_at(mask, g.sx + x, g.sy + y) : 0;
  }
  __syncthreads();
  const int x = blockIdx.x * kErodeBx + threadIdx.x, y = blockIdx.y * kErodeBy + threadIdx.y;
  if (x >= g.W || y >= g.H) return;
  int v = 255;
#pragma unroll
  for (int j = 0; j < 7; ++j)
#pragma unroll
    for (int i = 0; i < 7; ++i) v = min(v, static_cast<int>(tile[threadIdx.y + j][threadIdx.x + i]));
  eroded[y * g.W + x] = static_cast<uint8_t>(v);
}

// The RHS of a tile of kTileX x kTileY interior pixels. rhs_at per pixel would evaluate each
// guidance field three times (its own, its right and its lower neighbour's); here each field is
// evaluated once into shared memory and the divergence read from there, with the same float
// expressions as rhs_at, so the values are identical.
constexpr int kTileX = 32, kTileY = 8;

struct RhsTileScratch {
  float fx[3][kTileY + 1][kTileX + 1];
  float fy[3][kTileY + 1][kTileX + 1];
};

// Fills out[c][ty][tx] with the RHS at interior pixel (i0 + tx, j0 + ty) (0 outside the interior).
// Also stores the RHS at rhs_plane[c][j][i] ([3][M][N] floats). Called by the whole block; begins and
// ends with a barrier.
__device__ void rhs_tile(const PackedImage& bg, const PackedImage& ov, const MaskView& mask, const Geometry& g,
                         CloneMode mode, const uint8_t* eroded, int i0, int j0, RhsTileScratch& sc,
                         float (&out)[3][kTileY][kTileX], float* rhs_plane) {
  const int N = g.W - 2, M = g.H - 2;
  __syncthreads();
  // Interior pixel i is box column i + 1 and needs the fields at box columns i + 1 and i.
  for (int k = threadIdx.y * kTileX + threadIdx.x; k < (kTileX + 1) * (kTileY + 1); k += kTileX * kTileY) {
    const int lx = k % (kTileX + 1), ly = k / (kTileX + 1);
    const int x = i0 + lx, y = j0 + ly;
    if (x < 0 || y < 0 || x > N || y > M) continue;
    const int e = eroded[y * g.W + x];
    for (int c = 0; c < 3; ++c) {
      const detail::Field f = detail::field_at(bg, ov, mask, g, x, y, c, e, mode);
      sc.fx[c][ly][lx] = f.x;
      sc.fy[c][ly][lx] = f.y;
    }
  }
  __syncthreads();
  const int tx = threadIdx.x, ty = threadIdx.y, i = i0 + tx, j = j0 + ty;
  const bool inside = i >= 0 && j >= 0 && i < N && j < M;
  for (int c = 0; c < 3; ++c) {
    float v = 0.f;
    if (inside) {
      const float lap = detail::add_rn(sc.fx[c][ty + 1][tx + 1] - sc.fx[c][ty + 1][tx],
                                       sc.fy[c][ty + 1][tx + 1] - sc.fy[c][ty][tx + 1]);
      v = lap - detail::frame_neighbours(bg, g, i + 1, j + 1, c);
      rhs_plane[(static_cast<int64_t>(c) * M + j) * N + i] = v;  // for the OpenCV-exact low frequencies
    }
    out[c][ty][tx] = v;
  }
  __syncthreads();
}

// Fft: the RHS as odd extensions [0, x, 0, -rev x] of length 2N+2, row c*M + j for channel c,
// interior row j.
__global__ void rhs_odd_extension_kernel(PackedImage bg, PackedImage ov, MaskView mask, Geometry g, CloneMode mode,
                                         const uint8_t* eroded, double* out, float* rhs_plane) {
  __shared__ RhsTileScratch sc;
  __shared__ float rhs[3][kTileY][kTileX];
  const int N = g.W - 2, M = g.H - 2;
  const int i0 = blockIdx.x * kTileX, j0 = blockIdx.y * kTileY;
  rhs_tile(bg, ov, mask, g, mode, eroded, i0, j0, sc, rhs, rhs_plane);
  const int i = i0 + threadIdx.x, j = j0 + threadIdx.y;
  if (i >= N || j >= M || out == nullptr) return;  // (Replay wants the float plane only)
  for (int c = 0; c < 3; ++c) {
    const double v = rhs[c][threadIdx.y][threadIdx.x];
    double* row = out + static_cast<int64_t>(c * M + j) * (2 * N + 2);
    row[1 + i] = v;
    row[2 * N + 1 - i] = -v;
  }
}

// The even/odd split of one axis of length n: folded index f < ne holds x_f + x_{n-1-f} (x_f alone
// at the middle of an odd n), f = ne + a holds x_a - x_{n-1-a}.
struct Fold {
  int n, ne;
  __host__ __device__ explicit Fold(int len) : n(len), ne((len + 1) / 2) {}
  __host__ __device__ int no() const { return n - ne; }
  // Original index of split-order output position f: even outputs first, then odd ones.
  __host__ __device__ int spectral_index(int f) const { return f < ne ? 2 * f : 2 * (f - ne) + 1; }
};

// Gemm's planes [3][M][pitch]: rows in split order (odd half from row me), columns in split order
// with the odd half from column odd_col. odd_col and pitch are multiples of 32 so that every GEMM
// operand starts 256-byte aligned: an odd offset (ne = 1199 at 2400 wide) sends cuBLAS to slower
// unaligned kernels. Padding columns are zero.
struct SplitLayout {
  int N, M, ne, no, me, mo, odd_col, pitch;
  static constexpr int kAlign = 32;
  static SplitLayout of(int N, int M) {
    auto up = [](int v) { return (v + kAlign - 1) / kAlign * kAlign; };
    const Fold fn(N), fm(M);
    return {N, M, fn.ne, fn.no(), fm.ne, fm.no(), up(fn.ne), up(fn.ne) + up(fn.no())};
  }
  __host__ __device__ int64_t plane() const { return static_cast<int64_t>(M) * pitch; }
  // Column of split position f (f < ne: even half).
  __host__ __device__ int column(int f) const { return f < ne ? f : odd_col + f - ne; }
};

// Gemm: the RHS folded along both axes into split-order planes. Thread (a, b) combines the four
// mirrored pixels (a or N-1-a, b or M-1-b); the block computes the four mirrored tiles first.
__global__ void rhs_folded_kernel(PackedImage bg, PackedImage ov, MaskView mask, Geometry g, CloneMode mode,
                                  const uint8_t* eroded, SplitLayout L, double* out, float* rhs_plane) {
  __shared__ RhsTileScratch sc;
  __shared__ float rhs[4][3][kTileY][kTileX];  // quadrant q: bit 0 mirrored in x, bit 1 in y
  const int N = L.N, M = L.M;
  const int a0 = blockIdx.x * kTileX, b0 = blockIdx.y * kTileY;
  for (int q = 0; q < 4; ++q) {
    const int i0 = (q & 1) ? N - a0 - kTileX : a0, j0 = (q & 2) ? M - b0 - kTileY : b0;
    rhs_tile(bg, ov, mask, g, mode, eroded, i0, j0, sc, rhs[q], rhs_plane);
  }
  const int tx = threadIdx.x, ty = threadIdx.y, a = a0 + tx, b = b0 + ty;
  if (a >= L.ne || b >= L.me) return;
  const bool mirror_a = N - 1 - a != a, mirror_b = M - 1 - b != b;  // false at the middle of an odd length
  const int rx = kTileX - 1 - tx, ry = kTileY - 1 - ty;               // the mirrored pixel in its tile
  for (int c = 0; c < 3; ++c) {
    const double v11 = rhs[0][c][ty][tx];
    const double v21 = mirror_a ? rhs[1][c][ty][rx] : 0.0, v12 = mirror_b ? rhs[2][c][ry][tx] : 0.0;
    const double v22 = (mirror_a && mirror_b) ? rhs[3][c][ry][rx] : 0.0;
    double* row_even = out + c * L.plane() + static_cast<int64_t>(b) * L.pitch;
    double* row_odd = row_even + static_cast<int64_t>(L.me) * L.pitch;
    // Rows fold along M, columns along N.
    const double s1 = v11 + v21, d1 = v11 - v21, s2 = v12 + v22, d2 = v12 - v22;
    row_even[a] = s1 + s2;
    if (mirror_a) row_even[L.odd_col + a] = d1 + d2;
    if (mirror_b) {
      row_odd[a] = s1 - s2;
      if (mirror_a) row_odd[L.odd_col + a] = d1 - d2;
    }
  }
}

// Reads the imaginary part of spectrum rows (rows_in = channels * A rows of length B+2 complex,
// element k+1 for k < B) and writes it transposed as odd extensions: out row c*B + k, positions
// 1+a and pitch-1-a. A tile of 32x32 goes through shared memory so both sides are coalesced.
__global__ void transpose_imag_kernel(const cufftDoubleComplex* in, int A, int B, double* out, int out_pitch) {
  __shared__ double tile[32][33];
  const int c = blockIdx.z;
  const int k0 = blockIdx.x * 32, a0 = blockIdx.y * 32;
  for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
    const int a = a0 + dy, k = k0 + threadIdx.x;
    if (a < A && k < B) tile[dy][threadIdx.x] = in[static_cast<int64_t>(c * A + a) * (B + 2) + k + 1].y;
  }
  __syncthreads();
  for (int dy = threadIdx.y; dy < 32; dy += blockDim.y) {
    const int k = k0 + dy, a = a0 + threadIdx.x;
    if (a < A && k < B) {
      const double v = tile[threadIdx.x][dy];
      double* row = out + static_cast<int64_t>(c * B + k) * out_pitch;
      row[1 + a] = v;
      row[out_pitch - 1 - a] = -v;
    }
  }
}

// Denominator (fx[i] + fy[j]) - 4 in float, as OpenCV's solve().
__device__ __forceinline__ double eigen_denominator(const float* fx, const float* fy, int i, int j) {
  return static_cast<double>(__fsub_rn(__fadd_rn(fx[i], fy[j]), 4.0f));
}

// Fft: spectrum rows c*N + i (length M+2 complex) -> divided, odd extensions in place of `out`.
__global__ void divide_fft_kernel(const cufftDoubleComplex* in, int N, int M, const float* fx, const float* fy,
                                  double* out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y, c = blockIdx.z;
  if (j >= M) return;
  const int64_t r = static_cast<int64_t>(c) * N + i;
  const double v = in[r * (M + 2) + j + 1].y / eigen_denominator(fx, fy, i, j);
  double* row = out + r * (2 * M + 2);
  row[1 + j] = v;
  row[2 * M + 1 - j] = -v;
}

// Gemm: split-order planes in place (fx, fy permuted to the split order).
__global__ void divide_split_kernel(double* y, SplitLayout L, const float* fx, const float* fy) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y, c = blockIdx.z;
  if (i >= L.N) return;
  y[c * L.plane() + static_cast<int64_t>(j) * L.pitch + L.column(i)] /= eigen_denominator(fx, fy, i, j);
}

// Step 8: writes the solution into the background's box interior, all three channels of a pixel.
// Fft reads the imaginary parts of the last spectra; Gemm unfolds its split-order result (the
// inverse of rhs_folded_kernel's fold: x_i = p_a +- q_a with a = i or N-1-i).
template <bool kSpectrum>
__global__ void output_kernel(const void* solved, Geometry g, SplitLayout L, double scale, PackedImage bg) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
  const int N = g.W - 2, M = g.H - 2;
  if (i >= N || j >= M) return;
  uint8_t* px = bg.data + static_cast<int64_t>(g.dy + 1 + j) * bg.stride + static_cast<int64_t>(g.dx + 1 + i) * bg.channels;
  const int a = i < L.ne ? i : N - 1 - i, b = j < L.me ? j : M - 1 - j;
  const double sa = (a == N - 1 - a) ? 0.0 : (i < L.ne ? 1.0 : -1.0);  // 0: middle, no odd part
  const double sb = (b == M - 1 - b) ? 0.0 : (j < L.me ? 1.0 : -1.0);
  for (int c = 0; c < 3; ++c) {
    double v;
    if (kSpectrum) {
      const int64_t r = static_cast<int64_t>(c) * M + j;
      v = static_cast<const cufftDoubleComplex*>(solved)[r * (N + 2) + i + 1].y;
    } else {
      const double* row_even = static_cast<const double*>(solved) + c * L.plane() + static_cast<int64_t>(b) * L.pitch;
      const double* row_odd = row_even + static_cast<int64_t>(L.me) * L.pitch;
      v = row_even[a];
      if (sa != 0.0) v += sa * row_even[L.odd_col + a];
      if (sb != 0.0) {
        double w = row_odd[a];
        if (sa != 0.0) w += sa * row_odd[L.odd_col + a];
        v += sb * w;
      }
    }
    px[detail::channel_offset(bg, c)] = detail::to_u8_truncate(v * scale);
  }
}

// --- OpenCV-exact low frequencies (opencv_dft.h) -------------------------------------------------
// OpenCV's float errors in the forward transforms' lowest frequencies, amplified by the smallest
// eigenvalues, are what separates a double solve from OpenCV's answer (2400x1552 real image: 0.14%
// of values; 1078x719 noise: 0.27%). The first kExactLow outputs of the forward row pass (all rows)
// and of the forward column pass over those columns (a kExactLow^2 corner of the spectrum) are
// replayed bit for bit and replace the double values there: 0.011% and 0.019% (measured on the
// CPU with OpenCV's own passes; more outputs change little).
constexpr int kExactLow = 32;

// Rows of the odd extension [0, x, 0, -rev x] of `length` floats x: row r of channel c starts at
// data + c*channel_stride + r*row_stride, elements elem_stride apart.
struct RowSource {
  const float* data;
  int64_t channel_stride, row_stride, elem_stride;
  int length;
};

// Generic stages of at least this radix are not summed inside dft_head_kernel (one row per block,
// where the few threads that own the wanted outputs each walk h = radix/2 terms while the rest of
// the block idles, and the twiddles they read differ per thread) but split out to long_stage_kernel,
// where the 32 lanes of a warp are 32 transforms sharing each twiddle (2400x1552 on an H100: radix
// 2399, 1199 terms per output). A version computing the long stage's inputs inside long_stage_kernel
// (no pairs buffer) measured slower: its gathers from the input were latency-bound (592x592 on an
// H100: 40 us against 15 + 22).
constexpr int kLongRadix = 64;

// Which stages one dft_head_kernel launch runs. Whole pass: first = 0, stop = none. Split at a long
// stage L: the launch before it runs stages [0, L) and L's pairs (written to pairs_out/first_out
// instead of summed), the launch after it (if L is not the last stage) reads L's wanted outputs
// from `compact` and runs stages (L, end).
struct HeadRange {
  int first = 0;
  int stop = ocvdft::kMaxStages;
  float4* pairs_out = nullptr;           // [transform][pair][p - 1]: a, b
  ocvdft::Cf* first_out = nullptr;       // [transform][pair] the butterfly's v[0]
  const ocvdft::Cf* compact = nullptr;   // [transform][block][kept], stage first-1's outputs
  int compact_blocks = 0, compact_kept = 0, compact_n = 0;
  float inverse_scale = 0.f;             // > 0: OpenCV's inverse with DFT_SCALE (opencv_dft.h)
};

// Dynamic shared memory of one dft_head_kernel launch: the row, then the staging area where a
// pruned generic stage collects its outputs (positions below the bound in every block) before they
// replace the row's values (which hold that stage's a[] and b[] until every output is computed).
// The twiddle table stays in global memory: a copy in shared memory cost more in occupancy than it
// saved (2400x1552 on an H100: 4.07 ms against 3.55, before the long stage was split out).
struct HeadLayout {
  int staging = 0;  // complex values
  static HeadLayout of(const ocvdft::Plan& plan, int prune, int first, int stop) {
    HeadLayout h;
    for (int s = first; s < std::min(stop, plan.num_stages); ++s) {
      const ocvdft::Stage& st = plan.stages[s];
      if (!ocvdft::is_generic(st)) continue;
      h.staging = std::max(h.staging, plan.n0 / st.n * std::min(st.n, prune));
    }
    return h;
  }
  size_t bytes(int n0) const { return static_cast<size_t>(n0 + staging) * sizeof(ocvdft::Cf); }
};

constexpr int kHeadThreads = 256;

// One block per transform (r = blockIdx.x of channel c = blockIdx.y): OpenCV's forward DFT of the
// row's odd extension in shared memory, stage by stage (ocvdft::run_host in parallel), every
// stage pruned below `prune`; writes the imaginary parts of outputs 1..count to
// out[(c * rows + r) * count + k - 1]. `range` splits the pass around a long stage.
__global__ void __launch_bounds__(kHeadThreads) dft_head_kernel(ocvdft::Plan plan, const int* __restrict__ slot,
                                                                const ocvdft::Cf* __restrict__ wave, HeadRange range,
                                                                RowSource src, int prune, float* out, int count) {
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

// A long generic stage, split out of dft_head_kernel: the wanted outputs j + nx p (p = 0 is the
// running sum v[0] + sum a.re, b.im) of every (block, column j) pair, for all transforms.
struct LongStage {
  ocvdft::Stage st;
  int n0 = 0;
  int h = 0, cols = 0, pairs = 0, kept = 0, blocks = 0;
  int transforms = 0;
  int count = 0;       // last: positions 1..count are wanted (the pass's outputs), else 0..kept-1
  bool last = false;   // the plan's last stage: outputs go straight to the pass's output
  int p_max = 0;       // the largest wanted p (column 0)
  int tw_width = 0;    // twiddles per term q in the table: p = 1..p_max, padded to kLongGroup

  __host__ __device__ bool wanted(int pos) const { return last ? pos >= 1 && pos <= count : pos < kept; }
};

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
__global__ void __launch_bounds__(kLongThreads) long_stage_kernel(LongStage L, const ocvdft::Cf* __restrict__ tw_table,
                                                                  const float4* __restrict__ pairs_in,
                                                                  const ocvdft::Cf* __restrict__ first_in,
                                                                  ocvdft::Cf* compact, float* out) {
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
    if (L.last) out[static_cast<int64_t>(transform) * L.count + pos - 1] = s[g].im;
    else compact[(static_cast<int64_t>(transform) * L.blocks + blk) * L.kept + pos] = s[g];
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

// One forward pass replayed: `transforms` = channels x rows odd extensions of one length, the first
// `count` outputs of each. Plan, tables and (for a long stage) the split's buffers are made once.
class ReplayPass {
 public:
  ReplayPass() = default;
  ReplayPass(const ReplayPass&) = delete;
  ReplayPass& operator=(const ReplayPass&) = delete;

  // False when a row does not fit in shared memory (the pass is then left to the double solve).
  bool prepare(int length, int rows, int channels, int count, bool inverse = false) {
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

  void enqueue(const RowSource& src, float* out, cudaStream_t stream) const {
    const int n0 = plan_.n0;
    const dim3 grid(rows_, channels_);
    if (split_ < 0) {
      HeadRange whole;
      whole.inverse_scale = inverse_scale_;
      dft_head_kernel<<<grid, kHeadThreads, before_.bytes(n0), stream>>>(plan_, slot_.data(), wave_.data(), whole, src, prune_, out,
                                                                         count_);
      return;
    }
    HeadRange before;
    before.stop = split_;
    before.pairs_out = pairs_.data();
    before.first_out = firsts_.data();
    dft_head_kernel<<<grid, kHeadThreads, before_.bytes(n0), stream>>>(plan_, slot_.data(), wave_.data(), before, src, prune_, out,
                                                                       count_);
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
    dft_head_kernel<<<grid, kHeadThreads, after_.bytes(n0), stream>>>(plan_, slot_.data(), wave_.data(), after, src, prune_, out,
                                                                      count_);
  }

 private:
  ocvdft::Plan plan_{};
  int rows_ = 0, channels_ = 0, count_ = 0, prune_ = 0;
  float inverse_scale_ = 0.f;
  DeviceArray<int> slot_;  // work position of each extension element (dft_head_kernel's scatter)
  DeviceArray<ocvdft::Cf> wave_;
  int split_ = -1;  // index of the long stage, -1: none
  HeadLayout before_{}, after_{};
  LongStage long_{};
  DeviceArray<ocvdft::Cf> tw_;       // the long stage's twiddles [q][p - 1]
  DeviceArray<float4> pairs_;        // [transform][pair][p - 1]: a, b
  DeviceArray<ocvdft::Cf> firsts_;   // [transform][pair]: v[0]
  DeviceArray<ocvdft::Cf> compact_;
};

// Fft: exact forward row-pass values into the row spectra (spec_x rows c*M + j, element k + 1).
__global__ void splice_rows_fft_kernel(const float* e1, int M, int N, int K, cufftDoubleComplex* spec_x) {
  const int k = threadIdx.x, j = blockIdx.x, c = blockIdx.y;
  if (k >= K) return;
  spec_x[(static_cast<int64_t>(c) * M + j) * (N + 2) + k + 1].y = e1[(static_cast<int64_t>(c) * M + j) * K + k];
}

// Fft: the exact corner into the column spectra (spec_y rows c*N + k, element l + 1).
__global__ void splice_corner_fft_kernel(const float* e2, int N, int M, int K, int Lc, cufftDoubleComplex* spec_y) {
  const int l = threadIdx.x, k = blockIdx.x, c = blockIdx.y;
  if (l >= Lc) return;
  spec_y[(static_cast<int64_t>(c) * N + k) * (M + 2) + l + 1].y = e2[(static_cast<int64_t>(c) * K + k) * Lc + l];
}

// Gemm: after the N-axis products, plane rows are the M-folded rows and columns the split-order
// spectrum: row b (< me) holds A_b + A_{M-1-b}, row me + b holds A_b - A_{M-1-b}, where A = S x =
// -OpenCV/2. The exact values for spectral columns k < K go there.
__global__ void splice_rows_gemm_kernel(const float* e1, SplitLayout L, int K, double* t) {
  const int k = threadIdx.x, row = blockIdx.x, c = blockIdx.y;
  if (k >= K) return;
  const bool odd = row >= L.me;
  const int b = odd ? row - L.me : row, mirror = L.M - 1 - b;
  const float* e = e1 + static_cast<int64_t>(c) * L.M * K;
  const double a = -0.5 * static_cast<double>(e[static_cast<int64_t>(b) * K + k]);
  const double m = mirror == b ? 0.0 : -0.5 * static_cast<double>(e[static_cast<int64_t>(mirror) * K + k]);
  const int col = L.column(k % 2 == 0 ? k / 2 : L.ne + k / 2);
  t[c * L.plane() + static_cast<int64_t>(row) * L.pitch + col] = odd ? a - m : a + m;
}

// Gemm: the exact corner after the M-axis products (S_M S_N x = OpenCV / 4), split order both ways.
__global__ void splice_corner_gemm_kernel(const float* e2, SplitLayout L, int K, int Lc, double* y) {
  const int l = threadIdx.x, k = blockIdx.x, c = blockIdx.y;
  if (l >= Lc) return;
  const int row = l % 2 == 0 ? l / 2 : L.me + l / 2, col = L.column(k % 2 == 0 ? k / 2 : L.ne + k / 2);
  y[c * L.plane() + static_cast<int64_t>(row) * L.pitch + col] =
      0.25 * static_cast<double>(e2[(static_cast<int64_t>(c) * K + k) * Lc + l]);
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
  uint8_t* px = bg.data + static_cast<int64_t>(g.dy + 1 + j) * bg.stride + static_cast<int64_t>(g.dx + 1 + i) * bg.channels;
  for (int c = 0; c < 3; ++c)
    px[detail::channel_offset(bg, c)] = detail::to_u8_truncate(u[(static_cast<int64_t>(c) * N + i) * M + j]);
}

__global__ void mask_box_kernel(MaskView m, int* box /* minx, miny, maxx, maxy */) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= m.width || y >= m.height || detail::mask_at(m, x, y) == 0) return;
  atomicMin(&box[0], x);
  atomicMin(&box[1], y);
  atomicMax(&box[2], x);
  atomicMax(&box[3], y);
}

__global__ void init_box_kernel(int* box) {
  box[0] = box[1] = 1 << 30;
  box[2] = box[3] = -1;
}


}  // namespace

// Everything for one box size.
struct SizeEntry {
  int W = 0, H = 0;
  DstMethod requested = DstMethod::Fft;  // the cache key (Replay falls back to Fft when rows are too long)
  DstMethod method = DstMethod::Fft;
  DeviceArray<uint8_t> eroded;
  DeviceArray<float> fx;  // eigenvalue terms, OpenCV's float values
  DeviceArray<float> fy;
  // Fft
  DeviceArray<double> ext_x;  // [3M][2N+2]
  DeviceArray<double> ext_y;  // [3N][2M+2]
  DeviceArray<cufftDoubleComplex> spec_x;  // [3M][N+2]
  DeviceArray<cufftDoubleComplex> spec_y;  // [3N][M+2]
  FftPlan plan_x, plan_y;
  // Gemm: the split halves of the sine matrices, column-major (E: ne x ne, O: no x no).
  DeviceArray<double> e_n, o_n, e_m, o_m;
  int ld_e_n = 0, ld_o_n = 0, ld_e_m = 0, ld_o_m = 0;
  SplitLayout layout{};
  DeviceArray<double> dense;  // [3][M][pitch]
  DeviceArray<double> tmp;    // [3][M][pitch]
  // OpenCV-exact low frequencies: replay plans of the row (2N+2) and column (2M+2) transforms, the
  // float RHS [3][M][N], the exact row-pass values e1 [3][M][K] and corner e2 [3][K][Lc].
  bool exact = false;
  int K = 0, Lc = 0;
  ReplayPass row_pass, col_pass;
  DeviceArray<float> rhs;
  DeviceArray<float> e1;
  DeviceArray<float> e2;
  // Replay: OpenCV's whole float solve on the GPU, its four passes (forward rows, forward columns,
  // inverse rows, inverse columns), the row passes' outputs [3][M][N], the column passes' [3][N][M]
  // and the quotients by the eigenvalues [3][M][N].
  ReplayPass fwd_rows, fwd_cols, inv_rows, inv_cols;
  DeviceArray<float> pass_rows;
  DeviceArray<float> pass_cols;
  DeviceArray<float> quotient;
};

struct CudaCloner::Impl {
  cudaStream_t stream;
  DstMethod method;
  bool fast_fp64 = false;
  BlasHandle blas;
  std::list<SizeEntry> cache;  // most recently used first
  DeviceArray<int> box_dev{4};
  PinnedArray<int> box_host{4};

  // The replay plans and buffers of the OpenCV-exact low frequencies; left off (double solve alone)
  // when a row would not fit in shared memory (boxes over ~7,000 pixels wide).
  void prepare_exact(SizeEntry& e, int N, int M) {
    e.K = std::min(kExactLow, N);
    e.Lc = std::min(kExactLow, M);
    if (!e.row_pass.prepare(N, M, 3, e.K) || !e.col_pass.prepare(M, e.K, 3, e.Lc)) return;
    e.e1.resize(static_cast<size_t>(3) * M * e.K);
    e.e2.resize(static_cast<size_t>(3) * e.K * e.Lc);
    e.exact = true;
  }

  // Enqueues both replays: row pass of every row (first K outputs), column pass of those K columns
  // (first Lc outputs).
  void run_exact(SizeEntry& e, int N, int M) {
    if (!e.exact) return;
    e.row_pass.enqueue(RowSource{e.rhs.data(), static_cast<int64_t>(M) * N, N, 1, N}, e.e1.data(), stream);
    e.col_pass.enqueue(RowSource{e.e1.data(), static_cast<int64_t>(M) * e.K, 1, e.K, M}, e.e2.data(), stream);
  }

  // Replay's passes and buffers; false when a row does not fit in shared memory.
  bool prepare_replay(SizeEntry& e, int N, int M) {
    if (!e.fwd_rows.prepare(N, M, 3, N) || !e.fwd_cols.prepare(M, N, 3, M) || !e.inv_rows.prepare(N, M, 3, N, true) ||
        !e.inv_cols.prepare(M, N, 3, M, true))
      return false;
    const size_t plane = static_cast<size_t>(3) * M * N;
    e.pass_rows.resize(plane);
    e.pass_cols.resize(plane);
    e.quotient.resize(plane);
    return true;
  }

  SizeEntry& entry(int W, int H) {
    const DstMethod requested = method == DstMethod::Auto ? CudaCloner::solver_for(W, H, fast_fp64) : method;
    for (auto it = cache.begin(); it != cache.end(); ++it)
      if (it->W == W && it->H == H && it->requested == requested) {
        cache.splice(cache.begin(), cache, it);
        return cache.front();
      }
    if (cache.size() >= 4) cache.pop_back();
    // Made aside and spliced in when complete: a check that throws half-way leaves no entry behind.
    std::list<SizeEntry> made(1);
    SizeEntry& e = made.front();
    e.W = W;
    e.H = H;
    e.requested = requested;
    const int N = W - 2, M = H - 2;
    e.eroded.resize(static_cast<size_t>(W) * H);
    e.rhs.resize(static_cast<size_t>(3) * M * N);
    DstMethod m = requested;
    if (m == DstMethod::Replay && !prepare_replay(e, N, M)) m = DstMethod::Fft;
    e.method = m;
    if (m != DstMethod::Replay) prepare_exact(e, N, M);
    std::vector<float> fx(N), fy(M);
    detail::dst_filter(N, fx.data());
    detail::dst_filter(M, fy.data());
    if (m == DstMethod::Gemm) {  // the spectrum is in split order
      auto permute = [](std::vector<float>& f) {
        const Fold fold(static_cast<int>(f.size()));
        std::vector<float> p(f.size());
        for (int k = 0; k < fold.n; ++k) p[k] = f[fold.spectral_index(k)];
        f.swap(p);
      };
      permute(fx);
      permute(fy);
    }
    e.fx = device_copy(fx);
    e.fy = device_copy(fy);
    if (m == DstMethod::Fft) {
      const size_t nx = static_cast<size_t>(3) * M * (2 * N + 2), ny = static_cast<size_t>(3) * N * (2 * M + 2);
      e.ext_x.resize(nx);
      e.ext_y.resize(ny);
      // Positions 0 and n+1 of every odd extension stay zero; the kernels never write them.
      PRISM_CUDA_CHECK(cudaMemset(e.ext_x.data(), 0, nx * sizeof(double)));
      PRISM_CUDA_CHECK(cudaMemset(e.ext_y.data(), 0, ny * sizeof(double)));
      e.spec_x.resize(static_cast<size_t>(3) * M * (N + 2));
      e.spec_y.resize(static_cast<size_t>(3) * N * (M + 2));
      e.plan_x.make_d2z(2 * N + 2, N + 2, 3 * M, stream, "cufftPlanMany(x)");
      e.plan_y.make_d2z(2 * M + 2, M + 2, 3 * N, stream, "cufftPlanMany(y)");
    } else if (m == DstMethod::Gemm) {
      // Half matrix for outputs k = 2r + parity over folded inputs f: H[r, f] = S[f, k], column-major.
      // Leading dimension padded to kAlign, like the planes.
      auto half_matrix = [](int n, int parity, int& ld) -> DeviceArray<double> {
        const Fold fold(n);
        const int size = parity ? fold.no() : fold.ne;
        ld = (size + SplitLayout::kAlign - 1) / SplitLayout::kAlign * SplitLayout::kAlign;
        if (size == 0) return {};
        std::vector<double> h(static_cast<size_t>(ld) * size, 0.0);
        const double pi = 3.14159265358979323846;
        for (int f = 0; f < size; ++f)
          for (int r = 0; r < size; ++r)
            h[static_cast<size_t>(f) * ld + r] = std::sin(pi * (f + 1.0) * (2.0 * r + parity + 1.0) / (n + 1.0));
        return device_copy(h);
      };
      e.e_n = half_matrix(N, 0, e.ld_e_n);
      e.o_n = half_matrix(N, 1, e.ld_o_n);
      e.e_m = half_matrix(M, 0, e.ld_e_m);
      e.o_m = half_matrix(M, 1, e.ld_o_m);
      e.layout = SplitLayout::of(N, M);
      const size_t planes = static_cast<size_t>(3) * e.layout.plane();
      e.dense.resize(planes);
      e.tmp.resize(planes);
      PRISM_CUDA_CHECK(cudaMemset(e.dense.data(), 0, planes * sizeof(double)));  // padding columns stay zero
      PRISM_CUDA_CHECK(cudaMemset(e.tmp.data(), 0, planes * sizeof(double)));
    }
    cache.splice(cache.begin(), made);
    return cache.front();
  }

  // The 2D DST of folded [3][M][N] planes in place (forward: folded input, split-order output;
  // inverse: split-order input, folded output, with E^T and O^T). In cuBLAS's column-major view a
  // plane is X^T (N x M, ld N): the N axis is a left product, the M axis a right product.
  void sine_transform_2d(SizeEntry& e, double* x, double* tmp, bool inverse) {
    const SplitLayout& L = e.layout;
    const int P = L.pitch;
    const double one = 1.0, zero = 0.0;
    const long long plane = L.plane();
    const cublasOperation_t left = inverse ? CUBLAS_OP_T : CUBLAS_OP_N, right = inverse ? CUBLAS_OP_N : CUBLAS_OP_T;
    auto gemm = [&](cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double* A, int lda,
                    long long sa, const double* B, int ldb, long long sb, double* C) {
      if (m == 0 || n == 0 || k == 0) return;
      check_cublas(cublasDgemmStridedBatched(blas.get(), ta, tb, m, n, k, &one, A, lda, sa, B, ldb, sb, &zero, C, P, plane, 3),
                   "cublasDgemmStridedBatched");
    };
    // N axis: rows [0, ne) of X^T with E_N, rows [odd_col, odd_col + no) with O_N.
    gemm(left, CUBLAS_OP_N, L.ne, L.M, L.ne, e.e_n.data(), e.ld_e_n, 0, x, P, plane, tmp);
    gemm(left, CUBLAS_OP_N, L.no, L.M, L.no, e.o_n.data(), e.ld_o_n, 0, x + L.odd_col, P, plane, tmp + L.odd_col);
    if (!inverse && e.exact) splice_rows_gemm_kernel<<<dim3(L.M, 3), kExactLow, 0, stream>>>(e.e1.data(), L, e.K, tmp);
    // M axis: columns [0, me) with E_M, [me, M) with O_M; all P rows (the padding ones are zero).
    const int64_t odd_rows = static_cast<int64_t>(L.me) * P;
    gemm(CUBLAS_OP_N, right, P, L.me, L.me, tmp, P, plane, e.e_m.data(), e.ld_e_m, 0, x);
    gemm(CUBLAS_OP_N, right, P, L.mo, L.mo, tmp + odd_rows, P, plane, e.o_m.data(), e.ld_o_m, 0, x + odd_rows);
    if (!inverse && e.exact)
      splice_corner_gemm_kernel<<<dim3(e.K, 3), kExactLow, 0, stream>>>(e.e2.data(), L, e.K, e.Lc, x);
  }
};

// Replay's work in butterfly terms: per pass, transforms x outputs x (half the longest generic
// butterfly + the radix-2..5 stages' few terms), four passes.
double CudaCloner::replay_cost(int W, int H) {
  const int N = W - 2, M = H - 2;
  auto pass = [](int length, int transforms) {
    const std::vector<int> f = ocvdft::factorize(2 * length + 2);
    const int longest = *std::max_element(f.begin(), f.end());
    return 3.0 * transforms * length * ((longest % 2 == 1 && longest > 5 ? longest / 2 : 0) + 8);
  };
  return 2.0 * (pass(N, M) + pass(M, N));
}
// Measured on an H100 (bench_poisson): Replay 0.046 ms against cuFFT's 0.071 at 154x100 (cost 2.6e6),
// 0.133 against 0.106 at 300x194 (4.2e7).
constexpr double kReplayCheap = 1e7, kReplayThin = 4e9;

// Full-rate FP64: the data-centre parts (P100, V100, A100, H100/H200, B200).
static bool device_has_fast_fp64() {
  int dev = 0, major = 0, minor = 0;
  PRISM_CUDA_CHECK(cudaGetDevice(&dev));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return (minor == 0 && (major == 6 || major == 7 || major == 8 || major == 9 || major == 10));
}

CudaCloner::CudaCloner(cudaStream_t stream, DstMethod method) : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  impl_->method = method;
  impl_->fast_fp64 = device_has_fast_fp64();
  check_cublas(cublasSetStream(impl_->blas.get(), stream), "cublasSetStream");
  // DGEMM only: full FP64 (Hopper's FP64 tensor cores are IEEE double); TF32 cannot apply.
  check_cublas(cublasSetMathMode(impl_->blas.get(), CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

// The stream may still use the buffers; a destructor cannot throw, and the owners free regardless.
CudaCloner::~CudaCloner() { (void)cudaStreamSynchronize(impl_->stream); }

DstMethod CudaCloner::solver_for(int box_width, int box_height, bool fast_fp64) {
  // Replay wherever it is cheap, and on thin boxes (under 100 pixels a side) up to a larger bound:
  // there the solution sits on integers (the 7x7 erosion leaves little or no overlay) and only
  // OpenCV's own roundings reproduce its truncations.
  const double cost = replay_cost(box_width, box_height);
  if (cost <= kReplayCheap || (std::min(box_width, box_height) < 100 && cost <= kReplayThin)) return DstMethod::Replay;
  // Measured on an H100 (bench_poisson, BENCHMARKS.md, with the exact low frequencies): cuFFT wins
  // at 300x194 (0.107 vs 0.157 ms); the split DGEMM on the FP64 tensor cores wins from 592x592
  // (0.291 vs 0.311) through 1200x776 (0.60 vs 0.84) to 2400x1552 (2.80 vs 5.46). GPUs with
  // 1/64-rate FP64 (GeForce, most sm_86/89/120 parts) would make the GEMMs 30x slower: FFT there.
  const bool large = static_cast<int64_t>(box_width) * box_height >= 512 * 512;
  return fast_fp64 && large ? DstMethod::Gemm : DstMethod::Fft;
}


void CudaCloner::clone(const CloneJob& job) {
  const Placement& pl = job.placement;
  if (!pl.solvable()) return;
  const Geometry g{pl.dst.width, pl.dst.height, pl.src.x, pl.src.y, pl.dst.x, pl.dst.y};
  const int N = g.W - 2, M = g.H - 2;
  SizeEntry& e = impl_->entry(g.W, g.H);
  cudaStream_t s = impl_->stream;

  erode_kernel<<<dim3((g.W + kErodeBx - 1) / kErodeBx, (g.H + kErodeBy - 1) / kErodeBy), dim3(kErodeBx, kErodeBy), 0,
                 s>>>(job.mask, g, e.eroded.data());
  const dim3 pix_block(32, 8), pix_grid((N + 31) / 32, (M + 7) / 8);
  if (e.method == DstMethod::Replay) {
    const int64_t plane = static_cast<int64_t>(M) * N;
    rhs_odd_extension_kernel<<<dim3((N + kTileX - 1) / kTileX, (M + kTileY - 1) / kTileY), dim3(kTileX, kTileY), 0, s>>>(
        job.background, job.overlay, job.mask, g, job.mode, e.eroded.data(), nullptr, e.rhs.data());
    // dst_opencv's passes: rows of [3][M][N] planes, then their columns into [3][N][M].
    e.fwd_rows.enqueue(RowSource{e.rhs.data(), plane, N, 1, N}, e.pass_rows.data(), s);
    e.fwd_cols.enqueue(RowSource{e.pass_rows.data(), plane, 1, N, M}, e.pass_cols.data(), s);
    divide_replay_kernel<<<dim3((N + 127) / 128, M, 3), 128, 0, s>>>(e.pass_cols.data(), N, M, e.fx.data(), e.fy.data(), e.quotient.data());
    e.inv_rows.enqueue(RowSource{e.quotient.data(), plane, N, 1, N}, e.pass_rows.data(), s);
    e.inv_cols.enqueue(RowSource{e.pass_rows.data(), plane, 1, N, M}, e.pass_cols.data(), s);
    output_replay_kernel<<<pix_grid, pix_block, 0, s>>>(e.pass_cols.data(), g, job.background);
  } else if (e.method == DstMethod::Fft) {
    rhs_odd_extension_kernel<<<dim3((N + kTileX - 1) / kTileX, (M + kTileY - 1) / kTileY), dim3(kTileX, kTileY), 0, s>>>(job.background, job.overlay, job.mask, g, job.mode,
                                                            e.eroded.data(), e.ext_x.data(), e.rhs.data());
    impl_->run_exact(e, N, M);
    check_cufft(cufftExecD2Z(e.plan_x.get(), e.ext_x.data(), e.spec_x.data()), "cufftExecD2Z");
    if (e.exact) splice_rows_fft_kernel<<<dim3(M, 3), kExactLow, 0, s>>>(e.e1.data(), M, N, e.K, e.spec_x.data());
    transpose_imag_kernel<<<dim3((N + 31) / 32, (M + 31) / 32, 3), dim3(32, 8), 0, s>>>(e.spec_x.data(), M, N, e.ext_y.data(),
                                                                                       2 * M + 2);
    check_cufft(cufftExecD2Z(e.plan_y.get(), e.ext_y.data(), e.spec_y.data()), "cufftExecD2Z");
    if (e.exact) splice_corner_fft_kernel<<<dim3(e.K, 3), kExactLow, 0, s>>>(e.e2.data(), N, M, e.K, e.Lc, e.spec_y.data());
    divide_fft_kernel<<<dim3((M + 127) / 128, N, 3), 128, 0, s>>>(e.spec_y.data(), N, M, e.fx.data(), e.fy.data(), e.ext_y.data());
    check_cufft(cufftExecD2Z(e.plan_y.get(), e.ext_y.data(), e.spec_y.data()), "cufftExecD2Z");
    transpose_imag_kernel<<<dim3((M + 31) / 32, (N + 31) / 32, 3), dim3(32, 8), 0, s>>>(e.spec_y.data(), N, M, e.ext_x.data(),
                                                                                       2 * N + 2);
    check_cufft(cufftExecD2Z(e.plan_x.get(), e.ext_x.data(), e.spec_x.data()), "cufftExecD2Z");
    // Four transforms of -2 DST-I: 16 S^4 = 4 (N+1)(M+1) times the identity.
    output_kernel<true><<<pix_grid, pix_block, 0, s>>>(e.spec_x.data(), g, SplitLayout{}, 1.0 / (4.0 * (N + 1) * (M + 1)), job.background);
  } else {
    const SplitLayout& L = e.layout;
    rhs_folded_kernel<<<dim3((L.ne + kTileX - 1) / kTileX, (L.me + kTileY - 1) / kTileY), dim3(kTileX, kTileY), 0,
                        s>>>(
        job.background, job.overlay, job.mask, g, job.mode, e.eroded.data(), L, e.dense.data(), e.rhs.data());
    impl_->run_exact(e, N, M);
    impl_->sine_transform_2d(e, e.dense.data(), e.tmp.data(), false);
    divide_split_kernel<<<dim3((N + 127) / 128, M, 3), 128, 0, s>>>(e.dense.data(), L, e.fx.data(), e.fy.data());
    impl_->sine_transform_2d(e, e.dense.data(), e.tmp.data(), true);
    // S^2 = (n+1)/2 I per axis.
    output_kernel<false><<<pix_grid, pix_block, 0, s>>>(e.dense.data(), g, L, 4.0 / ((N + 1.0) * (M + 1.0)), job.background);
  }
  PRISM_CUDA_CHECK(cudaGetLastError());
}

DstMethod CudaCloner::method_for(int box_width, int box_height) const {
  return impl_->method == DstMethod::Auto ? solver_for(box_width, box_height, impl_->fast_fp64) : impl_->method;
}

Box CudaCloner::mask_box(const MaskView& m) {
  cudaStream_t s = impl_->stream;
  init_box_kernel<<<1, 1, 0, s>>>(impl_->box_dev.data());
  mask_box_kernel<<<dim3((m.width + 31) / 32, (m.height + 7) / 8), dim3(32, 8), 0, s>>>(m, impl_->box_dev.data());
  PRISM_CUDA_CHECK(cudaGetLastError());
  PRISM_CUDA_CHECK(cudaMemcpyAsync(impl_->box_host.data(), impl_->box_dev.data(), 4 * sizeof(int),
                                   cudaMemcpyDeviceToHost, s));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(s));
  const int* b = impl_->box_host.data();
  if (b[2] < 0) return {};
  return {b[0], b[1], b[2] - b[0] + 1, b[3] - b[1] + 1};
}

std::vector<float> detail::replay_odd_extension_gpu(const std::vector<float>& rows, int length, int count) {
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

}  // namespace prism::poisson
