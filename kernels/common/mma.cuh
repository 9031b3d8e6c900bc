// Tensor-core and async-copy primitives for sm_80 and newer, shared by the matcher (match/match.cu)
// and the bag-of-words words kernel (bow/gpu_histogram.cu). On older targets they trap: their
// callers check the compute capability first.
// Fragment layouts: PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type",
// "Matrix fragments for mma.m16n8k32" and "ldmatrix".
#pragma once
#include <cstdint>

namespace prism::gpu {

// D = A (16x16, row) x B (16x8, col) + C, FP16 in, FP32 accumulate.
__device__ __forceinline__ void mma_16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // callers refuse GPUs before sm_80
#endif
}

// D = A (16x32, row) x B (32x8, col) + C, u8 in, s32 accumulate: exact (no .satfinite; a 128-long
// u8 dot product stays below 2^31). The fragments hold the same bytes as m16n8k16's halves: with
// g = lane / 4 and t = lane % 4, a[0] = A[g][4t..4t+3], a[1] = A[g+8][4t..], a[2] = A[g][16+4t..],
// a[3] = A[g+8][16+4t..]; b0 = B[4t..4t+3][g], b1 = B[16+4t..][g]; c[0], c[1] = D[g][2t, 2t+1],
// c[2], c[3] = D[g+8][2t, 2t+1]. So ldmatrix of 16-byte rows loads u8 B fragments as it loads halves.
__device__ __forceinline__ void mma_16832_u8(int32_t c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // callers refuse GPUs before sm_80
#endif
}

// |q|^2 of the two rows a lane's u8 A fragments hold (rows g and g + 8 of an m16 tile, over the four
// k-steps of a 128-byte row, fragment layout as above): each of a row's four lanes sums its 32 bytes,
// then the four exchange. Every lane of the warp must call it (shuffles).
__device__ __forceinline__ void u8_fragment_norms(const uint32_t (&a)[4][4], int32_t& row_g, int32_t& row_g8) {
  uint32_t sa = 0, sb = 0;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) {
    sa = __dp4a(a[ks][0], a[ks][0], sa);
    sa = __dp4a(a[ks][2], a[ks][2], sa);
    sb = __dp4a(a[ks][1], a[ks][1], sb);
    sb = __dp4a(a[ks][3], a[ks][3], sb);
  }
  for (int mask = 1; mask <= 2; mask <<= 1) {
    sa += __shfl_xor_sync(0xFFFFFFFFu, sa, mask);
    sb += __shfl_xor_sync(0xFFFFFFFFu, sb, mask);
  }
  row_g = int32_t(sa);
  row_g8 = int32_t(sb);
}

// Four 8x8 matrices of halves from shared memory; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
#else
  __trap();
#endif
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
#else
  __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
__device__ __forceinline__ void cp_async_wait_one() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 1;\n" ::);
#endif
}

}  // namespace prism::gpu
