// The CUDA path of kernels/sift: the pyramid as separable blur passes (the DoG fused into the column
// pass), one launch for the extrema of every octave and layer (refined in the same thread), one
// warp per extremum for its orientations and one warp per kept keypoint for its descriptor. The
// per-pixel and per-keypoint arithmetic is sift_core.h's, shared with sift.cpp; this file is built
// with --fmad=false so that nvcc contracts nothing the CPU path does not.
//
// Host work per image: the selection of keypoints (sift_plan.h's, shared with the CPU path), with
// three small copies back (extremum count, keypoints, descriptors). Results are deterministic: the
// extrema are found in any order, but the selection sorts them in a total order.
//
// Batches: B images of one size are one pyramid array B times as long; every kernel takes the
// image from its grid (blockIdx.z for the image-shaped passes, the block or the record's `image`
// for the rest), so a batch costs the launches and host syncs of one image.
#include <cuda_runtime.h>

#if defined(__USE_FAST_MATH__)
#error "kernels/sift must not be built with --use_fast_math: the CPU and CUDA paths would differ"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "common/device_array.h"
#include "common/stopwatch.h"
#include "common/gpu.h"
#include "sift/sift.h"
#include "sift/sift_core.h"
#include "sift/sift_plan.h"

namespace prism::sift {

namespace {

using namespace detail;

constexpr int kMaxOctaves = 16;

// Where each octave's Gaussian levels and DoG layers live in the two pyramid arrays.
struct OctaveTable {
  int count, layers;
  int rows[kMaxOctaves], cols[kMaxOctaves];
  size_t gauss[kMaxOctaves], dog[kMaxOctaves];  // offsets in floats
  // The extremum search's 32x8 tiles: per octave, tiles across and the first tile's index (all
  // its layers' tiles follow); tile_start[count] = the total.
  int tiles_x[kMaxOctaves], tiles_y[kMaxOctaves], tile_start[kMaxOctaves + 1];
  size_t gauss_stride, dog_stride;  // one image's Gaussian and DoG pyramids, in floats
};
constexpr int kExtremaTileW = 32, kExtremaTileH = 8;

__global__ void upsample_kernel(const uint8_t* src, size_t pitch, int w, int h, float* dst) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= 2 * w || y >= 2 * h) return;
  src += blockIdx.z * pitch * h;
  dst += blockIdx.z * size_t(4) * w * h;
  dst[size_t(y) * 2 * w + x] = upsample2x([&](int sx, int sy) { return src[size_t(sy) * pitch + sx]; }, w, h, x, y);
}

