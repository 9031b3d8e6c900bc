// The CUDA path of kernels/sift: the pyramid as separable blur passes (the DoG fused into the column
// pass), one launch for the extrema of every octave and layer (refined in the same thread), one
// warp per extremum for its orientations and one warp per kept keypoint for its descriptor. The
// per-pixel and per-keypoint arithmetic is sift_core.h's, shared with sift.cpp; this file is built
// with --fmad=false so that nvcc contracts nothing the CPU path does not.
//
// Host work per image: the selection of keypoints (sift_plan.h's, shared with the CPU path), with
// three small copies back (extremum count, keypoints, descriptors). Results are deterministic: the
// extrema are found in any order, but the selection sorts them in a total order.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/device_array.h"
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
};

__global__ void upsample_kernel(const uint8_t* src, size_t pitch, int w, int h, float* dst) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= 2 * w || y >= 2 * h) return;
  dst[size_t(y) * 2 * w + x] = upsample2x([&](int sx, int sy) { return src[size_t(sy) * pitch + sx]; }, w, h, x, y);
}

__global__ void blur_rows_kernel(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols,
                                 const float* __restrict__ kernel, int ksize) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= cols || y >= rows) return;
  const float* row = src + size_t(y) * cols;
  const int r = ksize / 2;
  dst[size_t(y) * cols + x] =
      blur_row(kernel, ksize, [&](int k) { return __ldg(row + reflect101(x - r + k, cols)); });
}

// The column pass, writing the level and (when `below` is given) the DoG layer level - below.
__global__ void blur_columns_kernel(const float* __restrict__ src, float* __restrict__ dst, int rows, int cols,
                                    const float* __restrict__ kernel, int ksize, const float* __restrict__ below,
                                    float* __restrict__ dog) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= cols || y >= rows) return;
  const float v =
      blur_column(kernel, ksize, [&](int k) { return __ldg(src + size_t(reflect101(y + k, rows)) * cols + x); });
  const size_t i = size_t(y) * cols + x;
  dst[i] = v;
  if (below) dog[i] = v - below[i];
}

__global__ void halve_kernel(const float* __restrict__ src, int src_cols, float* __restrict__ dst, int rows, int cols) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= cols || y >= rows) return;
  dst[size_t(y) * cols + x] = src[size_t(2 * y) * src_cols + 2 * x];
}

// blockIdx.z = octave * layers + (layer - 1); blocks past a small octave's edge return at once.
__global__ void extrema_kernel(OctaveTable t, const float* __restrict__ dogs, int threshold, float contrast,
                               float edge, float sigma, Extremum* out, unsigned* count, unsigned capacity) {
  const int octave = blockIdx.z / t.layers, layer = blockIdx.z % t.layers + 1;
  const int c = blockIdx.x * blockDim.x + threadIdx.x + kBorder, r = blockIdx.y * blockDim.y + threadIdx.y + kBorder;
  if (c >= t.cols[octave] - kBorder || r >= t.rows[octave] - kBorder) return;
  DogOctave d{};
  const size_t plane = size_t(t.rows[octave]) * t.cols[octave];
  for (int i = 0; i < t.layers + 2; ++i) d.layer[i] = dogs + t.dog[octave] + i * plane;
  d.rows = t.rows[octave];
  d.cols = t.cols[octave];
  d.step = d.cols;
  Extremum e;
  if (!is_extremum(d, layer, r, c, threshold) || !refine_extremum(d, octave, layer, r, c, t.layers, contrast, edge, sigma, &e))
    return;
  const unsigned i = atomicAdd(count, 1u);
  if (i < capacity) out[i] = e;
}

// A keypoint as the orientation kernel emits it (cv::KeyPoint's fields, octave-0 coordinates).
struct RawKeypoint {
  float x, y, size, angle, response;
  int32_t octave;
};

constexpr int kWarpsPerBlock = 4;

__global__ void orientation_kernel(OctaveTable t, const float* __restrict__ gauss, const Extremum* __restrict__ extrema,
                                   unsigned n, RawKeypoint* out, unsigned* count, unsigned capacity) {
  __shared__ float partial[kWarpsPerBlock][kOriBins * kLanes];
  __shared__ float raw[kWarpsPerBlock][kOriBins], hist[kWarpsPerBlock][kOriBins];
  const int warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const unsigned index = blockIdx.x * kWarpsPerBlock + warp;
  if (index >= n) return;  // whole warps leave together: no block-wide barrier below
  const Extremum e = extrema[index];
  float* p = partial[warp];
  for (int b = 0; b < kOriBins; ++b) p[b * kLanes + lane] = 0.f;
  const size_t plane = size_t(t.rows[e.octave]) * t.cols[e.octave];
  const Level img{gauss + t.gauss[e.octave] + e.layer * plane, t.rows[e.octave], t.cols[e.octave], t.cols[e.octave]};
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
    if (i < capacity) out[i] = {e.x, e.y, e.size, angle, e.response, e.packed_octave};
  }
}

struct DescriptorJob {
  int octave, layer;
  float x, y, scl, angle;
};

