#include "texture_util.h"

#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <unistd.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <cstdio>
#include <stdexcept>

#include "gst/prism/gstprismimagefile.h"
#include "match/match.h"
#include "texture/gallery.h"
#include "texture/index.h"

namespace prism::cli {

int64_t parse_int64(const std::string& opt, const std::string& v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno == ERANGE || x < lo || x > hi)
    throw UsageError(opt + " takes an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", not '" + v +
                     "'");
  return x;
}

int parse_int(const std::string& opt, const std::string& v, int lo, int hi) { return int(parse_int64(opt, v, lo, hi)); }

gpu::Device parse_device(const std::string& opt, const std::string& v) {
  if (v == "auto") return gpu::Device::kAuto;
  if (v == "cpu") return gpu::Device::kCpu;
  if (v == "cuda") return gpu::Device::kCuda;
  throw UsageError(opt + " takes auto, cpu or cuda, not '" + v + "'");
}

gpu::HostWait parse_gpu_wait(const std::string& opt, const std::string& v) {
  try {
    return gpu::parse_host_wait(v);
  } catch (const std::invalid_argument& e) {
    throw UsageError(opt + ": " + e.what());
  }
}

texture::Normalisation parse_normalise(const std::string& opt, const std::string& v) {
  try {
    return texture::parse_normalisation(v);
  } catch (const std::invalid_argument& e) {
    throw UsageError(opt + ": " + e.what());
  }
}

int parse_digest_rows(const std::string& opt, const std::string& v, bool allow_none) {
  const int rows = parse_int(opt, v, allow_none ? 0 : 16, match::kSlot / 2);
  if (!texture::valid_host_digest_rows(rows))
    throw UsageError(opt + ": " + v + " is not a divisor of 768 from 16 to 384");
  return rows;
}

double parse_number(const std::string& opt, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(x >= lo && x <= hi))
    throw UsageError(opt + " takes a number in [" + cv::format("%g", lo) + ", " + cv::format("%g", hi) + "], not '" +
                     v + "'");
  return x;
}

int64_t parse_size(const std::string& opt, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  double unit = 1;
  const std::string suffix = end ? end : "";
  if (suffix == "K" || suffix == "k")
    unit = 1024.0;
  else if (suffix == "M")
    unit = 1024.0 * 1024;
  else if (suffix == "G")
    unit = 1024.0 * 1024 * 1024;
  else if (suffix == "T")
    unit = 1024.0 * 1024 * 1024 * 1024;
  else if (!suffix.empty())
    unit = -1;
  if (v.empty() || end == v.c_str() || unit < 0 || !(x >= 0) || x * unit > 9.0e18)
    throw UsageError(opt + " takes a size in bytes with an optional K, M, G or T (binary) suffix, e.g. 40G; not '" + v +
                     "'");
  return int64_t(x * unit);
}

cv::Mat load_grey(const std::string& path) {
  ImageFile image;
  GError* error = nullptr;
  if (!image_file_load_grey(path.c_str(), &image, &error)) {
    const std::string why = error ? error->message : path + ": cannot decode";
    g_clear_error(&error);
    throw std::runtime_error(why);
  }
  return cv::Mat(image.height, image.width, CV_8UC1, image.pixels.data()).clone();
}

FeatureImage load_feature_image(const std::string& path, int min_side) {
  ImageFile image;
  GError* error = nullptr;
  if (!image_file_load_grey(path.c_str(), &image, &error, kImageFileMaxPixels, min_side)) {
    const std::string why = error ? error->message : path + ": cannot decode";
    g_clear_error(&error);
    throw std::runtime_error(why);
  }
  return {cv::Mat(image.height, image.width, CV_8UC1, image.pixels.data()).clone(), image.file_width, image.file_height,
          image.reduction};
}

void to_file_pixels(texture::Features& f, const FeatureImage& image) {
  texture::to_original_pixels(f, image.width, image.height, image.reduction);
}

texture::Features file_features(const std::string& path, const texture::FeatureParams& params) {
  const FeatureImage image = load_feature_image(path, params.max_side);
  texture::Features f = texture::extract_features(image.grey, params);
  to_file_pixels(f, image);
  return f;
}

