// The one owner of CUDA device and pinned host memory, in kernels/ and in the elements.
//
// OwnedArray<T, Alloc> owns a typed array; move-only, freed by the destructor, so no algorithm keeps
// a hand-written free list and nothing leaks when a check throws between two allocations.
// DeviceArray<T> (cudaMalloc/cudaFree) and PinnedArray<T> (cudaMallocHost/cudaFreeHost) are it with
// a stateless policy. One error convention everywhere: a failed allocation throws gpu::CudaError
// naming the call site (PRISM_CUDA_CHECK); freeing never throws (a destructor may run while an
// exception unwinds, and a sticky CUDA error must not turn into std::terminate).
//
// The memory belongs to the CUDA context current when it was allocated: the primary context in
// kernels/, an element's GstCudaContext in plugins/. That is why the policy may carry state: the
// elements' policy (gst-libs/gst/prism/gstprismcudamemory.h, GstPrismDeviceArray<T>) holds a
// reference to the context it allocated in and pushes it to allocate and to free, so an element's
// array may be freed from any thread; this header knows nothing of GStreamer. A policy is
//   - nothrow default-constructible (the empty state) and nothrow movable, copyable;
//   - `void* alloc(size_t bytes)`: throws gpu::CudaError on failure;
//   - `void release(void* p, size_t bytes) noexcept`;
//   - with state: `==`, true when two policies allocate alike (the same context).
// The policy is that of the current allocation: reset() and a move leave the empty policy behind, so
// an empty array keeps no context alive. reserve(count, policy) keeps the allocation when it is large
// enough and made by an equal policy; otherwise the old array is freed (by its own policy) first.
//
// Like std::vector, zero elements hold no allocation; data() is then nullptr, which no kernel may
// dereference. OwnedArray itself needs no CUDA: tests/kernels/test_device_array.cpp holds it to
// these rules with host policies, in any build.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "common/gpu.h"
#endif

namespace prism::gpu {

// The policy is a private base, so that a stateless one takes no room (C++17 has no
// [[no_unique_address]]): DeviceArray is a pointer and a size, as before policies had state.
template <class T, class Alloc>
class OwnedArray : private Alloc {
  static_assert(std::is_nothrow_default_constructible_v<Alloc> && std::is_nothrow_move_constructible_v<Alloc> &&
                    std::is_nothrow_move_assignable_v<Alloc>,
                "an allocation policy's empty state and moves must not throw: reset() and moves are noexcept");

 public:
  OwnedArray() = default;
  explicit OwnedArray(size_t count, Alloc alloc = Alloc()) { resize(count, std::move(alloc)); }
  ~OwnedArray() { reset(); }
  OwnedArray(const OwnedArray&) = delete;
  OwnedArray& operator=(const OwnedArray&) = delete;
  OwnedArray(OwnedArray&& o) noexcept
      : Alloc(std::exchange(o.own_policy(), Alloc())),
        ptr_(std::exchange(o.ptr_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  OwnedArray& operator=(OwnedArray&& o) noexcept {
    if (this != &o) {
      reset();
      own_policy() = std::exchange(o.own_policy(), Alloc());
      ptr_ = std::exchange(o.ptr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }

  // Exactly `count` elements, allocated by `alloc` (by default the current policy); the contents
  // are not kept. Kept as it is when the size and the policy are the same. The old array is freed
  // first, so a failed allocation leaves this empty rather than holding stale memory.
  void resize(size_t count) { resize(count, Alloc(policy())); }
  void resize(size_t count, Alloc alloc) {
    if (count == size_ && same_policy(alloc)) return;
    reset();
    if (count == 0) return;
    ptr_ = static_cast<T*>(alloc.alloc(count * sizeof(T)));
    size_ = count;
    own_policy() = std::move(alloc);
  }
  // At least `count` elements (contents not kept): grows, never shrinks; with `alloc`, also
  // reallocates when the current allocation was made by another policy (another context).
  void reserve(size_t count) {
    if (count > size_) resize(count);
  }
  void reserve(size_t count, Alloc alloc) {
    if (count > size_ || !same_policy(alloc)) resize(count, std::move(alloc));
  }
  void reset() noexcept {
    if (ptr_) own_policy().release(ptr_, bytes());
    ptr_ = nullptr;
    size_ = 0;
    own_policy() = Alloc();
  }

  T* data() const { return ptr_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) const { return ptr_[i]; }  // pinned memory only: host-addressable
  const Alloc& policy() const { return *this; }

 private:
  Alloc& own_policy() { return *this; }
  bool same_policy(const Alloc& alloc) const {
    if constexpr (std::is_empty_v<Alloc>)
      return true;
    else
      return policy() == alloc;
  }

  T* ptr_ = nullptr;
  size_t size_ = 0;
};

#if defined(PRISM_HAVE_CUDA)
namespace detail {
// cudaMalloc / cudaMallocHost with cudaFree / cudaFreeHost as one stateless policy each.
struct DeviceAlloc {
  static void* alloc(size_t bytes) {
    void* p = nullptr;
    PRISM_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  static void release(void* p, size_t) noexcept { cudaFree(p); }
};
struct PinnedAlloc {
  static void* alloc(size_t bytes) {
    void* p = nullptr;
    PRISM_CUDA_CHECK(cudaMallocHost(&p, bytes));
    return p;
  }
  static void release(void* p, size_t) noexcept { cudaFreeHost(p); }
};
}  // namespace detail

template <class T>
using DeviceArray = OwnedArray<T, detail::DeviceAlloc>;
template <class T>
using PinnedArray = OwnedArray<T, detail::PinnedAlloc>;

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

#endif  // PRISM_HAVE_CUDA

}  // namespace prism::gpu