// One Gaussian level: a 32x32 tile of output from its input tile and halo (reflected at the
// image's edges) in shared memory, the row pass into a second shared tile, the column pass out;
// the DoG layer level - below is written with it (when `below` is given).
constexpr int kBlurTile = 32, kBlurThreadsY = 8, kMaxKernel = 63;
// Passed by value: the weights sit in the constant bank, read by every thread at once.
struct BlurWeights {
  float w[kMaxKernel];
  int ksize;
};
// Strides: one image's plane array in src, in dst (and below), in dog (blockIdx.z is the image).
__global__ void blur_kernel(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols,
                            const BlurWeights weights, const float* __restrict__ below, float* __restrict__ dog,
                            size_t src_stride, size_t dst_stride, size_t dog_stride) {
  extern __shared__ float tile[];
  src += blockIdx.z * src_stride;
  dst += blockIdx.z * dst_stride;
  if (below) {
    below += blockIdx.z * dst_stride;
    dog += blockIdx.z * dog_stride;
  }
  const int ksize = weights.ksize;
  const int r = ksize / 2, in_w = kBlurTile + 2 * r, in_h = kBlurTile + 2 * r;
  float* in = tile;                 // [in_h][in_w]
  float* mid = tile + in_w * in_h;  // [in_h][kBlurTile]
  const int x0 = blockIdx.x * kBlurTile, y0 = blockIdx.y * kBlurTile;
  for (int ty = threadIdx.y; ty < in_h; ty += kBlurThreadsY) {
    const float* row = src + size_t(reflect101(y0 - r + ty, rows)) * cols;
    for (int tx = threadIdx.x; tx < in_w; tx += kBlurTile) in[ty * in_w + tx] = row[reflect101(x0 - r + tx, cols)];
  }
  __syncthreads();
  // Row pass, 4 outputs per thread from one sliding window of taps; each output's chain of FMAs
  // is blur_row's (sift_core.h), so the result is the CPU path's bit for bit.
  constexpr int kRun = 4;
  for (int i = threadIdx.y * kBlurTile + threadIdx.x; i < in_h * (kBlurTile / kRun); i += kBlurTile * kBlurThreadsY) {
    const int ty = i / (kBlurTile / kRun), tx = (i % (kBlurTile / kRun)) * kRun;
    const float* row = in + ty * in_w + tx;
    float s[kRun] = {0.f, 0.f, 0.f, 0.f}, window[kRun];
    for (int q = 0; q < kRun - 1; ++q) window[q + 1] = row[q];
    for (int k = 0; k < ksize; ++k) {
      for (int q = 0; q < kRun - 1; ++q) window[q] = window[q + 1];
      window[kRun - 1] = row[k + kRun - 1];
      const float w = weights.w[k];
      for (int q = 0; q < kRun; ++q) s[q] = fmaf(window[q], w, s[q]);
    }
    for (int q = 0; q < kRun; ++q) mid[ty * kBlurTile + tx + q] = s[q];
  }
  __syncthreads();
  const int x = x0 + threadIdx.x;
  if (x >= cols) return;
  for (int ty = threadIdx.y; ty < kBlurTile; ty += kBlurThreadsY) {
    const int y = y0 + ty;
    if (y >= rows) break;
    const float* column = mid + (ty + r) * kBlurTile + threadIdx.x;
    const float v = blur_column(weights.w, ksize, [&](int k) { return column[k * kBlurTile]; });
    const size_t i = size_t(y) * cols + x;
    dst[i] = v;
    if (below) dog[i] = v - below[i];
  }
}

__global__ void halve_kernel(const float* __restrict__ src, int src_cols, float* __restrict__ dst, int rows, int cols,
                             size_t stride) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= cols || y >= rows) return;
  dst[blockIdx.z * stride + size_t(y) * cols + x] = src[blockIdx.z * stride + size_t(2 * y) * src_cols + 2 * x];
}

// A pixel passing the 26-neighbour test, before refinement.
struct Candidate {
  int16_t octave, layer;
  int r, c, image;
};

// One block per 32x8 tile of one DoG layer of one octave of one image, all in one launch
// (tile_start per image). Light on registers so that the many threads that find nothing leave
// fast; the few candidates are refined by refine_kernel.
__global__ void candidates_kernel(OctaveTable t, const float* __restrict__ dogs, int threshold, Candidate* out,
                                  unsigned* count, unsigned capacity) {
  const int image = int(blockIdx.x) / t.tile_start[t.count], block = int(blockIdx.x) % t.tile_start[t.count];
  dogs += image * t.dog_stride;
  int octave = 0;
  while (block >= t.tile_start[octave + 1]) ++octave;
  const int local = block - t.tile_start[octave], per_layer = t.tiles_x[octave] * t.tiles_y[octave];
  const int layer = local / per_layer + 1, tile = local % per_layer;
  const int c = (tile % t.tiles_x[octave]) * kExtremaTileW + threadIdx.x + kBorder;
  const int r = (tile / t.tiles_x[octave]) * kExtremaTileH + threadIdx.y + kBorder;
  if (c >= t.cols[octave] - kBorder || r >= t.rows[octave] - kBorder) return;
  const DogOctave d{dogs + t.dog[octave], size_t(t.rows[octave]) * t.cols[octave], t.rows[octave], t.cols[octave],
                    t.cols[octave]};
  if (!is_extremum(d, layer, r, c, threshold)) return;
  const unsigned i = atomicAdd(count, 1u);
  if (i < capacity) out[i] = {int16_t(octave), int16_t(layer), r, c, image};
}

