// Ratio-test decisions per query descriptor, against an FP32 reference: how often 8-bit (or FP16)
// matching decides Lowe's ratio test otherwise than full precision would, on real image pairs. One
// decision per query descriptor against one gallery image: whether it passes, and which gallery
// descriptor is its nearest. The matchers' decisions read their per-row outputs as the product's
// verification does (texture::ratio_row_passes, kernels/texture/verify.h).
#pragma once
#include <cstdint>
#include <vector>

namespace prism::eval {

struct RatioDecision {
  bool pass = false;
  int nearest = -1;  // -1 when the gallery image has no descriptor
};

// The reference: RootSIFT in float (texture::Features::descriptors_fp32), squared distances summed in
// double, the nearest two (ties: the lower index), d1 < r^2 d2. `query` [rows][kDim], `gallery`
// [gallery_rows][kDim]; fewer than 2 gallery descriptors never pass.
std::vector<RatioDecision> reference_decisions(const float* query, int rows, const float* gallery, int gallery_rows,
                                               float ratio);
// The 8-bit matcher's decisions (match::match_u8_cpu per-row outputs) and the FP16 matcher's
// (match::match_cpu), as texture::ratio_matches reads them before making them one-to-one.
// gallery_rows <= match::kSlot (std::invalid_argument otherwise).
std::vector<RatioDecision> u8_decisions(const uint8_t* query, int rows, const uint8_t* gallery, int gallery_rows,
                                        float ratio);
std::vector<RatioDecision> fp16_decisions(const uint16_t* query, int rows, const uint16_t* gallery, int gallery_rows,
                                          float ratio);

// Decisions that differ from the reference: a pass/fail flip, or both passing with another nearest
// (a row failing both ways makes no match either way, whichever its nearest).
struct DecisionDiff {
  int rows = 0, flips = 0, other_nearest = 0;
  int differ() const { return flips + other_nearest; }
  DecisionDiff& operator+=(const DecisionDiff& o) {
    rows += o.rows, flips += o.flips, other_nearest += o.other_nearest;
    return *this;
  }
};
// std::invalid_argument when the two differ in length.
DecisionDiff compare_decisions(const std::vector<RatioDecision>& reference, const std::vector<RatioDecision>& other);

}  // namespace prism::eval
