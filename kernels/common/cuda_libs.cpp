#include "common/cuda_libs.h"

#if defined(PRISM_HAVE_CUDA)
#include <dlfcn.h>

#include <string>

#include "common/gpu.h"

namespace prism::gpu {

namespace {

// The toolkit's library as the build found it (a runfile install without an ld.so.conf entry),
// then the soname the loader finds (Debian's packages, LD_LIBRARY_PATH). Never another major
// version: its entry points may differ.
void* open_library(const std::string& base, int major) {
  const std::string soname = base + "." + std::to_string(major);
  void* lib = nullptr;
#if defined(PRISM_CUDA_LIBRARY_DIR)
  lib = dlopen((std::string(PRISM_CUDA_LIBRARY_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
  if (!lib) lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    throw CudaError(soname + " could not be loaded (" + (why ? why : "not found") +
                    "): install the CUDA toolkit's libraries (or put them on LD_LIBRARY_PATH), or use device=cpu");
  }
  return lib;
}

template <class F>
void bind(void* lib, const char* library, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (!f) throw CudaError(std::string(library) + " has no " + name + ": a different CUDA version than the build's");
}

}  // namespace

const CufftApi& cufft() {
  static const CufftApi api = [] {
    void* lib = open_library("libcufft.so", CUFFT_VER_MAJOR);
    CufftApi a{};
    bind(lib, "cuFFT", "cufftPlanMany", a.plan_many);
    bind(lib, "cuFFT", "cufftSetStream", a.set_stream);
    bind(lib, "cuFFT", "cufftExecD2Z", a.exec_d2z);
    bind(lib, "cuFFT", "cufftDestroy", a.destroy);
    return a;
  }();
  return api;
}

const CublasApi& cublas() {
  static const CublasApi api = [] {
    void* lib = open_library("libcublas.so", CUBLAS_VER_MAJOR);
    CublasApi a{};
    bind(lib, "cuBLAS", "cublasCreate_v2", a.create);
    bind(lib, "cuBLAS", "cublasDestroy_v2", a.destroy);
    bind(lib, "cuBLAS", "cublasSetStream_v2", a.set_stream);
    bind(lib, "cuBLAS", "cublasSetMathMode", a.set_math_mode);
    bind(lib, "cuBLAS", "cublasGetStatusString", a.status_string);
    bind(lib, "cuBLAS", "cublasDgemmStridedBatched", a.dgemm_strided_batched);
    return a;
  }();
  return api;
}

}  // namespace prism::gpu
#endif