// One thread per candidate (the grid covers the capacity; the count is read on the device).
__global__ void refine_kernel(OctaveTable t, const float* __restrict__ dogs, const Candidate* __restrict__ candidates,
                              const unsigned* counts, unsigned capacity, float contrast, float edge, float sigma,
                              Extremum* out, int* out_image, unsigned* count) {
  const unsigned index = blockIdx.x * blockDim.x + threadIdx.x;
  if (index >= min(counts[0], capacity)) return;
  const Candidate k = candidates[index];
  const DogOctave d{dogs + k.image * t.dog_stride + t.dog[k.octave], size_t(t.rows[k.octave]) * t.cols[k.octave],
                    t.rows[k.octave], t.cols[k.octave], t.cols[k.octave]};
  Extremum e;
  if (!refine_extremum(d, k.octave, k.layer, k.r, k.c, t.layers, contrast, edge, sigma, &e)) return;
  const unsigned i = atomicAdd(count, 1u);  // at most one per candidate: within the capacity
  out[i] = e;
  out_image[i] = k.image;
}

constexpr int kWarpsPerBlock = 4;

__global__ void orientation_kernel(OctaveTable t, const float* __restrict__ gauss, const Extremum* __restrict__ extrema,
                                   const int* __restrict__ extremum_image, unsigned n, RawKeypoint* out, int* out_image,
                                   unsigned* count, unsigned capacity) {
  __shared__ float partial[kWarpsPerBlock][kOriBins * kLanes];
  __shared__ float raw[kWarpsPerBlock][kOriBins], hist[kWarpsPerBlock][kOriBins];
  const int warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const unsigned index = blockIdx.x * kWarpsPerBlock + warp;
  if (index >= n) return;  // whole warps leave together: no block-wide barrier below
  const Extremum e = extrema[index];
  float* p = partial[warp];
  for (int b = 0; b < kOriBins; ++b) p[b * kLanes + lane] = 0.f;
  const size_t plane = size_t(t.rows[e.octave]) * t.cols[e.octave];
  const int image = extremum_image[index];
  const Level img{gauss + image * t.gauss_stride + t.gauss[e.octave] + e.layer * plane, t.rows[e.octave],
                  t.cols[e.octave], t.cols[e.octave]};
  orientation_partial(img, e, orientation_window(e), lane, p + lane, kLanes);
  __syncwarp();
  for (int b = lane; b < kOriBins; b += kLanes) {
    float s = 0;
    for (int l = 0; l < kLanes; ++l) s += p[b * kLanes + l];
    raw[warp][b] = s;
  }
  __syncwarp();
  float local_max = -1.f;
  for (int b = lane; b < kOriBins; b += kLanes) {
    hist[warp][b] = orientation_smoothed(raw[warp], b);
    local_max = fmaxf(local_max, hist[warp][b]);
  }
  for (int o = 16; o > 0; o /= 2) local_max = fmaxf(local_max, __shfl_xor_sync(0xffffffffu, local_max, o));
  __syncwarp();
  for (int j = lane; j < kOriBins; j += kLanes) {
    const float angle = orientation_peak(hist[warp], local_max, j);
    if (angle < 0) continue;
    const unsigned i = atomicAdd(count, 1u);
    if (i < capacity) {
      out[i] = {e.x, e.y, e.size, angle, e.response, e.packed_octave};
      out_image[i] = image;
    }
  }
}

struct DescriptorJob {
  int octave, layer;
  float x, y, scl, angle;
  int image;
};

// One block per keypoint: a warp's lanes take 32 different rows (spread over several cells, so
// that their atomics rarely meet on one bin), the 4 warps every 4th column. Each fixed-point value
// goes in as two 32-bit parts (split at bit 18), each sum exact below 2^32 (sift_core.h), so the
// shared-memory atomics are the fast 32-bit ones and the result does not depend on their order.
constexpr int kDescriptorThreads = 128, kFixedSplit = 18;
__global__ void descriptor_kernel(OctaveTable t, const float* __restrict__ gauss,
                                  const DescriptorJob* __restrict__ jobs, float* out) {
  __shared__ unsigned low[kDescHistLen], high[kDescHistLen];
  __shared__ float summed[kDescHistLen];
  const int tid = threadIdx.x;
  for (int b = tid; b < kDescHistLen; b += kDescriptorThreads) low[b] = high[b] = 0;
  __syncthreads();
  const DescriptorJob job = jobs[blockIdx.x];
  const int rows = t.rows[job.octave], cols = t.cols[job.octave];
  const Level img{gauss + job.image * t.gauss_stride + t.gauss[job.octave] + job.layer * size_t(rows) * cols, rows,
                  cols, cols};
  const DescriptorWindow w = descriptor_window(job.x, job.y, job.angle, job.scl, rows, cols);
  descriptor_samples(img, w, tid % kLanes, kLanes, tid / kLanes, kDescriptorThreads / kLanes,
                     [&](int bin, long long v) {
                       atomicAdd(&low[bin], unsigned(v & ((1ll << kFixedSplit) - 1)));
                       atomicAdd(&high[bin], unsigned(v >> kFixedSplit));
                     });
  __syncthreads();
  for (int b = tid; b < kDescHistLen; b += kDescriptorThreads)
    summed[b] = from_fixed((static_cast<long long>(high[b]) << kFixedSplit) + low[b]);
  __syncthreads();
  if (tid == 0) descriptor_finish(summed, out + size_t(blockIdx.x) * kDescriptorSize);
}

