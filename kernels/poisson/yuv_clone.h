// Seamless cloning into a YUV 4:2:0 background (NV12, I420), for poissonblend.
//
// The solver works on packed RGB, so the clone makes an RGB round trip: the rectangle around the
// destination box, grown by one pixel (the box's frame is read) and to even coordinates (4:2:0
// holds one chroma sample per 2x2 block), goes to RGBA through colorconvert, is cloned into, and
// goes back. Pixels of that rectangle outside the box make the round trip too. The CPU and the CUDA
// entry share the plan (YuvRoundTrip); on the GPU every step is enqueued on one stream.
#pragma once

#include <cstdint>

#include "colorconvert/colorconvert.h"
#include "poisson/seamless_clone.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::poisson {

// A YUV 4:2:0 background, in host memory (CPU path) or device memory (CUDA path).
struct YuvBackground {
  colorconvert::Image frame;              // NV12 or I420, the whole frame; modified in place
  colorconvert::Colorimetry colorimetry;  // of the frame, both ways
  uint8_t* rgba = nullptr;                // scratch of frame.width * frame.height * 4 bytes, same memory
};

// The rectangle of a width x height 4:2:0 frame that goes through RGBA for a destination box: the
// box grown by one pixel, with even origin and even end (or the frame's edge).
Box yuv_rectangle(const Box& dst, int width, int height);

// One round trip: the frame's rectangle, the scratch as its RGBA image, the two conversions, and
// the clone into the RGBA rectangle (`job` with the background and placement.dst moved there).
struct YuvRoundTrip {
  Box rect;
  colorconvert::Image yuv;
  colorconvert::Image rgba;
  colorconvert::Plan to_rgba, to_yuv;
  CloneJob job;

  // `job.background` is ignored (the background is `background.frame`); `job.placement` must be
  // solvable.
  static YuvRoundTrip plan(const YuvBackground& background, const CloneJob& job);
};

// CPU path: clone_cpu between the two conversions. Does nothing when the placement is not solvable.
void clone_yuv_cpu(const YuvBackground& background, const CloneJob& job);

#if defined(PRISM_HAVE_CUDA)
// CUDA path: the conversions and the clone enqueued on `stream`, which must be the cloner's; no
// allocation, no synchronisation. Throws prism::gpu::CudaError. Does nothing when the placement is
// not solvable.
void clone_yuv_cuda(CudaCloner& cloner, const YuvBackground& background, const CloneJob& job, cudaStream_t stream);
#endif

}  // namespace prism::poisson
