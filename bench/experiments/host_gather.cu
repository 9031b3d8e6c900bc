// An experiment, not part of the build: ways to bring the first W bytes of every 98,304-byte slot of the
// pinned host tier (a streamed digest search, kernels/texture/index.cpp digest_match) to the GPU. Host
// memory as the index holds it (cudaMallocHost blocks of 1,024 slots), each way timed over all of it,
// with and without a kernel holding every multiprocessor meanwhile (the GPU tier's matching).
// BENCHMARKS.md ("Streamed digests") gives the figures. On the GPU machine:
//   nvcc -O3 -std=c++17 -arch=sm_90 host_gather.cu -o g && ./g [BLOCKS=48] [W=16384] [QUICK=0]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#define CHECK(x)                                                                    \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

constexpr size_t kSlot = 98304, kBlockSlots = 1024;

// rows[i] (W bytes) = src[i] slot's first W bytes; one block per image row range, 16-byte loads.
__global__ void gather(const uint4* const* __restrict__ blocks, size_t first, size_t n, size_t w16, uint4* dst) {
  const size_t total = n * w16;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t img = first + i / w16, off = i % w16;
    dst[i] = blocks[img / kBlockSlots][(img % kBlockSlots) * (kSlot / 16) + off];
  }
}

__global__ void hog(long long cycles, int* out) {  // holds its multiprocessor for `cycles`
  const long long t0 = clock64();
  int x = threadIdx.x;
  while (clock64() - t0 < cycles) x = x * 1664525 + 1013904223;
  if (x == 42) out[0] = x;
}

// Reads `n` uint4 of device memory `passes` times (HBM traffic, as the GPU tier's matching makes).
__global__ void hbm_hog(const uint4* src, size_t n, int passes, int* out) {
  uint32_t x = 0;
  for (int p = 0; p < passes; ++p)
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
      x ^= src[i].x + src[i].w;
  if (x == 42u) out[0] = int(x);
}