// An instantiated CUDA graph, destroyed with its owner.
class GraphExec : public gpu::detail::OwnedHandle<cudaGraphExec_t, cudaGraphExecDestroy> {
 public:
  // Records what `enqueue` queues on `stream` and instantiates it. Another thread of the process
  // can invalidate a capture (many elements share one context under prism run: a cudaFree, which
  // synchronises the device, while this stream captures): the capture is then made again, up to
  // kAttempts times, before its error reaches the caller. Nothing captured has run, so nothing is
  // done twice.
  template <class F>
  void capture(cudaStream_t stream, F enqueue) {
    for (int attempt = 1;; ++attempt) {
      reset();
      PRISM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      cudaGraph_t graph = nullptr;
      cudaError_t end = cudaSuccess;
      try {
        enqueue();
        end = cudaStreamEndCapture(stream, &graph);
      } catch (...) {
        end = cudaStreamEndCapture(stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();  // the capture's error is the exception's, not a later check's
        if (end == cudaErrorStreamCaptureInvalidated && attempt < kAttempts) continue;
        throw;
      }
      if (end == cudaErrorStreamCaptureInvalidated && attempt < kAttempts) {
        if (graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        continue;
      }
      PRISM_CUDA_CHECK(end);
      const cudaError_t e = cudaGraphInstantiate(&handle_, graph, 0);
      cudaGraphDestroy(graph);
      PRISM_CUDA_CHECK(e);
      return;
    }
  }
  void launch(cudaStream_t stream) const { PRISM_CUDA_CHECK(cudaGraphLaunch(handle_, stream)); }

 private:
  static constexpr int kAttempts = 8;
};

dim3 grid_for(int cols, int rows, dim3 block) {
  return dim3((cols + block.x - 1) / block.x, (rows + block.y - 1) / block.y);
}

}  // namespace

struct CudaExtractor::Impl {
  Params params;
  gpu::Stream stream = gpu::Stream::create();
  gpu::PinnedArray<uint8_t> staging;
  gpu::DeviceArray<uint8_t> input;  // `batch` packed images
  gpu::DeviceArray<float> gauss, dogs, scratch;
  gpu::DeviceArray<Candidate> candidates;
  gpu::DeviceArray<Extremum> extrema;
  gpu::DeviceArray<int> extremum_image, raw_image;  // the image of each extremum, each keypoint
  gpu::DeviceArray<RawKeypoint> raw;
  gpu::DeviceArray<unsigned> counters;  // [0] candidates, [1] extrema, [2] keypoints
  gpu::PinnedArray<unsigned> host_counters{3};
  gpu::PinnedArray<RawKeypoint> host_raw;
  gpu::PinnedArray<int> host_raw_image;
  std::vector<RawKeypoint> by_image;      // a batch's keypoints grouped by image (run)
  std::vector<size_t> image_start, fill;  // where each image's begin in by_image
  gpu::DeviceArray<DescriptorJob> jobs;
  gpu::PinnedArray<DescriptorJob> host_jobs;
  gpu::DeviceArray<float> descriptors;
  gpu::PinnedArray<float> host_descriptors;
  cv::Size planned;
  // The pyramid and extrema launches (about 50 for a 640x480 image, as many for a batch) as one
  // graph. It holds the pointers and sizes it was captured with, all of them in its key: any change
  // (a new size or batch, a grown buffer, or a growth that failed half way and freed one) finds
  // another graph or captures one, never launches on freed memory. A few are kept, most recent
  // last, because an enrolment's batches alternate between a full size and a remainder.
  struct Front {
    std::vector<const void*> key;
    GraphExec exec;
  };
  static constexpr size_t kFronts = 4;
  std::vector<std::unique_ptr<Front>> fronts;
  const GraphExec& front_for(int width, int height, int batch) {
    const std::vector<const void*> k = key(width, height, batch);
    for (size_t i = 0; i < fronts.size(); ++i)
      if (fronts[i]->key == k) {
        std::rotate(fronts.begin() + i, fronts.begin() + i + 1, fronts.end());
        return fronts.back()->exec;
      }
    auto f = std::make_unique<Front>();
    f->exec.capture(stream, [&] { enqueue_front(width, height, batch); });
    f->key = k;
    if (fronts.size() == kFronts) fronts.erase(fronts.begin());
    fronts.push_back(std::move(f));
    return fronts.back()->exec;
  }
  std::vector<const void*> key(int width, int height, int batch) const {
    return {input.data(),
            gauss.data(),
            dogs.data(),
            scratch.data(),
            candidates.data(),
            extrema.data(),
            extremum_image.data(),
            counters.data(),
            host_counters.data(),
            reinterpret_cast<const void*>(size_t(width)),
            reinterpret_cast<const void*>(size_t(height)),
            reinterpret_cast<const void*>(size_t(batch)),
            reinterpret_cast<const void*>(candidates.size()),
            reinterpret_cast<const void*>(extrema.size())};
  }
  Timings timings;
  Pyramid plan;
  OctaveTable table{};
  std::vector<BlurWeights> weights;