__global__ void descriptor_kernel(OctaveTable t, const float* __restrict__ gauss, const DescriptorJob* __restrict__ jobs,
                                  int n, float* out) {
  extern __shared__ float shared[];
  float* p = shared;                          // [kDescHistLen][kLanes]
  float* summed = shared + kDescHistLen * kLanes;  // [kDescHistLen]
  const int lane = threadIdx.x;
  const DescriptorJob job = jobs[blockIdx.x];
  for (int b = 0; b < kDescHistLen; ++b) p[b * kLanes + lane] = 0.f;
  const int rows = t.rows[job.octave], cols = t.cols[job.octave];
  const Level img{gauss + t.gauss[job.octave] + job.layer * size_t(rows) * cols, rows, cols, cols};
  const DescriptorWindow w = descriptor_window(job.x, job.y, job.angle, job.scl, rows, cols);
  descriptor_partial(img, w, lane, p + lane, kLanes);
  __syncwarp();
  for (int b = lane; b < kDescHistLen; b += kLanes) {
    float s = 0;
    for (int l = 0; l < kLanes; ++l) s += p[b * kLanes + l];
    summed[b] = s;
  }
  __syncwarp();
  if (lane == 0) descriptor_finish(summed, out + size_t(blockIdx.x) * kDescriptorSize);
}

dim3 grid_for(int cols, int rows, dim3 block) { return dim3((cols + block.x - 1) / block.x, (rows + block.y - 1) / block.y); }

}  // namespace

struct CudaExtractor::Impl {
  Params params;
  gpu::Stream stream = gpu::Stream::create();
  gpu::PinnedArray<uint8_t> staging;
  gpu::DeviceArray<uint8_t> input;
  gpu::DeviceArray<float> gauss, dogs, scratch, kernels;
  gpu::DeviceArray<Extremum> extrema;
  gpu::DeviceArray<RawKeypoint> raw;
  gpu::DeviceArray<unsigned> counters;  // [0] extrema, [1] keypoints
  gpu::PinnedArray<unsigned> host_counters{2};
  gpu::PinnedArray<RawKeypoint> host_raw;
  gpu::DeviceArray<DescriptorJob> jobs;
  gpu::PinnedArray<DescriptorJob> host_jobs;
  gpu::DeviceArray<float> descriptors;
  gpu::PinnedArray<float> host_descriptors;
  cv::Size planned;
  Pyramid plan;
  OctaveTable table{};
  std::vector<int> kernel_offset;