int main(int argc, char** argv) {
  const size_t nblocks = argc > 1 ? std::atoi(argv[1]) : 48, w = argc > 2 ? std::atoi(argv[2]) : 16384;
  const bool quick = argc > 3 && std::atoi(argv[3]) != 0;  // 1D, 2D on 1 stream and a gather only
  const size_t n = nblocks * kBlockSlots, batch = 1536;    // host_batch 256 x 6 digests a slot
  std::vector<unsigned char*> blocks(nblocks);
  for (auto& b : blocks) {
    CHECK(cudaMallocHost(&b, kBlockSlots * kSlot));
    for (size_t i = 0; i < kBlockSlots * kSlot; i += 4096) b[i] = 1;
  }
  const uint4** d_blocks;
  CHECK(cudaMalloc(&d_blocks, nblocks * sizeof(void*)));
  CHECK(cudaMemcpy(d_blocks, blocks.data(), nblocks * sizeof(void*), cudaMemcpyHostToDevice));
  const int ring = 4;
  std::vector<unsigned char*> stage(ring);
  for (auto& s : stage) CHECK(cudaMalloc(&s, batch * w));
  unsigned char* big;
  CHECK(cudaMalloc(&big, kBlockSlots * kSlot));
  int *d_out, sms = 0;
  CHECK(cudaMalloc(&d_out, 4));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int lo, hi;
  CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  std::vector<cudaStream_t> st(ring);
  for (auto& s : st) CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi));
  cudaStream_t hs;
  CHECK(cudaStreamCreateWithPriority(&hs, cudaStreamNonBlocking, lo));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<void*> dsts(batch), srcs(batch);
  std::vector<size_t> sizes(batch, w);
  // Batches of `batch` images, never across a host block (as the index's), round robin over `streams`.
  const auto each_batch = [&](int streams, const std::function<void(size_t, size_t, unsigned char*, cudaStream_t)>& f) {
    int k = 0;
    for (size_t blk = 0; blk < nblocks; ++blk)
      for (size_t l = 0; l < kBlockSlots; l += batch, ++k) {
        const size_t images = std::min(batch, kBlockSlots - l);
        f(blk * kBlockSlots + l, images, stage[k % ring], st[k % streams]);
      }
  };
  const size_t hbm_n = (size_t(4) << 30) / 16;
  uint4* hbm;
  CHECK(cudaMalloc(&hbm, hbm_n * 16));
  CHECK(cudaMemset(hbm, 1, hbm_n * 16));
  // 0: nothing else runs; 1: a kernel holds every multiprocessor; 2: a kernel reads HBM meanwhile.
  const auto time = [&](const char* what, double bytes, int with_hog, const std::function<void()>& f) {
    std::vector<float> v;
    for (int r = 0; r < 5; ++r) {
      CHECK(cudaDeviceSynchronize());
      if (with_hog == 1) hog<<<sms * 2, 1024, 0, hs>>>(200000000LL, d_out);         // about 0.1 s: outlasts every way
      if (with_hog == 2) hbm_hog<<<sms * 2, 1024, 0, hs>>>(hbm, hbm_n, 40, d_out);  // 160 GB: about 0.04 s
      CHECK(cudaEventRecord(a, st[0]));
      for (int s = 1; s < ring; ++s) CHECK(cudaStreamWaitEvent(st[s], a));
      f();
      for (int s = 1; s < ring; ++s) {
        CHECK(cudaEventRecord(b, st[s]));
        CHECK(cudaStreamWaitEvent(st[0], b));
      }
      CHECK(cudaEventRecord(b, st[0]));
      CHECK(cudaEventSynchronize(b));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      v.push_back(ms);
      CHECK(cudaDeviceSynchronize());
    }
    std::sort(v.begin(), v.end());
    std::printf("%-62s %s: %7.2f ms  %6.2f GB/s\n", what,
                with_hog == 1   ? "SMs"
                : with_hog == 2 ? "HBM"
                                : "   ",
                v[2], bytes / v[2] / 1e6);
  };
  const double digests = double(n) * w;
  std::printf("%s, %d SMs; %zu host blocks of %zu slots (%.1f GB pinned), digests of %zu bytes (%.2f GB)\n", "", sms,
              nblocks, kBlockSlots, n * kSlot / 1e9, w, digests / 1e9);
  for (int h : {0, 1, 2}) {
    if (quick && h == 1) continue;
    time("1D whole host blocks (100 MB copies), 1 stream", double(nblocks) * kBlockSlots * kSlot / 4, h, [&] {
      for (size_t blk = 0; blk < nblocks / 4; ++blk)
        CHECK(cudaMemcpyAsync(big, blocks[blk], kBlockSlots * kSlot, cudaMemcpyHostToDevice, st[0]));
    });
    for (int streams : {1, 2, 4})
      if (!quick || streams == 1)
        time((std::string("2D copies of 1024/1536 rows, ") + std::to_string(streams) + " streams").c_str(), digests, h,
             [&] {
               each_batch(streams, [&](size_t first, size_t images, unsigned char* dst, cudaStream_t s) {
                 CHECK(cudaMemcpy2DAsync(dst, w, blocks[first / kBlockSlots] + first % kBlockSlots * kSlot, kSlot, w,
                                         images, cudaMemcpyHostToDevice, s));
               });
             });
    if (!quick)
      time("batched 1D copies (cudaMemcpyBatchAsync), 1 stream", digests, h, [&] {
        each_batch(1, [&](size_t first, size_t images, unsigned char* dst, cudaStream_t s) {
          for (size_t i = 0; i < images; ++i) {
            dsts[i] = dst + i * w;
            srcs[i] = blocks[(first + i) / kBlockSlots] + (first + i) % kBlockSlots * kSlot;
          }
          cudaMemcpyAttributes at{};
          at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
          size_t idx = 0;
          CHECK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), images, &at, &idx, 1, s));
        });
      });
    for (int grid : {8, 16, 32, 66, 132, 264})
      if (!quick || grid == 132)
        time((std::string("gather kernel, ") + std::to_string(grid) + " blocks of 512, 1 stream").c_str(), digests, h,
             [&] {
               each_batch(1, [&](size_t first, size_t images, unsigned char* dst, cudaStream_t s) {
                 gather<<<grid, 512, 0, s>>>(d_blocks, first, images, w / 16, reinterpret_cast<uint4*>(dst));
               });
             });
  }
  return 0;
}
