// Marks functions compiled for both the CPU path and the CUDA path, so that both paths run the
// same source and compute the same function.
#pragma once
#if defined(__CUDACC__)
#define PRISM_HD __host__ __device__ __forceinline__
#else
#define PRISM_HD inline
#endif
