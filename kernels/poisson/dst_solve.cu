// The double-precision DST-I solve (Gemm and Fft, see seamless_clone.h's DstMethod), for boxes
// where replaying OpenCV's float solve would cost too much: the DST-I pair computed in double, with
// OpenCV's float roundings replayed (ReplayPass) for the lowest frequencies of the forward passes
// and spliced in (those are what moves OpenCV's answer; a plain double solve differs on up to ~0.3%
// of values).
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
// The RHS kernels that fill the first buffers (odd extensions, folded planes) are in
// seamless_clone.cu with the other RHS code.
#include <cmath>
#include <string>
#include <vector>

#include "poisson/seamless_clone_internal.cuh"

namespace prism::poisson::detail {

void check_cufft(cufftResult r, const char* what) {
  if (r != CUFFT_SUCCESS) throw gpu::CudaError(std::string(what) + " failed: cufftResult " + std::to_string(r));
}
void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw gpu::CudaError(std::string(what) + " failed: " + gpu::cublas().status_string(s));
}

namespace {

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
  uint8_t* px =
      bg.data + static_cast<int64_t>(g.dy + 1 + j) * bg.stride + static_cast<int64_t>(g.dx + 1 + i) * bg.channels;
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
// eigenvalues, are what separates a double solve from OpenCV's answer. The first kExactLow outputs
// of the forward row pass (all rows) and of the forward column pass over those columns (a
// kExactLow^2 corner of the spectrum) are replayed bit for bit and replace the double values there,
// which removes most of the difference (more outputs change little; the shares of differing values
// before and after are in docs/benchmarks/poisson.md, "How the exact low frequencies work").
constexpr int kExactLow = 32;

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

}  // namespace

void DstSolve::prepare_exact(int N, int M) {
  K = std::min(kExactLow, N);
  Lc = std::min(kExactLow, M);
  if (!row_pass.prepare(N, M, 3, K) || !col_pass.prepare(M, K, 3, Lc)) return;
  e1.resize(static_cast<size_t>(3) * M * K);
  e2.resize(static_cast<size_t>(3) * K * Lc);
  exact = true;
}

// Enqueues both replays: row pass of every row (first K outputs), column pass of those K columns
// (first Lc outputs).
void DstSolve::run_exact(const float* rhs, int N, int M, cudaStream_t stream) {
  if (!exact) return;
  row_pass.enqueue(RowSource{rhs, static_cast<int64_t>(M) * N, N, 1, N}, e1.data(), stream);
  col_pass.enqueue(RowSource{e1.data(), static_cast<int64_t>(M) * K, 1, K, M}, e2.data(), stream);
}

void DstSolve::prepare(DstMethod method, int N, int M, cudaStream_t stream) {
  if (method == DstMethod::Fft) {
    const size_t nx = static_cast<size_t>(3) * M * (2 * N + 2), ny = static_cast<size_t>(3) * N * (2 * M + 2);
    ext_x.resize(nx);
    ext_y.resize(ny);
    // Positions 0 and n+1 of every odd extension stay zero; the kernels never write them.
    PRISM_CUDA_CHECK(cudaMemset(ext_x.data(), 0, nx * sizeof(double)));
    PRISM_CUDA_CHECK(cudaMemset(ext_y.data(), 0, ny * sizeof(double)));
    spec_x.resize(static_cast<size_t>(3) * M * (N + 2));
    spec_y.resize(static_cast<size_t>(3) * N * (M + 2));
    plan_x.make_d2z(2 * N + 2, N + 2, 3 * M, stream, "cufftPlanMany(x)");
    plan_y.make_d2z(2 * M + 2, M + 2, 3 * N, stream, "cufftPlanMany(y)");
  } else if (method == DstMethod::Gemm) {
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
    e_n = half_matrix(N, 0, ld_e_n);
    o_n = half_matrix(N, 1, ld_o_n);
    e_m = half_matrix(M, 0, ld_e_m);
    o_m = half_matrix(M, 1, ld_o_m);
    layout = SplitLayout::of(N, M);
    const size_t planes = static_cast<size_t>(3) * layout.plane();
    dense.resize(planes);
    tmp.resize(planes);
    PRISM_CUDA_CHECK(cudaMemset(dense.data(), 0, planes * sizeof(double)));  // padding columns stay zero
    PRISM_CUDA_CHECK(cudaMemset(tmp.data(), 0, planes * sizeof(double)));
  }
}

