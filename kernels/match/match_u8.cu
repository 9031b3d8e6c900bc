// The 8-bit matcher on the GPU (match.h). A plain reference kernel: one thread per (query row,
// batch image), the same integers as match_u8_cpu.
#include <climits>
#include <stdexcept>

#include "common/gpu.h"
#include "match/match.h"

namespace prism::match {
namespace {

__global__ void match_u8_plain(const uint8_t* query, int rows, int query_rows, const uint8_t* gallery,
                               const int* counts, const int* slots, int images, float ratio, int* scores,
                               int32_t* out_best, int32_t* out_second, int* out_index) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (r >= rows) return;
  const int slot = slots ? slots[b] : b;
  const int n = counts[slot];
  const uint8_t* q = query + int64_t(r) * kDim;
  const uint8_t* img = gallery + int64_t(slot) * kSlotBytes;
  int32_t qn = 0;
  for (int k = 0; k < kDim; ++k) qn += int32_t(q[k]) * q[k];
  int32_t best = INT32_MAX, second = INT32_MAX;
  int index = -1;
  if (qn > 0)
    for (int j = 0; j < n; ++j) {
      const uint8_t* g = img + int64_t(j) * kDim;
      int32_t dot = 0, gn = 0;
      for (int k = 0; k < kDim; ++k) dot += int32_t(q[k]) * g[k], gn += int32_t(g[k]) * g[k];
      const int32_t d = qn + gn - 2 * dot;
      if (d < best) {
        second = best, best = d, index = j;
      } else if (d < second) {
        second = d;
      }
    }
  if (n >= 2 && qn > 0 && ratio_pass(best, second, ratio)) atomicAdd(&scores[int64_t(r / query_rows) * images + b], 1);
  const int64_t o = int64_t(b) * rows + r;
  if (out_best) out_best[o] = best;
  if (out_second) out_second[o] = second;
  if (out_index) out_index[o] = index;
}

}  // namespace

void match_u8_cuda(const MatchU8Problem& p, const MatchParams& params, const MatchU8Outputs& out, cudaStream_t stream) {
  if (!out.scores) throw std::invalid_argument("match_u8_cuda: scores are required");
  if (p.query_rows <= 0 || p.query_rows % 16 != 0 || p.rows % p.query_rows != 0)
    throw std::invalid_argument("match_u8_cuda: rows must be whole queries of a multiple of 16 rows");
  if (p.images == 0 || p.rows == 0) return;
  PRISM_CUDA_CHECK(cudaMemsetAsync(out.scores, 0, sizeof(int) * size_t(p.queries()) * p.images, stream));
  const dim3 grid((p.rows + 127) / 128, p.images);
  match_u8_plain<<<grid, 128, 0, stream>>>(p.query, p.rows, p.query_rows, p.gallery, p.counts, p.slots, p.images,
                                           params.ratio, out.scores, out.best, out.second, out.best_index);
  PRISM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace prism::match
