// The CUDA path of texture/normalise.h's CLAHE: the same per-tile and per-pixel functions
// (normalise_pixel.h) as the CPU path.
#include <stdexcept>

#include "common/border.h"
#include "common/gpu.h"
#include "texture/normalise.h"
#include "texture/normalise_pixel.h"

namespace prism::texture {

namespace {

constexpr int kHistThreads = 256;

// One block per tile: its pixels (the padded image reflected at the right and bottom) counted
// with shared-memory atomics, then the clipped, equalising LUT by one thread.
__global__ void clahe_luts_kernel(const uint8_t* __restrict__ grey, size_t pitch, int width, int height, int tiles_x,
                                  ClaheGeometry geo, uint8_t* luts) {
  __shared__ int hist[256];
  hist[threadIdx.x] = 0;
  __syncthreads();
  const int tx = blockIdx.x % tiles_x, ty = blockIdx.x / tiles_x, area = geo.tile_w * geo.tile_h;
  for (int i = threadIdx.x; i < area; i += kHistThreads) {
    const int y = reflect101(ty * geo.tile_h + i / geo.tile_w, height);
    const int x = reflect101(tx * geo.tile_w + i % geo.tile_w, width);
    atomicAdd(&hist[grey[size_t(y) * pitch + x]], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) clahe_tile_lut(hist, geo.clip_count, geo.lut_scale, luts + size_t(blockIdx.x) * 256);
}

__global__ void clahe_blend_kernel(const uint8_t* __restrict__ grey, size_t pitch, int width, int height, int tiles_x,
                                   int tiles_y, ClaheGeometry geo, const uint8_t* __restrict__ luts, uint8_t* out,
                                   size_t out_pitch) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= width || y >= height) return;
  const ClaheAxis ax = clahe_axis(x, geo.inv_w, tiles_x), ay = clahe_axis(y, geo.inv_h, tiles_y);
  const uint8_t* top = luts + size_t(ay.lo) * tiles_x * 256;
  const uint8_t* bottom = luts + size_t(ay.hi) * tiles_x * 256;
  const int v = grey[size_t(y) * pitch + x], lo = ax.lo * 256 + v, hi = ax.hi * 256 + v;
  out[size_t(y) * out_pitch + x] = clahe_blend(top[lo], top[hi], bottom[lo], bottom[hi], ax.w, ay.w);
}

}  // namespace

void CudaNormaliser::run(const Normalisation& n, const uint8_t* grey, size_t pitch, int width, int height, uint8_t* out,
                         size_t out_pitch, cudaStream_t stream) {
  if (n.kind != Normalisation::Kind::kClahe || n.clip < 1 || n.clip > kMaxClaheClip || n.tiles < 1 ||
      n.tiles > kMaxClaheTiles)
    throw std::invalid_argument("CudaNormaliser: not a CLAHE setting: '" + n.name() + "'");
  if (!grey || !out || width < 1 || height < 1 || pitch < size_t(width) || out_pitch < size_t(width))
    throw std::invalid_argument("CudaNormaliser: a " + std::to_string(width) + "x" + std::to_string(height) +
                                " image with pitches " + std::to_string(pitch) + " and " + std::to_string(out_pitch));
  const ClaheGeometry geo = clahe_geometry(width, height, n.clip, n.tiles, n.tiles);
  luts_.reserve(size_t(n.tiles) * n.tiles * 256);
  clahe_luts_kernel<<<n.tiles * n.tiles, kHistThreads, 0, stream>>>(grey, pitch, width, height, n.tiles, geo,
                                                                    luts_.data());
  const dim3 block(32, 8), grid((width + 31) / 32, (height + 7) / 8);
  clahe_blend_kernel<<<grid, block, 0, stream>>>(grey, pitch, width, height, n.tiles, n.tiles, geo, luts_.data(), out,
                                                 out_pitch);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace prism::texture
