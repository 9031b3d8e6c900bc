// Private to the CUDA path of the seamless clone: what its three files share.
//
//   seamless_clone.cu  the shared part: erosion, the RHS kernels, the per-size cache (SizeEntry),
//                      the solver choice (solver_for) and CudaCloner's entry points
//   replay.cu          Replay: OpenCV's float DFT passes replayed on the GPU (ReplayPass), OpenCV's
//                      whole float solve (ReplaySolve)
//   dst_solve.cu       the double-precision DST-I solve (DstSolve): cuFFT or split DGEMMs, with
//                      OpenCV's lowest frequencies replayed (ReplayPass) and spliced in
//
// Not part of the kernels' interface: included by those three files only.
#pragma once

#include <cublas_v2.h>
#include <cufft.h>

#include "common/cuda_libs.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/device_array.h"
#include "common/gpu.h"
#include "poisson/opencv_dft.h"
#include "poisson/poisson_pixel.h"
#include "poisson/seamless_clone.h"

namespace prism::poisson::detail {

using gpu::DeviceArray;
using gpu::PinnedArray;

// Throw gpu::CudaError naming the call when a cuFFT / cuBLAS call failed.
void check_cufft(cufftResult r, const char* what);
void check_cublas(cublasStatus_t s, const char* what);

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
    if (made_) gpu::cufft().destroy(plan_);
  }
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;
  // Batched 1-D D2Z transforms of `length` doubles (input rows `length` apart, output rows `out_dist`
  // complex values apart).
  void make_d2z(int length, int out_dist, int batch, cudaStream_t stream, const char* what) {
    check_cufft(gpu::cufft().plan_many(&plan_, 1, &length, nullptr, 1, length, nullptr, 1, out_dist, CUFFT_D2Z, batch),
                what);
    made_ = true;
    check_cufft(gpu::cufft().set_stream(plan_, stream), "cufftSetStream");
  }
  cufftHandle get() const { return plan_; }

 private:
  cufftHandle plan_ = 0;
  bool made_ = false;
};

// A cuBLAS handle, destroyed with its owner.
class BlasHandle {
 public:
  BlasHandle() { check_cublas(gpu::cublas().create(&handle_), "cublasCreate"); }
  ~BlasHandle() { gpu::cublas().destroy(handle_); }
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

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

// Rows of the odd extension [0, x, 0, -rev x] of `length` floats x: row r of channel c starts at
// data + c*channel_stride + r*row_stride, elements elem_stride apart.
struct RowSource {
  const float* data;
  int64_t channel_stride, row_stride, elem_stride;
  int length;
};

// Dynamic shared memory of one dft_head_kernel launch: the row, then the staging area where a
// pruned generic stage collects its outputs (positions below the bound in every block) before they
// replace the row's values (which hold that stage's a[] and b[] until every output is computed).
// The twiddle table stays in global memory: a copy in shared memory cost more in occupancy than it
// saved (measured before the long stage was split out; docs/benchmarks/poisson.md).
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

// A long generic stage, split out of dft_head_kernel: the wanted outputs j + nx p (p = 0 is the
// running sum v[0] + sum a.re, b.im) of every (block, column j) pair, for all transforms.
struct LongStage {
  ocvdft::Stage st;
  int n0 = 0;
  int h = 0, cols = 0, pairs = 0, kept = 0, blocks = 0;
  int transforms = 0;
  int count = 0;      // last: positions 1..count are wanted (the pass's outputs), else 0..kept-1
  bool last = false;  // the plan's last stage: outputs go straight to the pass's output
  int p_max = 0;      // the largest wanted p (column 0)
  int tw_width = 0;   // twiddles per term q in the table: p = 1..p_max, padded to kLongGroup

  __host__ __device__ bool wanted(int pos) const { return last ? pos >= 1 && pos <= count : pos < kept; }
};

// One forward pass replayed: `transforms` = channels x rows odd extensions of one length, the first
// `count` outputs of each. Plan, tables and (for a long stage) the split's buffers are made once.
class ReplayPass {
 public:
  ReplayPass() = default;
  ReplayPass(const ReplayPass&) = delete;
  ReplayPass& operator=(const ReplayPass&) = delete;

