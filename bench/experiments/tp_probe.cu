// An experiment, not part of the build: the throughput of the integer min/max forms the 8-bit matcher's
// top-2 could use (32-bit, 16x2 SIMD and 3-input DPX forms, half2 and float min), PRMT, IMAD and FFMA, alone
// and in pairs: which share the ALU pipe. BENCHMARKS.md ("The 8-bit kernel's ceiling") gives what it showed.
//   nvcc -O3 -std=c++17 -arch=sm_90 tp_probe.cu -o tp && ./tp
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdint>
template <int kOp>
__global__ void k(uint32_t* out, int iters, uint32_t s) {
  uint32_t v[8];
  for (int i = 0; i < 8; ++i) v[i] = s * (threadIdx.x + i) ^ 0x12345;
  long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      if (kOp == 0) v[i] = min(v[i], v[(i + 1) & 7] + 0u);                      // IMNMX
      if (kOp == 1) v[i] = __vminu2(v[i], v[(i + 1) & 7]);                      // VIMNMX.U16x2
      if (kOp == 2) v[i] = __vimin3_u32(v[i], v[(i + 1) & 7], v[(i + 2) & 7]);  // VIMNMX3
      if (kOp == 3) v[i] = __vimin3_u16x2(v[i], v[(i + 1) & 7], v[(i + 2) & 7]);
      if (kOp == 4) {
        __half2 a = *reinterpret_cast<__half2*>(&v[i]), b = *reinterpret_cast<__half2*>(&v[(i + 1) & 7]);
        a = __hmin2(a, b);
        v[i] = *reinterpret_cast<uint32_t*>(&a);
      }
      if (kOp == 5) v[i] = v[i] * 3u + v[(i + 1) & 7];                 // IMAD
      if (kOp == 6) v[i] = __byte_perm(v[i], v[(i + 1) & 7], 0x6521);  // PRMT
      if (kOp == 7) {
        float a = __uint_as_float(v[i]), b = __uint_as_float(v[(i + 1) & 7]);
        v[i] = __float_as_uint(fminf(a, b));
      }
      if (kOp == 8) v[i] = __vimax_s16x2_relu(v[i], v[(i + 1) & 7]);
      if (kOp == 9) {
        if (i & 1) {
          __half2 a = *reinterpret_cast<__half2*>(&v[i]), b = *reinterpret_cast<__half2*>(&v[(i + 1) & 7]);
          a = __hmin2(a, b);
          v[i] = *reinterpret_cast<uint32_t*>(&a);
        } else
          v[i] = min(v[i], v[(i + 1) & 7] + 0u);
      }
      if (kOp == 10) {
        if (i & 1)
          v[i] = v[i] * 3u + v[(i + 1) & 7];
        else
          v[i] = min(v[i], v[(i + 1) & 7] + 0u);
      }
      if (kOp == 11) {
        if (i & 1) {
          float a = __uint_as_float(v[i]), b = __uint_as_float(v[(i + 1) & 7]);
          v[i] = __float_as_uint(fminf(a, b));
        } else
          v[i] = min(v[i], v[(i + 1) & 7] + 0u);
      }
      if (kOp == 12) {
        if (i & 1)
          v[i] = __vminu2(v[i], v[(i + 1) & 7]);
        else
          v[i] = min(v[i], v[(i + 1) & 7] + 0u);
      }
      if (kOp == 13) {
        if (i & 1)
          v[i] = __byte_perm(v[i], v[(i + 1) & 7], 0x6521);
        else
          v[i] = min(v[i], v[(i + 1) & 7] + 0u);
      }
      if (kOp == 14) {
        if (i & 1) {
          float a = __uint_as_float(v[i]);
          v[i] = __float_as_uint(a * 1.5f + 2.f);
        } else
          v[i] = min(v[i], v[(i + 1) & 7] + 0u);
      }
    }
  }
  long long t1 = clock64();
  uint32_t x = 0;
  for (int i = 0; i < 8; ++i) x ^= v[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
  if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = uint32_t(t1 - t0);
}
template <int kOp>
void run(const char* name, uint32_t* d, int sms) {
  const int iters = 4096, threads = 1024, blocks = sms * 2;
  k<kOp><<<blocks, threads>>>(d, 16, 1);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  k<kOp><<<blocks, threads>>>(d, iters, 3);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms;
  cudaEventElapsedTime(&ms, a, b);
  int clk;
  cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
  const double ops = double(blocks) * threads * iters * 8;
  // per SM per cycle at the measured time, assuming the max clock
  printf("%-28s %8.3f ms  %.1f ops/clk/SM (at %d MHz)\n", name, ms, ops / (ms * 1e-3) / sms / (clk * 1e3), clk / 1000);
}
int main() {
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  uint32_t* d;
  cudaMalloc(&d, sizeof(uint32_t) * sms * 2 * 1024);
  run<0>("IMNMX u32", d, sms);
  run<1>("VIMNMX.U16x2 (vminu2)", d, sms);
  run<2>("VIMNMX3 u32", d, sms);
  run<3>("VIMNMX3.U16x2", d, sms);
  run<4>("HMNMX2 (hmin2)", d, sms);
  run<5>("IMAD", d, sms);
  run<6>("PRMT", d, sms);
  run<7>("FMNMX", d, sms);
  run<8>("vimax_s16x2_relu", d, sms);
  run<9>("IMNMX + HMNMX2", d, sms);
  run<10>("IMNMX + IMAD", d, sms);
  run<11>("IMNMX + FMNMX", d, sms);
  run<12>("IMNMX + VIMNMX.U16x2", d, sms);
  run<13>("IMNMX + PRMT", d, sms);
  run<14>("IMNMX + FFMA", d, sms);
  return 0;
}
