// SIFT keypoints and descriptors (Lowe, "Distinctive Image Features from Scale-Invariant Keypoints",
// IJCV 2004) computed the way OpenCV 4.6's cv::SIFT computes them, on the CPU and on CUDA GPUs.
//
// Why our own: no public GPU SIFT is interchangeable with OpenCV's (../shared/FACTS.md, "GPU SIFT
// facts"), and a gallery enrolled with cv::SIFT must stay searchable with GPU-extracted queries.
// So this follows OpenCV 4.6's float pipeline step by step: the first octave upsampled 2x
// (INTER_LINEAR) and blurred from an assumed sigma of 0.5, nOctaveLayers + 3 Gaussian levels per
// octave (each blurred from the one before with OpenCV's separable kernels and its FMA order),
// DoG extrema over 26 neighbours above floor(0.5 x contrastThreshold / nOctaveLayers x 255), the
// sub-pixel refinement (5 steps, 3x3 solve by Cramer's rule), the contrast and edge tests, a
// 36-bin orientation histogram smoothed [1 4 6 4 1]/16 with a keypoint per peak at 80% of the
// highest, duplicates removed, the strongest nfeatures kept, and 4x4x8 descriptors clamped at 0.2
// and scaled to 0..255 integers.
//
// Where it departs from OpenCV (each costs a float rounding, not an algorithmic difference; the
// tests state the tolerance against cv::SIFT on real images):
// - exp, atan2, sin/cos and 2^x are our own float polynomials (OpenCV: hal::exp32f, fastAtan2,
//   cosf/sinf, powf), so the CPU and CUDA paths run the same arithmetic and agree bit for bit.
// - Order of the sums: an orientation histogram is summed in 32 interleaved partial sums (rows
//   i, i + 32, ...) added in order, as a warp sums it; a descriptor histogram is summed exactly in
//   fixed point (2^-28), in any order, as a block's threads add with atomics. OpenCV sums both in
//   float in scan order.
// - The refinement's 3x3 solve and the other small expressions are evaluated without FMA
//   contraction (OpenCV's AVX2 build lets the compiler contract them).
//
// Output order is a total order (response descending, then y, x, size, angle, octave), so results
// are deterministic and both paths list the same keypoints in the same order.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <opencv2/core.hpp>

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::sift {

constexpr int kDescriptorSize = 128;  // 4 x 4 cells x 8 orientations

// cv::SIFT::create's parameters, with its defaults.
struct Params {
  // Keep exactly the strongest this many in the total order below (0: all). cv::SIFT keeps every
  // tie at the cut too (N + 1 to N + 3 at times); texture/features.cpp cuts its output the same way.
  int nfeatures = 0;
  int octave_layers = 3;
  double contrast_threshold = 0.04;
  double edge_threshold = 10;
  double sigma = 1.6;
};

// Keypoints in cv::KeyPoint's conventions (pixel centres at integers, angle in degrees, octave
// packed as octave | layer << 8 | round((xi + 0.5) x 255) << 16), descriptors as cv::SIFT's
// CV_32F output: [count][128] floats holding integers 0..255.
struct Result {
  std::vector<cv::KeyPoint> keypoints;
  cv::Mat descriptors;  // count x 128, CV_32F
};

// The order of Result::keypoints: strongest response first, then y, x, size, angle and octave
// ascending. A total order on distinct keypoints, so that features do not depend on the order an
// extractor found them in (cv::SIFT's varies from run to run); texture::Features uses it too.
bool strongest_first(const cv::KeyPoint& a, const cv::KeyPoint& b);

// The CPU path: plain loops, one thread. It exists to define what the CUDA path computes (the two
// are equal bit for bit) and to test that definition against cv::SIFT where there is no GPU;
// cv::SIFT (vectorised, threaded) remains the faster CPU extractor.
Result detect_and_compute_cpu(const cv::Mat& grey, const Params& params = {});

#if defined(PRISM_HAVE_CUDA)
// The CUDA path on the current device, on its own stream. Buffers grow to the largest image seen
// and are kept between calls, so a stream of same-sized frames allocates nothing after the first.
// Not thread-safe: one extractor per thread (or per element).
class CudaExtractor {
 public:
  explicit CudaExtractor(const Params& params = {});
  ~CudaExtractor();
  CudaExtractor(CudaExtractor&&) noexcept;
  CudaExtractor& operator=(CudaExtractor&&) noexcept;

  // An 8-bit grey image in host memory.
  Result detect_and_compute(const cv::Mat& grey);
  // Many images, for enrolment: images of one size go through every kernel together (the pyramid
  // arrays hold the whole batch; each block knows its image), so a batch pays the launches and
  // host syncs of one image. Each result equals detect_and_compute's for that image, bit for bit,
  // in the order given. A batch takes at most `max_bytes` of device buffers (one image at least;
  // about 80 MB per 640x480 image, 200 MB per 1024x768), kept for the next call.
  std::vector<Result> detect_and_compute_batch(const std::vector<cv::Mat>& greys, size_t max_bytes = size_t(1) << 31);
  // An 8-bit grey image already in device memory (`pitch` bytes per row), read on this
  // extractor's stream: the caller orders its writes before (an event or a synchronised stream).
  Result detect_and_compute_device(const uint8_t* grey, size_t pitch, int width, int height);

  // Where the last call's time went (a batch: its last group of one size), in host milliseconds:
  // the pyramid and the extrema (up to their count on the host), the orientations with the
  // keypoints' download, the selection on the host, and the descriptors with their download.
  struct Timings {
    double pyramid = 0, orientation = 0, select = 0, descriptors = 0;
  };
  const Timings& last_timings() const;
  // The stream every call works on (made in the context current at construction): work a caller
  // enqueues there is ordered before the next call reads its input, with no event or host sync.
  cudaStream_t stream() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
#endif

}  // namespace prism::sift
