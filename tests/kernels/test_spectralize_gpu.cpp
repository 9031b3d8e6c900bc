// spectralize's CUDA path against its CPU path, value for value.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <random>

#include "prism_test.h"
#include "spectral/spectralize.h"

#include <cuda_runtime_api.h>


namespace prism {
namespace {

using spectral::SpectralizeParams;

cv::Mat random_grey(int w, int h, uint32_t seed) {
  cv::Mat m(h, w, CV_8UC1);
  cv::RNG rng(seed);
  rng.fill(m, cv::RNG::UNIFORM, 0, 256);
  return m;
}

TEST(SpectralizeGpu, MatchesTheCpuPath) {
  PRISM_NEED_GPU();
  for (auto [w, h, bins, window] : std::vector<std::array<int, 4>>{
           {1920, 1080, 11, 11}, {333, 211, 32, 31}, {7, 5, 4, 3}, {640, 360, 8, 1}}) {
    const cv::Mat g = random_grey(w, h, 7u + static_cast<uint32_t>(bins));
    const SpectralizeParams p{bins, window};
    std::vector<float> cpu(static_cast<size_t>(w) * h * bins), gpu(cpu.size());
    spectral::spectralize_cpu(g.data, w, h, static_cast<int64_t>(g.step), p, cpu.data());
    uint8_t* d_grey = nullptr;
    float* d_out = nullptr;
    size_t pitch = 0;
    ASSERT_EQ(cudaMallocPitch(reinterpret_cast<void**>(&d_grey), &pitch, w, h), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_out), gpu.size() * sizeof(float)), cudaSuccess);
    cudaMemcpy2D(d_grey, pitch, g.data, g.step, w, h, cudaMemcpyHostToDevice);
    spectral::spectralize_cuda(d_grey, w, h, static_cast<int64_t>(pitch), p, d_out, nullptr);
    ASSERT_EQ(cudaMemcpy(gpu.data(), d_out, gpu.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(d_grey);
    cudaFree(d_out);
    EXPECT_EQ(gpu, cpu) << w << "x" << h << " bins " << bins << " window " << window;
  }
}
}  // namespace
}  // namespace prism
