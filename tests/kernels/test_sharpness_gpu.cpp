// texture::CudaSharpness (textureid's min-sharpness of frames in GPU memory) against the CPU path
// (test_sharpness.cpp: equal to OpenCV's): the same integer sums and so the same double, bit for
// bit, on random sizes (one-pixel sides, odd widths, pitched rows, images taller than the grid) and
// on real photos; the same on every run; bad images refused.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <opencv2/imgproc.hpp>

#include <iostream>
#include <random>
#include <stdexcept>
#include <string>

#include "common/device_array.h"
#include "ppm.h"
#include "prism_test.h"
#include "test_env.h"
#include "texture/sharpness.h"

namespace prism {
namespace {

// `grey` copied to the device with `pad` bytes after each row (pitch = width + pad).
gpu::DeviceArray<uint8_t> upload(const cv::Mat& grey, size_t pad, size_t* pitch) {
  *pitch = size_t(grey.cols) + pad;
  gpu::DeviceArray<uint8_t> d(*pitch * size_t(grey.rows));
  PRISM_CUDA_CHECK(cudaMemset(d.data(), 0xff, d.bytes()));  // padding that would show if it were read
  PRISM_CUDA_CHECK(cudaMemcpy2D(d.data(), *pitch, grey.data, grey.step[0], size_t(grey.cols), size_t(grey.rows),
                                cudaMemcpyHostToDevice));
  return d;
}

void expect_equal(texture::CudaSharpness& gpu_sharpness, const cv::Mat& grey, size_t pad, cudaStream_t stream) {
  size_t pitch = 0;
  const gpu::DeviceArray<uint8_t> d = upload(grey, pad, &pitch);
  const texture::LaplacianSums c = texture::laplacian_sums(grey.data, grey.step[0], grey.cols, grey.rows);
  const texture::LaplacianSums g = gpu_sharpness.sums(d.data(), pitch, grey.cols, grey.rows, stream);
  EXPECT_EQ(g.sum, c.sum);
  EXPECT_EQ(g.squares, c.squares);
  EXPECT_EQ(g.count, c.count);
  const double cpu = texture::sharpness(grey),
               gpu = gpu_sharpness.measure(d.data(), pitch, grey.cols, grey.rows, stream);
  EXPECT_EQ(gpu, cpu);
  EXPECT_EQ(gpu_sharpness.measure(d.data(), pitch, grey.cols, grey.rows, stream), gpu) << "another run";
}

TEST(SharpnessGpu, EqualsTheCpuPathBitForBitOnRandomSizes) {
  PRISM_NEED_GPU();
  const unsigned seed = std::random_device{}();
  std::cout << "random images from seed " << seed << "\n";
  std::mt19937 rng(seed);
  gpu::Stream stream = gpu::Stream::create();
  texture::CudaSharpness s;
  const cv::Size fixed[] = {{1, 1}, {1, 9}, {7, 1}, {2, 2}, {3, 5}, {33, 1500}, {1921, 1081}};
  for (int trial = 0; trial < 40; ++trial) {
    const cv::Size size =
        trial < 7 ? fixed[trial] : cv::Size((1 + int(rng() % 700)) | (trial % 2), 1 + int(rng() % 500));
    const size_t pad = trial % 3 == 0 ? 0 : rng() % 64;
    cv::Mat g(size, CV_8UC1);
    cv::theRNG().state = rng();
    if (trial % 4 == 3)
      g.setTo(int(rng() % 256));  // flat: 0
    else
      cv::randu(g, 0, 256);
    SCOPED_TRACE(std::to_string(size.width) + "x" + std::to_string(size.height) + " pad " + std::to_string(pad));
    expect_equal(s, g, pad, stream);
  }
}

TEST(SharpnessGpu, EqualsTheCpuPathOnRealPhotos) {
  PRISM_NEED_GPU();
  if (test::gpu_required()) PRISM_NEED_FILE(test::data_dir() + "/images/fruits.ppm");
  gpu::Stream stream = gpu::Stream::create();
  texture::CudaSharpness s;
  int photos = 0;
  for (const char* name : {"fruits", "baboon"}) {
    const cv::Mat bgr = test::read_ppm(test::data_dir() + "/images/" + name + ".ppm");
    if (bgr.empty()) continue;
    cv::Mat grey, blurred;
    cv::cvtColor(bgr, grey, cv::COLOR_BGR2GRAY);
    cv::GaussianBlur(grey, blurred, cv::Size(0, 0), 3);
    SCOPED_TRACE(name);
    ++photos;
    expect_equal(s, grey, 0, stream);
    expect_equal(s, grey(cv::Rect(1, 2, (grey.cols - 5) | 1, grey.rows - 3)), 13, stream);  // odd width, pitched
    expect_equal(s, blurred, 32, stream);
  }
  if (!photos) std::cerr << "*** no PPM photos under " << test::data_dir() << "/images: random images only ***\n";
}

TEST(SharpnessGpu, BadImagesAreRefused) {
  PRISM_NEED_GPU();
  gpu::Stream stream = gpu::Stream::create();
  texture::CudaSharpness s;
  gpu::DeviceArray<uint8_t> d(64);
  EXPECT_THROW(s.sums(nullptr, 8, 8, 8, stream), std::invalid_argument);
  EXPECT_THROW(s.sums(d.data(), 4, 8, 8, stream), std::invalid_argument);
  EXPECT_THROW(s.sums(d.data(), 8, 0, 8, stream), std::invalid_argument);
  PRISM_CUDA_CHECK(cudaMemset(d.data(), 7, d.bytes()));
  EXPECT_EQ(s.measure(d.data(), 8, 8, 8, stream), 0.0);  // and it still works after refusing
}

}  // namespace
}  // namespace prism