  // One image's pyramid plan for this size (the table's strides are per image).
  void plan_size(int width, int height) {
    if (planned == cv::Size(width, height)) return;
    planned = cv::Size();  // until the table and weights below are in place
    plan = plan_pyramid(width, height, params);
    if (plan.octaves > kMaxOctaves) throw std::invalid_argument("sift: the image is too large for the CUDA path");
    table = {};
    table.count = plan.octaves;
    table.layers = plan.layers;
    size_t g = 0, d = 0;
    for (int o = 0; o < plan.octaves; ++o) {
      table.rows[o] = plan.size[o].height;
      table.cols[o] = plan.size[o].width;
      table.gauss[o] = g;
      table.dog[o] = d;
      const size_t plane = size_t(plan.size[o].area());
      g += plane * (plan.layers + 3);
      d += plane * (plan.layers + 2);
      table.tiles_x[o] = std::max(0, (table.cols[o] - 2 * kBorder + kExtremaTileW - 1) / kExtremaTileW);
      table.tiles_y[o] = std::max(0, (table.rows[o] - 2 * kBorder + kExtremaTileH - 1) / kExtremaTileH);
      table.tile_start[o + 1] = table.tile_start[o] + table.tiles_x[o] * table.tiles_y[o] * plan.layers;
    }
    table.gauss_stride = g;
    table.dog_stride = d;
    weights.clear();
    for (const auto& v : plan.kernel) {
      if (int(v.size()) > kMaxKernel) throw std::invalid_argument("sift: sigma is too large for the CUDA path");
      BlurWeights b{};
      std::copy(v.begin(), v.end(), b.w);
      b.ksize = int(v.size());
      weights.push_back(b);
    }
    planned = cv::Size(width, height);
  }
  // Device bytes one image of this size takes (pyramids, upsampled input, 8-bit input).
  size_t image_bytes(int width, int height) {
    plan_size(width, height);
    return (table.gauss_stride + table.dog_stride + size_t(plan.size[0].area())) * sizeof(float) +
           size_t(width) * height;
  }
  void prepare(int width, int height, int batch) {
    plan_size(width, height);
    gauss.reserve(table.gauss_stride * batch);
    dogs.reserve(table.dog_stride * batch);
    scratch.reserve(size_t(plan.size[0].area()) * batch);
  }

