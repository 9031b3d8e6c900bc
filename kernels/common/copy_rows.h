// Rows of a pitched array copied by a kernel rather than by a copy engine.
//
// Why: a streamed digest search (texture/index.cpp) brings the first 16 KB of every 96 KB slot of the
// pinned host tier to the GPU. cudaMemcpy2DAsync loses about a third of its rate once the pinned
// memory is as large as an index's, and more while a kernel reads HBM; thread blocks loading the same
// rows from the mapped memory keep close to a contiguous copy's rate, from 16 blocks of 512 threads
// up (the figures: docs/benchmarks/texture-index.md, "Streamed digests"). The price is
// multiprocessors: the blocks need room beside the other kernels (MatchU8Problem::grid_sms leaves it).
#pragma once

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace prism::gpu {

// dst row r (r < rows) = the `width` bytes at src + r * src_pitch; then `fill_rows` more rows of dst
// are `fill` bytes. src is device memory or pinned host memory (cudaMallocHost: with unified
// addressing the kernel reads it through the same pointer, over PCIe). width, both pitches and both
// pointers must be multiples of 16 (std::invalid_argument otherwise). Enqueued on `stream` with
// `blocks` blocks of 512 threads; no synchronisation.
void copy_rows_async(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows,
                     size_t fill_rows, uint8_t fill, int blocks, cudaStream_t stream);

}  // namespace prism::gpu
#endif
