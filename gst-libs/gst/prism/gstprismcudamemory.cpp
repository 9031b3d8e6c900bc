#include "gst/prism/gstprismcudamemory.h"

#if defined(PRISM_HAVE_CUDA)
#include <string>

#include "common/gpu.h"

/* GstPrismContextAlloc's two calls, out of line: one definition for every element, its warning in
 * GStreamer's default debug category. */
namespace prism {

void *GstPrismContextAlloc::alloc(size_t bytes) const {
  GstPrismContextScope scope(context_);
  if (!scope.pushed()) {
    const std::string what = std::to_string(bytes) + " bytes of device memory";
    throw gpu::CudaError(context_ ? "cannot make the CUDA context current (gst_cuda_context_push) to allocate " + what
                                  : "no CUDA context to allocate " + what + " in");
  }
  void *p = nullptr;
  PRISM_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

void GstPrismContextAlloc::release(void *p, size_t bytes) const noexcept {
  GstPrismContextScope scope(context_);
  if (scope.pushed())
    (void)cudaFree(p);
  else /* freeing in whatever context is current would be worse than leaking */
    GST_WARNING("GstPrismDeviceArray: the CUDA context cannot be made current; %zu bytes leaked", bytes);
}

}  // namespace prism
#endif