  void blur(const float* src, float* dst, int rows, int cols, int level, const float* below, float* dog,
            size_t src_stride, int batch) {
    const int ksize = int(plan.kernel[level].size()), r = ksize / 2;
    const dim3 block(kBlurTile, kBlurThreadsY);
    const dim3 grid((cols + kBlurTile - 1) / kBlurTile, (rows + kBlurTile - 1) / kBlurTile, batch);
    const size_t shared = size_t(kBlurTile + 2 * r) * (kBlurTile + 2 * r + kBlurTile) * sizeof(float);
    blur_kernel<<<grid, block, shared, stream>>>(src, dst, rows, cols, weights[level], below, dog, src_stride,
                                                 table.gauss_stride, table.dog_stride);
  }

  // The pyramids of the `batch` images in `input`, the candidates and the extrema, their counts
  // copied to host_counters[0..1].
  void enqueue_front(int width, int height, int batch) {
    const int L = plan.layers, levels = L + 3;
    float* up = scratch.data();  // the upsampled inputs
    const size_t up_stride = size_t(plan.size[0].area());
    const dim3 block(32, 8);
    dim3 grid = grid_for(plan.size[0].width, plan.size[0].height, block);
    grid.z = batch;
    upsample_kernel<<<grid, block, 0, stream>>>(input.data(), size_t(width), width, height, up);
    for (int o = 0; o < plan.octaves; ++o) {
      const int rows = table.rows[o], cols = table.cols[o];
      const size_t plane = size_t(rows) * cols;
      float* g = gauss.data() + table.gauss[o];
      if (o == 0) {
        blur(up, g, rows, cols, 0, nullptr, nullptr, up_stride, batch);
      } else {
        const float* src = gauss.data() + table.gauss[o - 1] + size_t(L) * table.rows[o - 1] * table.cols[o - 1];
        grid = grid_for(cols, rows, block);
        grid.z = batch;
        halve_kernel<<<grid, block, 0, stream>>>(src, table.cols[o - 1], g, rows, cols, table.gauss_stride);
      }
      for (int i = 1; i < levels; ++i)
        blur(g + (i - 1) * plane, g + i * plane, rows, cols, i, g + (i - 1) * plane,
             dogs.data() + table.dog[o] + (i - 1) * plane, table.gauss_stride, batch);
    }
    PRISM_CUDA_CHECK(cudaMemsetAsync(counters.data(), 0, 3 * sizeof(unsigned), stream));
    const unsigned capacity = unsigned(std::min(candidates.size(), extrema.size()));
    if (table.tile_start[plan.octaves] > 0)
      candidates_kernel<<<table.tile_start[plan.octaves] * batch, dim3(kExtremaTileW, kExtremaTileH), 0, stream>>>(
          table, dogs.data(), plan.threshold, candidates.data(), counters.data(), capacity);
    refine_kernel<<<(capacity + 127) / 128, 128, 0, stream>>>(
        table, dogs.data(), candidates.data(), counters.data(), capacity, float(params.contrast_threshold),
        float(params.edge_threshold), float(params.sigma), extrema.data(), extremum_image.data(), counters.data() + 1);
    PRISM_CUDA_CHECK(cudaGetLastError());  // a launch refused while capturing: no graph missing a pass
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(host_counters.data(), counters.data(), 2 * sizeof(unsigned), cudaMemcpyDeviceToHost, stream));
  }

