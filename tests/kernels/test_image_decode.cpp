// kernels/image/decode.h against independent decoders, bit for bit: OpenCV's imdecode (its own
// libpng, libjpeg-turbo and PxM readers) on fresh random images of every variant the decoder
// reads, and on the real photos of ../shared/data; the refusals (other formats, declared sizes,
// damage, deadlines) by kind and wording. Reduced JPEG decodes against OpenCV's
// imdecode(IMREAD_REDUCED_GRAYSCALE_2/4/8), which asks libjpeg for scale_denom 2/4/8 itself
// (imgcodecs' JpegDecoder; OpenCV 4.6 here links the system's libjpeg-turbo 2.1.5, as we do), and
// their sizes against libjpeg's own jpeg_calc_output_dimensions.
#include <gtest/gtest.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
// (png.h wants FILE)
#include <cstdio>
#include <png.h>
// (after cstdio)
#include <jpeglib.h>

#include <cstdlib>
#include <fstream>
#include <iterator>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "image/decode.h"
#include "prism_test.h"
#include "test_env.h"

namespace {

using prism::image::DecodeError;
using prism::image::DecodeLimits;
using prism::image::jpeg_reduced_size;
using prism::image::ReducedGrey;
using prism::image::ReducedSize;
using Kind = DecodeError::Kind;

std::vector<uint8_t> encode(const cv::Mat& m, const std::string& ext, const std::vector<int>& params = {}) {
  std::vector<uint8_t> out;
  EXPECT_TRUE(cv::imencode(ext, m, out, params)) << ext;
  return out;
}

cv::Mat decode(const std::vector<uint8_t>& b, const DecodeLimits& limits = {}) {
  return prism::image::decode_grey(b.data(), b.size(), limits);
}

ReducedGrey decode_reduced(const std::vector<uint8_t>& b, int min_side, const DecodeLimits& limits = {}) {
  return prism::image::decode_grey_reduced(b.data(), b.size(), min_side, limits);
}

// OpenCV's grey of a JPEG reduced by 1/`reduction` in libjpeg's DCT domain (1: full size).
cv::Mat opencv_reduced_grey(const std::vector<uint8_t>& b, int reduction) {
  const int flag = reduction == 8   ? cv::IMREAD_REDUCED_GRAYSCALE_8
                   : reduction == 4 ? cv::IMREAD_REDUCED_GRAYSCALE_4
                   : reduction == 2 ? cv::IMREAD_REDUCED_GRAYSCALE_2
                                    : cv::IMREAD_GRAYSCALE;
  return cv::imdecode(b, flag | cv::IMREAD_IGNORE_ORIENTATION);
}

// libjpeg's own output size for a JPEG at 1/`denom` (jpeg_calc_output_dimensions), asked directly.
cv::Size libjpeg_output_size(const std::vector<uint8_t>& b, int denom) {
  jpeg_decompress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, b.data(), (unsigned long)b.size());
  jpeg_read_header(&c, TRUE);
  c.scale_num = 1;
  c.scale_denom = unsigned(denom);
  jpeg_calc_output_dimensions(&c);
  const cv::Size size(int(c.output_width), int(c.output_height));
  jpeg_destroy_decompress(&c);
  return size;
}

std::string size_text(int w, int h) { return std::to_string(w) + "x" + std::to_string(h); }

// OpenCV's grey of a PNG or PNM: read as 8-bit colour, then cvtColor (the decoder's documented rule).
cv::Mat opencv_grey_via_colour(const std::vector<uint8_t>& b) {
  const cv::Mat colour = cv::imdecode(b, cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION);
  cv::Mat grey;
  cv::cvtColor(colour, grey, cv::COLOR_BGR2GRAY);
  return grey;
}

cv::Mat random_image(std::mt19937& rng, int rows, int cols, int type) {
  cv::Mat m(rows, cols, type);
  cv::randu(m, 0, CV_MAT_DEPTH(type) == CV_16U ? 65536 : 256);
  // Some structure as well as noise, so that JPEG's DCT has edges and flat parts.
  cv::rectangle(m, cv::Rect(cols / 4, rows / 4, cols / 3, rows / 3),
                cv::Scalar::all(CV_MAT_DEPTH(type) == CV_16U ? 40000 : 160), cv::FILLED);
  (void)rng;
  return m;
}

void expect_same(const cv::Mat& got, const cv::Mat& want, const std::string& what) {
  ASSERT_EQ(got.type(), CV_8UC1) << what;
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(cv::norm(got, want, cv::NORM_INF), 0) << what << ": pixels differ from OpenCV's";
}

