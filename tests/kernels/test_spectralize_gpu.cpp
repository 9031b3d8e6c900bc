// spectralize's CUDA path against its CPU path, value for value.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <cstring>
#include <random>

#include "common/device_array.h"
#include "prism_test.h"
#include "random_images.h"
#include "spectral/spectralize.h"
#include "tensor/tensor.h"

#include <cuda_runtime_api.h>

namespace prism {
namespace {

using spectral::SpectralizeParams;

using test::random_grey;

TEST(SpectralizeGpu, MatchesTheCpuPath) {
  PRISM_NEED_GPU();
  for (auto [w, h, bins, window] :
       std::vector<std::array<int, 4>>{{1920, 1080, 11, 11},
                                       {333, 211, 32, 31},
                                       {7, 5, 4, 3},
                                       {640, 360, 8, 1},
                                       // every width of the packed counts (2, 4, 6, 8, 12, 16 words),
                                       // tiles cut by the frame's edges, windows wider than the frame
                                       {95, 41, 2, 5},
                                       {129, 17, 7, 9},
                                       {64, 64, 13, 15},
                                       {200, 9, 16, 13},
                                       {31, 33, 23, 21},
                                       {257, 130, 24, 31},
                                       {40, 300, 29, 3},
                                       {3, 3, 32, 31}}) {
    const cv::Mat g = random_grey(w, h, 7u + static_cast<uint32_t>(bins));
    const SpectralizeParams p{bins, window};
    std::vector<float> cpu(static_cast<size_t>(w) * h * bins), gpu(cpu.size());
    spectral::spectralize_cpu(g.data, w, h, static_cast<int64_t>(g.step), p, cpu.data());
    // A pitched device image, as a GstCudaMemory frame is (DeviceArray has no pitch): freed by hand.
    uint8_t* d_grey = nullptr;
    size_t pitch = 0;
    ASSERT_EQ(cudaMallocPitch(reinterpret_cast<void**>(&d_grey), &pitch, w, h), cudaSuccess);
    const gpu::DeviceArray<float> d_out(gpu.size());
    ASSERT_EQ(cudaMemcpy2D(d_grey, pitch, g.data, g.step, w, h, cudaMemcpyHostToDevice), cudaSuccess);
    spectral::spectralize_cuda(d_grey, w, h, static_cast<int64_t>(pitch), p, d_out.data(), nullptr);
    ASSERT_EQ(cudaMemcpy(gpu.data(), d_out.data(), d_out.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaFree(d_grey), cudaSuccess);
    EXPECT_EQ(gpu, cpu) << w << "x" << h << " bins " << bins << " window " << window;
  }
}

// 16-bit counts into pitched rows (as into a GstCudaMemory tensor), against the CPU path.
TEST(SpectralizeGpu, U16IntoPitchedRowsMatchesTheCpuPath) {
  PRISM_NEED_GPU();
  const int w = 301, h = 97, bins = 9;
  const cv::Mat g = random_grey(w, h, std::random_device{}());
  const SpectralizeParams p{bins, 7};
  const int64_t row = int64_t(w) * bins * 2, pitch = row + 62;
  std::vector<uint8_t> cpu(size_t(pitch) * h, 0), gpu(cpu.size(), 0);
  spectral::spectralize_cpu(g.data, w, h, static_cast<int64_t>(g.step), p, reinterpret_cast<uint16_t*>(cpu.data()),
                            pitch);
  const gpu::DeviceArray<uint8_t> d_grey(size_t(w) * h), d_out(gpu.size());
  ASSERT_EQ(cudaMemset(d_out.data(), 0, d_out.bytes()), cudaSuccess);
  ASSERT_EQ(cudaMemcpy2D(d_grey.data(), w, g.data, g.step, w, h, cudaMemcpyHostToDevice), cudaSuccess);
  spectral::spectralize_cuda(d_grey.data(), w, h, w, p, reinterpret_cast<uint16_t*>(d_out.data()), nullptr, pitch);
  ASSERT_EQ(cudaMemcpy(gpu.data(), d_out.data(), d_out.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(gpu, cpu);
}

TEST(TensorGpu, ToSignaturesMatchesTheCpuPath) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  for (tensor::DType t : {tensor::DType::U8, tensor::DType::U16, tensor::DType::F32}) {
    tensor::FrameLayout l;
    l.dtype = t;
    l.width = 333;
    l.height = 77;
    l.channels = 11;
    l.row_bytes = (l.packed_row_bytes() + 255) / 256 * 256;  // a device pitch
    std::vector<uint8_t> frame(size_t(l.row_bytes) * l.height);
    for (auto& b : frame) b = uint8_t(rng());
    if (t == tensor::DType::F32)  // finite floats only
      for (size_t i = 0; i + 4 <= frame.size(); i += 4) {
        const float v = float(rng() % 100000) / 3.f;
        std::memcpy(&frame[i], &v, 4);
      }
    std::vector<float> cpu(size_t(l.width) * l.height * l.channels), gpu(cpu.size());
    tensor::to_signatures_cpu(frame.data(), l, cpu.data());
    const gpu::DeviceArray<uint8_t> d_frame = gpu::device_copy(frame.data(), frame.size());
    const gpu::DeviceArray<float> d_out(gpu.size());
    tensor::to_signatures_cuda(d_frame.data(), l, d_out.data(), nullptr);
    ASSERT_EQ(cudaMemcpy(gpu.data(), d_out.data(), d_out.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(gpu, cpu) << tensor::dtype_name(t);
  }
}

}  // namespace
}  // namespace prism
