// Contrast normalisation of the grey image before SIFT, for captures in poor light. SIFT's contrast
// threshold is absolute (0.04 of the full grey range, after its 1/3 per-octave scaling), so a dark,
// low-contrast capture (a mean grey under 40) yields tens of keypoints where its enrolled image had
// hundreds, and is not identified. Equalising each region's grey levels first restores them.
// Enrolment and query must apply the same normalisation, so a gallery records the one its entries
// were extracted with (Gallery::normalisation) and every extraction against it uses that one.
//
// The normalisation is CLAHE (Zuiderveld 1994) as OpenCV 4.6's cv::CLAHE computes it on 8-bit
// images, written here (normalise_pixel.h) in integer and single-rounding float arithmetic that a
// CUDA kernel reproduces bit for bit; chosen by measurement in `prism-texture-eval` against global
// histogram equalisation, other CLAHE settings and a local mean/std normalisation
// (docs/TEXTUREID.md, "Poor light").
#pragma once
#include <string>

#include <opencv2/core.hpp>

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "common/device_array.h"
#endif

namespace prism::texture {

struct Normalisation {
  enum class Kind { kNone, kClahe };
  Kind kind = Kind::kNone;
  int clip = 0;   // kClahe: cv::CLAHE's clipLimit (a level may hold clip x the mean count per level)
  int tiles = 0;  // kClahe: the tile grid, tiles x tiles (cv::CLAHE's tileGridSize)

  // The canonical name, which parse_normalisation reads back: "none" or "clahe-CLIP-TILES".
  std::string name() const;
  bool operator==(const Normalisation& o) const { return kind == o.kind && clip == o.clip && tiles == o.tiles; }
  bool operator!=(const Normalisation& o) const { return !(*this == o); }
};

// What parse_normalisation accepts, for usage texts and errors.
constexpr const char* kNormalisationNames =
    "none, or clahe-CLIP-TILES with CLIP 1..40 and TILES 1..32 (e.g. clahe-2-8)";
constexpr int kMaxClaheClip = 40, kMaxClaheTiles = 32;

// "none" or "clahe-CLIP-TILES" (whole numbers in range, no other spelling). Throws
// std::invalid_argument naming `name` and what is accepted.
Normalisation parse_normalisation(const std::string& name);

// The normalisation `prism-texture-eval` chose for poor light (docs/TEXTUREID.md), and the default
// that `prism texture enroll`, `serve`, `shard` and Python's Gallery(create=True) record in a new
// gallery: on the full evaluation it identifies better in every perturbation, dim captures above
// all. Gallery::open's own default stays none (the meaning of a gallery without a record).
Normalisation poor_light_normalisation();

// `grey` (8-bit, one channel) normalised; kNone returns `grey` itself (no copy). Throws
// std::invalid_argument on another image type or an invalid setting.
cv::Mat normalise(const cv::Mat& grey, const Normalisation& n);

// CLAHE of an 8-bit grey image with cv::CLAHE's clipLimit `clip` (0: no clipping) and a
// tiles_x x tiles_y grid; equal to cv::createCLAHE(clip, {tiles_x, tiles_y})->apply(grey, out)
// (tests/kernels/test_normalise.cpp). An image whose sides are not multiples of the grid is padded
// at the right and bottom by reflection (BORDER_REFLECT_101) for the tiles' histograms, as OpenCV does
// (both sides by tiles - side % tiles, a side that divides by a whole tile).
void clahe(const cv::Mat& grey, double clip, int tiles_x, int tiles_y, cv::Mat& out);

#if defined(PRISM_HAVE_CUDA)
// normalise() on the GPU, equal to it bit for bit (normalise_pixel.h's arithmetic): one block per
// tile builds the tile's histogram with integer shared-memory atomics (a sum in any order) and its
// LUT, then one thread per pixel blends. The LUTs' buffer is kept between calls.
class CudaNormaliser {
 public:
  // `grey` (device, `pitch` bytes per row) normalised into `out` (device), enqueued on `stream`.
  // Throws std::invalid_argument for kNone or an invalid setting (the caller skips kNone).
  void run(const Normalisation& n, const uint8_t* grey, size_t pitch, int width, int height, uint8_t* out,
           size_t out_pitch, cudaStream_t stream);

 private:
  gpu::DeviceArray<uint8_t> luts_;
};
#endif

}  // namespace prism::texture