// `min_side` > 0: the refusal of the reduced decode.
DecodeError::Kind refusal(const std::vector<uint8_t>& b, std::string* message, const DecodeLimits& limits = {},
                          int min_side = 0) {
  try {
    if (min_side > 0)
      decode_reduced(b, min_side, limits);
    else
      decode(b, limits);
  } catch (const DecodeError& e) {
    *message = e.what();
    return e.kind();
  }
  *message = "(decoded)";
  return Kind(-1);
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

// A PNG written with libpng directly, for what cv::imencode cannot write: Adam7 interlace,
// palettes with transparency, 1/2/4-bit grey.
std::vector<uint8_t> libpng_encode(int w, int h, int colour_type, int depth, bool interlace,
                                   const std::vector<uint8_t>& rows, int palette_size = 0,
                                   int filters = PNG_ALL_FILTERS) {
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    ADD_FAILURE() << "libpng could not write the test image";
    png_destroy_write_struct(&png, &info);
    return {};
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep d, png_size_t n) {
        auto* v = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(p));
        v->insert(v->end(), d, d + n);
      },
      nullptr);
  png_set_IHDR(png, info, png_uint_32(w), png_uint_32(h), depth, colour_type,
               interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> palette(size_t(std::max(palette_size, 1)));
  std::vector<png_byte> alpha(palette.size());
  if (colour_type == PNG_COLOR_TYPE_PALETTE) {
    for (size_t i = 0; i < palette.size(); ++i) {
      palette[i] = {png_byte(i * 37), png_byte(255 - i * 11), png_byte(i * 101)};
      alpha[i] = png_byte(i * 13);
    }
    png_set_PLTE(png, info, palette.data(), palette_size);
    png_set_tRNS(png, info, alpha.data(), palette_size, nullptr);
  }
  png_set_filter(png, PNG_FILTER_TYPE_BASE, filters);
  png_write_info(png, info);
  const size_t row_bytes = rows.size() / size_t(h);
  std::vector<png_bytep> ptrs;
  for (int y = 0; y < h; ++y) ptrs.push_back(const_cast<png_bytep>(rows.data()) + size_t(y) * row_bytes);
  png_write_image(png, ptrs.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// A JPEG written with libjpeg, for what OpenCV 4.6 does not write: CMYK, 4:4:4 YCbCr, RGB.
std::vector<uint8_t> libjpeg_encode(int w, int h, J_COLOR_SPACE space, const std::vector<uint8_t>& pixels,
                                    bool full_chroma = false) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = JDIMENSION(w);
  c.image_height = JDIMENSION(h);
  c.input_components = space == JCS_CMYK ? 4 : 3;
  c.in_color_space = space == JCS_CMYK ? JCS_CMYK : JCS_RGB;
  jpeg_set_defaults(&c);
  if (space == JCS_RGB) jpeg_set_colorspace(&c, JCS_RGB);  // stored as RGB, not converted to YCbCr
  if (full_chroma) c.comp_info[0].h_samp_factor = c.comp_info[0].v_samp_factor = 1;
  jpeg_start_compress(&c, TRUE);
  const size_t row_bytes = size_t(w) * size_t(c.input_components);
  for (int y = 0; y < h; ++y) {
    JSAMPROW r = const_cast<JSAMPROW>(pixels.data()) + size_t(y) * row_bytes;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> out(buffer, buffer + size);
  free(buffer);
  return out;
}

TEST(ImageDecode, PngOfEveryKindIsOpenCvsGreyBitForBit) {
  std::mt19937 rng(41);
  for (int type : {CV_8UC1, CV_8UC3, CV_8UC4, CV_16UC1, CV_16UC3, CV_16UC4})
    for (cv::Size size : {cv::Size(1, 1), cv::Size(37, 23), cv::Size(640, 480)}) {
      const cv::Mat m = random_image(rng, size.height, size.width, type);
      const std::vector<uint8_t> png = encode(m, ".png");
      expect_same(
          decode(png), opencv_grey_via_colour(png),
          "PNG type " + std::to_string(type) + " " + std::to_string(size.width) + "x" + std::to_string(size.height));
    }
  // What imencode cannot write: Adam7, palettes with tRNS, low bit depths.
  const int w = 53, h = 31;
  std::uniform_int_distribution<int> byte(0, 255);
  for (bool interlace : {false, true}) {
    std::vector<uint8_t> rgb(size_t(w) * h * 3), pal(size_t(w) * h), grey4(size_t((w + 1) / 2) * h);
    for (uint8_t& v : rgb) v = uint8_t(byte(rng));
    for (uint8_t& v : pal) v = uint8_t(byte(rng) % 16);
    for (uint8_t& v : grey4) v = uint8_t(byte(rng));
    for (const auto& [png, what] : std::vector<std::pair<std::vector<uint8_t>, std::string>>{
             {libpng_encode(w, h, PNG_COLOR_TYPE_RGB, 8, interlace, rgb), "RGB"},
             {libpng_encode(w, h, PNG_COLOR_TYPE_PALETTE, 8, interlace, pal, 16), "palette + tRNS"},
             {libpng_encode(w, h, PNG_COLOR_TYPE_GRAY, 4, interlace, grey4), "4-bit grey"}})
      expect_same(decode(png), opencv_grey_via_colour(png), what + (interlace ? ", Adam7" : ""));
  }
}

// Plain PNGs (8 or 16 bits, grey or RGB, alpha or not, not interlaced) are inflated in one piece
// and unfiltered here (decode.cpp, png_whole); every filter, at every pixel size it steps by, must
// give libpng's pixels: OpenCV's, and the same image's Adam7 file, which libpng reads row by row.
TEST(ImageDecode, PlainPngOfEveryFilterIsOpenCvsAndLibpngsGrey) {
  std::mt19937 rng(47);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int type : {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA})
    for (int depth : {8, 16})
      for (int filter :
           {PNG_FILTER_NONE, PNG_FILTER_SUB, PNG_FILTER_UP, PNG_FILTER_AVG, PNG_FILTER_PAETH, PNG_ALL_FILTERS})
        for (cv::Size size : {cv::Size(1, 1), cv::Size(3, 2), cv::Size(37, 23)}) {
          const int channels = type == PNG_COLOR_TYPE_GRAY         ? 1
                               : type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                               : type == PNG_COLOR_TYPE_RGB        ? 3
                                                                   : 4;
          std::vector<uint8_t> rows(size_t(size.area()) * channels * (depth / 8));
          // Smooth rows as well as noise, so that the adaptive filter choice picks each filter somewhere.
          for (size_t i = 0; i < rows.size(); ++i) rows[i] = uint8_t(i % 3 == 0 ? byte(rng) : (i * 7) & 0xff);
          const std::vector<uint8_t> plain =
              libpng_encode(size.width, size.height, type, depth, false, rows, 0, filter);
          const std::vector<uint8_t> adam7 = libpng_encode(size.width, size.height, type, depth, true, rows, 0, filter);
          const std::string what = "PNG colour type " + std::to_string(type) + ", " + std::to_string(depth) +
                                   " bits, filters " + std::to_string(filter) + ", " + std::to_string(size.width) +
                                   "x" + std::to_string(size.height);
          const cv::Mat got = decode(plain);
          expect_same(got, opencv_grey_via_colour(plain), what);
          expect_same(got, decode(adam7), what + ", against its Adam7 file");
        }
}

TEST(ImageDecode, JpegOfEveryKindIsOpenCvsGreyBitForBit) {
  std::mt19937 rng(42);
  for (int type : {CV_8UC1, CV_8UC3})
    for (cv::Size size : {cv::Size(1, 1), cv::Size(37, 23), cv::Size(1001, 667)})
      for (const std::vector<int>& params :
           std::vector<std::vector<int>>{{cv::IMWRITE_JPEG_QUALITY, 90},
                                         {cv::IMWRITE_JPEG_QUALITY, 30, cv::IMWRITE_JPEG_PROGRESSIVE, 1},
                                         {cv::IMWRITE_JPEG_QUALITY, 100, cv::IMWRITE_JPEG_OPTIMIZE, 1},
                                         {cv::IMWRITE_JPEG_QUALITY, 75, cv::IMWRITE_JPEG_RST_INTERVAL, 3}}) {
        const std::vector<uint8_t> jpg = encode(random_image(rng, size.height, size.width, type), ".jpg", params);
        expect_same(decode(jpg), cv::imdecode(jpg, cv::IMREAD_GRAYSCALE | cv::IMREAD_IGNORE_ORIENTATION),
                    "JPEG type " + std::to_string(type) + " " + std::to_string(size.width) + "x" +
                        std::to_string(size.height) + " param " + std::to_string(params[1]));
      }
}

TEST(ImageDecode, JpegOfOtherColourLayoutsIsOpenCvsGrey) {
  std::mt19937 rng(47);
  const int w = 99, h = 61;
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
  for (uint8_t& v : rgb) v = uint8_t(rng());
  for (const auto& [jpg, what] : std::vector<std::pair<std::vector<uint8_t>, std::string>>{
           {libjpeg_encode(w, h, JCS_YCbCr, rgb, true), "4:4:4 YCbCr"}, {libjpeg_encode(w, h, JCS_RGB, rgb), "RGB"}})
    expect_same(decode(jpg), cv::imdecode(jpg, cv::IMREAD_GRAYSCALE | cv::IMREAD_IGNORE_ORIENTATION), what);
}

TEST(ImageDecode, BinaryPnmIsOpenCvsGreyAndRescalesMaxval) {
  std::mt19937 rng(43);
  for (int type : {CV_8UC1, CV_8UC3}) {
    const std::vector<uint8_t> pnm = encode(random_image(rng, 29, 41, type), type == CV_8UC1 ? ".pgm" : ".ppm");
    expect_same(decode(pnm), opencv_grey_via_colour(pnm), type == CV_8UC1 ? "P5" : "P6");
  }
  // P4: 1 is black.
  const std::vector<uint8_t> pbm =
      bytes(std::string("P4\n# a comment\n10 2\n") + char(0xA5) + char(0xC0) + char(0x00) + char(0x40));
  const cv::Mat bits = decode(pbm);
  const uint8_t want[2][10] = {{0, 255, 0, 255, 255, 0, 255, 0, 0, 0},
                               {255, 255, 255, 255, 255, 255, 255, 255, 255, 0}};
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 10; ++x) EXPECT_EQ(bits.at<uint8_t>(y, x), want[y][x]) << x << "," << y;
  // Other maxvals, one and two bytes a sample, against the rounding done in double.
  for (int maxval : {1, 15, 200, 1000, 65535}) {
    const int n = 64;
    std::string p = "P5 " + std::to_string(n) + " 1 " + std::to_string(maxval) + "\n";
    std::vector<int> values;
    for (int i = 0; i < n; ++i) {
      const int v = int(rng() % uint32_t(maxval + 1));
      values.push_back(v);
      if (maxval > 255) p += char(v >> 8);
      p += char(v & 0xff);
    }
    const cv::Mat g = decode(bytes(p));
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(g.at<uint8_t>(0, i), int(std::floor(values[size_t(i)] * 255.0 / maxval + 0.5)))
          << "maxval " << maxval << " sample " << values[size_t(i)];
  }
}

