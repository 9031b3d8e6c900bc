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

#include "gst/prism/gstprismcuda.h"
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

// GstPrismCudaContextSharer (gstprismcuda.h), what prism run answers need-context with: only a
// CUDA context is answered; every asker on a device gets that device's one context, the device
// taken from the asker's cuda-device-id. Without a GPU nothing is answered (the elements then make
// their own): that half runs everywhere.
class CudaContextSharer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
  void TearDown() override {
    gst_prism_cuda_context_sharer_free(sharer);
    for (GstElement* e : {fake, upload_a, upload_b})
      if (e) gst_object_unref(e);
  }
  gboolean ask(GstElement* e, const char* type) {
    GstMessage* m = gst_message_new_need_context(GST_OBJECT(e), type);
    const gboolean answered = gst_prism_cuda_context_sharer_answer(sharer, m);
    gst_message_unref(m);
    return answered;
  }
  static GstCudaContext* context_of(GstElement* e) {
    GstContext* c = gst_element_get_context(e, "gst.cuda.context");
    GstCudaContext* got = nullptr;
    if (c) gst_structure_get(gst_context_get_structure(c), "gst.cuda.context", GST_TYPE_CUDA_CONTEXT, &got, nullptr);
    if (c) gst_context_unref(c);
    if (got) gst_object_unref(got);  // compared as pointers; the sharer keeps it
    return got;
  }
  GstPrismCudaContextSharer* sharer = gst_prism_cuda_context_sharer_new();
  static GstElement* make(const char* factory) {
    GstElement* e = gst_element_factory_make(factory, nullptr);
    return e ? GST_ELEMENT(gst_object_ref_sink(e)) : nullptr;
  }
  GstElement* fake = make("fakesink");
  GstElement* upload_a = nullptr;
  GstElement* upload_b = nullptr;
};

TEST_F(CudaContextSharer, AnswersOnlyCudaContexts) {
  ASSERT_NE(fake, nullptr);
  EXPECT_FALSE(ask(fake, "gst.gl.GLDisplay"));
  GstMessage* eos = gst_message_new_eos(GST_OBJECT(fake));
  EXPECT_FALSE(gst_prism_cuda_context_sharer_answer(sharer, eos));
  gst_message_unref(eos);
  EXPECT_EQ(gst_prism_cuda_context_sharer_answered(sharer), 0u);
  EXPECT_EQ(gst_element_get_context(fake, "gst.gl.GLDisplay"), nullptr);
  std::string why;
  if (!prism::gpu::available(&why)) {
    // No GPU: a CUDA need-context is left for the element, which then fails or falls back itself.
    EXPECT_FALSE(ask(fake, "gst.cuda.context"));
    EXPECT_EQ(gst_prism_cuda_context_sharer_answered(sharer), 0u);
    EXPECT_EQ(context_of(fake), nullptr);
  }
}

TEST_F(CudaContextSharer, EveryAskerOnADeviceGetsItsOneBlockingContext) {
  PRISM_NEED_GPU();
  // fakesink has no cuda-device-id (device 0); cudaupload has one, -1 ("any") by default or 0 set.
  upload_a = make("cudaupload");
  upload_b = make("cudaupload");
  ASSERT_TRUE(upload_a && upload_b) << "no cudaupload (gst-plugins-bad's nvcodec)";
  g_object_set(upload_b, "cuda-device-id", 0, nullptr);
  EXPECT_TRUE(ask(fake, "gst.cuda.context"));
  EXPECT_TRUE(ask(upload_a, "gst.cuda.context"));
  EXPECT_TRUE(ask(upload_b, "gst.cuda.context"));
  EXPECT_EQ(gst_prism_cuda_context_sharer_answered(sharer), 3u);
  GstCudaContext* shared = gst_prism_cuda_context_sharer_get(sharer, 0);
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(context_of(fake), shared);
  EXPECT_EQ(context_of(upload_a), shared);
  EXPECT_EQ(context_of(upload_b), shared);
  EXPECT_EQ(gst_prism_cuda_context_sharer_get(sharer, 1), nullptr) << "no element asked for device 1";
  // Made with CU_CTX_SCHED_BLOCKING_SYNC: the reason it exists.
  ASSERT_TRUE(gst_cuda_context_push(shared));
  unsigned int flags = 0;
  EXPECT_EQ(cudaGetDeviceFlags(&flags), cudaSuccess);
  EXPECT_EQ(flags & cudaDeviceScheduleMask, unsigned(cudaDeviceScheduleBlockingSync));
  gst_cuda_context_pop(nullptr);
  gst_object_unref(shared);
}

}  // namespace
