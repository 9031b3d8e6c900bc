// Sharpness of an 8-bit grey image: the variance of its Laplacian, what textureid's min-sharpness
// compares (blurred or defocused frames score low). The definition is OpenCV 4.6's
//   cv::Laplacian(grey, lap, CV_32F); cv::meanStdDev(lap, mean, stddev); return stddev^2;
// that is, the 3x3 kernel 0 1 0 / 1 -4 1 / 0 1 0 (ksize 1) with BORDER_REFLECT_101, then
// mean = S / n and stddev = sqrt(max(Q / n - mean^2, 0)) in double, S and Q the sum and the sum
// of squares of the Laplacian. The Laplacian of 8-bit pixels is an integer (|L| <= 1020) and
// OpenCV's double sums of such integers are exact (below 2^53 for any image under 8 gigapixels),
// so we sum in 64-bit integers, in any order, and finish with OpenCV's double arithmetic: the CPU
// path, the CUDA path and OpenCV agree bit for bit (tests/kernels/test_sharpness.cpp and
// test_sharpness_gpu.cpp), and the CUDA reduction is deterministic without ordering its sums.
// The per-pixel Laplacian is shared by both paths (sharpness_pixel.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include <opencv2/core.hpp>

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "common/device_array.h"
#endif

namespace prism::texture {

// The integer sums the variance is made of, over `count` pixels.
struct LaplacianSums {
  int64_t sum = 0;
  uint64_t squares = 0;
  int64_t count = 0;
};

// The variance from the sums, as cv::meanStdDev computes it (then squared, as sharpness() squares
// the standard deviation). 0 for no pixels.
double laplacian_variance(const LaplacianSums& s);

// The sums of an 8-bit grey image, `pitch` bytes per row. Throws std::invalid_argument for an empty
// image or a pitch under the width.
LaplacianSums laplacian_sums(const uint8_t* grey, size_t pitch, int width, int height);

// laplacian_variance(laplacian_sums(grey)) of a CV_8UC1 image (any step); throws
// std::invalid_argument naming the type or size otherwise. A view into a larger image is measured
// on its own pixels, mirrored at its own border (cv::Laplacian would read the parent's pixels
// there unless given BORDER_ISOLATED).
double sharpness(const cv::Mat& grey);

#if defined(PRISM_HAVE_CUDA)
// sharpness() of a grey image in device memory, on the caller's stream, downloading only the two
// sums: one memset, one kernel (per-thread integer sums, a block reduction, one 64-bit integer
// atomic per block and sum: exact in any order) and one 16-byte copy to pinned memory, then the
// stream is synchronised (the caller needs the value to decide). Its buffers are allocated once, by
// the constructor, in the context current then: make and destroy it in the context it runs in.
class CudaSharpness {
 public:
  CudaSharpness();
  // The sums of `grey` (device, `pitch` bytes per row), its writes ordered before this call on
  // `stream` (or already complete). Throws std::invalid_argument for an empty image or a pitch under
  // the width, gpu::CudaError on a CUDA failure.
  LaplacianSums sums(const uint8_t* grey, size_t pitch, int width, int height, cudaStream_t stream);
  double measure(const uint8_t* grey, size_t pitch, int width, int height, cudaStream_t stream) {
    return laplacian_variance(sums(grey, pitch, width, height, stream));
  }

 private:
  gpu::DeviceArray<unsigned long long> device_sums_;  // sum (two's complement), squares
  gpu::PinnedArray<unsigned long long> host_sums_;
};
#endif

}  // namespace prism::texture
