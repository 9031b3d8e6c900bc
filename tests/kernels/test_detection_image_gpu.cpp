// The detection image on the GPU (kernels/texture/detection_image.h) against its CPU path, which
// test_detection_image.cpp holds equal to OpenCV: the shrink and the RGBA grey equal bit for bit
// on pitched device images; and CudaFeatureExtractor::extract_device, which shrinks on the device,
// gives exactly extract()'s features (cv::resize on the host) for the same pixels.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <opencv2/imgproc.hpp>

#include <random>
#include <string>
#include <vector>

#include "common/device_array.h"
#include "detection_cases.h"
#include "prism_test.h"
#include "texture/detection_image.h"
#include "texture/features.h"
#include "texture/normalise.h"
#include "texture_cases.h"

namespace prism {
namespace {

// `m` in device memory with a row pitch padded past its width (as GstCudaMemory pitches frames).
struct DeviceImage {
  gpu::DeviceArray<uint8_t> data;
  size_t pitch = 0;
  explicit DeviceImage(const cv::Mat& m) : pitch((m.cols * m.elemSize() + 255) / 256 * 256 + 256) {
    data.resize(pitch * m.rows);
    PRISM_CUDA_CHECK(cudaMemset(data.data(), 0xAB, data.bytes()));
    PRISM_CUDA_CHECK(
        cudaMemcpy2D(data.data(), pitch, m.data, m.step, m.cols * m.elemSize(), m.rows, cudaMemcpyHostToDevice));
  }
};

cv::Mat download(const uint8_t* d, size_t pitch, int width, int height) {
  cv::Mat m(height, width, CV_8UC1);
  PRISM_CUDA_CHECK(cudaMemcpy2D(m.data, m.step, d, pitch, width, height, cudaMemcpyDeviceToHost));
  return m;
}

TEST(DetectionImageGpu, AreaShrinkEqualsTheCpuPath) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  gpu::Stream stream = gpu::Stream::create();
  texture::CudaAreaResize shrink;
  int kind = 0;
  for (const test::ShrinkCase& c : test::shrink_cases(rng, 20)) {
    const cv::Mat src = test::shrink_content(rng, c.src_width, c.src_height, kind++);
    const texture::AreaPlan plan = texture::make_area_plan(c.src_width, c.src_height, c.dst_width, c.dst_height);
    cv::Mat expected(c.dst_height, c.dst_width, CV_8UC1);
    texture::area_resize(plan, src.data, src.step, expected.data, expected.step);
    const DeviceImage in(src);
    const size_t out_pitch = size_t(c.dst_width) + 64;
    gpu::DeviceArray<uint8_t> out(out_pitch * c.dst_height);
    shrink.prepare(c.src_width, c.src_height, c.dst_width, c.dst_height);
    shrink.run(in.data.data(), in.pitch, out.data(), out_pitch, stream);
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
    const cv::Mat got = download(out.data(), out_pitch, c.dst_width, c.dst_height);
    ASSERT_EQ(cv::countNonZero(got != expected), 0) << c.name() << ", content " << (kind - 1) % 4;
  }
}

TEST(DetectionImageGpu, RgbaGreyEqualsTheCpuPath) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  gpu::Stream stream = gpu::Stream::create();
  for (const cv::Size size : {cv::Size(1920, 1080), cv::Size(641, 479), cv::Size(1, 1)}) {
    cv::Mat rgba(size, CV_8UC4);
    cv::theRNG().state = rng();
    cv::randu(rgba, 0, 256);
    cv::Mat expected(size, CV_8UC1);
    texture::grey_from_rgba(rgba.data, rgba.step, rgba.cols, rgba.rows, expected.data, expected.step);
    const DeviceImage in(rgba);
    gpu::DeviceArray<uint8_t> out(size_t(size.area()));
    texture::grey_from_rgba_cuda(in.data.data(), in.pitch, size.width, size.height, out.data(), size.width, stream);
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(cv::countNonZero(download(out.data(), size.width, size.width, size.height) != expected), 0) << size;
  }
}

void expect_same(const texture::Features& a, const texture::Features& b, const std::string& what) {
  EXPECT_EQ(a.width, b.width) << what;
  EXPECT_EQ(a.height, b.height) << what;
  ASSERT_EQ(a.count(), b.count()) << what;
  for (int i = 0; i < a.count(); ++i) {
    const texture::Keypoint &p = a.keypoints[i], &q = b.keypoints[i];
    ASSERT_TRUE(p.x == q.x && p.y == q.y && p.size == q.size && p.angle == q.angle && p.response == q.response &&
                p.octave == q.octave)
        << what << ": keypoint " << i;
  }
  EXPECT_EQ(a.descriptors, b.descriptors) << what;
}

