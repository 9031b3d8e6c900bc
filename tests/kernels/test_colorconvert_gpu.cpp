// colorconvert CUDA path against the CPU path: every format pair, random data, odd sizes,
// upscaling and downscaling, padded strides; the bytes must be identical.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include "colorconvert/colorconvert.h"
#include "common/device_array.h"
#include "image_util.h"
#include "prism_test.h"

using namespace prism::colorconvert;
using prism::test::HostImage;
using prism::test::make_image;

namespace {

struct DeviceImage {
  Image view;
  prism::gpu::DeviceArray<uint8_t> mem[3];
  explicit DeviceImage(const HostImage& h) : view(h.view) {
    for (int p = 0; p < plane_count(h.view.format); ++p) {
      mem[p] = prism::gpu::device_copy(h.storage[p].data(), h.storage[p].size());
      view.plane[p] = mem[p].data();
    }
  }
  void download(HostImage& h) const {
    for (int p = 0; p < plane_count(view.format); ++p)
      PRISM_CUDA_CHECK(cudaMemcpy(h.storage[p].data(), mem[p].data(), mem[p].bytes(), cudaMemcpyDeviceToHost));
  }
};

const auto& kAll = kAllFormats;  // every format, 4:2:2 and the six packed RGB layouts included

}  // namespace

TEST(ColorConvertGpu, EveryFormatPairAndSizeMatchesCpuExactly) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  // Blocking: DeviceImage's synchronous copies (legacy default stream) come before the conversions queued here.
  const prism::gpu::Stream stream = prism::gpu::Stream::create(cudaStreamDefault);
  const std::pair<int, int> sizes[][2] = {{{64, 48}, {64, 48}},       {{33, 17}, {33, 17}}, {{320, 180}, {1280, 720}},
                                          {{1920, 1080}, {640, 360}}, {{101, 77}, {13, 9}}, {{7, 5}, {300, 211}}};
  int cases = 0;
  for (auto& sz : sizes)
    for (PixelFormat sf : kAll)
      for (PixelFormat df : kAll) {
        HostImage src = make_image(sf, sz[0].first, sz[0].second, 13);
        prism::test::fill_random(src, rng);
        Colorimetry sc{YuvMatrix::BT709, false}, dc{YuvMatrix::BT601, (cases & 1) != 0};
        Plan plan = make_plan(sf, sc, sz[0].first, sz[0].second, df, dc, sz[1].first, sz[1].second);
        HostImage cpu = make_image(df, sz[1].first, sz[1].second, 11, 0x5A);
        HostImage gpu = make_image(df, sz[1].first, sz[1].second, 11, 0xA5);  // other poison
        convert_cpu(plan, src.view, cpu.view);
        DeviceImage dsrc(src), ddst(gpu);
        convert_cuda(plan, dsrc.view, ddst.view, stream);  // throws CudaError
        PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
        ddst.download(gpu);
        ASSERT_EQ(prism::test::pixels(cpu), prism::test::pixels(gpu))
            << format_name(sf) << "->" << format_name(df) << " " << sz[0].first << "x" << sz[0].second << "->"
            << sz[1].first << "x" << sz[1].second;
        ++cases;
      }
  EXPECT_EQ(cases, 6 * 11 * 11);  // six size pairs, 11 x 11 format pairs
}
