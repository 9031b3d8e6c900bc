// Multispectral frames from ordinary video, the way the reference tracking system simulated them:
// every pixel's "spectrum" is the histogram of the grey levels in an odd window around it, over
// `bins` equal-width bins of 0..255 (bin = v * bins / 256). The window is clamped at the frame's
// edges (replicated border, like OpenCV's BORDER_REPLICATE), so every histogram holds
// window x window counts and all signatures have the same mass.
#pragma once
#include <cstdint>

#include "common/hostdevice.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::spectral {

struct SpectralizeParams {
  int bins = 11;    // 2..32
  int window = 11;  // odd, 1..31
};

// Throws std::invalid_argument naming the bad parameter.
void validate(const SpectralizeParams& p);

PRISM_HD int bin_of(uint8_t v, int bins) { return (static_cast<int>(v) * bins) >> 8; }

// grey: width x height bytes with `stride`; out: rows of width x bins counts (float or uint16_t),
// `out_row_bytes` apart (0: packed, [height * width][bins]).
template <class T>
void spectralize_cpu(const uint8_t* grey, int width, int height, int64_t stride, const SpectralizeParams& p, T* out,
                     int64_t out_row_bytes = 0);

#if defined(PRISM_HAVE_CUDA)
// The same on device memory, asynchronous on `stream`.
template <class T>
void spectralize_cuda(const uint8_t* grey, int width, int height, int64_t stride, const SpectralizeParams& p, T* out,
                      cudaStream_t stream, int64_t out_row_bytes = 0);
#endif

}  // namespace prism::spectral
