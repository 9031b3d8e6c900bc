// Helpers of the bad-input tests: a GLib log recorder (GStreamer-CRITICALs and WARNINGs are
// g_log messages, e.g. from g_return_if_fail), crafted image files that declare what they do not
// hold, and the one runner of the bad-input tables (tests/plugins/test_bad_input.cpp per element,
// tests/tools/cli_bad_input_test.cpp per CLI command): a case names its files, a launch line and what
// must happen; the runner writes the files, runs the line within a time bound under the log
// recorder and says what went wrong. No gtest here: tests assert on what these return.
#pragma once

#include <glib.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace prism::test {

// Records every CRITICAL and WARNING logged through GLib (any domain, any thread) while it lives,
// and still prints them. Installs the default handler, so domains with a handler of their own
// (none in GStreamer) are not seen. One at a time.
class GlibLogRecorder {
 public:
  GlibLogRecorder() { previous_ = g_log_set_default_handler(&GlibLogRecorder::handle, this); }
  ~GlibLogRecorder() { g_log_set_default_handler(previous_, nullptr); }
  GlibLogRecorder(const GlibLogRecorder&) = delete;
  GlibLogRecorder& operator=(const GlibLogRecorder&) = delete;

  // "DOMAIN-CRITICAL: message" lines, in order.
  std::vector<std::string> messages() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return messages_;
  }
  std::string joined() const {
    std::string s;
    for (const std::string& m : messages()) s += m + "\n";
    return s;
  }

 private:
  static void handle(const gchar* domain, GLogLevelFlags level, const gchar* message, gpointer data) {
    auto* self = static_cast<GlibLogRecorder*>(data);
    if (level & (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING)) {
      std::lock_guard<std::mutex> lock(self->mutex_);
      self->messages_.push_back(std::string(domain ? domain : "") +
                                (level & G_LOG_LEVEL_CRITICAL ? "-CRITICAL: " : "-WARNING: ") +
                                (message ? message : ""));
    }
    g_log_default_handler(domain, level, message, nullptr);
  }

  GLogFunc previous_ = nullptr;
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

// A PNG whose header declares width x height (8-bit; colour type 0 grey, 2 RGB, 6 RGBA) and whose
// image data holds only a few zero bytes: a crafted header, a few hundred bytes at most, that
// a decoder trusting the header would allocate width x height pixels for. Up to 4096 pixels the
// data is complete: a black image.
inline void write_png_declaring(const std::string& path, uint32_t width, uint32_t height, uint8_t colour_type = 0) {
  auto be32 = [](std::vector<uint8_t>& v, uint32_t x) {
    for (int s = 24; s >= 0; s -= 8) v.push_back((uint8_t)(x >> s));
  };
  auto crc32 = [](const uint8_t* p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
      c ^= p[i];
      for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
    }
    return c ^ 0xffffffffu;
  };
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto chunk = [&](const char* type, const std::vector<uint8_t>& data) {
    be32(png, (uint32_t)data.size());
    const size_t start = png.size();
    png.insert(png.end(), type, type + 4);
    png.insert(png.end(), data.begin(), data.end());
    be32(png, crc32(png.data() + start, png.size() - start));
  };
  std::vector<uint8_t> ihdr;
  be32(ihdr, width);
  be32(ihdr, height);
  ihdr.insert(ihdr.end(), {8, colour_type, 0, 0, 0});
  // zlib stream of one stored (uncompressed) deflate block of zero bytes: all of a small image's
  // rows (each a filter byte and its samples), so that it decodes, black; 64 of a large one's.
  const uint64_t channels = colour_type == 6 ? 4 : colour_type == 2 ? 3 : 1;
  const uint64_t whole = uint64_t(height) * (1 + uint64_t(width) * channels);
  const uint16_t n = uint64_t(width) * height <= 4096 ? uint16_t(whole) : 64;
  std::vector<uint8_t> idat = {
      0x78, 0x01, 0x01, (uint8_t)(n & 0xff), (uint8_t)(n >> 8), (uint8_t)(~n & 0xff), (uint8_t)((uint16_t)~n >> 8)};
  idat.insert(idat.end(), n, 0);
  be32(idat, ((uint32_t)n << 16) | 1u);  // adler32 of n zero bytes: a = 1, b = n
  chunk("IHDR", ihdr);
  chunk("IDAT", idat);
  chunk("IEND", {});
  std::ofstream(path, std::ios::binary).write((const char*)png.data(), (std::streamsize)png.size());
}

class TempDir;

// A file a case makes in its temporary folder before it runs, by one of the makers below.
struct CaseFile {
  std::string name;                                   // relative to the case's folder
  std::function<void(const std::string& path)> make;  // makes `path`
};
CaseFile text_file(const std::string& name, const std::string& bytes);
CaseFile folder(const std::string& name);                                 // an empty directory
CaseFile fifo(const std::string& name);                                   // a named pipe with no writer
CaseFile symlink_to(const std::string& name, const std::string& target);  // e.g. /dev/zero
CaseFile png_declaring(const std::string& name, uint32_t width, uint32_t height, uint8_t colour_type = 0);

// Makes every file of `files` under `dir`.
void make_case_files(const TempDir& dir, const std::vector<CaseFile>& files);

// `text` with every "@DIR@" replaced by `dir`'s path (launch lines and argv name the case's files).
std::string in_case_dir(std::string text, const TempDir& dir);

// A string property set with g_object_set before the run, for values gst-launch syntax cannot
// carry (a file name that is not UTF-8).
struct StringProperty {
  std::string object;  // "element" or "element.pad"
  std::string property;
  std::string value;  // "@DIR@" = the case's folder
};

// One row of an element's table: run `launch` (gst-launch syntax, "@DIR@" = the case's folder,
// where `files` are made) to its end.
struct LaunchCase {
  std::string name;
  std::string launch;
  std::vector<CaseFile> files;
  // A substring of the first error's message ("element: message") or of its debug text (where
  // GStreamer says "not-negotiated"); "" = reaches EOS without an error.
  std::string error;
  std::vector<StringProperty> strings = {};
};

// Runs `c` and returns "" when it did what it expects, else what went wrong: no error or another
// one, no EOS, any GLib CRITICAL or WARNING logged meanwhile, or no end within `seconds` (after
// twice that the process ends: a set_state blocked on a read cannot hang the suite).
std::string check_launch_case(const LaunchCase& c, int seconds = 20);

}  // namespace prism::test