// 1080p and 4K (shrunk to 1024 on the device, as extract() shrinks them on the host), portrait,
// an integer ratio (OpenCV's fast path) and 640x480 (not shrunk): the same keypoints and
// descriptors, twice (the second call reuses the buffers and tables).
TEST(DetectionImageGpu, ExtractDeviceEqualsExtractOfTheSamePixels) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  texture::CudaFeatureExtractor extractor;
  for (const cv::Size size :
       {cv::Size(1920, 1080), cv::Size(3840, 2160), cv::Size(1080, 1920), cv::Size(2048, 1536), cv::Size(640, 480)}) {
    const cv::Mat grey = test::random_texture(rng, size.width, size.height);
    const texture::Features host = extractor.extract(grey);
    EXPECT_GT(host.count(), 100) << size;
    const DeviceImage in(grey);
    for (int run = 0; run < 2; ++run) {
      const texture::Features dev = extractor.extract_device(in.data.data(), in.pitch, size.width, size.height);
      expect_same(dev, host,
                  std::to_string(size.width) + "x" + std::to_string(size.height) + " run " + std::to_string(run));
    }
  }
  EXPECT_THROW(extractor.extract_device(nullptr, 640, 640, 480), std::invalid_argument);
}

// The poor-light normalisation (CLAHE, texture/normalise.h) on the device equals the CPU path's bits,
// which test_normalise.cpp holds equal to cv::CLAHE: sizes that divide into the grid and sizes that
// do not, from 1 to 32 tiles, clip limits 1 to 40, dark and bright contents, pitched input.
TEST(DetectionImageGpu, NormaliserEqualsTheCpuPath) {
  PRISM_NEED_GPU();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  texture::CudaNormaliser normaliser;
  const std::vector<std::pair<cv::Size, std::string>> cases = {
      {{640, 480}, "clahe-4-8"}, {{1024, 576}, "clahe-4-8"}, {{333, 251}, "clahe-2-8"}, {{64, 64}, "clahe-40-32"},
      {{1000, 17}, "clahe-1-3"}, {{9, 9}, "clahe-3-16"},     {{1, 1}, "clahe-4-1"},     {{517, 1023}, "clahe-7-5"}};
  for (const auto& [size, name] : cases) {
    cv::Mat grey = test::random_texture(rng, std::max(size.width, 8), std::max(size.height, 8));
    grey = grey(cv::Rect(0, 0, size.width, size.height)).clone();
    grey.convertTo(grey, CV_8U, 0.2 + 0.6 * (rng() % 100) / 100.0);  // dark to mid
    const texture::Normalisation n = texture::parse_normalisation(name);
    const cv::Mat want = texture::normalise(grey, n);
    const DeviceImage in(grey);
    gpu::DeviceArray<uint8_t> out(size_t(size.area()));
    normaliser.run(n, in.data.data(), in.pitch, size.width, size.height, out.data(), size_t(size.width), nullptr);
    PRISM_CUDA_CHECK(cudaDeviceSynchronize());
    const cv::Mat got = download(out.data(), size_t(size.width), size.width, size.height);
    EXPECT_EQ(cv::norm(got, want, cv::NORM_INF), 0) << name << " " << size;
  }
  gpu::DeviceArray<uint8_t> out(16);
  EXPECT_THROW(normaliser.run(texture::Normalisation{}, out.data(), 4, 4, 4, out.data(), 4, nullptr),
               std::invalid_argument);
}

// A gallery that records a normalisation: extract_device normalises on the device and gives
// exactly extract()'s features (normalised on the host), with and without the shrink.
TEST(DetectionImageGpu, ExtractDeviceNormalisesAsExtract) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  texture::FeatureParams p;
  p.normalisation = texture::poor_light_normalisation();
  texture::CudaFeatureExtractor extractor(p);
  for (const cv::Size size : {cv::Size(640, 480), cv::Size(1920, 1080)}) {
    cv::Mat grey = test::random_texture(rng, size.width, size.height);
    grey.convertTo(grey, CV_8U, 0.25);  // a dim capture
    const texture::Features host = extractor.extract(grey);
    EXPECT_GT(host.count(), 100) << size;
    const DeviceImage in(grey);
    expect_same(extractor.extract_device(in.data.data(), in.pitch, size.width, size.height), host,
                std::to_string(size.width) + "x" + std::to_string(size.height) + " normalised");
  }
}

}  // namespace
}  // namespace prism
