#include "image/decode.h"

// (jpeglib.h and png.h want FILE and size_t declared before them)
#include <cstdio>
#include <jpeglib.h>
// (after jpeglib.h)
#include <jerror.h>
#include <libdeflate.h>
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "common/grey.h"

namespace prism::image {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = DecodeError::Kind;

// Each scan of a progressive JPEG is a pass over the whole image, so a small file of many scans
// costs seconds: libjpeg-turbo's TurboJPEG refuses more than 500 as well.
constexpr int kJpegMaxScans = 500;
// The largest ancillary PNG chunk libpng may allocate (iCCP, zTXt decompressed): a photo's colour
// profile is some KB; libpng's own default is 8 MB.
constexpr png_alloc_size_t kPngChunkMax = 1 << 20;
// The most a PNG decoded in one piece (png_whole) holds inflated; larger ones are read row by row.
constexpr uint64_t kPngWholeMax = 64ull << 20;

// netpbm's whitespace (ASCII, whatever the locale).
bool is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string size_text(uint64_t w, uint64_t h) { return std::to_string(w) + "x" + std::to_string(h); }

// `as_written`: the size as the header writes it, where its numbers may exceed what was parsed.
void check_size(uint64_t w, uint64_t h, uint64_t max_pixels, const std::string& as_written = {}) {
  const std::string size = as_written.empty() ? size_text(w, h) : as_written;
  if (w == 0 || h == 0)
    throw DecodeError(Kind::kMalformed,
                      "declares " + size + " pixels: an image needs a width and a height of at least 1");
  if (w > max_pixels / h)
    throw DecodeError(Kind::kTooLarge, "declares " + size + " pixels, more than the " + std::to_string(max_pixels) +
                                           " an image may have here; refused before decoding");
}

bool starts_with(const uint8_t* data, size_t size, const char* magic, size_t n, size_t at = 0) {
  return size >= at + n && std::memcmp(data + at, magic, n) == 0;
}

// What bytes that are not PNG, JPEG or binary PNM look like, for the refusal (empty: unknown).
std::string looks_like(const uint8_t* data, size_t size) {
  struct Magic {
    const char* bytes;
    size_t n, at;
    const char* name;
  };
  static const Magic kMagics[] = {
      {"GIF8", 4, 0, "a GIF image"},
      {"BM", 2, 0, "a BMP image"},
      {"II*\0", 4, 0, "a TIFF image"},
      {"MM\0*", 4, 0, "a TIFF image"},
      {"WEBP", 4, 8, "a WebP image"},
      {"v/1\x01", 4, 0, "an OpenEXR image"},
      {"\0\0\0\x0cjP  ", 8, 0, "a JPEG 2000 image"},
      {"\xff\x4f\xff\x51", 4, 0, "a JPEG 2000 codestream"},
      {"ftypheic", 8, 4, "a HEIC image"},
      {"ftypmif1", 8, 4, "a HEIF image"},
      {"ftypavif", 8, 4, "an AVIF image"},
      {"8BPS", 4, 0, "a Photoshop image"},
      {"P7", 2, 0, "a PAM image"},
      {"%PDF", 4, 0, "a PDF document"},
      {"RIFF", 4, 0, "a RIFF file"},
  };
  for (const Magic& m : kMagics)
    if (starts_with(data, size, m.bytes, m.n, m.at)) return m.name;
  if (size >= 3 && data[0] == 'P' && data[1] >= '1' && data[1] <= '3')
    return std::string("a plain (ASCII) PNM, P") + char(data[1]) +
           ", which is not read here (save it as binary PNM "
           "or PNG)";
  // SVG and other XML: text that opens with '<' after any byte-order mark and whitespace.
  size_t i = starts_with(data, size, "\xef\xbb\xbf", 3) ? 3 : 0;
  while (i < size && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n')) ++i;
  if (i < size && data[i] == '<') {
    const std::string head(reinterpret_cast<const char*>(data) + i, std::min<size_t>(size - i, 4096));
    return head.find("<svg") != std::string::npos ? "an SVG image" : "an XML or HTML document";
  }
  return {};
}

[[noreturn]] void unsupported(const uint8_t* data, size_t size) {
  const std::string what = looks_like(data, size);
  throw DecodeError(Kind::kUnsupported,
                    (what.empty() ? std::string("is not an image this server reads") : "is " + what) +
                        ": unsupported image format (" + kSupportedFormats + ")");
}

// ---- binary PNM (netpbm: P4, P5, P6) ----

struct PnmHeader {
  char kind = 0;  // '4', '5' or '6'
  uint64_t width = 0, height = 0, maxval = 1;
  std::string size;    // "WxH" as written
  size_t data_at = 0;  // the first sample byte
};

// A header number: whitespace and '#' comments (to the end of the line) before it, values saturating
// at 2^32. False where none ends inside the bytes.
bool pnm_number(const uint8_t* d, size_t n, size_t* pos, uint64_t* value, std::string* digits = nullptr) {
  size_t i = *pos;
  while (i < n && (is_space(d[i]) || d[i] == '#')) {
    if (d[i] == '#')
      while (i < n && d[i] != '\n' && d[i] != '\r') ++i;
    else
      ++i;
  }
  const size_t start = i;
  *value = 0;
  for (; i < n && d[i] >= '0' && d[i] <= '9'; ++i) *value = std::min<uint64_t>(*value * 10 + (d[i] - '0'), 1ull << 32);
  if (i == start || i == n || !(is_space(d[i]) || d[i] == '#')) return false;
  if (digits) digits->assign(reinterpret_cast<const char*>(d) + start, i - start);
  *pos = i;
  return true;
}

PnmHeader pnm_header(const uint8_t* d, size_t n) {
  PnmHeader h;
  h.kind = char(d[1]);
  size_t pos = 2;
  std::string w_digits, h_digits;
  const bool ok = pnm_number(d, n, &pos, &h.width, &w_digits) && pnm_number(d, n, &pos, &h.height, &h_digits) &&
                  (h.kind == '4' || (pnm_number(d, n, &pos, &h.maxval) && h.maxval >= 1 && h.maxval <= 65535));
  if (!ok)
    throw DecodeError(Kind::kMalformed, std::string("has a malformed or incomplete binary PNM (P") + h.kind +
                                            ") header: netpbm's magic, width, height" +
                                            (h.kind == '4' ? "" : " and maxval (1..65535)") +
                                            ", separated by whitespace or '#' comments");
  // One whitespace byte ends the header (a comment cannot come after the last number).
  if (d[pos] == '#')
    throw DecodeError(Kind::kMalformed,
                      "has a binary PNM header whose last number is followed by a comment, not by "
                      "the single whitespace byte before the samples");
  h.data_at = pos + 1;
  h.size = w_digits + "x" + h_digits;
  return h;
}

uint64_t pnm_row_bytes(const PnmHeader& h) {
  if (h.kind == '4') return (h.width + 7) / 8;
  return h.width * (h.kind == '6' ? 3 : 1) * (h.maxval > 255 ? 2 : 1);
}

void check_deadline(const DecodeLimits& limits) {
  if (Clock::now() > limits.deadline)
    throw DecodeError(Kind::kTimedOut, "could not be decoded before the deadline; the decode was abandoned");
}

cv::Mat decode_pnm(const uint8_t* d, size_t n, const DecodeLimits& limits) {
  const PnmHeader h = pnm_header(d, n);
  check_size(h.width, h.height, limits.max_pixels, h.size);
  const uint64_t row = pnm_row_bytes(h);
  if (h.data_at > n || (n - h.data_at) / row < h.height)
    throw DecodeError(Kind::kMalformed, "is a truncated binary PNM: " + size_text(h.width, h.height) + " needs " +
                                            std::to_string(row * h.height) + " bytes of samples, it has " +
                                            std::to_string(n > h.data_at ? n - h.data_at : 0));
  cv::Mat out(int(h.height), int(h.width), CV_8UC1);
  const bool wide = h.maxval > 255;
  const uint32_t maxval = uint32_t(h.maxval);
  const auto sample = [&](const uint8_t* p) -> uint32_t {
    const uint32_t v = std::min<uint32_t>(wide ? uint32_t(p[0]) << 8 | p[1] : p[0], maxval);
    return maxval == 255 ? v : (v * 255 + maxval / 2) / maxval;
  };
  const size_t step = wide ? 2 : 1;
  for (uint64_t y = 0; y < h.height; ++y) {
    if ((y & 63) == 0) check_deadline(limits);
    const uint8_t* s = d + h.data_at + y * row;
    uint8_t* o = out.ptr<uint8_t>(int(y));
    if (h.kind == '4') {
      for (uint64_t x = 0; x < h.width; ++x) o[x] = (s[x / 8] >> (7 - x % 8)) & 1 ? 0 : 255;  // 1 is black
    } else if (h.kind == '5') {
      for (uint64_t x = 0; x < h.width; ++x) o[x] = uint8_t(sample(s + x * step));
    } else {
      for (uint64_t x = 0; x < h.width; ++x) {
        const uint8_t* p = s + 3 * x * step;
        o[x] = grey_bgr(int(sample(p + 2 * step)), int(sample(p + step)), int(sample(p)));
      }
    }
  }
  return out;
}

// ---- JPEG (libjpeg-turbo) ----

// libjpeg reports errors by calling error_exit, which must not return: it longjmps back into the
// function that called libjpeg, with no C++ object between the two (so none is skipped). The
// reason, and whether the progress monitor gave up for the deadline or the scan count, stay here.
struct JpegJob {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr err{};
  jpeg_progress_mgr progress{};
  std::jmp_buf on_error;
  bool created = false;
  bool truncated = false;  // the data ended before the image (libjpeg filled in an end marker)
  Kind kind = Kind::kMalformed;
  char message[JMSG_LENGTH_MAX] = {0};
  Clock::time_point deadline = Clock::time_point::max();

  ~JpegJob() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

JpegJob* job_of(j_common_ptr c) { return reinterpret_cast<JpegJob*>(c->client_data); }

void jpeg_fail(j_common_ptr c) {
  JpegJob* job = job_of(c);
  if (c->err->msg_code == JERR_OUT_OF_MEMORY) job->kind = Kind::kNoMemory;
  (*c->err->format_message)(c, job->message);
  std::longjmp(job->on_error, 1);
}

void jpeg_warning(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) job_of(c)->truncated = true;
}

// Called between a progressive JPEG's input rows while jpeg_start_decompress reads its scans, and
// for every jpeg_read_scanlines call.
void jpeg_monitor(j_common_ptr c) {
  JpegJob* job = job_of(c);
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (d->input_scan_number > kJpegMaxScans) {
    std::snprintf(job->message, sizeof job->message,
                  "has more than %d JPEG scans: each is a pass over the whole image, and libjpeg-turbo's TurboJPEG "
                  "refuses them too",
                  kJpegMaxScans);
    std::longjmp(job->on_error, 1);
  }
  if (Clock::now() > job->deadline) {
    job->kind = Kind::kTimedOut;
    std::snprintf(job->message, sizeof job->message,
                  "could not be decoded before the deadline; the decode was abandoned");
    std::longjmp(job->on_error, 1);
  }
}

// Reads the header into job.cinfo. False with job.message set on a libjpeg error.
bool jpeg_open(JpegJob& job, const uint8_t* data, size_t size) {
  job.cinfo.err = jpeg_std_error(&job.err);
  job.err.error_exit = jpeg_fail;
  job.err.emit_message = jpeg_warning;
  job.err.output_message = [](j_common_ptr) {};
  if (setjmp(job.on_error)) return false;
  jpeg_create_decompress(&job.cinfo);
  job.created = true;
  job.cinfo.client_data = &job;
  job.progress.progress_monitor = jpeg_monitor;
  job.cinfo.progress = &job.progress;
  jpeg_mem_src(&job.cinfo, data, (unsigned long)size);  // past the end: a warning and an end marker
  jpeg_read_header(&job.cinfo, TRUE);
  return true;
}

// Decodes into `out` (height rows of width bytes, `stride` apart), reduced by 1 / `reduction` in
// the DCT domain. False with job.message set, also where libjpeg's output size is not out's
// (jpeg_reduced_size rounds as libjpeg does: it is not expected).
bool jpeg_rows(JpegJob& job, int reduction, uint8_t* out, size_t stride, uint64_t width, uint64_t height) {
  if (setjmp(job.on_error)) return false;
  job.cinfo.out_color_space = JCS_GRAYSCALE;
  job.cinfo.dct_method = JDCT_ISLOW;
  job.cinfo.scale_num = 1;
  job.cinfo.scale_denom = unsigned(reduction);
  jpeg_start_decompress(&job.cinfo);  // a progressive image's scans are all read here
  if (job.cinfo.output_width != width || job.cinfo.output_height != height) {
    std::snprintf(job.message, sizeof job.message, "libjpeg decodes it at 1/%d to %ux%u, not the %llux%llu expected",
                  reduction, unsigned(job.cinfo.output_width), unsigned(job.cinfo.output_height),
                  (unsigned long long)width, (unsigned long long)height);
    return false;
  }
  while (job.cinfo.output_scanline < job.cinfo.output_height) {
    JSAMPROW row = out + size_t(job.cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&job.cinfo, &row, 1);
  }
  return true;
}

[[noreturn]] void jpeg_error(const JpegJob& job) {
  if (job.kind == Kind::kTimedOut || job.kind == Kind::kNoMemory) throw DecodeError(job.kind, job.message);
  throw DecodeError(Kind::kMalformed, std::string("is a malformed JPEG: ") + job.message);
}

DecodeHeader jpeg_header(JpegJob& job, const uint8_t* data, size_t size, uint64_t max_pixels, int min_side) {
  if (!jpeg_open(job, data, size)) jpeg_error(job);
  const jpeg_decompress_struct& c = job.cinfo;
  if (c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK)
    throw DecodeError(Kind::kUnsupported, std::string("is a ") + (c.jpeg_color_space == JCS_CMYK ? "CMYK" : "YCCK") +
                                              " JPEG, which is not read here: save it as RGB or grey");
  DecodeHeader h;
  h.format = ImageFormat::kJpeg;
  h.width = c.image_width;
  h.height = c.image_height;
  check_size(h.width, h.height, max_pixels);  // the declared size, whatever the scaling
  h.decoded = jpeg_reduced_size(h.width, h.height, min_side);
  h.working_bytes = h.decoded.width * h.decoded.height;
  // (coefficients are buffered for every block at full size, scaled or not)
  if (jpeg_has_multiple_scans(const_cast<j_decompress_ptr>(&c))) {
    // Every component's DCT coefficients (2 bytes each, per block of 8x8, at its own sampling).
    uint64_t coefficients = 0;
    for (int i = 0; i < c.num_components; ++i) {
      const jpeg_component_info& k = c.comp_info[i];
      const uint64_t bw =
          (h.width * uint64_t(k.h_samp_factor) + 8 * c.max_h_samp_factor - 1) / (8 * uint64_t(c.max_h_samp_factor));
      const uint64_t bh =
          (h.height * uint64_t(k.v_samp_factor) + 8 * c.max_v_samp_factor - 1) / (8 * uint64_t(c.max_v_samp_factor));
      coefficients += bw * bh * 64 * 2;
    }
    h.working_bytes += coefficients;
  }
  return h;
}

ReducedGrey decode_jpeg(const uint8_t* data, size_t size, int min_side, const DecodeLimits& limits) {
  JpegJob job;
  job.deadline = limits.deadline;
  const DecodeHeader h = jpeg_header(job, data, size, limits.max_pixels, min_side);
  ReducedGrey out;
  out.width = h.width;
  out.height = h.height;
  out.reduction = h.decoded.reduction;
  out.grey.create(int(h.decoded.height), int(h.decoded.width), CV_8UC1);
  if (!jpeg_rows(job, out.reduction, out.grey.data, out.grey.step, h.decoded.width, h.decoded.height)) jpeg_error(job);
  if (job.truncated) throw DecodeError(Kind::kMalformed, "is a truncated JPEG: its data ends before the image does");
  return out;
}

// ---- PNG (libpng) ----

struct PngJob {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0, at = 0;
  Kind kind = Kind::kMalformed;
  std::string message;

  ~PngJob() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

void png_fail(png_structp png, png_const_charp message) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  job->message = message;
  png_longjmp(png, 1);
}

void png_read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (n > job->size - job->at) png_error(png, "the data ends before the image does (truncated)");
  std::memcpy(out, job->data + job->at, n);
  job->at += n;
}

struct PngLayout {
  uint64_t width = 0, height = 0;
  int passes = 1;
  bool colour = false;  // rows of R, G, B after the transforms; else of grey
};

// Reads the header and sets the transforms to 8-bit grey or RGB rows (png_error on a fault).
bool png_open(PngJob& job, PngLayout* layout) {
  job.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, png_fail, [](png_structp, png_const_charp) {});
  if (!job.png) {
    job.kind = Kind::kNoMemory;
    job.message = "libpng could not start";
    return false;
  }
  job.info = png_create_info_struct(job.png);
  if (!job.info) {
    job.kind = Kind::kNoMemory;
    job.message = "libpng could not start";
    return false;
  }
  if (setjmp(png_jmpbuf(job.png))) return false;
  png_set_read_fn(job.png, &job, png_read_bytes);
  png_set_chunk_malloc_max(job.png, kPngChunkMax);
  png_set_user_limits(job.png, 0x7fffffff, 0x7fffffff);  // ours is the pixel count, checked next
  png_read_info(job.png, job.info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, type = 0, interlace = 0;
  png_get_IHDR(job.png, job.info, &w, &h, &depth, &type, &interlace, nullptr, nullptr);
  layout->width = w;
  layout->height = h;
  if (depth == 16) png_set_strip_16(job.png);
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(job.png);
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(job.png);
  png_set_strip_alpha(job.png);
  layout->colour = (type & PNG_COLOR_MASK_COLOR) != 0;
  layout->passes = png_set_interlace_handling(job.png);
  png_read_update_info(job.png, job.info);
  return true;
}

// Reads every row into `rows` (each `row_bytes`; for an interlaced image, all of them at once).
// `done(y)` after each row of the last pass converts it; the deadline between rows.
bool png_rows(PngJob& job, const PngLayout& layout, std::vector<png_bytep>& rows, const DecodeLimits& limits,
              void (*done)(void*, uint64_t), void* ctx) {
  if (setjmp(png_jmpbuf(job.png))) return false;
  const bool whole = layout.passes > 1;
  for (int pass = 0; pass < layout.passes; ++pass)
    for (uint64_t y = 0; y < layout.height; ++y) {
      if ((y & 15) == 0 && Clock::now() > limits.deadline) {
        job.kind = Kind::kTimedOut;
        job.message = "could not be decoded before the deadline; the decode was abandoned";
        return false;
      }
      png_read_row(job.png, whole ? rows[y] : rows[0], nullptr);
      if (pass == layout.passes - 1 && !whole) done(ctx, y);
    }
  if (whole)
    for (uint64_t y = 0; y < layout.height; ++y) done(ctx, y);
  return true;
}

// ---- PNG in one piece (libdeflate) ----
// libpng inflates with zlib, a few bytes at a time through its row callbacks: 5 of the 8.4 ms a
// 640x480 photo's decode took on the GPU host. Most uploads are the plain kind (8- or 16-bit grey or
// RGB, with or without alpha, not interlaced), and those are read here in one piece: the chunks
// walked and their CRCs checked, the IDAT data inflated at once by libdeflate (2-3x zlib's speed,
// its Adler-32 checked), the rows unfiltered in place (PNG specification, 9) and turned to grey as
// png_row_to_grey turns libpng's. Anything else, and anything this walk does not find exactly as
// the specification wants it (a CRC, a stream longer or shorter than the image, an unknown critical
// chunk), goes to libpng, which stays the decoder (and the judge) of every other and every damaged
// file.

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

// A PNG this path reads: its IHDR, and the inflated size.
struct PngWhole {
  uint32_t width = 0, height = 0;
  int channels = 0, sample_bytes = 0;  // 1-4 channels of 1 or 2 bytes
  uint64_t inflated = 0;               // height rows of a filter byte and width x channels x sample_bytes
};

// The IHDR, when it is one this path reads; nothing is checked beyond it.
bool png_whole_layout(const uint8_t* data, size_t size, PngWhole* w) {
  if (size < 33 || be32(data + 8) != 13 || std::memcmp(data + 12, "IHDR", 4) != 0) return false;
  const uint8_t* h = data + 16;
  const int depth = h[8], type = h[9];
  if ((depth != 8 && depth != 16) || h[10] != 0 || h[11] != 0 || h[12] != 0) return false;  // interlaced: libpng
  static constexpr int kChannels[7] = {1, 0, 3, 0, 2, 0, 4};  // grey, RGB, grey + alpha, RGBA
  if (type > 6 || kChannels[type] == 0) return false;         // palettes: libpng
  w->width = be32(h);
  w->height = be32(h + 4);
  w->channels = kChannels[type];
  w->sample_bytes = depth / 8;
  w->inflated = uint64_t(w->height) * (1 + uint64_t(w->width) * uint64_t(w->channels * w->sample_bytes));
  return w->width > 0 && w->height > 0 && w->width < (1u << 31) && w->height < (1u << 31) &&
         w->inflated <= kPngWholeMax;
}

uint8_t paeth(int a, int b, int c) {  // PNG specification, 9.4
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return uint8_t(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

// Undoes row y's filter in place (`prior`: the row above, unfiltered; null for the first).
bool png_unfilter(uint8_t filter, uint8_t* row, const uint8_t* prior, size_t n, size_t bpp) {
  switch (filter) {
    case 0: return true;
    case 1:
      for (size_t i = bpp; i < n; ++i) row[i] = uint8_t(row[i] + row[i - bpp]);
      return true;
    case 2:
      if (prior)
        for (size_t i = 0; i < n; ++i) row[i] = uint8_t(row[i] + prior[i]);
      return true;
    case 3:
      for (size_t i = 0; i < n; ++i)
        row[i] = uint8_t(row[i] + (((i >= bpp ? row[i - bpp] : 0) + (prior ? prior[i] : 0)) >> 1));
      return true;
    case 4:
      for (size_t i = 0; i < n; ++i)
        row[i] = uint8_t(
            row[i] + paeth(i >= bpp ? row[i - bpp] : 0, prior ? prior[i] : 0, i >= bpp && prior ? prior[i - bpp] : 0));
      return true;
    default: return false;
  }
}

// True with `out` decoded, or false for libpng to decode (or refuse) the file.
bool png_whole(const uint8_t* data, size_t size, cv::Mat& out) {
  PngWhole w;
  if (!png_whole_layout(data, size, &w)) return false;
  std::vector<uint8_t> compressed;
  enum { kBefore, kIn, kAfter } idat = kBefore;  // the IDATs, which must follow one another
  for (size_t at = 8;;) {
    if (size - at < 12) return false;
    const uint64_t n = be32(data + at);
    if (n > 0x7fffffff || n > size - at - 12) return false;
    const uint8_t* type = data + at + 4;
    if (libdeflate_crc32(0, type, size_t(n) + 4) != be32(type + 4 + n)) return false;
    if (std::memcmp(type, "IDAT", 4) == 0) {
      if (idat == kAfter) return false;
      idat = kIn;
      compressed.insert(compressed.end(), type + 4, type + 4 + n);
    } else {
      if (idat == kIn) idat = kAfter;
      if (std::memcmp(type, "IEND", 4) == 0) break;
      if ((type[0] & 0x20) == 0 && at != 8) return false;  // a critical chunk but IHDR, IDAT, IEND: libpng's
    }
    at += 12 + size_t(n);
  }
  if (compressed.empty()) return false;
  static thread_local std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> inflater(
      libdeflate_alloc_decompressor(), libdeflate_free_decompressor);
  if (!inflater) return false;
  std::vector<uint8_t> raw(size_t(w.inflated));
  size_t used = 0;
  if (libdeflate_zlib_decompress_ex(inflater.get(), compressed.data(), compressed.size(), raw.data(), raw.size(), &used,
                                    nullptr) != LIBDEFLATE_SUCCESS ||
      used != compressed.size())
    return false;
  const size_t bpp = size_t(w.channels * w.sample_bytes), row_bytes = size_t(w.width) * bpp;
  out.create(int(w.height), int(w.width), CV_8UC1);
  const uint8_t* prior = nullptr;
  for (uint32_t y = 0; y < w.height; ++y) {
    uint8_t* row = raw.data() + size_t(y) * (row_bytes + 1);
    if (!png_unfilter(row[0], row + 1, prior, row_bytes, bpp)) return false;
    prior = row + 1;
    // 16-bit samples keep their high byte (big-endian: the first), alpha is ignored.
    const uint8_t* s = row + 1;
    uint8_t* o = out.ptr<uint8_t>(int(y));
    const size_t step = bpp, b = size_t(w.sample_bytes);
    if (w.channels <= 2)
      for (uint32_t x = 0; x < w.width; ++x) o[x] = s[x * step];
    else
      for (uint32_t x = 0; x < w.width; ++x) o[x] = grey_bgr(s[x * step + 2 * b], s[x * step + b], s[x * step]);
  }
  return true;
}

[[noreturn]] void png_error_of(const PngJob& job) {
  if (job.kind == Kind::kTimedOut || job.kind == Kind::kNoMemory) throw DecodeError(job.kind, job.message);
  throw DecodeError(Kind::kMalformed, "is a malformed PNG: " + job.message);
}

DecodeHeader png_header(PngJob& job, PngLayout& layout, const uint8_t* data, size_t size, uint64_t max_pixels) {
  job.data = data;
  job.size = size;
  // IHDR comes first (PNG specification, 11.2.2): its size is checked here, named as declared,
  // where libpng would say "Invalid IHDR data" (0) or "PNG unsigned integer out of range" (2^31).
  if (size >= 24 && std::memcmp(data + 12, "IHDR", 4) == 0) {
    const auto be32 = [&](size_t at) {
      return uint64_t(data[at]) << 24 | uint64_t(data[at + 1]) << 16 | uint64_t(data[at + 2]) << 8 | data[at + 3];
    };
    check_size(be32(16), be32(20), max_pixels);
  }
  if (!png_open(job, &layout)) png_error_of(job);
  check_size(layout.width, layout.height, max_pixels);
  DecodeHeader h;
  h.format = ImageFormat::kPng;
  h.width = layout.width;
  h.height = layout.height;
  h.decoded = {h.width, h.height, 1};
  h.working_bytes = h.width * h.height * (layout.passes > 1 ? (layout.colour ? 4 : 2) : 1);
  if (PngWhole whole; png_whole_layout(data, size, &whole)) h.working_bytes += whole.inflated + size;  // png_whole's
  return h;
}

struct PngGrey {
  std::vector<png_bytep>* rows;
  cv::Mat* out;
  bool colour;
};

void png_row_to_grey(void* ctx, uint64_t y) {
  auto* g = static_cast<PngGrey*>(ctx);
  const png_bytep s = (*g->rows)[g->rows->size() == 1 ? 0 : y];
  uint8_t* o = g->out->ptr<uint8_t>(int(y));
  if (!g->colour) {
    std::memcpy(o, s, size_t(g->out->cols));
    return;
  }
  for (int x = 0; x < g->out->cols; ++x) o[x] = grey_bgr(s[3 * x + 2], s[3 * x + 1], s[3 * x]);
}

cv::Mat decode_png(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  PngWhole whole;
  if (png_whole_layout(data, size, &whole)) {
    check_size(whole.width, whole.height, limits.max_pixels);
    if (Clock::now() > limits.deadline)
      throw DecodeError(Kind::kTimedOut, "could not be decoded before the deadline; the decode was abandoned");
    cv::Mat out;
    if (png_whole(data, size, out)) return out;
  }
  PngJob job;
  PngLayout layout;
  png_header(job, layout, data, size, limits.max_pixels);
  const size_t row_bytes = png_get_rowbytes(job.png, job.info);
  cv::Mat out(int(layout.height), int(layout.width), CV_8UC1);
  std::vector<uint8_t> buffer;
  std::vector<png_bytep> rows;
  if (layout.passes > 1) {  // Adam7: every pass writes into all rows
    buffer.resize(row_bytes * layout.height);
    for (uint64_t y = 0; y < layout.height; ++y) rows.push_back(buffer.data() + y * row_bytes);
  } else {
    buffer.resize(row_bytes);
    rows.push_back(buffer.data());
  }
  PngGrey grey{&rows, &out, layout.colour};
  if (!png_rows(job, layout, rows, limits, png_row_to_grey, &grey)) png_error_of(job);
  return out;
}

bool is_binary_pnm(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 'P' && data[1] >= '4' && data[1] <= '6' && is_space(data[2]);
}

ReducedGrey full_size(cv::Mat grey) {
  ReducedGrey out;
  out.width = uint64_t(grey.cols);
  out.height = uint64_t(grey.rows);
  out.grey = std::move(grey);
  return out;
}

}  // namespace

ReducedSize jpeg_reduced_size(uint64_t width, uint64_t height, int min_side) {
  ReducedSize r{width, height, 1};
  if (min_side <= 0) return r;
  const uint64_t side = std::max(width, height);
  for (uint64_t d : {2, 4, 8}) {
    if ((side + d - 1) / d < uint64_t(min_side)) break;  // libjpeg rounds each side up
    r = {(width + d - 1) / d, (height + d - 1) / d, int(d)};
  }
  return r;
}

ImageFormat sniff_format(const uint8_t* data, size_t size) {
  if (starts_with(data, size, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  if (starts_with(data, size, "\xff\xd8\xff", 3)) return ImageFormat::kJpeg;
  if (is_binary_pnm(data, size)) return ImageFormat::kPnm;
  return ImageFormat::kUnknown;
}

void check_format(const uint8_t* data, size_t size) {
  if (sniff_format(data, size) == ImageFormat::kUnknown) unsupported(data, size);
}

DecodeHeader read_header(const uint8_t* data, size_t size, uint64_t max_pixels, int min_side) {
  switch (sniff_format(data, size)) {
    case ImageFormat::kPng: {
      PngJob job;
      PngLayout layout;
      return png_header(job, layout, data, size, max_pixels);
    }
    case ImageFormat::kJpeg: {
      JpegJob job;
      return jpeg_header(job, data, size, max_pixels, min_side);
    }
    case ImageFormat::kPnm: {
      const PnmHeader p = pnm_header(data, size);
      check_size(p.width, p.height, max_pixels, p.size);
      DecodeHeader h;
      h.format = ImageFormat::kPnm;
      h.width = p.width;
      h.height = p.height;
      h.decoded = {h.width, h.height, 1};
      h.working_bytes = h.width * h.height;
      return h;
    }
    case ImageFormat::kUnknown: break;
  }
  unsupported(data, size);
}

cv::Mat decode_grey(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  return decode_grey_reduced(data, size, 0, limits).grey;
}

ReducedGrey decode_grey_reduced(const uint8_t* data, size_t size, int min_side, const DecodeLimits& limits) {
  try {
    switch (sniff_format(data, size)) {
      case ImageFormat::kPng: return full_size(decode_png(data, size, limits));
      case ImageFormat::kJpeg: return decode_jpeg(data, size, min_side, limits);
      case ImageFormat::kPnm: return full_size(decode_pnm(data, size, limits));
      case ImageFormat::kUnknown: break;
    }
  } catch (const std::bad_alloc&) {
    throw DecodeError(Kind::kNoMemory, "could not be decoded: out of memory");
  } catch (const cv::Exception&) {  // cv::Mat's allocation
    throw DecodeError(Kind::kNoMemory, "could not be decoded: out of memory");
  }
  unsupported(data, size);
}

}  // namespace prism::image
