// Decoding an uploaded or stored photo to 8-bit grey, bounded in formats, memory and time: the one
// decoder behind `prism texture`, the service's uploads, Python's Gallery and poissonblend's masks.
//
// Why not decodebin (what the project used before) or cv::imdecode: a texture photo needs only
// PNG, JPEG or binary PNM, and every other decoder is attack surface for bytes from strangers (an
// SVG of stacked blurs took 276 s and 1.6 GB of one server; EXR, JP2 and WebP decoded without size
// checks). The format is decided here from the first bytes, before any decoder runs; everything
// else is refused naming what it looks like. The pixels go straight to grey row by row, so a
// decode holds the grey image and a few rows (a progressive JPEG or an interlaced PNG also holds
// the whole image once in the codec's own layout: DecodeHeader::working_bytes says how much before
// any of it is allocated, so that a server can admit decodes against a memory budget). A deadline
// is checked between rows and between a progressive JPEG's scans, so a decode that overruns is
// abandoned, not waited for.
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

// What the header says, read without decoding a pixel.
struct DecodeHeader {
  ImageFormat format = ImageFormat::kUnknown;
  uint64_t width = 0, height = 0;
  // The most memory the decode holds at once: the grey result plus, for a progressive JPEG or an
  // interlaced PNG, the whole image in the codec's layout (a JPEG's DCT coefficients, a PNG's
  // 8-bit rows). Codec state of a few rows is not counted.
  uint64_t working_bytes = 0;
};

// The format the bytes begin with (kUnknown for anything else, including plain PNM).
ImageFormat sniff_format(const uint8_t* data, size_t size);

// Nothing unless the bytes begin as PNG, JPEG or binary PNM; else DecodeError kUnsupported naming
// what they look like ("is an SVG image: unsupported image format (PNG, JPEG, PNM)").
void check_format(const uint8_t* data, size_t size);

// The header, or DecodeError: kUnsupported (naming what the bytes look like: "an SVG image"),
// kMalformed, or kTooLarge when it declares more than `max_pixels`.
DecodeHeader read_header(const uint8_t* data, size_t size, uint64_t max_pixels);

// The image as 8-bit grey (CV_8UC1, continuous). Throws DecodeError.
cv::Mat decode_grey(const uint8_t* data, size_t size, const DecodeLimits& limits = {});

}  // namespace prism::image