TEST(ImageDecode, RealPhotosAreOpenCvsGrey) {
  const std::string dir = prism::test::data_dir() + "/images";
  PRISM_NEED_FILE(dir + "/box.png");
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (ext != ".jpg" && ext != ".png") continue;
    std::ifstream f(e.path(), std::ios::binary);
    const std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const cv::Mat want = ext == ".jpg" ? cv::imdecode(b, cv::IMREAD_GRAYSCALE | cv::IMREAD_IGNORE_ORIENTATION)
                                       : opencv_grey_via_colour(b);
    expect_same(decode(b), want, e.path().string());
    ++n;
  }
  EXPECT_GE(n, 15);
}

TEST(ImageDecode, OtherFormatsAreRefusedNamingWhatTheyAre) {
  const cv::Mat m(16, 16, CV_8UC3, cv::Scalar(10, 200, 30));
  struct Case {
    std::vector<uint8_t> bytes;
    std::string says;
  } cases[] = {
      {bytes("<svg xmlns='http://www.w3.org/2000/svg' width='7000' height='7000'><rect/></svg>"), "is an SVG image"},
      {bytes("\xef\xbb\xbf  <?xml version='1.0'?>\n<svg/>"), "is an SVG image"},
      {bytes("<html></html>"), "is an XML or HTML document"},
      {bytes("GIF89a\x01\x00\x01\x00"), "is a GIF image"},
      {encode(m, ".bmp"), "is a BMP image"},
      {encode(m, ".tiff"), "is a TIFF image"},
      {encode(m, ".webp"), "is a WebP image"},
      {bytes(std::string("v/1\x01\x02\x00\x00\x00", 8)), "is an OpenEXR image"},
      {bytes(std::string("\0\0\0\x0cjP  \r\n\x87\n", 12)), "is a JPEG 2000 image"},
      {bytes("P2\n2 2\n255\n0 1 2 3\n"), "is a plain (ASCII) PNM, P2"},
      {bytes("P7\nWIDTH 2\n"), "is a PAM image"},
      {bytes("not an image at all"), "is not an image this server reads"},
  };
  for (const Case& c : cases) {
    std::string message;
    EXPECT_EQ(refusal(c.bytes, &message), Kind::kUnsupported) << c.says << ": " << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
    EXPECT_NE(message.find("unsupported image format (PNG, JPEG, PNM)"), std::string::npos) << message;
    EXPECT_THROW(prism::image::check_format(c.bytes.data(), c.bytes.size()), DecodeError) << c.says;
  }
  // A CMYK JPEG (libjpeg writes one): the colour space named, reduced or not.
  std::string message;
  const std::vector<uint8_t> cmyk = libjpeg_encode(32, 32, JCS_CMYK, std::vector<uint8_t>(32 * 32 * 4, 77));
  for (int min_side : {0, 4}) {
    EXPECT_EQ(refusal(cmyk, &message, {}, min_side), Kind::kUnsupported) << message;
    EXPECT_NE(message.find("is a CMYK JPEG"), std::string::npos) << message;
  }
}

