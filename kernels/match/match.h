// Descriptor matching for texture identification: a query image's RootSIFT descriptors against a
// batch of gallery images, each query descriptor's two nearest descriptors in every gallery image,
// Lowe's ratio test, and a score per (query, gallery image) = how many query descriptors pass.
//
// RootSIFT vectors (Arandjelovic & Zisserman, "Three things everyone should know to improve object
// retrieval", CVPR 2012) are L2-unit with non-negative entries, so squared distance = 2 - 2 dot:
// the two nearest are the two largest dot products, and the ratio test d1 < r d2 on distances is
// (1 - dot1) < r^2 (1 - dot2). Descriptors are stored in FP16; dot products accumulate in FP32.
//
// The CUDA path needs an sm_80 or newer GPU (it throws otherwise).
//
// Layout: a gallery batch is `images` slots of kSlot descriptors x kDim halves, padded with any
// values past the image's count (counts[b] <= kSlot; padded rows are never matched). Queries are
// rows of kDim halves; with batched queries, query q owns rows [q * query_rows, (q+1) * query_rows).
#pragma once
#include <cstdint>

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::match {

constexpr int kDim = 128;   // SIFT
constexpr int kSlot = 768;  // descriptors per gallery image at most (the strongest keypoints)

// IEEE binary16 conversions (round to nearest even), the same bits as CUDA's __float2half_rn.
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);

// RootSIFT of `count` SIFT vectors (kDim floats each, non-negative): L1-normalise, square root,
// store as FP16. An all-zero vector stays zero.
void rootsift(const float* sift, int count, uint16_t* out);

struct MatchParams {
  float ratio = 0.8f;  // Lowe's ratio on distances
};

// Per (query row, gallery image), when requested (pointers may be null): the best and second
// dot products and the best's descriptor index in the image (-1 when the image has no
// descriptor; the second is -inf when it has one). Index [(image * rows) + row].
struct MatchOutputs {
  int* scores = nullptr;  // [queries][images], required
  float* best = nullptr;
  float* second = nullptr;
  int* best_index = nullptr;
};

struct MatchProblem {
  const uint16_t* query = nullptr;    // [rows][kDim]
  int rows = 0;                       // all queries' rows
  int query_rows = 0;                 // rows per query (rows for a single query); a multiple of 16 for the GPU
  const uint16_t* gallery = nullptr;  // [images][kSlot][kDim]
  const int* counts = nullptr;        // [images]
  int images = 0;
  int queries() const { return query_rows > 0 ? rows / query_rows : 0; }
};

// CPU path (threads over gallery images). Ties keep the lower descriptor index.
void match_cpu(const MatchProblem& p, const MatchParams& params, const MatchOutputs& out);

#if defined(PRISM_HAVE_CUDA)
// The same on device memory, asynchronous on `stream`: one fused kernel, the dot products on
// tensor cores (mma.sync m16n8k16, FP16 in, FP32 accumulate) with the top-2 selection and the
// ratio test in the epilogue, so the distance matrix never goes to memory. out.scores must be
// zeroed by the caller (the kernel adds to it).
void match_cuda(const MatchProblem& p, const MatchParams& params, const MatchOutputs& out, cudaStream_t stream);
#endif

}  // namespace prism::match
