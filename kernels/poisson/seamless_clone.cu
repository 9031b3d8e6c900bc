// CUDA path of the seamless clone: the part its two solvers share.
//
// The RHS (OpenCV's float expressions, poisson_pixel.h) is computed in one kernel per job from the
// background, the overlay and the eroded mask (this file). Then, chosen per box size by
// measurement (solver_for, below):
//  - Replay (replay.cu): OpenCV's own float solve, its four DFT passes replayed operation for
//    operation (opencv_dft.h), the division and truncation as OpenCV writes them: bit-exact, but a
//    generic butterfly costs O(p) per output for a prime factor p of 2n+2, so it serves small and
//    thin boxes (where the solution sits on integers and only OpenCV's roundings truncate alike).
//  - Gemm or Fft (dst_solve.cu): the DST-I pair in double precision, by split DGEMMs or cuFFT, with
//    OpenCV's float roundings replayed for the lowest frequencies of the forward passes and spliced
//    in.
// Buffers, plans and matrices are made per box size the first time it is seen and cached
// (SizeEntry). Auto: Replay where cheap or thin, then by box size on GPUs with full-rate FP64, Fft
// elsewhere (solver_for). seamless_clone_internal.cuh has what the three files share.
#include <algorithm>
#include <list>
#include <vector>

#include "poisson/seamless_clone_internal.cuh"

namespace prism::poisson {

using detail::BlasHandle;
using detail::check_cublas;
using detail::DeviceArray;
using detail::Fold;
using detail::Geometry;
using detail::PinnedArray;
using detail::SplitLayout;

namespace {

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
      const float lap =
          add_rn(sc.fx[c][ty + 1][tx + 1] - sc.fx[c][ty + 1][tx], sc.fy[c][ty + 1][tx + 1] - sc.fy[c][ty][tx + 1]);
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
  const int rx = kTileX - 1 - tx, ry = kTileY - 1 - ty;             // the mirrored pixel in its tile
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
  DeviceArray<float> rhs;  // the float RHS [3][M][N]
  detail::ReplaySolve replay;
  detail::DstSolve dst;
};

struct CudaCloner::Impl {
  cudaStream_t stream;
  DstMethod method;
  bool fast_fp64 = false;
  BlasHandle blas;
  std::list<SizeEntry> cache;  // most recently used first
  DeviceArray<int> box_dev{4};
  PinnedArray<int> box_host{4};

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
    if (m == DstMethod::Replay && !e.replay.prepare(N, M)) m = DstMethod::Fft;
    e.method = m;
    if (m != DstMethod::Replay) e.dst.prepare_exact(N, M);
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
    e.fx = detail::device_copy(fx);
    e.fy = detail::device_copy(fy);
    if (m != DstMethod::Replay) e.dst.prepare(m, N, M, stream);
    cache.splice(cache.begin(), made);
    return cache.front();
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
// Replay beats cuFFT at 154x100 (cost 2.6e6) and loses at 300x194 (4.2e7): bench_poisson's replay
// and fft columns, docs/benchmarks/poisson.md ("The solver").
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
  check_cublas(gpu::cublas().set_stream(impl_->blas.get(), stream), "cublasSetStream");
  // DGEMM only: full FP64 (Hopper's FP64 tensor cores are IEEE double); TF32 cannot apply.
  check_cublas(gpu::cublas().set_math_mode(impl_->blas.get(), CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

// The stream may still use the buffers; a destructor cannot throw, and the owners free regardless.
CudaCloner::~CudaCloner() { (void)cudaStreamSynchronize(impl_->stream); }

DstMethod CudaCloner::solver_for(int box_width, int box_height, bool fast_fp64) {
  // Replay wherever it is cheap, and on thin boxes (under 100 pixels a side) up to a larger bound:
  // there the solution sits on integers (the 7x7 erosion leaves little or no overlay) and only
  // OpenCV's own roundings reproduce its truncations.
  const double cost = replay_cost(box_width, box_height);
  if (cost <= kReplayCheap || (std::min(box_width, box_height) < 100 && cost <= kReplayThin)) return DstMethod::Replay;
  // bench_poisson (docs/benchmarks/poisson.md, "The solver"): cuFFT wins at 300x194; the split DGEMM on
  // the FP64 tensor cores wins from 592x592 up. GPUs with 1/64-rate FP64 (GeForce, most
  // sm_86/89/120 parts) would make the GEMMs far slower: FFT there.
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
  if (e.method == DstMethod::Replay) {
    rhs_odd_extension_kernel<<<dim3((N + kTileX - 1) / kTileX, (M + kTileY - 1) / kTileY), dim3(kTileX, kTileY), 0,
                               s>>>(job.background, job.overlay, job.mask, g, job.mode, e.eroded.data(), nullptr,
                                    e.rhs.data());
    e.replay.solve(e.rhs.data(), e.fx.data(), e.fy.data(), g, job.background, s);
  } else if (e.method == DstMethod::Fft) {
    rhs_odd_extension_kernel<<<dim3((N + kTileX - 1) / kTileX, (M + kTileY - 1) / kTileY), dim3(kTileX, kTileY), 0,
                               s>>>(job.background, job.overlay, job.mask, g, job.mode, e.eroded.data(),
                                    e.dst.ext_x.data(), e.rhs.data());
    e.dst.solve_fft(e.rhs.data(), e.fx.data(), e.fy.data(), g, job.background, s);
  } else {
    const SplitLayout& L = e.dst.layout;
    rhs_folded_kernel<<<dim3((L.ne + kTileX - 1) / kTileX, (L.me + kTileY - 1) / kTileY), dim3(kTileX, kTileY), 0, s>>>(
        job.background, job.overlay, job.mask, g, job.mode, e.eroded.data(), L, e.dst.dense.data(), e.rhs.data());
    e.dst.solve_gemm(impl_->blas.get(), e.rhs.data(), e.fx.data(), e.fy.data(), g, job.background, s);
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
  PRISM_CUDA_CHECK(
      cudaMemcpyAsync(impl_->box_host.data(), impl_->box_dev.data(), 4 * sizeof(int), cudaMemcpyDeviceToHost, s));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(s));
  const int* b = impl_->box_host.data();
  if (b[2] < 0) return {};
  return {b[0], b[1], b[2] - b[0] + 1, b[3] - b[1] + 1};
}

}  // namespace prism::poisson
