// Decoding an uploaded or stored photo to 8-bit grey, bounded in formats, memory and time: the one
// decoder behind `prism texture`, the service's uploads, Python's Gallery and poissonblend's masks.
//
// Why not decodebin (what the project used before) or cv::imdecode: a texture photo needs only
// PNG, JPEG or binary PNM, and every other decoder is attack surface for bytes from strangers (an
// SVG of stacked blurs took 276 s and 1.6 GB of one server; EXR, JP2 and WebP decoded without size
// checks). The format is decided here from the first bytes, before any decoder runs; everything
// else is refused naming what it looks like. The pixels go straight to grey row by row, so a
// decode holds the grey image and a few rows (a progressive JPEG or an interlaced PNG also holds
// the whole image once in the codec's own layout, and a plain PNG of up to 64 MB inflated is
// inflated in one piece, libdeflate's 2-3x the speed of libpng's zlib: DecodeHeader::working_bytes
// says how much before any of it is allocated, so that a server can admit decodes against a memory
// budget). A deadline
// is checked between rows and between a progressive JPEG's scans, so a decode that overruns is
// abandoned, not waited for.
//
// Reduced JPEG decoding (decode_grey_reduced): texture extraction shrinks every image whose longer
// side exceeds FeatureParams::max_side (1024) before SIFT, so a 4000x3000 phone photo decoded at
// full size is mostly thrown away by the shrink. libjpeg-turbo can decode a JPEG already reduced in
// the DCT domain (libjpeg's scale_num/scale_denom: each 8x8 block's inverse DCT computed at 4x4,
// 2x2 or 1x1), far cheaper than a full decode then a resize, so a caller that will shrink anyway
// asks for a minimum longer side and gets the smallest of 1/2, 1/4, 1/8 that still has it (the
// later shrink still only shrinks), plus the factor that maps the reduced pixels back to the
// image's own. Only those three of libjpeg-turbo's M/8 scalings: they are the ones OpenCV's
// imdecode(IMREAD_REDUCED_GRAYSCALE_2/4/8) reads, an independent reference to hold them to bit for
// bit; libjpeg-turbo has SIMD inverse DCTs for 1/2 and 1/4 (3/8 to 7/8 are plain C); and a factor
// of 2^k maps coordinates back exactly (float keypoints times 2, 4 or 8). The entropy decoding, the
// same at every scale, is most of what is left (docs/TEXTUREID.md, "Reduced JPEG decoding", has the
// figures). PNG and PNM are always decoded at full size.
//
// What grey is, per format (tests/kernels/test_image_decode.cpp holds each to an independent
// decoder, bit for bit):
// - JPEG: libjpeg-turbo's own grey output (the Y channel of YCbCr; RGB and grey JPEGs converted by
//   libjpeg), accurate integer IDCT (JDCT_ISLOW): what cv::imdecode(IMREAD_GRAYSCALE) gives. CMYK
//   and YCCK are refused.
// - PNG (libpng): 16-bit samples keep their high byte, palettes and low bit depths expand to 8
//   bits, alpha is ignored, and colour becomes grey by OpenCV's cvtColor BGR2GRAY (grey_bgr): what
//   cv::imdecode(IMREAD_COLOR) then cvtColor gives.
// - binary PNM (P4 bitmap, P5 grey, P6 colour; maxval 1..65535, rescaled to 0..255 rounding to
//   nearest): colour as PNG's. Plain (ASCII) PNM, P1-P3, is refused.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <opencv2/core.hpp>

