#include "jpeg_cases.h"

// (jpeglib.h wants FILE and size_t declared before it)
#include <cstdio>
#include <jpeglib.h>
// (after jpeglib.h)
#include <jerror.h>

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>

namespace prism::test {

std::string JpegCase::name() const {
  std::string n = std::to_string(width) + "x" + std::to_string(height) + " q" + std::to_string(quality);
  n += grey ? " grey" : " " + std::to_string(h) + "x" + std::to_string(v);
  if (restart_mcus) n += " dri" + std::to_string(restart_mcus);
  if (restart_rows) n += " dri-rows" + std::to_string(restart_rows);
  if (optimize) n += " optimized";
  if (progressive) n += " progressive";
  if (arithmetic) n += " arithmetic";
  if (rgb) n += " rgb";
  if (one_scan_per_component) n += " 3-scans";
  n += smooth ? " smooth" : " noise";
  return n + " seed" + std::to_string(seed);
}

cv::Mat jpeg_case_image(const JpegCase& c) {
  cv::Mat m(c.height, c.width, c.grey ? CV_8UC1 : CV_8UC3);
  cv::RNG rng(c.seed);
  if (c.smooth) {
    // gradients and soft discs: most blocks have a few small coefficients
    for (int y = 0; y < c.height; ++y)
      for (int x = 0; x < c.width; ++x) {
        const double fx = double(x) / std::max(1, c.width), fy = double(y) / std::max(1, c.height);
        const int a = int(128 + 100 * std::sin(6.0 * fx + 3 * fy + c.seed));
        const int b = int(128 + 90 * std::cos(4.0 * fy - 2 * fx));
        if (c.grey)
          m.at<uint8_t>(y, x) = cv::saturate_cast<uint8_t>(a);
        else
          m.at<cv::Vec3b>(y, x) = cv::Vec3b(cv::saturate_cast<uint8_t>(a), cv::saturate_cast<uint8_t>(b),
                                            cv::saturate_cast<uint8_t>((a + b) / 2));
      }
    cv::GaussianBlur(m, m, cv::Size(0, 0), 2.0);
  } else {
    rng.fill(m, cv::RNG::UNIFORM, 0, 256);
    for (int i = 0; i < 6; ++i) {
      const cv::Point p(rng.uniform(0, c.width), rng.uniform(0, c.height));
      cv::circle(m, p, rng.uniform(1, std::max(2, c.width / 3)), cv::Scalar::all(rng.uniform(0, 256)), cv::FILLED);
    }
  }
  return m;
}

namespace {

struct ErrorJump {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  bool eof = false;
  char message[JMSG_LENGTH_MAX] = {0};
};

void on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<ErrorJump*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

void on_message(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) reinterpret_cast<ErrorJump*>(c->err)->eof = true;
}

}  // namespace

std::vector<uint8_t> encode_jpeg(const cv::Mat& image, const JpegCase& k) {
  jpeg_compress_struct c{};
  ErrorJump err;
  c.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = on_error;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  cv::Mat rgb;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&c);
    free(buffer);
    throw std::runtime_error(std::string("libjpeg could not write the test JPEG: ") + err.message);
  }
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = JDIMENSION(image.cols);
  c.image_height = JDIMENSION(image.rows);
  const bool grey = image.channels() == 1;
  c.input_components = grey ? 1 : 3;
  c.in_color_space = grey ? JCS_GRAYSCALE : JCS_RGB;
  if (!grey) cv::cvtColor(image, rgb, cv::COLOR_BGR2RGB);
  jpeg_set_defaults(&c);
  if (k.rgb && !grey) jpeg_set_colorspace(&c, JCS_RGB);
  jpeg_set_quality(&c, k.quality, TRUE);
  if (!grey && !k.rgb) {
    c.comp_info[0].h_samp_factor = k.h;
    c.comp_info[0].v_samp_factor = k.v;
  }
  c.optimize_coding = k.optimize ? TRUE : FALSE;
  c.arith_code = k.arithmetic ? TRUE : FALSE;
  c.restart_interval = unsigned(k.restart_mcus);
  c.restart_in_rows = k.restart_rows;
  if (k.progressive) jpeg_simple_progression(&c);
  jpeg_scan_info scans[3];
  if (k.one_scan_per_component && !grey) {
    for (int i = 0; i < 3; ++i) scans[i] = {1, {i, 0, 0, 0}, 0, 63, 0, 0};
    c.scan_info = scans;
    c.num_scans = 3;
  }
  jpeg_start_compress(&c, TRUE);
  const cv::Mat& src = grey ? image : rgb;
  for (int y = 0; y < src.rows; ++y) {
    JSAMPROW r = const_cast<JSAMPROW>(src.ptr<uint8_t>(y));
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> out(buffer, buffer + size);
  free(buffer);
  return out;
}

std::vector<uint8_t> encode_jpeg_case(const JpegCase& c) { return encode_jpeg(jpeg_case_image(c), c); }

std::optional<cv::Mat> libjpeg_grey(const uint8_t* bytes, size_t size, int reduction, std::string* error) {
  jpeg_decompress_struct c{};
  ErrorJump err;
  c.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = on_error;
  err.mgr.emit_message = on_message;
  cv::Mat out;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&c);
    if (error) *error = err.message;
    return std::nullopt;
  }
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, bytes, (unsigned long)size);
  jpeg_read_header(&c, TRUE);
  c.out_color_space = JCS_GRAYSCALE;
  c.dct_method = JDCT_ISLOW;
  c.scale_num = 1;
  c.scale_denom = unsigned(reduction);
  jpeg_start_decompress(&c);
  out.create(int(c.output_height), int(c.output_width), CV_8UC1);
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = out.ptr<uint8_t>(int(c.output_scanline));
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_destroy_decompress(&c);
  if (err.eof) {
    if (error) *error = "the data ends early (JWRN_JPEG_EOF)";
    return std::nullopt;
  }
  return out;
}

std::vector<std::string> jpeg_files(const std::string& folder, size_t limit) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(folder, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::string ext = it->path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    if (ext == ".jpg" || ext == ".jpeg") files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  if (files.size() > limit) files.resize(limit);
  return files;
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace prism::test
