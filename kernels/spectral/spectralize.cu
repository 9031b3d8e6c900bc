// CUDA path of spectralize: a block stages its tile of bin indices (with the window's halo,
// replicated at the frame's edges) in shared memory; each thread counts its window there into a
// private histogram and writes it as floats or
// 16-bit counts.
#include "common/gpu.h"
#include "spectral/spectralize.h"

namespace prism::spectral {
namespace {

constexpr int kTx = 32, kTy = 8, kMaxR = 15;

template <class T>
__global__ void spectralize_kernel(const uint8_t* grey, int width, int height, int64_t stride, int bins, int r, T* out,
                                   int64_t out_row_bytes) {
  __shared__ uint8_t tile[kTy + 2 * kMaxR][kTx + 2 * kMaxR];
  const int x0 = blockIdx.x * kTx - r, y0 = blockIdx.y * kTy - r;
  const int tw = kTx + 2 * r, th = kTy + 2 * r;
  for (int k = threadIdx.y * kTx + threadIdx.x; k < tw * th; k += kTx * kTy) {
    const int tx = k % tw, ty = k / tw;
    const int x = min(max(x0 + tx, 0), width - 1), y = min(max(y0 + ty, 0), height - 1);
    tile[ty][tx] = static_cast<uint8_t>(bin_of(grey[y * stride + x], bins));
  }
  __syncthreads();
  const int x = blockIdx.x * kTx + threadIdx.x, y = blockIdx.y * kTy + threadIdx.y;
  if (x >= width || y >= height) return;
  unsigned short hist[32];  // up to 31x31 = 961 counts
  for (int b = 0; b < bins; ++b) hist[b] = 0;
  for (int dy = 0; dy <= 2 * r; ++dy)
    for (int dx = 0; dx <= 2 * r; ++dx) ++hist[tile[threadIdx.y + dy][threadIdx.x + dx]];
  T* o = reinterpret_cast<T*>(reinterpret_cast<uint8_t*>(out) + y * out_row_bytes) + static_cast<int64_t>(x) * bins;
  for (int b = 0; b < bins; ++b) o[b] = static_cast<T>(hist[b]);
}

}  // namespace

template <class T>
void spectralize_cuda(const uint8_t* grey, int width, int height, int64_t stride, const SpectralizeParams& p, T* out,
                      cudaStream_t stream, int64_t out_row_bytes) {
  validate(p);
  if (out_row_bytes == 0) out_row_bytes = static_cast<int64_t>(width) * p.bins * sizeof(T);
  const dim3 grid((width + kTx - 1) / kTx, (height + kTy - 1) / kTy);
  spectralize_kernel<T>
      <<<grid, dim3(kTx, kTy), 0, stream>>>(grey, width, height, stride, p.bins, p.window / 2, out, out_row_bytes);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

template void spectralize_cuda<float>(const uint8_t*, int, int, int64_t, const SpectralizeParams&, float*, cudaStream_t,
                                      int64_t);
template void spectralize_cuda<uint16_t>(const uint8_t*, int, int, int64_t, const SpectralizeParams&, uint16_t*,
                                         cudaStream_t, int64_t);

}  // namespace prism::spectral
