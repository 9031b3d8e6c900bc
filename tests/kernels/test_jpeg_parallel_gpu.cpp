// The parallel JPEG decoder on the GPU (image::jpeg::CudaJpegDecoder) against libjpeg-turbo's grey
// (tests/support/jpeg_cases.h) and the CPU path (test_jpeg_parallel.cpp), bit for bit: JPEGs written
// by libjpeg-turbo (every sampling, qualities 10..100, odd sizes, restart intervals, a 4000x3000
// photo-sized one) and the JPEG photos of the test data, at every reduction and several subsequence
// and group sizes, one decoder reused across sizes (its buffers grow); the sequential fallback
// forced; damaged files fail or give libjpeg's pixels, as on the CPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/device_array.h"
#include "image/jpeg_parallel.h"
#include "jpeg_cases.h"
#include "prism_test.h"
#include "test_env.h"

namespace prism {
namespace {

using image::jpeg::CudaJpegDecoder;
using image::jpeg::DeviceGrey;
using image::jpeg::ParallelParams;
using image::jpeg::ParallelStats;
using test::JpegCase;

cv::Mat download(const DeviceGrey& g) {
  cv::Mat m(g.height, g.width, CV_8UC1);
  PRISM_CUDA_CHECK(cudaMemcpy(m.data, g.pixels.data(), m.total(), cudaMemcpyDeviceToHost));
  return m;
}

// The GPU decode of `b` at 1/r equals libjpeg's and the CPU path's (and its stats the CPU's).
void expect_equal(CudaJpegDecoder& dec, const std::vector<uint8_t>& b, int r, const ParallelParams& p,
                  cudaStream_t stream, const std::string& what, DeviceGrey& out) {
  SCOPED_TRACE(what + " at 1/" + std::to_string(r) + ", " + std::to_string(p.seq_bits) + " bits, groups of " +
               std::to_string(p.group));
  std::string error, why;
  const std::optional<cv::Mat> want = test::libjpeg_grey(b.data(), b.size(), r, &error);
  ASSERT_TRUE(want) << "libjpeg: " << error;
  ParallelStats gs, cs;
  ASSERT_TRUE(dec.decode_grey(b.data(), b.size(), r, &out, stream, &why, &gs)) << why;
  const cv::Mat got = download(out);
  ASSERT_EQ(got.size(), want->size());
  EXPECT_EQ(cv::norm(got, *want, cv::NORM_INF), 0) << "pixels differ from libjpeg-turbo's";
  const std::optional<cv::Mat> cpu = image::jpeg::decode_grey_parallel(b.data(), b.size(), r, p, &why, &cs);
  ASSERT_TRUE(cpu) << why;
  EXPECT_EQ(cv::norm(got, *cpu, cv::NORM_INF), 0) << "pixels differ from the CPU path's";
  EXPECT_EQ(gs.subsequences, cs.subsequences);
  EXPECT_EQ(gs.sequential, cs.sequential);
}

TEST(JpegParallelGpu, EqualsLibjpegOnWrittenJpegs) {
  PRISM_NEED_GPU();
  gpu::Stream stream = gpu::Stream::create();
  std::mt19937 rng(99);
  int compared = 0;
  for (const int seq_bits : {64, 256, 1024})
    for (const int group : {32, 128}) {
      ParallelParams p;
      p.seq_bits = seq_bits;
      p.group = group;
      CudaJpegDecoder dec(p);
      DeviceGrey out;
      for (int i = 0; i < 12; ++i) {
        JpegCase c;
        const cv::Size fixed[] = {{1, 1}, {17, 9}, {4001, 3001}};
        const cv::Size s = i < 3 ? fixed[i] : cv::Size(1 + int(rng() % 700), 1 + int(rng() % 500));
        if (i == 2 && !(seq_bits == 256 && group == 128)) continue;  // the large one once
        c.width = s.width;
        c.height = s.height;
        c.quality = 10 + int(rng() % 91);
        const int sampling = int(rng() % 5);
        c.grey = sampling == 4;
        c.h = sampling == 1 || sampling == 2 ? 2 : 1;
        c.v = sampling == 2 || sampling == 3 ? 2 : 1;
        c.restart_mcus = rng() % 3 == 0 ? 1 + int(rng() % 9) : 0;
        c.optimize = rng() % 2 == 0;
        c.smooth = rng() % 2 == 0;
        c.seed = rng();
        const std::vector<uint8_t> b = test::encode_jpeg_case(c);
        for (int r : {1, 2, 4, 8}) {
          expect_equal(dec, b, r, p, stream, c.name(), out);
          ++compared;
        }
      }
    }
  std::cout << compared << " GPU decodes compared with libjpeg-turbo and the CPU path\n";
}

TEST(JpegParallelGpu, PhotoSizedJpegAtHalfSize) {
  PRISM_NEED_GPU();
  gpu::Stream stream = gpu::Stream::create();
  JpegCase c;
  c.width = 4000;
  c.height = 3000;
  c.quality = 80;
  const std::vector<uint8_t> b = test::encode_jpeg_case(c);
  CudaJpegDecoder dec;
  DeviceGrey out;
  for (int r : {2, 1, 2}) expect_equal(dec, b, r, ParallelParams(), stream, c.name(), out);
}

TEST(JpegParallelGpu, TheSequentialFallbackGivesTheSamePixels) {
  PRISM_NEED_GPU();
  gpu::Stream stream = gpu::Stream::create();
  JpegCase c;
  c.width = 640;
  c.height = 480;
  c.quality = 85;
  c.restart_rows = 1;
  const std::vector<uint8_t> b = test::encode_jpeg_case(c);
  ParallelParams p;
  p.max_rounds = 1;
  CudaJpegDecoder dec(p);
  DeviceGrey out;
  ParallelStats s;
  std::string why;
  ASSERT_TRUE(dec.decode_grey(b.data(), b.size(), 2, &out, stream, &why, &s)) << why;
  EXPECT_TRUE(s.sequential);
  expect_equal(dec, b, 2, p, stream, "max_rounds 1", out);
  p.max_rounds = 0;
  p.group = 1;
  CudaJpegDecoder ones(p);
  expect_equal(ones, b, 4, p, stream, "groups of 1", out);
}

TEST(JpegParallelGpu, EqualsLibjpegOnThePhotosOfTheTestData) {
  PRISM_NEED_GPU();
  const std::string folder = test::data_dir() + "/images";
  PRISM_NEED_FILE(folder + "/fruits.jpg");
  gpu::Stream stream = gpu::Stream::create();
  CudaJpegDecoder dec;
  DeviceGrey out;
  int compared = 0;
  for (const std::string& f : test::jpeg_files(folder, 100)) {
    const std::vector<uint8_t> b = test::read_file_bytes(f);
    if (!image::jpeg::parse_jpeg(b.data(), b.size())) continue;
    for (int r : {1, 2, 4, 8}) {
      expect_equal(dec, b, r, ParallelParams(), stream, f, out);
      ++compared;
    }
  }
  std::cout << compared << " GPU decodes of photos compared\n";
  EXPECT_GE(compared, 4);
}

TEST(JpegParallelGpu, DamagedFilesFailOrGiveLibjpegsPixels) {
  PRISM_NEED_GPU();
  gpu::Stream stream = gpu::Stream::create();
  std::mt19937 rng(5);
  JpegCase c;
  c.width = 200;
  c.height = 120;
  c.restart_mcus = 4;
  const std::vector<uint8_t> good = test::encode_jpeg_case(c);
  const size_t scan = image::jpeg::parse_jpeg(good.data(), good.size())->scan_begin;
  CudaJpegDecoder dec;
  DeviceGrey out;
  int decoded = 0, failed = 0;
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> b = good;
    if (i % 5 == 0) {
      b.resize(scan + rng() % (good.size() - scan));
    } else {
      b[scan + rng() % (b.size() - scan)] ^= uint8_t(1u << (rng() % 8));
    }
    for (int r : {1, 2}) {
      std::string why;
      const bool ok = dec.decode_grey(b.data(), b.size(), r, &out, stream, &why);
      const std::optional<cv::Mat> cpu = image::jpeg::decode_grey_parallel(b.data(), b.size(), r);
      EXPECT_EQ(ok, bool(cpu)) << "#" << i << ": the GPU and CPU paths disagree on whether it decodes: " << why;
      if (!ok) {
        ++failed;
        continue;
      }
      ++decoded;
      const std::optional<cv::Mat> want = test::libjpeg_grey(b.data(), b.size(), r);
      ASSERT_TRUE(want);
      EXPECT_EQ(cv::norm(download(out), *want, cv::NORM_INF), 0) << "#" << i;
    }
  }
  std::cout << decoded << " damaged decodes equal to libjpeg's, " << failed << " refused\n";
}

}  // namespace
}  // namespace prism
