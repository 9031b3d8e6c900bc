// cuBLAS and cuFFT, opened on first use (dlopen) instead of linked. Linked, the two load about
// 225 MB into every process that loads the plugin, and the plugin cannot load at all where they
// are missing, although only poissonblend's GPU solver calls them: a CPU-only user (device=cpu, or
// no GPU) would pay for libraries it never uses. Opened here, a missing library is a
// gpu::CudaError naming it at the first GPU solve, and nothing else changes.
#pragma once
#if defined(PRISM_HAVE_CUDA)
#include <cublas_v2.h>
#include <cufft.h>

namespace prism::gpu {

struct CufftApi {
  decltype(&::cufftPlanMany) plan_many;
  decltype(&::cufftSetStream) set_stream;
  decltype(&::cufftExecD2Z) exec_d2z;
  decltype(&::cufftDestroy) destroy;
};

struct CublasApi {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasDestroy_v2) destroy;
  decltype(&::cublasSetStream_v2) set_stream;
  decltype(&::cublasSetMathMode) set_math_mode;
  decltype(&::cublasGetStatusString) status_string;
  decltype(&::cublasDgemmStridedBatched) dgemm_strided_batched;
};

// The library's entry points, loaded at the first call (thread-safe); throws CudaError naming the
// library when it cannot be opened (and tries again at the next call).
const CufftApi& cufft();
const CublasApi& cublas();

}  // namespace prism::gpu
#endif
