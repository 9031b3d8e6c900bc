/* Device memory and the current CUDA context for C++ code in elements.
 *
 * An element's device memory lives in its GstCudaContext (shared with nvh264dec, cudaupload and
 * our other elements), which is current only while pushed; cudaFree outside it would free in the
 * wrong context or none. GstPrismContextScope pushes the context for a scope.
 *
 * GstPrismDeviceArray<T> is the one owner of kernels/common/device_array.h (gpu::OwnedArray) with
 * GstPrismContextAlloc as its policy, not a class of its own: the policy holds a reference to the
 * context the array allocated in and pushes it to allocate and again to free, so the array may be
 * reset from any thread (stop, pad finalize) and outlive a context switch; reset() drops the
 * reference. reserve(count, GstPrismContextAlloc(context)) keeps the allocation when it is large
 * enough and in the same context. The error convention is the kernels' one: a failed allocation
 * (the context cannot be pushed, cudaMalloc fails) throws prism::gpu::CudaError, which the element
 * catches where GStreamer calls it and posts as an element error; freeing never throws, and when
 * the context cannot be pushed it warns and leaks rather than free in whatever context is current.
 *
 * GstPrismContextScope(GstPrismCuda *) also exists in a CPU-only build (where it pushes nothing),
 * so element code that pushes the context needs no #if of its own.
 */
#pragma once

#include "gst/prism/gstprismcuda.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#include <gst/cuda/gstcudacontext.h>

#include <cstddef>
#include <utility>

#include "common/device_array.h"
#include "common/gpu.h"
#endif

namespace prism {

/* Pushes `cuda`'s context for the scope when the element runs on the GPU (pushed() tells). */
class GstPrismContextScope {
 public:
#if defined(PRISM_HAVE_CUDA)
  explicit GstPrismContextScope(GstPrismCuda *cuda) : pushed_(cuda->use_cuda && gst_prism_cuda_push(cuda)) {}
  explicit GstPrismContextScope(GstCudaContext *context) : pushed_(context && gst_cuda_context_push(context)) {}
  ~GstPrismContextScope() {
    if (pushed_) gst_cuda_context_pop(nullptr);
  }
#else
  explicit GstPrismContextScope(GstPrismCuda *) : pushed_(false) {}
#endif
  GstPrismContextScope(const GstPrismContextScope &) = delete;
  GstPrismContextScope &operator=(const GstPrismContextScope &) = delete;
  bool pushed() const { return pushed_; }

 private:
  const bool pushed_;
};

}  // namespace prism

#if defined(PRISM_HAVE_CUDA)
namespace prism {

/* The allocation policy of GstPrismDeviceArray (see above): cudaMalloc and cudaFree with the
 * context pushed. Holds a reference to the context (the empty policy, an empty array's, holds
 * none); two policies are equal when they name the same context. */
class GstPrismContextAlloc {
 public:
  GstPrismContextAlloc() noexcept = default;
  explicit GstPrismContextAlloc(GstCudaContext *context) noexcept
      : context_(context ? (GstCudaContext *)gst_object_ref(context) : nullptr) {}
  GstPrismContextAlloc(const GstPrismContextAlloc &o) noexcept : GstPrismContextAlloc(o.context_) {}
  GstPrismContextAlloc(GstPrismContextAlloc &&o) noexcept : context_(std::exchange(o.context_, nullptr)) {}
  GstPrismContextAlloc &operator=(GstPrismContextAlloc o) noexcept {
    std::swap(context_, o.context_);
    return *this;
  }
  ~GstPrismContextAlloc() { gst_clear_object(&context_); }
  bool operator==(const GstPrismContextAlloc &o) const { return context_ == o.context_; }
  GstCudaContext *context() const { return context_; }

  /* Throws gpu::CudaError when the context cannot be pushed or cudaMalloc fails. */
  void *alloc(size_t bytes) const;
  /* Warns and leaks when the context cannot be pushed. */
  void release(void *p, size_t bytes) const noexcept;

 private:
  GstCudaContext *context_ = nullptr;
};

/* `count` T in a GstCudaContext; move-only, freed in that context. */
template <class T>
using GstPrismDeviceArray = gpu::OwnedArray<T, GstPrismContextAlloc>;

}  // namespace prism
#endif
