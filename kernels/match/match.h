// Descriptor matching for texture identification: a query image's RootSIFT descriptors against a
// batch of gallery images, each query descriptor's two nearest descriptors in every gallery image,
// Lowe's ratio test, and a score per (query, gallery image) = how many query descriptors pass.
//
// RootSIFT vectors (Arandjelovic & Zisserman, "Three things everyone should know to improve object
// retrieval", CVPR 2012) are L2-unit with non-negative entries, so squared distance = 2 - 2 dot:
// the two nearest are the two largest dot products, and the ratio test d1 < r d2 on distances is
// (1 - dot1) < r^2 (1 - dot2).
//
// Two precisions. 8 bits (below) is the product: what the gallery stores and the index matches, on
// the CPU and on the GPU, equal bit for bit. FP16 (this part) is the evaluation's reference for the
// 8-bit rounding (`prism-texture-eval`'s ratio decisions) and runs on the CPU only; its CUDA kernel
// was deleted once the 8-bit matcher replaced it everywhere (commit b53c1f8 is the last that has
// it; docs/benchmarks/matching.md keeps its figures).
//
// Layout: a gallery batch is `images` slots of kSlot descriptors x kDim halves, padded with any
// values past the image's count (counts[b] <= kSlot; padded rows are never matched). Queries are
// rows of kDim halves; with batched queries, query q owns rows [q * query_rows, (q+1) * query_rows).
#pragma once
#include <cstdint>

#include "common/hostdevice.h"

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
// in float (the FP32 reference of `prism-texture-eval`). An all-zero vector stays zero.
void rootsift_float(const float* sift, int count, float* out);
// The same stored as FP16.
void rootsift(const float* sift, int count, uint16_t* out);

struct MatchParams {
  float ratio = 0.8f;  // Lowe's ratio on distances
};

// The FP16 matcher's ratio test on the best and second dot products of unit vectors, in float as
// match_cpu decides it: (1 - dot1) < r^2 (1 - dot2).
PRISM_HD bool ratio_pass_dot(float best, float second, float ratio) {
  const float r2 = ratio * ratio;
  return (1.f - best) < r2 * (1.f - second);
}

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
  int query_rows = 0;                 // rows per query (rows for a single query)
  const uint16_t* gallery = nullptr;  // [images][kSlot][kDim]
  const int* counts = nullptr;        // [images]
  int images = 0;
  int queries() const { return query_rows > 0 ? rows / query_rows : 0; }
};

// CPU path (threads over gallery images). Ties keep the lower descriptor index.
void match_cpu(const MatchProblem& p, const MatchParams& params, const MatchOutputs& out);

// ---- 8-bit descriptors (the gallery's storage and the index's matcher) ----
//
// RootSIFT in 8 bits as COLMAP stores it: u = min(255, round(512 x)) (components above 0.498
// saturate; OpenCV's SIFT itself is natively 8-bit, ../shared/FACTS.md). Dot products of two u8
// vectors are exact integers (128 x 255^2 < 2^31), so squared distances are exact and the CPU and
// GPU paths agree bit for bit. Half as many bytes as FP16: 98,304 per gallery slot.
//
// The two nearest are the two smallest squared distances d = |q|^2 + |g|^2 - 2 q.g (vectors are no
// longer exactly unit after rounding, so the norms are part of it); ties keep the lower descriptor
// index. A query row that is all zero (the padding of a query to a multiple of 16 rows) never
// passes the ratio test and has no nearest (best_index -1).
constexpr int kSlotBytes = kSlot * kDim;

uint8_t quantize_u8(float x);  // min(255, round(512 x)), halves away from zero; x <= 0 and NaN give 0
// 8-bit RootSIFT of `count` SIFT vectors (kDim floats each): rootsift() then quantize_u8.
void rootsift_u8(const float* sift, int count, uint8_t* out);
// An FP16 RootSIFT component in 8 bits (migrating a gallery written in FP16).
inline uint8_t half_to_u8(uint16_t h) { return quantize_u8(half_to_float(h)); }

// Lowe's ratio test on exact squared distances: d1 < r d2 <=> d1 < r^2 d2 (d = squared), in
// double from the float ratio, so that host and device decide identically.
PRISM_HD bool ratio_pass(int32_t d1, int32_t d2, float ratio) {
  const double r = ratio;
  return double(d1) < r * r * double(d2);
}