TEST(ImageDecode, DeclaredSizesAreRefusedBeforeDecoding) {
  DecodeLimits limits;
  limits.max_pixels = 1000 * 1000;
  std::string message;
  // PNG: a header declaring 100000x100000 and nothing behind it.
  std::vector<uint8_t> png = encode(cv::Mat(10, 10, CV_8UC1, cv::Scalar(7)), ".png");
  auto be32 = [&](size_t at, uint32_t v) {
    for (int k = 0; k < 4; ++k) png[at + size_t(k)] = uint8_t(v >> (24 - 8 * k));
  };
  be32(16, 100000);
  be32(20, 100000);
  EXPECT_EQ(refusal(png, &message, limits), Kind::kTooLarge) << message;  // from IHDR's bytes, before its CRC
  EXPECT_NE(message.find("declares 100000x100000 pixels, more than the 1000000"), std::string::npos) << message;
  // PNM and JPEG (the SOF's size patched; the SOF0 marker found in the file).
  EXPECT_EQ(refusal(bytes("P5 100000 100000 255\n"), &message, limits), Kind::kTooLarge) << message;
  EXPECT_NE(message.find("declares 100000x100000 pixels, more than the 1000000"), std::string::npos) << message;
  std::vector<uint8_t> jpg = encode(cv::Mat(16, 16, CV_8UC1, cv::Scalar(9)), ".jpg");
  for (size_t i = 0; i + 8 < jpg.size(); ++i)
    if (jpg[i] == 0xff && jpg[i + 1] == 0xc0) {
      jpg[i + 5] = jpg[i + 7] = 0xff;  // height and width 65280 + ...
      jpg[i + 6] = jpg[i + 8] = 0x00;
      break;
    }
  EXPECT_EQ(refusal(jpg, &message, limits), Kind::kTooLarge) << message;
  EXPECT_NE(message.find("declares 65280x65280 pixels"), std::string::npos) << message;
  // Reduced or not, the declared size is what is checked (65280x65280 at 1/8 is 8160x8160).
  EXPECT_EQ(refusal(jpg, &message, limits, 1024), Kind::kTooLarge) << message;
  EXPECT_NE(message.find("declares 65280x65280 pixels"), std::string::npos) << message;
  EXPECT_THROW(prism::image::read_header(jpg.data(), jpg.size(), limits.max_pixels, 1024), DecodeError);
  const prism::image::DecodeHeader h = [&] {
    try {
      return prism::image::read_header(jpg.data(), jpg.size(), 1ull << 40);
    } catch (const DecodeError& e) {
      ADD_FAILURE() << e.what();
      return prism::image::DecodeHeader{};
    }
  }();
  EXPECT_EQ(h.width, 65280u);
  EXPECT_EQ(refusal(bytes("P5 0 7 255\n"), &message), Kind::kMalformed) << message;
  EXPECT_NE(message.find("declares 0x7 pixels"), std::string::npos) << message;
}

