// gpu::copy_rows_async (kernels/common/copy_rows.h) against cudaMemcpy2D of the same rows, from pinned
// host memory (the streamed digests' source) and from device memory, with the fill rows after them.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/copy_rows.h"
#include "common/device_array.h"
#include "prism_test.h"

using namespace prism;

TEST(CopyRowsGpu, EqualsA2DCopyFromPinnedAndDeviceMemory) {
  PRISM_NEED_GPU();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const size_t src_pitch = 98304 / 4, width = 4096 + 16 * (rng() % 64), rows = 300 + rng() % 200, fill_rows = 5;
  const size_t dst_pitch = width + 16 * (rng() % 3);
  gpu::PinnedArray<uint8_t> host(rows * src_pitch);
  for (size_t i = 0; i < host.size(); ++i) host.data()[i] = uint8_t(rng());
  gpu::DeviceArray<uint8_t> dev(host.size()), got((rows + fill_rows) * dst_pitch), want(got.size());
  PRISM_CUDA_CHECK(cudaMemcpy(dev.data(), host.data(), host.size(), cudaMemcpyHostToDevice));
  PRISM_CUDA_CHECK(cudaMemset(want.data(), 0x5A, want.size()));
  PRISM_CUDA_CHECK(cudaMemcpy2D(want.data(), dst_pitch, host.data(), src_pitch, width, rows, cudaMemcpyHostToDevice));
  PRISM_CUDA_CHECK(cudaMemset2D(want.data() + rows * dst_pitch, dst_pitch, 255, width, fill_rows));
  std::vector<uint8_t> w(want.size()), g(got.size());
  PRISM_CUDA_CHECK(cudaMemcpy(w.data(), want.data(), w.size(), cudaMemcpyDeviceToHost));
  for (const uint8_t* src : {static_cast<const uint8_t*>(host.data()), static_cast<const uint8_t*>(dev.data())})
    for (int blocks : {1, 16, 300}) {
      SCOPED_TRACE(std::string(src == host.data() ? "pinned" : "device") + " source, " + std::to_string(blocks) +
                   " blocks");
      PRISM_CUDA_CHECK(cudaMemset(got.data(), 0x5A, got.size()));  // the bytes between rows stay as they were
      gpu::copy_rows_async(got.data(), dst_pitch, src, src_pitch, width, rows, fill_rows, 255, blocks, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      PRISM_CUDA_CHECK(cudaMemcpy(g.data(), got.data(), g.size(), cudaMemcpyDeviceToHost));
      EXPECT_EQ(g, w);
    }
}

// No rows to copy, only the fill (a batch whose images all came before): every fill row is `fill`, the
// bytes past `width` untouched.
TEST(CopyRowsGpu, FillRowsAloneAreWritten) {
  PRISM_NEED_GPU();
  const size_t pitch = 96, width = 64, fill_rows = 7;
  gpu::DeviceArray<uint8_t> d(pitch * (fill_rows + 1));
  PRISM_CUDA_CHECK(cudaMemset(d.data(), 0x5A, d.size()));
  gpu::copy_rows_async(d.data(), pitch, nullptr, 0, width, 0, fill_rows, 0xC3, 3, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint8_t> g(d.size());
  PRISM_CUDA_CHECK(cudaMemcpy(g.data(), d.data(), g.size(), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < g.size(); ++i) {
    SCOPED_TRACE("byte " + std::to_string(i));
    ASSERT_EQ(g[i], i / pitch < fill_rows && i % pitch < width ? 0xC3 : 0x5A);
  }
}

TEST(CopyRowsGpu, BadShapesAreRefused) {
  PRISM_NEED_GPU();
  gpu::DeviceArray<uint8_t> d(4096);
  EXPECT_THROW(gpu::copy_rows_async(d.data(), 64, d.data(), 64, 40, 2, 0, 0, 1, nullptr), std::invalid_argument);
  EXPECT_THROW(gpu::copy_rows_async(d.data() + 8, 64, d.data(), 64, 64, 2, 0, 0, 1, nullptr), std::invalid_argument);
  EXPECT_THROW(gpu::copy_rows_async(d.data(), 32, d.data(), 64, 64, 2, 0, 0, 1, nullptr), std::invalid_argument);
  EXPECT_THROW(gpu::copy_rows_async(d.data(), 64, d.data(), 64, 64, 2, 0, 0, 0, nullptr), std::invalid_argument);
  // a source row wider than the source's pitch (the rows would overlap)
  EXPECT_THROW(gpu::copy_rows_async(d.data(), 128, d.data(), 64, 128, 2, 0, 0, 1, nullptr), std::invalid_argument);
}
