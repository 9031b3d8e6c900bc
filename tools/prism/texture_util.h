// Helpers of the `prism texture` commands: image loading, JSON strings, a progress bar.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace prism::cli {

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