TEST(ImageDecode, DamagedImagesAreMalformedNotGarbage) {
  std::mt19937 rng(44);
  const cv::Mat m = random_image(rng, 200, 300, CV_8UC3);
  std::string message;
  for (const std::string ext : {".png", ".jpg", ".ppm"}) {
    std::vector<uint8_t> b = encode(m, ext);
    b.resize(b.size() / 2);
    for (int min_side : {0, 40}) {  // full size, and a JPEG at 1/4
      EXPECT_EQ(refusal(b, &message, {}, min_side), Kind::kMalformed) << ext << " " << min_side << ": " << message;
      EXPECT_NE(message.find("truncated"), std::string::npos) << ext << ": " << message;
    }
  }
  std::vector<uint8_t> png = encode(m, ".png");
  png[40] ^= 0xff;  // inside IDAT: its CRC fails
  EXPECT_EQ(refusal(png, &message), Kind::kMalformed) << message;
  EXPECT_NE(message.find("is a malformed PNG"), std::string::npos) << message;
  EXPECT_EQ(refusal(bytes("P5 4 4 255#x\n0123456789abcdef"), &message), Kind::kMalformed) << message;
  EXPECT_EQ(refusal(bytes("P6 4 4 70000\n"), &message), Kind::kMalformed) << message;
}

