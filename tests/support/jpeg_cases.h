// JPEGs written with libjpeg-turbo for the parallel JPEG decoder's tests and benchmark
// (kernels/image/jpeg_parallel.h), and libjpeg-turbo's own grey decode of them, the reference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace prism::test {

struct JpegCase {
  int width = 64, height = 48;
  int quality = 75;
  // Sampling of the first component (the others 1x1): 1x1 is 4:4:4, 2x1 4:2:2, 2x2 4:2:0, 1x2 4:4:0.
  int h = 2, v = 2;
  bool grey = false;                    // one component
  int restart_mcus = 0;                 // DRI in MCUs (0: none)
  int restart_rows = 0;                 // or in MCU rows
  bool optimize = false;                // optimal Huffman tables instead of the standard ones
  bool progressive = false;             // not handled by the parallel decoder
  bool arithmetic = false;              // not handled
  bool rgb = false;                     // stored as RGB (no YCbCr conversion): not handled
  bool one_scan_per_component = false;  // a sequential JPEG of 3 scans: not handled
  bool smooth = false;                  // a smooth image (else noise with shapes)
  uint32_t seed = 1;

  std::string name() const;
};

// The test image of a case: BGR (or grey) 8-bit, made from its seed.
cv::Mat jpeg_case_image(const JpegCase& c);

// `c` written by libjpeg-turbo (from jpeg_case_image).
std::vector<uint8_t> encode_jpeg_case(const JpegCase& c);
// Any 8-bit BGR or grey image written as a case says (its size and seed ignored).
std::vector<uint8_t> encode_jpeg(const cv::Mat& image, const JpegCase& c);

// libjpeg-turbo's grey of `bytes` at 1/reduction, as image/decode.h's decode_grey_reduced asks for
// it (JCS_GRAYSCALE, JDCT_ISLOW, scale_denom = reduction), warnings ignored; nothing (with the error
// in `error`) where libjpeg fails or the data ends early (JWRN_JPEG_EOF), as decode.h refuses then.
std::optional<cv::Mat> libjpeg_grey(const uint8_t* bytes, size_t size, int reduction, std::string* error = nullptr);

// The JPEG files of a folder (sorted), at most `limit`.
std::vector<std::string> jpeg_files(const std::string& folder, size_t limit);

std::vector<uint8_t> read_file_bytes(const std::string& path);

}  // namespace prism::test
