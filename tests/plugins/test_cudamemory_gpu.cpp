// GstPrismDeviceArray (gst-libs/gst/prism/gstprismcudamemory.h) on the GPU: kernels' gpu::OwnedArray
// with GstPrismContextAlloc, the policy that allocates and frees with a GstCudaContext pushed and
// holds a reference to it while it owns memory. Reserve keeps an allocation that is large enough and
// in the same context, another context frees in the old one first, reset (from any thread) drops the
// reference, and a failed allocation throws prism::gpu::CudaError, leaving the array empty with no
// reference and no CUDA error behind. The rules without CUDA: tests/kernels/test_device_array.cpp.
#include <cuda_runtime_api.h>
#include <gst/cuda/gstcudacontext.h>
#include <gst/cuda/gstcudaloader.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>

#include "gst/prism/gstprismcudamemory.h"
#include "prism_test.h"

namespace {

using prism::GstPrismContextAlloc;
using prism::GstPrismContextScope;
using Array = prism::GstPrismDeviceArray<uint8_t>;

int refs(GstCudaContext* context) { return GST_OBJECT_REFCOUNT_VALUE(context); }

class CudaMemoryGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
  void SetUp() override {
    PRISM_NEED_GPU();
    ASSERT_TRUE(gst_cuda_load_library());
    one = gst_cuda_context_new(0);
    two = gst_cuda_context_new(0);
    ASSERT_TRUE(one && two);
  }
  void TearDown() override {
    gst_clear_object(&one);
    gst_clear_object(&two);
  }
  GstCudaContext* one = nullptr;
  GstCudaContext* two = nullptr;
};

TEST_F(CudaMemoryGpu, ReserveKeepsAnAllocationLargeEnoughInTheSameContext) {
  Array a;
  a.reserve(1 << 20, GstPrismContextAlloc(one));
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.policy().context(), one);
  EXPECT_EQ(refs(one), 2);
  {
    GstPrismContextScope scope(one);
    ASSERT_TRUE(scope.pushed());
    EXPECT_EQ(cudaMemset(a.data(), 7, a.bytes()), cudaSuccess);  // device memory of that context
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  uint8_t* p = a.data();
  a.reserve(1000, GstPrismContextAlloc(one));
  EXPECT_EQ(a.data(), p);
  EXPECT_EQ(a.size(), size_t(1) << 20);
  a.reserve(2 << 20);  // grows, in the same context
  EXPECT_EQ(a.size(), size_t(2) << 20);
  EXPECT_EQ(a.policy().context(), one);
  EXPECT_EQ(refs(one), 2);
}

TEST_F(CudaMemoryGpu, AnotherContextFreesInTheOldOneFirst) {
  Array a;
  a.reserve(4096, GstPrismContextAlloc(one));
  a.reserve(16, GstPrismContextAlloc(two));
  EXPECT_EQ(a.policy().context(), two);
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(refs(one), 1);
  EXPECT_EQ(refs(two), 2);
}

TEST_F(CudaMemoryGpu, ResetFromAnotherThreadDropsTheReference) {
  Array a(1 << 16, GstPrismContextAlloc(one));
  Array b = std::move(a);  // the reference moves with the memory
  EXPECT_EQ(a.policy().context(), nullptr);
  EXPECT_EQ(refs(one), 2);
  std::thread([&] { b.reset(); }).join();  // no context current on that thread: the policy pushes it
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.policy().context(), nullptr);
  EXPECT_EQ(refs(one), 1);
}

TEST_F(CudaMemoryGpu, AFailedAllocationThrowsCudaErrorAndLeavesNothingBehind) {
  Array a(64, GstPrismContextAlloc(one));
  try {
    a.reserve(size_t(1) << 50, GstPrismContextAlloc(one));  // a petabyte
    FAIL() << "a petabyte was allocated";
  } catch (const prism::gpu::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("cudaMalloc"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(refs(one), 1);
  GstPrismContextScope scope(one);
  ASSERT_TRUE(scope.pushed());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // handled: not reported again by the next check

  Array none;
  try {
    none.resize(16);  // the empty policy: no context to allocate in
    FAIL() << "allocated without a context";
  } catch (const prism::gpu::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA context"), std::string::npos) << e.what();
  }
}

}  // namespace
