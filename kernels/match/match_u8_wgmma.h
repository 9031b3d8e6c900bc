// The 8-bit matcher's scores on Hopper's warpgroup MMA: private to match_u8.cu, which chooses between
// this kernel and the mma.sync one (match.h, GpuPath). Built for sm_90a alone (wgmma exists on no
// other target), in its own object library: kernels/CMakeLists.txt.
#pragma once
#include <cuda_runtime_api.h>

#include "match/match.h"

namespace prism::match::detail {

// Query rows per block: the whole of a 768-row query, so that each gallery image crosses into a
// streaming multiprocessor's shared memory once per query, not once per slice of rows.
constexpr int kWgmmaRowsPerBlock = 768;

// Scores only (out.scores, zeroed by the caller), on a device of compute capability 9.0; the
// problem is checked by the caller. `sms`: the device's multiprocessors (the grid is persistent).
void match_u8_scores_wgmma(const MatchU8Problem& p, float ratio, int* scores, int sms, cudaStream_t stream);

}  // namespace prism::match::detail