  // False when a row does not fit in shared memory (the pass is then left to the double solve).
  bool prepare(int length, int rows, int channels, int count, bool inverse = false);
  // Enqueues the pass over the rows of `src` on `stream`: imaginary parts of outputs 1..count.
  void enqueue(const RowSource& src, float* out, cudaStream_t stream) const;

 private:
  ocvdft::Plan plan_{};
  int rows_ = 0, channels_ = 0, count_ = 0, prune_ = 0;
  float inverse_scale_ = 0.f;
  DeviceArray<int> slot_;  // work position of each extension element (dft_head_kernel's scatter)
  DeviceArray<ocvdft::Cf> wave_;
  int split_ = -1;  // index of the long stage, -1: none
  HeadLayout before_{}, after_{};
  LongStage long_{};
  DeviceArray<ocvdft::Cf> tw_;      // the long stage's twiddles [q][p - 1]
  DeviceArray<float4> pairs_;       // [transform][pair][p - 1]: a, b
  DeviceArray<ocvdft::Cf> firsts_;  // [transform][pair]: v[0]
  DeviceArray<ocvdft::Cf> compact_;
};

// Replay: OpenCV's whole float solve of one box size on the GPU, its four passes (forward rows,
// forward columns, inverse rows, inverse columns), the row passes' outputs [3][M][N], the column
// passes' [3][N][M] and the quotients by the eigenvalues [3][M][N].
struct ReplaySolve {
  ReplayPass fwd_rows, fwd_cols, inv_rows, inv_cols;
  DeviceArray<float> pass_rows;
  DeviceArray<float> pass_cols;
  DeviceArray<float> quotient;

  // Passes and buffers for an N x M interior; false when a row does not fit in shared memory.
  bool prepare(int N, int M);
  // From the float RHS [3][M][N] to the box's interior of `bg`, on `stream`.
  void solve(const float* rhs, const float* fx, const float* fy, const Geometry& g, const PackedImage& bg,
             cudaStream_t stream);
};

// The double-precision DST-I solve of one box size: Fft or Gemm (seamless_clone.h's DstMethod), with
// OpenCV's own float roundings replayed for the lowest frequencies of the forward passes.
struct DstSolve {
  // Fft
  DeviceArray<double> ext_x;               // [3M][2N+2]
  DeviceArray<double> ext_y;               // [3N][2M+2]
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
  // exact row-pass values e1 [3][M][K] and corner e2 [3][K][Lc].
  bool exact = false;
  int K = 0, Lc = 0;
  ReplayPass row_pass, col_pass;
  DeviceArray<float> e1;
  DeviceArray<float> e2;

  // The replay plans and buffers of the OpenCV-exact low frequencies; left off (double solve alone)
  // when a row would not fit in shared memory (boxes over ~7,000 pixels wide).
  void prepare_exact(int N, int M);
  // The buffers, plans (Fft) and matrices (Gemm) of `method` for an N x M interior.
  void prepare(DstMethod method, int N, int M, cudaStream_t stream);
  // After the RHS kernels have filled the float RHS [3][M][N] and ext_x (Fft) or dense (Gemm): the
  // solve into the box's interior of `bg`, on `stream` (the cuBLAS handle's).
  void solve_fft(const float* rhs, const float* fx, const float* fy, const Geometry& g, const PackedImage& bg,
                 cudaStream_t stream);
  void solve_gemm(cublasHandle_t blas, const float* rhs, const float* fx, const float* fy, const Geometry& g,
                  const PackedImage& bg, cudaStream_t stream);

 private:
  void run_exact(const float* rhs, int N, int M, cudaStream_t stream);
  void sine_transform_2d(cublasHandle_t blas, double* x, double* tmp, bool inverse, cudaStream_t stream);
};

}  // namespace prism::poisson::detail