// The 2D DST of folded [3][M][N] planes in place (forward: folded input, split-order output;
// inverse: split-order input, folded output, with E^T and O^T). In cuBLAS's column-major view a
// plane is X^T (N x M, ld N): the N axis is a left product, the M axis a right product.
void DstSolve::sine_transform_2d(cublasHandle_t blas, double* x, double* tmp, bool inverse, cudaStream_t stream) {
  const SplitLayout& L = layout;
  const int P = L.pitch;
  const double one = 1.0, zero = 0.0;
  const long long plane = L.plane();
  const cublasOperation_t left = inverse ? CUBLAS_OP_T : CUBLAS_OP_N, right = inverse ? CUBLAS_OP_N : CUBLAS_OP_T;
  auto gemm = [&](cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double* A, int lda,
                  long long sa, const double* B, int ldb, long long sb, double* C) {
    if (m == 0 || n == 0 || k == 0) return;
    check_cublas(
        gpu::cublas().dgemm_strided_batched(blas, ta, tb, m, n, k, &one, A, lda, sa, B, ldb, sb, &zero, C, P, plane, 3),
        "cublasDgemmStridedBatched");
  };
  // N axis: rows [0, ne) of X^T with E_N, rows [odd_col, odd_col + no) with O_N.
  gemm(left, CUBLAS_OP_N, L.ne, L.M, L.ne, e_n.data(), ld_e_n, 0, x, P, plane, tmp);
  gemm(left, CUBLAS_OP_N, L.no, L.M, L.no, o_n.data(), ld_o_n, 0, x + L.odd_col, P, plane, tmp + L.odd_col);
  if (!inverse && exact) splice_rows_gemm_kernel<<<dim3(L.M, 3), kExactLow, 0, stream>>>(e1.data(), L, K, tmp);
  // M axis: columns [0, me) with E_M, [me, M) with O_M; all P rows (the padding ones are zero).
  const int64_t odd_rows = static_cast<int64_t>(L.me) * P;
  gemm(CUBLAS_OP_N, right, P, L.me, L.me, tmp, P, plane, e_m.data(), ld_e_m, 0, x);
  gemm(CUBLAS_OP_N, right, P, L.mo, L.mo, tmp + odd_rows, P, plane, o_m.data(), ld_o_m, 0, x + odd_rows);
  if (!inverse && exact) splice_corner_gemm_kernel<<<dim3(K, 3), kExactLow, 0, stream>>>(e2.data(), L, K, Lc, x);
}

void DstSolve::solve_fft(const float* rhs, const float* fx, const float* fy, const Geometry& g, const PackedImage& bg,
                         cudaStream_t s) {
  const int N = g.W - 2, M = g.H - 2;
  const dim3 pix_block(32, 8), pix_grid((N + 31) / 32, (M + 7) / 8);
  run_exact(rhs, N, M, s);
  check_cufft(gpu::cufft().exec_d2z(plan_x.get(), ext_x.data(), spec_x.data()), "cufftExecD2Z");
  if (exact) splice_rows_fft_kernel<<<dim3(M, 3), kExactLow, 0, s>>>(e1.data(), M, N, K, spec_x.data());
  transpose_imag_kernel<<<dim3((N + 31) / 32, (M + 31) / 32, 3), dim3(32, 8), 0, s>>>(spec_x.data(), M, N, ext_y.data(),
                                                                                      2 * M + 2);
  check_cufft(gpu::cufft().exec_d2z(plan_y.get(), ext_y.data(), spec_y.data()), "cufftExecD2Z");
  if (exact) splice_corner_fft_kernel<<<dim3(K, 3), kExactLow, 0, s>>>(e2.data(), N, M, K, Lc, spec_y.data());
  divide_fft_kernel<<<dim3((M + 127) / 128, N, 3), 128, 0, s>>>(spec_y.data(), N, M, fx, fy, ext_y.data());
  check_cufft(gpu::cufft().exec_d2z(plan_y.get(), ext_y.data(), spec_y.data()), "cufftExecD2Z");
  transpose_imag_kernel<<<dim3((M + 31) / 32, (N + 31) / 32, 3), dim3(32, 8), 0, s>>>(spec_y.data(), N, M, ext_x.data(),
                                                                                      2 * N + 2);
  check_cufft(gpu::cufft().exec_d2z(plan_x.get(), ext_x.data(), spec_x.data()), "cufftExecD2Z");
  // Four transforms of -2 DST-I: 16 S^4 = 4 (N+1)(M+1) times the identity.
  output_kernel<true>
      <<<pix_grid, pix_block, 0, s>>>(spec_x.data(), g, SplitLayout{}, 1.0 / (4.0 * (N + 1) * (M + 1)), bg);
}

void DstSolve::solve_gemm(cublasHandle_t blas, const float* rhs, const float* fx, const float* fy, const Geometry& g,
                          const PackedImage& bg, cudaStream_t s) {
  const int N = g.W - 2, M = g.H - 2;
  const dim3 pix_block(32, 8), pix_grid((N + 31) / 32, (M + 7) / 8);
  const SplitLayout& L = layout;
  run_exact(rhs, N, M, s);
  sine_transform_2d(blas, dense.data(), tmp.data(), false, s);
  divide_split_kernel<<<dim3((N + 127) / 128, M, 3), 128, 0, s>>>(dense.data(), L, fx, fy);
  sine_transform_2d(blas, dense.data(), tmp.data(), true, s);
  // S^2 = (n+1)/2 I per axis.
  output_kernel<false><<<pix_grid, pix_block, 0, s>>>(dense.data(), g, L, 4.0 / ((N + 1.0) * (M + 1.0)), bg);
}

}  // namespace prism::poisson::detail