TEST(ImageDecode, ADecodePastItsDeadlineIsAbandoned) {
  std::mt19937 rng(45);
  const cv::Mat m = random_image(rng, 600, 800, CV_8UC3);
  DecodeLimits past;
  past.deadline = std::chrono::steady_clock::now() - std::chrono::milliseconds(1);
  std::string message;
  for (const auto& [b, what] : std::vector<std::pair<std::vector<uint8_t>, std::string>>{
           {encode(m, ".png"), "PNG"},
           {encode(m, ".jpg"), "baseline JPEG"},
           {encode(m, ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1}), "progressive JPEG"},
           {encode(m, ".ppm"), "PNM"}}) {
    for (int min_side : {0, 100}) {  // full size, and a JPEG at 1/8
      EXPECT_EQ(refusal(b, &message, past, min_side), Kind::kTimedOut) << what << " " << min_side << ": " << message;
      EXPECT_NE(message.find("abandoned"), std::string::npos) << message;
    }
    EXPECT_NO_THROW(decode(b)) << what;  // and in time, it decodes
    EXPECT_NO_THROW(decode_reduced(b, 100)) << what;
  }
}

TEST(ImageDecode, WorkingBytesCountWhatTheCodecHoldsWhole) {
  std::mt19937 rng(46);
  const cv::Mat m = random_image(rng, 480, 640, CV_8UC3);
  const auto working = [](const std::vector<uint8_t>& b) {
    return prism::image::read_header(b.data(), b.size(), 1ull << 30).working_bytes;
  };
  const uint64_t pixels = 640 * 480;
  EXPECT_EQ(working(encode(m, ".jpg")), pixels);
  // 4:2:0: Y's blocks and a quarter of them for each of Cb and Cr, 128 bytes of coefficients each.
  EXPECT_EQ(working(encode(m, ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1})), pixels + (80 * 60 + 2 * 40 * 30) * 128);
  // A plain PNG is inflated in one piece (png_whole): a filter byte and 3 bytes a pixel per row, and
  // its compressed data gathered.
  const std::vector<uint8_t> png = encode(m, ".png");
  EXPECT_EQ(working(png), pixels + 480 * (1 + 640 * 3) + png.size());
  std::vector<uint8_t> rgb(size_t(pixels) * 3, 5);
  EXPECT_EQ(working(libpng_encode(640, 480, PNG_COLOR_TYPE_RGB, 8, true, rgb)), 4 * pixels);
  EXPECT_EQ(working(encode(m, ".ppm")), pixels);
  // Reduced: the grey result at its reduced size, a progressive JPEG's coefficients at full size.
  const auto reduced = [](const std::vector<uint8_t>& b, int min_side) {
    return prism::image::read_header(b.data(), b.size(), 1ull << 30, min_side);
  };
  const prism::image::DecodeHeader quarter = reduced(encode(m, ".jpg"), 100);  // 640 / 8 = 80 < 100
  EXPECT_EQ(quarter.width, 640u);
  EXPECT_EQ(quarter.decoded.width, 160u);
  EXPECT_EQ(quarter.decoded.height, 120u);
  EXPECT_EQ(quarter.decoded.reduction, 4);
  EXPECT_EQ(quarter.working_bytes, 160u * 120u);
  EXPECT_EQ(reduced(encode(m, ".jpg", {cv::IMWRITE_JPEG_PROGRESSIVE, 1}), 100).working_bytes,
            160u * 120u + (80 * 60 + 2 * 40 * 30) * 128);
  for (const std::string ext : {".png", ".ppm"}) {  // never reduced
    const prism::image::DecodeHeader h = reduced(encode(m, ext), 100);
    EXPECT_EQ(h.decoded.width, 640u) << ext;
    EXPECT_EQ(h.decoded.reduction, 1) << ext;
    if (ext == ".ppm") EXPECT_EQ(h.working_bytes, pixels);
  }
}

