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
#include "texture/features.h"
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
// --gpu-wait auto|spin|yield|block (gpu::HostWait; UsageError naming the option otherwise).
gpu::HostWait parse_gpu_wait(const std::string& opt, const std::string& v);
// --normalise NAME (texture/normalise.h names), UsageError naming the option otherwise.
texture::Normalisation parse_normalise(const std::string& opt, const std::string& v);

// --digest-rows N (texture::IndexOptions::host_digest_rows; 0 allowed when `allow_none`), UsageError
// naming the option otherwise.
int parse_digest_rows(const std::string& opt, const std::string& v, bool allow_none);

// An image file as 8-bit grey (decoded by GStreamer; grey = OpenCV's BGR2GRAY). Throws
// std::runtime_error naming the file.
cv::Mat load_grey(const std::string& path);

// An image file decoded for texture features (`prism texture` enroll, update, search, verify): as
// load_grey, except that a JPEG whose longer side is at least twice `min_side` (the extraction's
// FeatureParams::max_side) is decoded reduced by libjpeg's DCT scaling (1/2, 1/4 or 1/8:
// kernels/image/decode.h), which extract_features then shrinks to max_side as it shrinks any image.
struct FeatureImage {
  cv::Mat grey;               // what extract_features is given
  int width = 0, height = 0;  // the file's own size
  int reduction = 1;          // grey is the file's image reduced by it (1: full size)
};
FeatureImage load_feature_image(const std::string& path, int min_side);
// Features of such an image in the file's own pixels (texture::to_original_pixels): size, keypoints
// and so the homographies verified from them are the file's, whatever the decode's reduction.
void to_file_pixels(texture::Features& f, const FeatureImage& image);
// load_feature_image with params.max_side, extract_features, to_file_pixels.
texture::Features file_features(const std::string& path, const texture::FeatureParams& params);

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