std::vector<uint8_t> gst_transcode(const cv::Mat& img, const std::string& chain) {
  if (img.empty() || img.depth() != CV_8U || (img.channels() != 1 && img.channels() != 3))
    throw std::runtime_error("gst_transcode: needs an 8-bit grey or BGR image");
  GError* err = nullptr;
  const std::string desc = "appsrc name=src ! " + chain + " ! appsink name=sink sync=false";
  GstElement* pipeline = gst_parse_launch(desc.c_str(), &err);
  if (!pipeline || err) {
    const std::string why = err ? err->message : "parse failed";
    g_clear_error(&err);
    if (pipeline) gst_object_unref(pipeline);
    throw std::runtime_error("'" + chain + "': " + why);
  }
  GstElement* src = gst_bin_get_by_name(GST_BIN(pipeline), "src");
  GstElement* sink = gst_bin_get_by_name(GST_BIN(pipeline), "sink");
  const char* format = img.channels() == 1 ? "GRAY8" : "BGR";
  GstCaps* caps = gst_caps_new_simple("video/x-raw", "format", G_TYPE_STRING, format, "width", G_TYPE_INT, img.cols,
                                      "height", G_TYPE_INT, img.rows, "framerate", GST_TYPE_FRACTION, 0, 1, nullptr);
  g_object_set(src, "caps", caps, "format", GST_FORMAT_TIME, nullptr);
  gst_caps_unref(caps);
  // GStreamer's default strides: rows rounded up to 4 bytes.
  const size_t row = size_t(img.cols) * img.channels(), stride = (row + 3) & ~size_t(3);
  GstBuffer* buf = gst_buffer_new_allocate(nullptr, stride * img.rows, nullptr);
  GstMapInfo map;
  gst_buffer_map(buf, &map, GST_MAP_WRITE);
  for (int y = 0; y < img.rows; ++y) std::memcpy(map.data + stride * y, img.ptr(y), row);
  gst_buffer_unmap(buf, &map);
  GST_BUFFER_PTS(buf) = 0;
  gst_element_set_state(pipeline, GST_STATE_PLAYING);
  gst_app_src_push_buffer(GST_APP_SRC(src), buf);
  gst_app_src_end_of_stream(GST_APP_SRC(src));
  GstSample* sample = gst_app_sink_try_pull_sample(GST_APP_SINK(sink), 10 * GST_SECOND);
  std::vector<uint8_t> out;
  if (sample) {
    GstBuffer* b = gst_sample_get_buffer(sample);
    gst_buffer_map(b, &map, GST_MAP_READ);
    out.assign(map.data, map.data + map.size);
    gst_buffer_unmap(b, &map);
    gst_sample_unref(sample);
  }
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(src);
  gst_object_unref(sink);
  gst_object_unref(pipeline);
  if (out.empty()) throw std::runtime_error("'" + chain + "' produced nothing");
  return out;
}

cv::Mat jpeg_roundtrip(const cv::Mat& grey, int quality) {
  // Encoded at a width padded to a multiple of 8 (a grey JPEG's block) with the last column repeated
  // (what libjpeg does itself for the blocks past a row's end), then cropped: jpegenc fills those
  // blocks from memory it never wrote, so that an image of another width came back different from
  // run to run.
  cv::Mat padded = grey;
  if (grey.cols % 8 != 0) cv::copyMakeBorder(grey, padded, 0, 0, 0, 8 - grey.cols % 8, cv::BORDER_REPLICATE);
  const std::vector<uint8_t> raw = gst_transcode(
      padded, "jpegenc quality=" + std::to_string(quality) + " ! jpegdec ! videoconvert ! video/x-raw,format=GRAY8");
  const size_t stride = (size_t(padded.cols) + 3) & ~size_t(3);
  if (raw.size() < stride * grey.rows) throw std::runtime_error("jpeg_roundtrip: short output");
  cv::Mat out(grey.rows, grey.cols, CV_8UC1);
  for (int y = 0; y < grey.rows; ++y) std::memcpy(out.ptr(y), raw.data() + stride * y, grey.cols);
  return out;
}

void write_png(const cv::Mat& img, const std::string& path) {
  const std::vector<uint8_t> png = gst_transcode(img, "videoconvert ! pngenc");
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f.write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
    if (!f) throw std::runtime_error(path + ": cannot write");
  }
  std::filesystem::rename(tmp, path);
}

std::string json_number(double v, int decimals) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  return out + "\"";
}

Progress::Progress(std::string what, int total, bool enabled)
    : what_(std::move(what)),
      total_(total),
      enabled_(enabled && total > 1),
      tty_(isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void Progress::step() {
  ++done_;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  const int decile = done_ * 10 / total_;
  if (tty_ ? (now - last_draw_ > std::chrono::milliseconds(100) || done_ == total_) : decile != last_decile_) {
    last_draw_ = now;
    last_decile_ = decile;
    draw();
  }
}

void Progress::draw() {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = s > 0 ? done_ / s : 0;
  const int width = 30, filled = total_ ? done_ * width / total_ : width;
  std::string bar(size_t(filled), '#');
  bar.resize(width, '.');
  const double eta = rate > 0 ? (total_ - done_) / rate : 0;
  std::fprintf(stderr, "%s%s [%s] %d/%d  %.1f/s  ETA %.0f s%s", tty_ ? "\r" : "", what_.c_str(), bar.c_str(), done_,
               total_, rate, eta, tty_ ? "\033[K" : "\n");
  std::fflush(stderr);
}

void Progress::clear_line() {
  if (enabled_ && tty_) std::fprintf(stderr, "\r\033[K");
}

void Progress::finish() {
  if (!enabled_) return;
  if (tty_) {
    draw();
    std::fprintf(stderr, "\n");
  }
}

}  // namespace prism::cli