// The size chosen: the smallest of 1/2, 1/4, 1/8 with a longer side still >= min_side, rounded up
// as libjpeg rounds (its jpeg_calc_output_dimensions asked directly).
TEST(ImageDecode, ReducedSizesAreTheSmallestStillAsLargeAsAskedRoundedAsLibjpegRounds) {
  const auto expect_size = [](uint64_t w, uint64_t h, int min_side, uint64_t rw, uint64_t rh, int r) {
    const ReducedSize s = jpeg_reduced_size(w, h, min_side);
    EXPECT_EQ(s.width, rw) << w << "x" << h << " min_side " << min_side;
    EXPECT_EQ(s.height, rh) << w << "x" << h << " min_side " << min_side;
    EXPECT_EQ(s.reduction, r) << w << "x" << h << " min_side " << min_side;
  };
  expect_size(4000, 3000, 1024, 2000, 1500, 2);  // a phone photo, for extraction at 1024
  expect_size(3000, 4000, 1024, 1500, 2000, 2);
  expect_size(8000, 6000, 1024, 2000, 1500, 4);
  expect_size(4000, 3000, 2000, 2000, 1500, 2);
  expect_size(4000, 3000, 2001, 4000, 3000, 1);  // no scaling is large enough: full size
  expect_size(4000, 3000, 5000, 4000, 3000, 1);
  expect_size(4000, 3000, 0, 4000, 3000, 1);  // 0 (the default) and below: full size
  expect_size(4000, 3000, -1, 4000, 3000, 1);
  expect_size(4001, 3001, 1000, 1001, 751, 4);  // sides rounded up
  expect_size(4001, 3001, 1002, 2001, 1501, 2);
  expect_size(16385, 3, 2048, 2049, 1, 8);
  expect_size(1, 1, 1, 1, 1, 8);
  // Against libjpeg, for every min_side of images of odd sizes.
  std::mt19937 rng(48);
  for (cv::Size size : {cv::Size(1, 1), cv::Size(7, 3), cv::Size(9, 17), cv::Size(37, 23), cv::Size(1001, 667)}) {
    const std::vector<uint8_t> jpg = encode(random_image(rng, size.height, size.width, CV_8UC1), ".jpg");
    const int side = std::max(size.width, size.height);
    for (int min_side = 0; min_side <= side + 1; min_side += min_side < 40 ? 1 : 37) {
      const ReducedSize s = jpeg_reduced_size(uint64_t(size.width), uint64_t(size.height), min_side);
      EXPECT_EQ(cv::Size(int(s.width), int(s.height)), libjpeg_output_size(jpg, s.reduction))
          << size_text(size.width, size.height) << " min_side " << min_side;
      if (s.reduction > 1) EXPECT_GE(int(std::max(s.width, s.height)), min_side);
      if (s.reduction < 8 && min_side > 0) {  // the next scaling would be too small
        const cv::Size next = libjpeg_output_size(jpg, 2 * s.reduction);
        EXPECT_LT(std::max(next.width, next.height), min_side)
            << size_text(size.width, size.height) << " min_side " << min_side;
      }
    }
  }
}

