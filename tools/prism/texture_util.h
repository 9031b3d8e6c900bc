// Helpers of the `prism texture` and `prism bow` commands: option parsing, image loading, JSON
// strings, a progress bar.
#pragma once
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "common/gpu.h"
#include "options.h" /* UsageError */
#include "texture/normalise.h"

namespace prism::cli {

// The value `v` of option `opt` as a whole number in [lo, hi] / a number in [lo, hi] (UsageError).
int parse_int(const std::string& opt, const std::string& v, int lo, int hi);
int64_t parse_int64(const std::string& opt, const std::string& v, int64_t lo, int64_t hi);
double parse_number(const std::string& opt, const std::string& v, double lo, double hi);
// A byte count such as 40G, 512M or 1000000 (K, M, G, T: powers of 1024) (UsageError).
int64_t parse_size(const std::string& opt, const std::string& v);
// auto, cpu or cuda (UsageError).
gpu::Device parse_device(const std::string& opt, const std::string& v);
// --normalise NAME (texture/normalise.h names), UsageError naming the option otherwise.
texture::Normalisation parse_normalise(const std::string& opt, const std::string& v);

// --digest-rows N (texture::IndexOptions::host_digest_rows; 0 allowed when `allow_none`), UsageError
// naming the option otherwise.
int parse_digest_rows(const std::string& opt, const std::string& v, bool allow_none);

// An image file as 8-bit grey (decoded by GStreamer; grey = OpenCV's BGR2GRAY). Throws
// std::runtime_error naming the file.
cv::Mat load_grey(const std::string& path);

// Runs `img` (GRAY8 or BGR, one frame) through `appsrc ! CHAIN ! appsink` and returns the first
// output buffer's bytes (e.g. CHAIN = "videoconvert ! pngenc"). Throws std::runtime_error.
std::vector<uint8_t> gst_transcode(const cv::Mat& img, const std::string& chain);

// A JPEG re-encoding of a grey image at `quality` (GStreamer's jpegenc, then jpegdec).
cv::Mat jpeg_roundtrip(const cv::Mat& grey, int quality);

// Writes a BGR or grey image as PNG (pngenc), atomically. Throws std::runtime_error.
void write_png(const cv::Mat& img, const std::string& path);

// `s` as a JSON string literal.
std::string json_string(const std::string& s);
// `v` as a JSON number with `decimals` decimals, or null when it is NaN or infinite (JSON has neither).
std::string json_number(double v, int decimals);

// A progress bar on stderr: redrawn in place on a terminal, a line every 10% otherwise.
class Progress {
 public:
  Progress(std::string what, int total, bool enabled);
  void step();
  void clear_line();  // before printing something else on a terminal
  void finish();

 private:
  void draw();
  std::string what_;
  int total_, done_ = 0, last_decile_ = -1;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace prism::cli
