// Reading the PPM copies of the test photos: the GPU bundle's binaries ship without OpenCV's imgcodecs
// (it drags gdal in), so tests and benchmarks that run there read real images as binary PPM (P6).
#pragma once

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <fstream>
#include <string>

namespace prism::test {

// Reads a binary PPM (P6) into BGR; empty on failure.
inline cv::Mat read_ppm(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string magic;
  int w = 0, h = 0, maxv = 0;
  if (!(f >> magic >> w >> h >> maxv) || magic != "P6" || maxv != 255) return {};
  f.get();
  cv::Mat rgb(h, w, CV_8UC3);
  f.read(reinterpret_cast<char*>(rgb.data), static_cast<std::streamsize>(rgb.total() * 3));
  if (!f) return {};
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  return bgr;
}

// An 8-bit grey image as the bytes of a binary PGM (P5): what the service's tests and benchmark
// upload (the server decodes it with GStreamer's pnmdec; the same pixels as the image).
inline std::string pgm_bytes(const cv::Mat& grey) {
  std::string out = "P5\n" + std::to_string(grey.cols) + " " + std::to_string(grey.rows) + "\n255\n";
  for (int y = 0; y < grey.rows; ++y) out.append(reinterpret_cast<const char*>(grey.ptr(y)), size_t(grey.cols));
  return out;
}

}  // namespace prism::test