// Every kind of JPEG (grey, colour 4:2:0, progressive, optimised, restart intervals; odd sizes) at
// each scaling is OpenCV's IMREAD_REDUCED_GRAYSCALE_2/4/8 bit for bit.
TEST(ImageDecode, ReducedJpegIsOpenCvsReducedGreyBitForBit) {
  std::mt19937 rng(49);
  for (int type : {CV_8UC1, CV_8UC3})
    for (cv::Size size : {cv::Size(1, 1), cv::Size(37, 23), cv::Size(1001, 667), cv::Size(667, 2049)})
      for (const std::vector<int>& params :
           std::vector<std::vector<int>>{{cv::IMWRITE_JPEG_QUALITY, 90},
                                         {cv::IMWRITE_JPEG_QUALITY, 30, cv::IMWRITE_JPEG_PROGRESSIVE, 1},
                                         {cv::IMWRITE_JPEG_QUALITY, 100, cv::IMWRITE_JPEG_OPTIMIZE, 1},
                                         {cv::IMWRITE_JPEG_QUALITY, 75, cv::IMWRITE_JPEG_RST_INTERVAL, 3}}) {
        const std::vector<uint8_t> jpg = encode(random_image(rng, size.height, size.width, type), ".jpg", params);
        const int side = std::max(size.width, size.height);
        for (int want : {2, 4, 8}) {
          const int min_side = (side + want - 1) / want;  // the longer side at 1/want
          const std::string what = "JPEG type " + std::to_string(type) + " " + size_text(size.width, size.height) +
                                   " param " + std::to_string(params[1]) + " min_side " + std::to_string(min_side);
          const ReducedGrey d = decode_reduced(jpg, min_side);
          const ReducedSize s = jpeg_reduced_size(uint64_t(size.width), uint64_t(size.height), min_side);
          EXPECT_EQ(d.width, uint64_t(size.width)) << what;
          EXPECT_EQ(d.height, uint64_t(size.height)) << what;
          EXPECT_EQ(d.reduction, s.reduction) << what;
          if (side >= 8) EXPECT_EQ(d.reduction, want) << what;  // (1x1 is 1x1 at 1/8 already)
          EXPECT_TRUE(d.grey.isContinuous()) << what;
          expect_same(d.grey, opencv_reduced_grey(jpg, d.reduction), what);
        }
      }
  // Other colour layouts.
  const int w = 99, h = 61;
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
  for (uint8_t& v : rgb) v = uint8_t(rng());
  for (const auto& [jpg, what] : std::vector<std::pair<std::vector<uint8_t>, std::string>>{
           {libjpeg_encode(w, h, JCS_YCbCr, rgb, true), "4:4:4 YCbCr"}, {libjpeg_encode(w, h, JCS_RGB, rgb), "RGB"}})
    for (int min_side : {50, 25, 13}) {
      const ReducedGrey d = decode_reduced(jpg, min_side);
      expect_same(d.grey, opencv_reduced_grey(jpg, d.reduction), what + " min_side " + std::to_string(min_side));
    }
}

// min_side 0 (every existing caller), or more than half the longer side: the full decode.
TEST(ImageDecode, ReducedDecodesAtFullSizeWhenNoScalingIsLargeEnough) {
  std::mt19937 rng(50);
  const cv::Mat m = random_image(rng, 667, 1001, CV_8UC3);
  for (const std::vector<int>& params : std::vector<std::vector<int>>{{}, {cv::IMWRITE_JPEG_PROGRESSIVE, 1}}) {
    const std::vector<uint8_t> jpg = encode(m, ".jpg", params);
    for (int min_side : {0, -3, 502, 1001, 5000}) {
      const ReducedGrey d = decode_reduced(jpg, min_side);
      EXPECT_EQ(d.reduction, 1) << min_side;
      EXPECT_EQ(d.width, 1001u);
      EXPECT_EQ(d.height, 667u);
      expect_same(d.grey, decode(jpg), "min_side " + std::to_string(min_side));
    }
    EXPECT_EQ(decode_reduced(jpg, 501).reduction, 2);  // ceil(1001 / 2)
  }
}

// PNG and PNM ignore min_side: decoded at full size, as decode_grey decodes them.
TEST(ImageDecode, PngAndPnmAreNeverReduced) {
  std::mt19937 rng(51);
  const cv::Mat m = random_image(rng, 480, 640, CV_8UC3);
  for (const std::string ext : {".png", ".ppm"}) {
    const std::vector<uint8_t> b = encode(m, ext);
    const ReducedGrey d = decode_reduced(b, 16);
    EXPECT_EQ(d.reduction, 1) << ext;
    EXPECT_EQ(d.width, uint64_t(d.grey.cols)) << ext;
    EXPECT_EQ(d.height, uint64_t(d.grey.rows)) << ext;
    expect_same(d.grey, decode(b), ext);
  }
}

// The real JPEG photos of ../shared/data at 1/2, 1/4 and 1/8: OpenCV's reduced grey.
TEST(ImageDecode, RealJpegPhotosReducedAreOpenCvsReducedGrey) {
  const std::string dir = prism::test::data_dir() + "/images";
  PRISM_NEED_FILE(dir + "/baboon.jpg");
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".jpg") continue;
    std::ifstream f(e.path(), std::ios::binary);
    const std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const prism::image::DecodeHeader h = prism::image::read_header(b.data(), b.size(), 1ull << 30);
    const int side = int(std::max(h.width, h.height));
    for (int want : {2, 4, 8}) {
      const ReducedGrey d = decode_reduced(b, (side + want - 1) / want);
      EXPECT_EQ(d.reduction, want) << e.path();
      expect_same(d.grey, opencv_reduced_grey(b, want), e.path().string() + " at 1/" + std::to_string(want));
    }
    ++n;
  }
  EXPECT_GE(n, 10);
}

}  // namespace