  // The `batch` 8-bit images are in `input` (width x height each, packed, one after the other).
  std::vector<Result> run(int width, int height, int batch) {
    auto clock = std::chrono::steady_clock::now();
    prepare(width, height, batch);
    counters.reserve(3);
    // Room for more candidates than any image has shown; a rerun with more if not.
    size_t room = std::max({candidates.size(), size_t(1) << 16, size_t(batch) << 14});
    for (;;) {
      candidates.reserve(room);
      extrema.reserve(room);
      extremum_image.reserve(room);
      front_for(width, height, batch).launch(stream);
      PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (host_counters[0] <= candidates.size()) break;
      room = host_counters[0] + host_counters[0] / 4;
    }
    timings.pyramid = lap_ms(clock);
    const unsigned n = host_counters[1];
    const unsigned capacity = n * kMaxOrientations;
    raw.reserve(std::max(capacity, 1u));
    raw_image.reserve(std::max(capacity, 1u));
    if (n) {
      orientation_kernel<<<(n + kWarpsPerBlock - 1) / kWarpsPerBlock, kWarpsPerBlock * kLanes, 0, stream>>>(
          table, gauss.data(), extrema.data(), extremum_image.data(), n, raw.data(), raw_image.data(),
          counters.data() + 2, capacity);
      PRISM_CUDA_CHECK(cudaMemcpyAsync(host_counters.data() + 2, counters.data() + 2, sizeof(unsigned),
                                       cudaMemcpyDeviceToHost, stream));
      PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
    } else {
      host_counters[2] = 0;
    }
    const unsigned kps = host_counters[2];
    host_raw.reserve(std::max(kps, 1u));
    host_raw_image.reserve(std::max(kps, 1u));
    if (kps) {
      PRISM_CUDA_CHECK(
          cudaMemcpyAsync(host_raw.data(), raw.data(), kps * sizeof(RawKeypoint), cudaMemcpyDeviceToHost, stream));
      PRISM_CUDA_CHECK(
          cudaMemcpyAsync(host_raw_image.data(), raw_image.data(), kps * sizeof(int), cudaMemcpyDeviceToHost, stream));
      PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    timings.orientation = lap_ms(clock);
    // Each image's keypoints selected on their own (the selection sorts: their order here is free).
    // A batch's keypoints grouped by image (a counting sort into buffers kept between calls); one
    // image's are read where they were downloaded.
    const RawKeypoint* grouped = host_raw.data();
    image_start.assign(size_t(batch) + 1, 0);
    for (unsigned i = 0; i < kps; ++i) ++image_start[size_t(host_raw_image[i]) + 1];
    for (int b = 0; b < batch; ++b) image_start[b + 1] += image_start[b];
    if (batch > 1) {
      by_image.resize(kps);
      fill = image_start;
      for (unsigned i = 0; i < kps; ++i) by_image[fill[host_raw_image[i]]++] = host_raw[i];
      grouped = by_image.data();
    }
    std::vector<Result> out(batch);
    int total = 0;
    for (int b = 0; b < batch; ++b) {
      out[b].keypoints =
          select_keypoints(grouped + image_start[b], image_start[b + 1] - image_start[b], params.nfeatures);
      out[b].descriptors.create(int(out[b].keypoints.size()), kDescriptorSize, CV_32F);
      total += int(out[b].keypoints.size());
    }
    timings.select = lap_ms(clock);
    timings.descriptors = 0;
    if (total == 0) return out;
    host_jobs.reserve(total);
    for (int b = 0, j = 0; b < batch; ++b)
      for (const cv::KeyPoint& kp : out[b].keypoints) {
        const DescriptorSource s = descriptor_source(kp);
        host_jobs[j++] = {s.octave, s.layer, s.x, s.y, s.scl, s.angle, b};
      }
    jobs.reserve(total);
    descriptors.reserve(size_t(total) * kDescriptorSize);
    host_descriptors.reserve(size_t(total) * kDescriptorSize);
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(jobs.data(), host_jobs.data(), total * sizeof(DescriptorJob), cudaMemcpyHostToDevice, stream));
    descriptor_kernel<<<total, kDescriptorThreads, 0, stream>>>(table, gauss.data(), jobs.data(), descriptors.data());
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cudaMemcpyAsync(host_descriptors.data(), descriptors.data(),
                                     size_t(total) * kDescriptorSize * sizeof(float), cudaMemcpyDeviceToHost, stream));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
    const float* d = host_descriptors.data();
    for (Result& r : out) {
      const size_t count = size_t(r.descriptors.rows) * kDescriptorSize;
      if (count) std::copy(d, d + count, r.descriptors.ptr<float>());
      d += count;
    }
    timings.descriptors = lap_ms(clock);
    return out;
  }
};

