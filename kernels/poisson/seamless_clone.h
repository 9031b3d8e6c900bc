// Poisson seamless cloning (Perez, Gangnet, Blake, "Poisson Image Editing", SIGGRAPH 2003) that
// reproduces OpenCV 4.6's cv::seamlessClone (modules/photo/src/seamless_cloning*.cpp) to within
// max difference 1, on both the CPU and the CUDA path. What OpenCV computes, step by step:
//  1. mask: the mask image's outermost 1-pixel frame counts as 0; the box is the bounding
//     rectangle of the non-zero mask pixels (empty box: the background is left unchanged);
//  2. placement: the box's centre lands at p: roi_d = (p.x - w/2, p.y - h/2, w, h), integer
//     division;
//  3. patch = overlay inside the box where mask != 0, else 0; forward-difference gradients in
//     float of the background ROI and the patch;
//  4. weight m = erode7x7(mask) / 255 (zero outside the box), 1-m = (255 - E) / 255;
//  5. field = dG*(1-m) + pG*m (NORMAL), per channel the larger of |Gx - Gy| (MIXED; ties to the
//     background), or the patch's grey gradient on all channels (MONOCHROME_TRANSFER);
//  6. Dirichlet problem on the whole box: its 1-pixel frame keeps the background; RHS is the
//     backward-difference divergence minus the frame's neighbour contribution;
//  7. DST-I both ways, divided by 2cos(pi(i+1)/(W-1)) + 2cos(pi(j+1)/(H-1)) - 4 evaluated in
//     float exactly as OpenCV does, DST-I back;
//  8. clamp to [0, 255] and truncate.
//
// Where OpenCV throws (the ROI leaves the background), we clip instead: the box is cut to the part
// that lands inside the background, and the cut box is solved as if the mask had been that box (its
// frame, now on the background's edge, keeps the background). Boxes narrower or lower than 3 pixels
// after clipping leave the background unchanged. When the box is inside, nothing changes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/grey.h"  // grey_bgr: colour masks and MONOCHROME_TRANSFER
#include "common/hostdevice.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::poisson {

// Values equal cv::NORMAL_CLONE, cv::MIXED_CLONE, cv::MONOCHROME_TRANSFER.
enum class CloneMode : int { Normal = 1, Mixed = 2, MonochromeTransfer = 3 };

// An 8-bit image with 3 or 4 interleaved channels, in host or device memory. r, g, b are the byte
// offsets of the colours within a pixel (OpenCV's BGR: b=0 g=1 r=2; RGBA: r=0 g=1 b=2). The solve
// treats channels independently except for MONOCHROME_TRANSFER's grey.
struct PackedImage {
  uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int64_t stride = 0;  // bytes per row
  int channels = 3;    // bytes per pixel: 3 or 4
  int r = 2, g = 1, b = 0;
};

// An 8-bit mask the size of the overlay: `step` bytes between pixels (1 for a grey mask, 4 with
// offset 3 for an RGBA overlay's alpha channel). 0 = background, 255 = overlay, between = soft.
struct MaskView {
  const uint8_t* data = nullptr;
  int width = 0;
  int height = 0;
  int64_t stride = 0;
  int step = 1;
};

struct Box {
  int x = 0, y = 0, width = 0, height = 0;
  bool empty() const { return width <= 0 || height <= 0; }
  bool operator==(const Box& o) const { return x == o.x && y == o.y && width == o.width && height == o.height; }
};

// Step 1 on the host: bounding box of the non-zero mask pixels, ignoring the mask's outer frame.
Box mask_box(const MaskView& mask);

// Step 2 plus clipping: the source box (overlay coordinates) and destination box (background
// coordinates) actually solved, both of the same size; empty when nothing is to be done.
struct Placement {
  Box src;
  Box dst;
  bool clipped = false;  // the box reached outside the background
  bool solvable() const { return src.width >= 3 && src.height >= 3; }
};
Placement place(const Box& mask_box, int px, int py, int background_width, int background_height);

// One overlay to clone into the background, in place.
struct CloneJob {
  PackedImage background;  // modified in place, only inside placement.dst's interior
  PackedImage overlay;
  MaskView mask;        // same size as the overlay
  Placement placement;  // from place()
  CloneMode mode = CloneMode::Normal;
};

// CPU path: float DST-I through OpenCV's real DFT, rows in parallel.
void clone_cpu(const CloneJob& job);

#if defined(PRISM_HAVE_CUDA)
// How the GPU path computes the DST-I: dense FP64 matrix products (cuBLAS, split even/odd), batched
// real FFTs of the odd extension (cuFFT), or Replay: OpenCV's own float DFTs replayed operation for
// operation (opencv_dft.h), bit-exact with OpenCV but O(n p) per row for a prime factor p of 2n+2,
// so for small and thin boxes (falls back to Fft when a row does not fit in shared memory). Auto
// picks by box size (see solver_for()).
enum class DstMethod : int { Auto = 0, Gemm = 1, Fft = 2, Replay = 3 };

// CUDA path, solving in double precision with OpenCV's low frequencies spliced in, or replaying
// OpenCV's float solve (see seamless_clone.cu). Holds one CUDA stream's worth of scratch buffers, cuFFT plans and
// cuBLAS handle, made the first time a box size is seen and kept (a few sizes, least recently used evicted), so a
// stream of frames allocates nothing and never synchronises. All pointers in jobs are device
// pointers. Create, use and destroy it with the same CUDA context current.
class CudaCloner {
 public:
  explicit CudaCloner(cudaStream_t stream, DstMethod method = DstMethod::Auto);
  ~CudaCloner();
  CudaCloner(const CudaCloner&) = delete;
  CudaCloner& operator=(const CudaCloner&) = delete;

  // Enqueues the clone on the stream. Throws prism::gpu::CudaError on a CUDA/cuFFT/cuBLAS error.
  void clone(const CloneJob& job);

  // Bounding box of a device-resident mask (step 1); synchronises the stream once.
  Box mask_box(const MaskView& device_mask);

  // The method Auto uses: Replay for cheap and thin boxes, then by box size (measured, see .cu) on
  // GPUs with full-rate FP64, else Fft.
  static DstMethod solver_for(int box_width, int box_height, bool fast_fp64);
  // Replay's work for a box, in butterfly terms (what solver_for weighs).
  static double replay_cost(int box_width, int box_height);
  DstMethod method_for(int box_width, int box_height) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

namespace detail {
// Test hook: OpenCV's float forward DFT of the odd extensions [0, x, 0, -rev x] of rows.size() /
// length host rows, replayed on the GPU as the CUDA path replays its passes: the imaginary parts of
// outputs 1..count of each row, row after row. Empty when a row does not fit in shared memory.
std::vector<float> replay_odd_extension_gpu(const std::vector<float>& rows, int length, int count);
}  // namespace detail
#endif

}  // namespace prism::poisson