namespace prism::image {

enum class ImageFormat { kUnknown, kPng, kJpeg, kPnm };

// The formats read here, as messages list them.
constexpr const char* kSupportedFormats = "PNG, JPEG, PNM";

class DecodeError : public std::runtime_error {
 public:
  enum class Kind {
    kUnsupported,  // not PNG, JPEG or binary PNM (or one of their variants that is not read here)
    kTooLarge,     // declares more pixels than allowed: refused before any pixel is decoded
    kMalformed,    // damaged, truncated, or declaring a width or height of 0
    kTimedOut,     // the deadline passed mid-decode; the decode was abandoned
    kNoMemory,     // an allocation failed
  };
  DecodeError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

struct DecodeLimits {
  uint64_t max_pixels = 64ull << 20;  // width x height, checked from the header
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// The size a decode reduced by libjpeg's DCT scaling gives.
struct ReducedSize {
  uint64_t width = 0, height = 0;  // the image's sides divided by `reduction`, rounded up
  int reduction = 1;               // 1 (full size), 2, 4 or 8
};

// The size a width x height JPEG is decoded to when a longer side of at least `min_side` is asked
// for (decode_grey_reduced): the smallest of libjpeg's scalings 1/2, 1/4 and 1/8 whose longer side is
// still >= min_side, each side rounded up as libjpeg's jpeg_calc_output_dimensions rounds it (a
// 4001x3001 image at 1/2 is 2001x1501); full size when min_side <= 0 or the longer side is under
// 2 min_side. 4000x3000 with min_side 1024: 2000x1500 (1/2); 8000x6000: 2000x1500 (1/4).
ReducedSize jpeg_reduced_size(uint64_t width, uint64_t height, int min_side);

// What the header says, read without decoding a pixel.
struct DecodeHeader {
  ImageFormat format = ImageFormat::kUnknown;
  uint64_t width = 0, height = 0;  // as declared
  // What the decode gives: width x height, or for a JPEG read with a min_side, jpeg_reduced_size's.
  ReducedSize decoded;
  // The most memory the decode holds at once: the grey result (of the decoded size) plus, for a
  // progressive JPEG or an interlaced PNG, the whole image in the codec's layout (a JPEG's DCT
  // coefficients, at full size whatever the scaling; a PNG's 8-bit rows; a plain PNG's inflated
  // rows and its compressed data gathered, counted as the file's size). Codec state of a few rows
  // is not counted.
  uint64_t working_bytes = 0;
};

// A decode that may be reduced (decode_grey_reduced).
struct ReducedGrey {
  cv::Mat grey;                    // 8-bit grey (CV_8UC1, continuous) of the decoded size
  uint64_t width = 0, height = 0;  // the image's own size, as its header declares it
  // 1, 2, 4 or 8: `grey` is the image reduced by it (sides rounded up: jpeg_reduced_size); its
  // pixel (x, y) covers the image's [x r, (x + 1) r) x [y r, (y + 1) r), so a point at x in grey's
  // pixels (centres at integers) is at (x + 0.5) r - 0.5 in the image's.
  int reduction = 1;
};

// The format the bytes begin with (kUnknown for anything else, including plain PNM).
ImageFormat sniff_format(const uint8_t* data, size_t size);

// Nothing unless the bytes begin as PNG, JPEG or binary PNM; else DecodeError kUnsupported naming
// what they look like ("is an SVG image: unsupported image format (PNG, JPEG, PNM)").
void check_format(const uint8_t* data, size_t size);

// The header, or DecodeError: kUnsupported (naming what the bytes look like: "an SVG image"),
// kMalformed, or kTooLarge when it declares more than `max_pixels`. `min_side`: as
// decode_grey_reduced's, for DecodeHeader::decoded and working_bytes.
DecodeHeader read_header(const uint8_t* data, size_t size, uint64_t max_pixels, int min_side = 0);

// The image as 8-bit grey (CV_8UC1, continuous). Throws DecodeError.
cv::Mat decode_grey(const uint8_t* data, size_t size, const DecodeLimits& limits = {});

// As decode_grey, but a JPEG whose longer side is at least 2 `min_side` is decoded reduced by
// libjpeg's DCT scaling, to jpeg_reduced_size(width, height, min_side): for a caller that shrinks
// the image to a longer side of min_side or less anyway (texture extraction: min_side =
// FeatureParams::max_side). The pixels are libjpeg's scaled output (what
// cv::imdecode(IMREAD_REDUCED_GRAYSCALE_2/4/8) gives), not a full decode resized. PNG and PNM, and
// min_side <= 0, decode at full size (reduction 1). Every limit holds as in decode_grey: the pixel
// count is checked on the declared (full) size before anything is allocated, and the deadline and
// the scan count between rows and scans, progressive JPEGs included.
ReducedGrey decode_grey_reduced(const uint8_t* data, size_t size, int min_side, const DecodeLimits& limits = {});

}  // namespace prism::image
