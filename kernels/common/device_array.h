// The one owner of CUDA device and pinned host memory in kernels/.
//
// DeviceArray<T> (cudaMalloc/cudaFree) and PinnedArray<T> (cudaMallocHost/cudaFreeHost) own a
// typed array; move-only, freed by the destructor, so no algorithm keeps a hand-written free list
// and nothing leaks when a check throws between two allocations. Allocation failures throw
// gpu::CudaError naming the call site (PRISM_CUDA_CHECK); freeing never throws (a destructor may
// run while an exception unwinds, and a sticky CUDA error must not turn into std::terminate).
//
// The memory belongs to the CUDA context current when it was allocated (the primary context in
// kernels/, an element's GstCudaContext in plugins/: gst-libs/gst/prism/gstprismcudamemory.h has
// the context-aware variant). Like std::vector, zero elements hold no allocation; data() is then
// nullptr, which no kernel may dereference.
#pragma once

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "common/gpu.h"

namespace prism::gpu {

namespace detail {
// cudaMalloc / cudaMallocHost with cudaFree / cudaFreeHost as one policy each, so the two arrays
// below are one template.
struct DeviceAlloc {
  static void* alloc(size_t bytes) {
    void* p = nullptr;
    PRISM_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  static void release(void* p) noexcept { cudaFree(p); }
};
struct PinnedAlloc {
  static void* alloc(size_t bytes) {
    void* p = nullptr;
    PRISM_CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
  static void release(void* p) noexcept { cudaFreeHost(p); }
};

template <class T, class Alloc>
class OwnedArray {
 public:
  OwnedArray() = default;
  explicit OwnedArray(size_t count) { resize(count); }
  ~OwnedArray() { reset(); }
  OwnedArray(const OwnedArray&) = delete;
  OwnedArray& operator=(const OwnedArray&) = delete;
  OwnedArray(OwnedArray&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  OwnedArray& operator=(OwnedArray&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  // Exactly `count` elements; the contents are not kept. The old array is freed first, so a
  // failed allocation leaves this empty rather than holding stale memory.
  void resize(size_t count) {
    if (count == size_) return;
    reset();
    if (count == 0) return;
    ptr_ = static_cast<T*>(Alloc::alloc(count * sizeof(T)));
    size_ = count;
  }
  // At least `count` elements: grows (contents not kept), never shrinks.
  void reserve(size_t count) {
    if (count > size_) resize(count);
  }
  void reset() noexcept {
    if (ptr_) Alloc::release(ptr_);
    ptr_ = nullptr;
    size_ = 0;
  }

  T* data() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) const { return ptr_[i]; }  // pinned memory only: host-addressable

 private:
  T* ptr_ = nullptr;
  size_t size_ = 0;
};
}  // namespace detail

template <class T>
using DeviceArray = detail::OwnedArray<T, detail::DeviceAlloc>;
template <class T>
using PinnedArray = detail::OwnedArray<T, detail::PinnedAlloc>;

// A device copy of `count` host values (synchronous: set-up uploads, not per-frame work).
template <class T>
DeviceArray<T> device_copy(const T* host, size_t count) {
  DeviceArray<T> d(count);
  if (count) PRISM_CUDA_CHECK(cudaMemcpy(d.data(), host, count * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

namespace detail {
// One owner for a CUDA handle (a pointer-like type that cudaXxxDestroy frees), so that the stream and
// the event below are the same few lines once: move-only, destroyed unchecked (see above).
template <class Handle, cudaError_t (*Destroy)(Handle)>
class OwnedHandle {
 public:
  OwnedHandle() = default;
  ~OwnedHandle() { reset(); }
  OwnedHandle(const OwnedHandle&) = delete;
  OwnedHandle& operator=(const OwnedHandle&) = delete;
  OwnedHandle(OwnedHandle&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  OwnedHandle& operator=(OwnedHandle&& o) noexcept {
    if (this != &o) {
      reset();
      handle_ = std::exchange(o.handle_, nullptr);
    }
    return *this;
  }
  void reset() noexcept {
    if (handle_) Destroy(handle_);
    handle_ = nullptr;
  }
  Handle get() const { return handle_; }
  operator Handle() const { return handle_; }

 protected:
  Handle handle_ = nullptr;
};
}  // namespace detail

// A cudaStream_t owned like the arrays above. Non-blocking by default: the legacy default stream
// must not serialise an element's work with its neighbours'. cudaStreamDefault gives a blocking
// stream, for tests and benchmarks whose synchronous cudaMemcpy on the legacy default stream must
// be ordered before the work they queue on it.
class Stream : public detail::OwnedHandle<cudaStream_t, cudaStreamDestroy> {
 public:
  static Stream create(unsigned flags = cudaStreamNonBlocking) {
    Stream s;
    PRISM_CUDA_CHECK(cudaStreamCreateWithFlags(&s.handle_, flags));
    return s;
  }
  // A stream whose kernels the scheduler starts before those of lower-priority streams: the
  // device's greatest priority (cudaDeviceGetStreamPriorityRange).
  static Stream create_high_priority(unsigned flags = cudaStreamNonBlocking) {
    int least = 0, greatest = 0;
    PRISM_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    Stream s;
    PRISM_CUDA_CHECK(cudaStreamCreateWithPriority(&s.handle_, flags, greatest));
    return s;
  }
};

// A cudaEvent_t owned likewise; without timing (cudaEventDisableTiming) unless asked: an event that
// only orders one stream after another need not record a time. cudaEventDefault times.
class Event : public detail::OwnedHandle<cudaEvent_t, cudaEventDestroy> {
 public:
  static Event create(unsigned flags = cudaEventDisableTiming) {
    Event e;
    PRISM_CUDA_CHECK(cudaEventCreateWithFlags(&e.handle_, flags));
    return e;
  }
};

}  // namespace prism::gpu
#endif
