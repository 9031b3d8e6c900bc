/* Device memory and the current CUDA context for C++ code in elements: the context-aware variant of
 * kernels/common/device_array.h.
 *
 * An element's device memory lives in its GstCudaContext (shared with nvh264dec, cudaupload and
 * our other elements), which is current only while pushed; cudaFree outside it would free in the
 * wrong context or none. GstPrismContextScope pushes the context for a scope;
 * GstPrismDeviceArray<T> holds a reference to the context it allocated in and pushes it again to
 * free, so it may be reset from any thread (stop, pad finalize) and outlive a context switch.
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

/* `count` T in a GstCudaContext; move-only, freed in that context. */
template <class T>
class GstPrismDeviceArray {
 public:
  GstPrismDeviceArray() = default;
  ~GstPrismDeviceArray() { reset(); }
  GstPrismDeviceArray(const GstPrismDeviceArray &) = delete;
  GstPrismDeviceArray &operator=(const GstPrismDeviceArray &) = delete;
  GstPrismDeviceArray(GstPrismDeviceArray &&o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        context_(std::exchange(o.context_, nullptr)) {}
  GstPrismDeviceArray &operator=(GstPrismDeviceArray &&o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
      context_ = std::exchange(o.context_, nullptr);
    }
    return *this;
  }

  /* At least `count` elements in `context` (contents not kept); keeps the allocation when it is
   * large enough and in the same context. cudaErrorDeviceUninitialized when the context cannot be
   * pushed; on failure the array is empty. */
  cudaError_t reserve(GstCudaContext *context, size_t count) {
    if (ptr_ && size_ >= count && context_ == context) return cudaSuccess;
    reset();
    if (count == 0) return cudaSuccess;
    GstPrismContextScope scope(context);
    if (!scope.pushed()) return cudaErrorDeviceUninitialized;
    void *p = nullptr;
    cudaError_t err = cudaMalloc(&p, count * sizeof(T));
    if (err != cudaSuccess) return err;
    ptr_ = static_cast<T *>(p);
    size_ = count;
    context_ = (GstCudaContext *)gst_object_ref(context);
    return cudaSuccess;
  }
  void reset() noexcept {
    if (ptr_) {
      GstPrismContextScope scope(context_);
      if (scope.pushed())
        (void)cudaFree(ptr_);
      else /* freeing in whatever context is current would be worse than leaking */
        GST_WARNING("GstPrismDeviceArray: the CUDA context cannot be made current; %zu bytes leaked", bytes());
    }
    ptr_ = nullptr;
    size_ = 0;
    gst_clear_object(&context_);
  }

  T *data() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }
  GstCudaContext *context() const { return context_; }

 private:
  T *ptr_ = nullptr;
  size_t size_ = 0;
  GstCudaContext *context_ = nullptr;
};

}  // namespace prism
#endif