CudaExtractor::CudaExtractor(const Params& params) : impl_(std::make_unique<Impl>()) {
  // Validates the parameters now rather than at the first image.
  for (const auto& k : plan_pyramid(64, 64, params).kernel)
    if (int(k.size()) > kMaxKernel)
      throw std::invalid_argument("sift: octave_layers " + std::to_string(params.octave_layers) + " with sigma " +
                                  std::to_string(params.sigma) + " needs a blur of " + std::to_string(k.size()) +
                                  " taps; the CUDA path takes at most " + std::to_string(kMaxKernel));
  // The largest descriptor window (layer = nOctaveLayers, xi < 0.5) must keep the fixed-point
  // sums' 32-bit halves exact (descriptor_kernel).
  const double scl = params.sigma * std::pow(2., (params.octave_layers + 0.5) / params.octave_layers);
  const int radius = int(std::lround(kDescSclFactor * scl * 1.4142135623730951 * (kDescWidth + 1) * 0.5)) + 1;
  if ((2 * radius + 1) * (2 * radius + 1) > kMaxDescSamples)
    throw std::invalid_argument("sift: sigma " + std::to_string(params.sigma) + " is too large for the CUDA path");
  impl_->params = params;
}
CudaExtractor::~CudaExtractor() = default;
CudaExtractor::CudaExtractor(CudaExtractor&&) noexcept = default;
CudaExtractor& CudaExtractor::operator=(CudaExtractor&&) noexcept = default;

Result CudaExtractor::detect_and_compute(const cv::Mat& grey) { return std::move(detect_and_compute_batch({grey})[0]); }

std::vector<Result> CudaExtractor::detect_and_compute_batch(const std::vector<cv::Mat>& greys, size_t max_bytes) {
  for (size_t i = 0; i < greys.size(); ++i) {
    try {
      check_grey(greys[i]);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string(e.what()) + " (image " + std::to_string(i) + " of the batch)");
    }
  }
  Impl& m = *impl_;
  // Same-sized images together (stable: the batches and so the results do not depend on the
  // order beyond it), each batch as large as max_bytes allows.
  std::vector<size_t> order(greys.size());
  std::iota(order.begin(), order.end(), size_t(0));
  const auto size_less = [&](size_t a, size_t b) {
    return std::make_pair(greys[a].cols, greys[a].rows) < std::make_pair(greys[b].cols, greys[b].rows);
  };
  std::stable_sort(order.begin(), order.end(), size_less);
  std::vector<Result> out(greys.size());
  for (size_t first = 0; first < order.size();) {
    const cv::Mat& g0 = greys[order[first]];
    const int w = g0.cols, h = g0.rows;
    const size_t per_image = m.image_bytes(w, h);
    size_t last = first;
    // At most 65535 images: the image-shaped passes take the image from gridDim.z.
    while (last < order.size() && last - first < 65535 && greys[order[last]].size() == g0.size() &&
           (last == first || (last - first + 1) * per_image <= max_bytes))
      ++last;
    const int batch = int(last - first);
    const size_t bytes = size_t(w) * h;
    m.staging.reserve(bytes * batch);
    m.input.reserve(bytes * batch);
    for (int b = 0; b < batch; ++b) {
      const cv::Mat& g = greys[order[first + b]];
      for (int y = 0; y < h; ++y) std::copy(g.ptr(y), g.ptr(y) + w, m.staging.data() + b * bytes + size_t(y) * w);
    }
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(m.input.data(), m.staging.data(), bytes * batch, cudaMemcpyHostToDevice, m.stream));
    std::vector<Result> results = m.run(w, h, batch);
    for (int b = 0; b < batch; ++b) out[order[first + b]] = std::move(results[b]);
    first = last;
  }
  return out;
}

Result CudaExtractor::detect_and_compute_device(const uint8_t* grey, size_t pitch, int width, int height) {
  if (!grey) throw std::invalid_argument("sift: null device image");
  check_size(width, height);
  if (pitch < size_t(width))
    throw std::invalid_argument("sift: a pitch of " + std::to_string(pitch) + " bytes for rows of " +
                                std::to_string(width));
  Impl& m = *impl_;
  m.input.reserve(size_t(width) * height);
  PRISM_CUDA_CHECK(cudaMemcpy2DAsync(m.input.data(), size_t(width), grey, pitch, size_t(width), size_t(height),
                                     cudaMemcpyDeviceToDevice, m.stream));
  return std::move(m.run(width, height, 1)[0]);
}

const CudaExtractor::Timings& CudaExtractor::last_timings() const { return impl_->timings; }
cudaStream_t CudaExtractor::stream() const { return impl_->stream; }

}  // namespace prism::sift