  void prepare(int width, int height) {
    if (planned == cv::Size(width, height)) return;
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
    }
    gauss.reserve(g);
    dogs.reserve(d);
    scratch.reserve(size_t(plan.size[0].area()) * 2);
    std::vector<float> k;
    kernel_offset.clear();
    for (const auto& v : plan.kernel) {
      kernel_offset.push_back(int(k.size()));
      k.insert(k.end(), v.begin(), v.end());
    }
    kernels = gpu::device_copy(k.data(), k.size());
    planned = cv::Size(width, height);
  }

  void blur(const float* src, float* dst, int rows, int cols, int level, const float* below, float* dog) {
    const dim3 block(32, 8), grid = grid_for(cols, rows, block);
    float* tmp = scratch.data();
    const float* k = kernels.data() + kernel_offset[level];
    const int ksize = int(plan.kernel[level].size());
    blur_rows_kernel<<<grid, block, 0, stream>>>(src, tmp, rows, cols, k, ksize);
    blur_columns_kernel<<<grid, block, 0, stream>>>(tmp, dst, rows, cols, k, ksize, below, dog);
  }

  Result run(const uint8_t* grey, size_t pitch, int width, int height) {
    prepare(width, height);
    const int L = plan.layers, levels = L + 3;
    // The upsampled input goes to the second half of the scratch, the row pass uses the first.
    float* up = scratch.data() + plan.size[0].area();
    const dim3 block(32, 8);
    upsample_kernel<<<grid_for(plan.size[0].width, plan.size[0].height, block), block, 0, stream>>>(grey, pitch, width,
                                                                                                    height, up);
    for (int o = 0; o < plan.octaves; ++o) {
      const int rows = table.rows[o], cols = table.cols[o];
      const size_t plane = size_t(rows) * cols;
      float* g = gauss.data() + table.gauss[o];
      if (o == 0) {
        blur(up, g, rows, cols, 0, nullptr, nullptr);
      } else {
        const float* src = gauss.data() + table.gauss[o - 1] + size_t(L) * table.rows[o - 1] * table.cols[o - 1];
        halve_kernel<<<grid_for(cols, rows, block), block, 0, stream>>>(src, table.cols[o - 1], g, rows, cols);
      }
      for (int i = 1; i < levels; ++i)
        blur(g + (i - 1) * plane, g + i * plane, rows, cols, i, g + (i - 1) * plane,
             dogs.data() + table.dog[o] + (i - 1) * plane);
    }
    PRISM_CUDA_CHECK(cudaGetLastError());

    // Extrema, with room for more than any image has shown; a rerun with more if not.
    counters.reserve(2);
    if (extrema.size() == 0) extrema.resize(1u << 16);
    for (;;) {
      PRISM_CUDA_CHECK(cudaMemsetAsync(counters.data(), 0, 2 * sizeof(unsigned), stream));
      const dim3 eb(32, 8);
      const dim3 eg((table.cols[0] - 2 * kBorder + eb.x - 1) / eb.x, (table.rows[0] - 2 * kBorder + eb.y - 1) / eb.y,
                    unsigned(plan.octaves * L));
      extrema_kernel<<<eg, eb, 0, stream>>>(table, dogs.data(), plan.threshold, float(params.contrast_threshold),
                                            float(params.edge_threshold), float(params.sigma), extrema.data(),
                                            counters.data(), unsigned(extrema.size()));
      PRISM_CUDA_CHECK(cudaMemcpyAsync(host_counters.data(), counters.data(), sizeof(unsigned), cudaMemcpyDeviceToHost,
                                       stream));
      PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (host_counters[0] <= extrema.size()) break;
      extrema.resize(host_counters[0] + host_counters[0] / 4);
    }
    const unsigned n = host_counters[0];
    const unsigned capacity = n * kMaxOrientations;
    raw.reserve(std::max(capacity, 1u));
    if (n) {
      orientation_kernel<<<(n + kWarpsPerBlock - 1) / kWarpsPerBlock, kWarpsPerBlock * kLanes, 0, stream>>>(
          table, gauss.data(), extrema.data(), n, raw.data(), counters.data() + 1, capacity);
      PRISM_CUDA_CHECK(cudaMemcpyAsync(host_counters.data() + 1, counters.data() + 1, sizeof(unsigned),
                                       cudaMemcpyDeviceToHost, stream));
      PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
    } else {
      host_counters[1] = 0;
    }
    const unsigned kps = host_counters[1];
    host_raw.reserve(std::max(kps, 1u));
    if (kps) {
      PRISM_CUDA_CHECK(
          cudaMemcpyAsync(host_raw.data(), raw.data(), kps * sizeof(RawKeypoint), cudaMemcpyDeviceToHost, stream));
      PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    std::vector<cv::KeyPoint> found;
    found.reserve(kps);
    for (unsigned i = 0; i < kps; ++i) {
      const RawKeypoint& k = host_raw[i];
      found.emplace_back(k.x, k.y, k.size, k.angle, k.response, k.octave);
    }

    Result out;
    out.keypoints = select_keypoints(std::move(found), params.nfeatures);
    const int m = int(out.keypoints.size());
    out.descriptors.create(m, kDescriptorSize, CV_32F);
    if (m == 0) return out;
    host_jobs.reserve(m);
    for (int i = 0; i < m; ++i) {
      const DescriptorSource s = descriptor_source(out.keypoints[i]);
      host_jobs[i] = {s.octave, s.layer, s.x, s.y, s.scl, s.angle};
    }
    jobs.reserve(m);
    descriptors.reserve(size_t(m) * kDescriptorSize);
    host_descriptors.reserve(size_t(m) * kDescriptorSize);
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(jobs.data(), host_jobs.data(), m * sizeof(DescriptorJob), cudaMemcpyHostToDevice, stream));
    const size_t shared = (kDescHistLen * kLanes + kDescHistLen) * sizeof(float);
    descriptor_kernel<<<m, kLanes, shared, stream>>>(table, gauss.data(), jobs.data(), m, descriptors.data());
    PRISM_CUDA_CHECK(cudaGetLastError());
    PRISM_CUDA_CHECK(cudaMemcpyAsync(host_descriptors.data(), descriptors.data(), size_t(m) * kDescriptorSize * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::copy(host_descriptors.data(), host_descriptors.data() + size_t(m) * kDescriptorSize,
              out.descriptors.ptr<float>());
    return out;
  }
};

CudaExtractor::CudaExtractor(const Params& params) : impl_(std::make_unique<Impl>()) {
  plan_pyramid(64, 64, params);  // validates the parameters now rather than at the first image
  impl_->params = params;
}
CudaExtractor::~CudaExtractor() = default;
CudaExtractor::CudaExtractor(CudaExtractor&&) noexcept = default;
CudaExtractor& CudaExtractor::operator=(CudaExtractor&&) noexcept = default;

Result CudaExtractor::detect_and_compute(const cv::Mat& grey) {
  check_grey(grey);
  Impl& m = *impl_;
  const size_t bytes = grey.total();
  m.staging.reserve(bytes);
  m.input.reserve(bytes);
  for (int y = 0; y < grey.rows; ++y) std::copy(grey.ptr(y), grey.ptr(y) + grey.cols, m.staging.data() + size_t(y) * grey.cols);
  PRISM_CUDA_CHECK(cudaMemcpyAsync(m.input.data(), m.staging.data(), bytes, cudaMemcpyHostToDevice, m.stream));
  return m.run(m.input.data(), size_t(grey.cols), grey.cols, grey.rows);
}

Result CudaExtractor::detect_and_compute_device(const uint8_t* grey, size_t pitch, int width, int height) {
  if (!grey) throw std::invalid_argument("sift: null device image");
  check_size(width, height);
  return impl_->run(grey, pitch, width, height);
}

}  // namespace prism::sift
