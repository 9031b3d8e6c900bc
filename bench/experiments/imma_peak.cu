// An experiment, not part of the build: the mma.sync m16n8k32 u8 throughput ceiling of this GPU (independent
// accumulator chains, no memory traffic). nvcc -O3 -arch=sm_90 imma_peak.cu -o p && ./p
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
template <int kChains>
__global__ void imma_loop(int iters, int* out) {
  uint32_t a[4] = {threadIdx.x, threadIdx.x * 3u, 7u, 9u}, b0 = threadIdx.x ^ 5u, b1 = 11u;
  int32_t c[kChains][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int k = 0; k < kChains; ++k)
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+r"(c[k][0]), "+r"(c[k][1]), "+r"(c[k][2]), "+r"(c[k][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  int s = 0;
  for (int k = 0; k < kChains; ++k) s += c[k][0] + c[k][1] + c[k][2] + c[k][3];
  if (s == 123456789) out[0] = s;
}
template <int kChains>
void run(int warps_per_block, int blocks_per_sm) {
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  int* out;
  cudaMalloc(&out, 4);
  const int iters = 20000;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best = 1e9;
  for (int r = 0; r < 5; ++r) {
    cudaEventRecord(e0);
    imma_loop<kChains><<<sms * blocks_per_sm, 32 * warps_per_block>>>(iters, out);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    if (ms < best) best = ms;
  }
  const double macs = double(sms) * blocks_per_sm * warps_per_block * iters * kChains * 16 * 8 * 32;
  printf("chains %d warps/block %d blocks/SM %d: %.3f ms, %.0f TOPS (u8 mma.sync m16n8k32)\n", kChains, warps_per_block,
         blocks_per_sm, best, 2 * macs / best / 1e9);
}
int main() {
  run<4>(8, 2);
  run<8>(8, 2);
  run<8>(16, 2);
  run<4>(32, 2);
  run<8>(4, 4);
  run<16>(8, 2);
}