struct MatchU8Problem {
  const uint8_t* query = nullptr;    // [rows][kDim]
  int rows = 0;                      // all queries' rows
  int query_rows = 0;                // rows per query; a multiple of 16 for the GPU
  const uint8_t* gallery = nullptr;  // [slots][kSlot][kDim]; rows past a slot's count hold any values
  const int* counts = nullptr;       // [slots]
  int images = 0;                    // gallery images in this batch
  // Optional: batch image b reads gallery slot slots[b] (a search within a scope); null: slot b.
  const int* slots = nullptr;
  // Optional: |g|^2 of every gallery row ([slots][kSlot] as u8_norms writes them, 16-byte aligned
  // like the gallery; rows past a slot's count are ignored), read by the wgmma kernel; the others,
  // and this kernel when null, compute them from the bytes. A gallery that stays in GPU memory keeps them beside its
  // slots: computing them per search costs the wgmma kernel a tenth of its time (docs/benchmarks/
  // matching.md, "A whole query per block, and |g|^2 kept beside the gallery").
  const int32_t* norms = nullptr;
  // GPU: at most this many multiprocessors for the wgmma kernel's persistent grid (0: all of them). A
  // grid of one block per multiprocessor holds every one for the whole launch; fewer leave room for a
  // kernel that must run meanwhile (gpu::copy_rows_async streaming a digest search's rows). The
  // mma.sync kernel needs no cap: its grid is one short block per image and 256 rows, so a
  // higher-priority stream's blocks take the next multiprocessor that frees up.
  int grid_sms = 0;
  int queries() const { return query_rows > 0 ? rows / query_rows : 0; }
};

// |g|^2 of `rows` 8-bit descriptors (kDim bytes each) into out[0 .. rows): MatchU8Problem::norms.
void u8_norms(const uint8_t* descriptors, int rows, int32_t* out);

// Per (query row, batch image), when requested: the squared distances to the nearest and second
// nearest (INT32_MAX when there is none) and the nearest's index (-1). Index [(b * rows) + row].
struct MatchU8Outputs {
  int* scores = nullptr;  // [queries][images], required: ratio-test passes
  int32_t* best = nullptr;
  int32_t* second = nullptr;
  int* best_index = nullptr;
};

// The CPU matcher's instruction paths. Every path computes the same integers; kAuto takes the
// fastest this CPU runs (checked at run time, so one binary serves any x86-64 host). Tests force
// each path and compare; benchmarks time each.
enum class CpuPath {
  kAuto,
  kAvx512Vnni,  // vpdpbusd on 16 gallery descriptors at a time (u8 x s8 with a bias of 128)
  kAvx2,        // vpmaddwd on s16-widened bytes, 8 descriptors per register
  kScalar,      // plain C++ (any CPU)
};
bool cpu_path_available(CpuPath path);
const char* cpu_path_name(CpuPath path);  // "avx512-vnni", "avx2", "scalar"; kAuto names the one it takes

// Threads over batch images; `path` must be available (std::invalid_argument otherwise).
void match_u8_cpu(const MatchU8Problem& p, const MatchParams& params, const MatchU8Outputs& out,
                  CpuPath path = CpuPath::kAuto);
#if defined(PRISM_HAVE_CUDA)
// The 8-bit matcher's GPU kernels; every one computes the same integers. kAuto takes kWgmma for
// scores alone on a compute capability 9.0 device (H100, H200) when the batch fills the device and
// the rows fill its blocks of 768 (match_u8_wgmma.h), kMmaSync otherwise. Tests force each path.
enum class GpuPath {
  kAuto,
  kMmaSync,  // mma.sync m16n8k32, 256 rows per block, sm_80+; the only one with per-row outputs
  kWgmma,    // wgmma m64n64k32, a whole 768-row query per persistent block, compute capability 9.0
};
// Whether `path` runs on the current device (kWgmma: compute capability 9.0 exactly, as sm_90a code).
bool gpu_path_available(GpuPath path);

// Device memory, asynchronous on `stream`; out.scores is written (not added to). A fused kernel on
// the integer tensor cores (u8 x u8 -> s32) with the top-2 and the ratio test in its epilogue;
// needs sm_80 or newer (it throws otherwise). Forcing kWgmma with per-row outputs, or on a device
// without it, throws std::invalid_argument.
void match_u8_cuda(const MatchU8Problem& p, const MatchParams& params, const MatchU8Outputs& out, cudaStream_t stream,
                   GpuPath path = GpuPath::kAuto);
// The plain reference kernel (one thread per query row and image, no tensor cores): the GPU
// tests' independent check of the fused kernel. Same contract, any GPU; slow.
void match_u8_cuda_reference(const MatchU8Problem& p, const MatchParams& params, const MatchU8Outputs& out,
                             cudaStream_t stream);
#endif

}  // namespace prism::match
