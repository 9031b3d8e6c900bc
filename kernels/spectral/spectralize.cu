// CUDA path of spectralize, one 32x8 tile of pixels a block, in three steps through shared memory:
// the tile's bin indices with the window's halo (replicated at the frame's edges); per output row
// and tile column, the column's counts over the window's height; per pixel, the sum of its window's
// columns. Counts are 16-bit fields, two bins a word, held in registers (a window holds at most
// 31 x 31 = 961 pixels), so no thread indexes an array by bin (which would put it in local memory).
// The block's histograms are then written row by row as consecutive values, coalesced.
#include "common/gpu.h"
#include "spectral/spectralize.h"

namespace prism::spectral {
namespace {

constexpr int kTx = 32, kTy = 8;

template <int kWords>
__device__ __forceinline__ void count_bin(uint32_t (&h)[kWords], int b) {
  const int word = b >> 1;
  const uint32_t one = 1u << ((b & 1) * 16);
#pragma unroll
  for (int k = 0; k < kWords; ++k) h[k] += k == word ? one : 0u;
}

size_t shared_bytes(int words, int r) {
  const int tw = kTx + 2 * r, th = kTy + 2 * r;
  return sizeof(uint32_t) * words * kTy * (tw + kTx) + static_cast<size_t>(tw) * th;
}

template <class T, int kWords>
__global__ void __launch_bounds__(kTx* kTy)
    spectralize_kernel(const uint8_t* grey, int width, int height, int64_t stride, int bins, int r, T* out,
                       int64_t out_row_bytes) {
  extern __shared__ uint32_t smem[];
  const int tw = kTx + 2 * r, th = kTy + 2 * r;
  uint32_t* cols = smem;                                                   // [kWords][kTy][tw]
  uint32_t* hists = cols + kWords * kTy * tw;                              // [kWords][kTy][kTx]
  uint8_t* tile = reinterpret_cast<uint8_t*>(hists + kWords * kTy * kTx);  // [th][tw] bin indices
  const int tid = threadIdx.y * kTx + threadIdx.x;
  const int x0 = blockIdx.x * kTx, y0 = blockIdx.y * kTy;
  for (int k = tid; k < tw * th; k += kTx * kTy) {
    const int tx = k % tw, ty = k / tw;
    const int x = min(max(x0 - r + tx, 0), width - 1), y = min(max(y0 - r + ty, 0), height - 1);
    tile[k] = static_cast<uint8_t>(bin_of(grey[y * stride + x], bins));
  }
  __syncthreads();
  for (int k = tid; k < kTy * tw; k += kTx * kTy) {
    const int col = k % tw, row = k / tw;
    uint32_t h[kWords] = {};
    for (int dy = 0; dy <= 2 * r; ++dy) count_bin(h, tile[(row + dy) * tw + col]);
#pragma unroll
    for (int w = 0; w < kWords; ++w) cols[(w * kTy + row) * tw + col] = h[w];
  }
  __syncthreads();
  {
    uint32_t h[kWords] = {};
    for (int dx = 0; dx <= 2 * r; ++dx)
#pragma unroll
      for (int w = 0; w < kWords; ++w) h[w] += cols[(w * kTy + threadIdx.y) * tw + threadIdx.x + dx];
#pragma unroll
    for (int w = 0; w < kWords; ++w) hists[(w * kTy + threadIdx.y) * kTx + threadIdx.x] = h[w];
  }
  __syncthreads();
  // A block row's pixels are consecutive in the output row: each warp writes one row's values.
  const int y = y0 + threadIdx.y;
  if (y >= height) return;
  T* o = reinterpret_cast<T*>(reinterpret_cast<uint8_t*>(out) + y * out_row_bytes) + static_cast<int64_t>(x0) * bins;
  const int n = min(kTx, width - x0) * bins;
  for (int i = threadIdx.x; i < n; i += kTx) {
    const int p = i / bins, b = i - p * bins;
    o[i] = static_cast<T>((hists[((b >> 1) * kTy + threadIdx.y) * kTx + p] >> ((b & 1) * 16)) & 0xFFFFu);
  }
}

template <class T, int kWords>
void launch(const uint8_t* grey, int width, int height, int64_t stride, int bins, int r, T* out, int64_t out_row_bytes,
            cudaStream_t stream) {
  const size_t bytes = shared_bytes(kWords, r);
  if (bytes > 48 * 1024)  // past the default limit only with many bins and a wide window
    PRISM_CUDA_CHECK(cudaFuncSetAttribute(spectralize_kernel<T, kWords>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
  const dim3 grid((width + kTx - 1) / kTx, (height + kTy - 1) / kTy);
  spectralize_kernel<T, kWords>
      <<<grid, dim3(kTx, kTy), bytes, stream>>>(grey, width, height, stride, bins, r, out, out_row_bytes);
}

}  // namespace

template <class T>
void spectralize_cuda(const uint8_t* grey, int width, int height, int64_t stride, const SpectralizeParams& p, T* out,
                      cudaStream_t stream, int64_t out_row_bytes) {
  validate(p);
  if (out_row_bytes == 0) out_row_bytes = static_cast<int64_t>(width) * p.bins * sizeof(T);
  const int words = (p.bins + 1) / 2, r = p.window / 2;
  if (words <= 2)
    launch<T, 2>(grey, width, height, stride, p.bins, r, out, out_row_bytes, stream);
  else if (words <= 4)
    launch<T, 4>(grey, width, height, stride, p.bins, r, out, out_row_bytes, stream);
  else if (words <= 6)
    launch<T, 6>(grey, width, height, stride, p.bins, r, out, out_row_bytes, stream);
  else if (words <= 8)
    launch<T, 8>(grey, width, height, stride, p.bins, r, out, out_row_bytes, stream);
  else if (words <= 12)
    launch<T, 12>(grey, width, height, stride, p.bins, r, out, out_row_bytes, stream);
  else
    launch<T, 16>(grey, width, height, stride, p.bins, r, out, out_row_bytes, stream);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

template void spectralize_cuda<float>(const uint8_t*, int, int, int64_t, const SpectralizeParams&, float*, cudaStream_t,
                                      int64_t);
template void spectralize_cuda<uint16_t>(const uint8_t*, int, int, int64_t, const SpectralizeParams&, uint16_t*,
                                         cudaStream_t, int64_t);

}  // namespace prism::spectral
