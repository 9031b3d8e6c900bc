// ENVI cubes (kernels/envi) and tensor frames (kernels/tensor): every interleave, type and byte
// order read back as written; a file laid out by hand (independent of the writer) read right;
// malformed headers and data refused with the file and line.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "envi/envi.h"
#include "prism_test.h"
#include "tensor/tensor.h"

namespace prism {
namespace {

using envi::Interleave;

// Random values of an ENVI data type, packed BIP, host order; also as the floats they read as.
std::vector<uint8_t> random_values(int type, size_t n, std::mt19937& rng, std::vector<double>* as_double) {
  const int size = envi::data_type_size(type);
  std::vector<uint8_t> out(n * size);
  as_double->resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = rng();
    double d = 0;
    switch (type) {
      case 1: {
        uint8_t v = r & 0xFF;
        std::memcpy(&out[i * size], &v, size);
        d = v;
        break;
      }
      case 2: {
        int16_t v = int16_t(r & 0xFFFF);
        std::memcpy(&out[i * size], &v, size);
        d = v;
        break;
      }
      case 12: {
        uint16_t v = r & 0xFFFF;
        std::memcpy(&out[i * size], &v, size);
        d = v;
        break;
      }
      case 3: {
        int32_t v = int32_t(r) >> 8;
        std::memcpy(&out[i * size], &v, size);
        d = v;
        break;
      }
      case 13: {
        uint32_t v = r >> 8;
        std::memcpy(&out[i * size], &v, size);
        d = v;
        break;
      }
      case 4: {
        float v = float(int32_t(r)) / 65536.f;
        std::memcpy(&out[i * size], &v, size);
        d = v;
        break;
      }
      case 5: {
        double v = double(int32_t(r)) / 3.0;
        std::memcpy(&out[i * size], &v, size);
        d = v;
        break;
      }
    }
    (*as_double)[i] = d;
  }
  return out;
}

double value_at(const envi::Cube& c, size_t i) {
  switch (c.dtype) {
    case tensor::DType::U8: return c.bip[i];
    case tensor::DType::U16: {
      uint16_t v;
      std::memcpy(&v, &c.bip[2 * i], 2);
      return v;
    }
    case tensor::DType::F32: {
      float v;
      std::memcpy(&v, &c.bip[4 * i], 4);
      return v;
    }
  }
  return -1;
}

TEST(Envi, EveryTypeInterleaveAndByteOrderReadsBackAsWritten) {
  test::TempDir dir;
  std::mt19937 rng(std::random_device{}());
  for (int type : {1, 2, 3, 4, 5, 12, 13})
    for (Interleave il : {Interleave::BSQ, Interleave::BIL, Interleave::BIP})
      for (int order : {0, 1}) {
        envi::Header h;
        h.samples = 7;
        h.lines = 5;
        h.bands = 3;
        h.data_type = type;
        h.interleave = il;
        h.byte_order = order;
        h.header_offset = order ? 16 : 0;
        h.wavelengths = {450.5, 550, 650};
        std::vector<double> expected;
        const std::vector<uint8_t> values = random_values(type, size_t(7) * 5 * 3, rng, &expected);
        const std::string hdr = dir.file("cube.hdr");
        envi::write_cube(hdr, h, values.data());
        const envi::Cube c = envi::read_cube(hdr);
        SCOPED_TRACE("type " + std::to_string(type) + " interleave " + std::to_string(int(il)) + " order " +
                     std::to_string(order));
        EXPECT_EQ(c.header.samples, 7);
        EXPECT_EQ(c.header.lines, 5);
        EXPECT_EQ(c.header.bands, 3);
        EXPECT_EQ(c.header.wavelengths, h.wavelengths);
        EXPECT_EQ(c.dtype, envi::dtype_of(type));
        for (size_t i = 0; i < expected.size(); ++i)
          ASSERT_EQ(value_at(c, i), c.dtype == tensor::DType::F32 ? double(float(expected[i])) : expected[i]) << i;
      }
}

// A 3x2 cube of 2 bands, u16 big-endian BSQ after a 4-byte offset, laid out byte by byte here.
TEST(Envi, HandWrittenBigEndianBsqFile) {
  test::TempDir dir;
  dir.write("hand.hdr",
            "ENVI\ndescription = {written\n by hand}\nsamples = 3\nlines = 2\nbands = 2\nheader offset = 4\n"
            "data type = 12\ninterleave = BSQ\nbyte order = 1\nband names = {a, b}\n");
  std::string raw = "HDR!";
  for (int b = 0; b < 2; ++b)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 3; ++x) {
        const int v = 1000 * b + 10 * y + x + 256;  // high byte non-zero
        raw += char(v >> 8);
        raw += char(v & 0xFF);
      }
  dir.write("hand.img", raw);
  const envi::Cube c = envi::read_cube(dir.file("hand.hdr"));
  ASSERT_EQ(c.dtype, tensor::DType::U16);
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x)
      for (int b = 0; b < 2; ++b) EXPECT_EQ(value_at(c, (y * 3 + x) * 2 + b), 1000 * b + 10 * y + x + 256);
}

std::string header_error(const std::string& text) {
  static int n = 0;
  test::TempDir dir;
  const std::string hdr = dir.write("bad" + std::to_string(n++) + ".hdr", text);
  try {
    envi::read_header(hdr);
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    return what.substr(what.rfind('/') + 1);  // from the file name on
  }
  return "no error";
}

TEST(Envi, MalformedHeadersNameTheFileAndLine) {
  const std::string ok = "samples = 4\nlines = 3\nbands = 2\ndata type = 4\ninterleave = bip\n";
  EXPECT_EQ(header_error("NOT ENVI\n" + ok), "bad0.hdr:1: an ENVI header starts with the line 'ENVI', not 'NOT ENVI'");
  EXPECT_EQ(header_error("ENVI\nsamples = 4\nlines = three\n"), "bad1.hdr:3: 'lines' is 'three', not an integer");
  EXPECT_EQ(header_error("ENVI\n" + ok + "data type = 6\n"),
            "bad2.hdr:7: data type 6 is not supported (1 u8, 2 i16, 3 i32, 4 f32, 5 f64, 12 u16, 13 u32 are)");
  EXPECT_EQ(header_error("ENVI\n" + ok + "wavelength = {1, 2,\n 3\n"),
            "bad3.hdr:7: 'wavelength': the '{' is never closed");
  EXPECT_EQ(header_error("ENVI\nsamples = 4\nlines = 3\ndata type = 4\ninterleave = bip\n"),
            "bad4.hdr:0: the header has no 'bands'");
  EXPECT_EQ(header_error("ENVI\n" + ok + "wavelength = {400,\n 500, 600}\n"), "bad5.hdr:7: 3 wavelengths for 2 bands");
  EXPECT_EQ(header_error("ENVI\n" + ok + "interleave = bsx\n"),
            "bad6.hdr:7: interleave is 'bsx'; bsq, bil or bip expected");
  EXPECT_EQ(header_error("ENVI\n" + ok + "this line has no equals sign\n"),
            "bad7.hdr:7: expected 'key = value', got 'this line has no equals sign'");
  EXPECT_EQ(header_error("ENVI\nsamples = 0\nlines = 3\nbands = 2\ndata type = 4\ninterleave = bip\n"),
            "bad8.hdr:2: 'samples' is 0; 1 to 32768 are supported");
}

// Dimensions beyond what a tensor frame carries (1..32768 wide and high, 1..1024 bands) are refused
// at their line: 1073741824 x 1073741824 x 16 once wrapped to 0 bytes, passed the size check of an
// empty data file and crashed; 4294967304 samples were read as 8.
TEST(Envi, DimensionsOutOfRangeAreRefusedAtTheirLine) {
  auto error = [](const std::string& text) {
    const std::string e = header_error(text);
    return e.find(':') == std::string::npos ? e : e.substr(e.find(':'));  // from the line on
  };
  const std::string tail = "data type = 1\ninterleave = bsq\n";
  EXPECT_EQ(error("ENVI\nsamples = 1073741824\nlines = 1073741824\nbands = 16\n" + tail),
            ":2: 'samples' is 1073741824; 1 to 32768 are supported");
  EXPECT_EQ(error("ENVI\nsamples = 4294967304\nlines = 4\nbands = 2\n" + tail),
            ":2: 'samples' is 4294967304; 1 to 32768 are supported");
  EXPECT_EQ(error("ENVI\nsamples = 4\nlines = 32769\nbands = 2\n" + tail),
            ":3: 'lines' is 32769; 1 to 32768 are supported");
  EXPECT_EQ(error("ENVI\nsamples = 4\nlines = 4\nbands = 1025\n" + tail),
            ":4: 'bands' is 1025; 1 to 1024 are supported");
  EXPECT_EQ(error("ENVI\nsamples = 4\nlines = 4\nbands = -2147483648\n" + tail),
            ":4: 'bands' is -2147483648; 1 to 1024 are supported");
  EXPECT_EQ(error("ENVI\nsamples = 99999999999999999999\nlines = 4\nbands = 2\n" + tail),
            ":2: 'samples' is '99999999999999999999', beyond a 64-bit integer");
  // Other integers are range-checked as parsed too (4294967297 was read as data type 1).
  EXPECT_EQ(error("ENVI\nsamples = 4\nlines = 4\nbands = 2\ninterleave = bsq\ndata type = 4294967297\n"),
            ":6: data type 4294967297 is not supported (1 u8, 2 i16, 3 i32, 4 f32, 5 f64, 12 u16, 13 u32 are)");
  EXPECT_EQ(error("ENVI\nsamples = 4\nlines = 4\nbands = 2\n" + tail + "byte order = 4294967296\n"),
            ":7: 'byte order' is 4294967296; 0 or 1 expected");
  EXPECT_EQ(error("ENVI\nsamples = 4\nlines = 4\nbands = 2\n" + tail + "header offset = -1\n"),
            ":7: 'header offset' is -1; it cannot be negative");
  // The offset plus the data's size must be a file size (this one overflows 64 bits).
  EXPECT_EQ(error("ENVI\nsamples = 32768\nlines = 32768\nbands = 1024\ndata type = 5\ninterleave = bip\n"
                  "header offset = 9223372036854775000\n"),
            ":7: 'header offset' is 9223372036854775000; with the 8796093022208 bytes of data that is beyond any "
            "file size");
}

// The largest cube the caps allow, with an empty data file: refused by the size check, before any
// allocation.
TEST(Envi, LargestCubeWithAnEmptyDataFileIsRefused) {
  test::TempDir dir;
  const std::string hdr =
      dir.write("big.hdr", "ENVI\nsamples = 32768\nlines = 32768\nbands = 1024\ndata type = 5\ninterleave = bsq\n");
  dir.write("big", "");
  try {
    envi::read_cube(hdr);
    FAIL() << "no error for an empty data file";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              dir.file("big") + ": 0 bytes; the header (32768x32768x1024, data type 5, offset 0) needs 8796093022208");
  }
  const std::string huge = dir.write(
      "huge.hdr", "ENVI\nsamples = 1073741824\nlines = 1073741824\nbands = 16\ndata type = 1\ninterleave = bsq\n");
  dir.write("huge", "");
  try {
    envi::read_cube(huge);
    FAIL() << "no error for 1073741824 samples";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), huge + ":2: 'samples' is 1073741824; 1 to 32768 are supported");
  }
}

// What read_cube threw for `hdr`, within 10 s (a FIFO or /dev/zero was once read forever).
std::string cube_error(const std::string& hdr) {
  std::string what = "no error";
  test::within_seconds(10, "envi::read_cube(" + hdr + ")", [&] {
    try {
      envi::read_cube(hdr);
    } catch (const std::invalid_argument& e) {
      what = e.what();
    }
  });
  return what;
}

// A header or data file that is a FIFO, a device or a symlink to one is refused, naming it; a
// symlink to a regular file is read.
TEST(Envi, NonRegularFilesAreRefused) {
  test::TempDir dir;
  const std::string ok = "ENVI\nsamples = 2\nlines = 1\nbands = 1\ndata type = 1\ninterleave = bsq\n";
  const std::string fifo_hdr = dir.fifo("f.hdr");
  EXPECT_EQ(cube_error(fifo_hdr), fifo_hdr + ": not a regular file (a FIFO)");
  const std::string zero_hdr = dir.file("z.hdr");
  std::filesystem::create_symlink("/dev/zero", zero_hdr);
  EXPECT_EQ(cube_error(zero_hdr), zero_hdr + ": not a regular file (a character device)");
  EXPECT_EQ(cube_error(dir.path().string()), dir.path().string() + ": not a regular file (a directory)");

  const std::string a = dir.write("a.hdr", ok);
  const std::string a_data = dir.fifo("a");
  EXPECT_EQ(cube_error(a), a_data + ": not a regular file (a FIFO)");
  const std::string b = dir.write("b.hdr", ok);
  std::filesystem::create_symlink("/dev/zero", dir.file("b"));
  EXPECT_EQ(cube_error(b), dir.file("b") + ": not a regular file (a character device)");
  const std::string c = dir.write("c.hdr", ok);
  std::filesystem::create_symlink(dir.fifo("c_fifo"), dir.file("c.img"));
  EXPECT_EQ(cube_error(c), dir.file("c.img") + ": not a regular file (a FIFO)");

  // Symlinks to regular files are fine.
  dir.write("d_data", "AB");
  std::filesystem::create_symlink(dir.file("d_data"), dir.file("d"));
  std::filesystem::create_symlink(dir.write("d_header", ok), dir.file("d.hdr"));
  EXPECT_EQ(cube_error(dir.file("d.hdr")), "no error");
  EXPECT_EQ(envi::read_cube(dir.file("d.hdr")).bip, (std::vector<uint8_t>{'A', 'B'}));
}

TEST(Envi, ShortOrMissingDataIsRefused) {
  test::TempDir dir;
  const std::string hdr =
      dir.write("c.hdr", "ENVI\nsamples = 4\nlines = 3\nbands = 2\ndata type = 12\ninterleave = bil\n");
  try {
    envi::read_cube(hdr);
    FAIL() << "no error without a data file";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("c.hdr: no data file beside the header"), std::string::npos) << e.what();
  }
  dir.write("c.raw", std::string(47, '\0'));  // needs 48
  try {
    envi::read_cube(hdr);
    FAIL() << "no error for a short data file";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("c.raw: 47 bytes; the header (4x3x2, data type 12, offset 0) needs 48"),
              std::string::npos)
        << e.what();
  }
}

// The sequence configs/emd-envi.yaml reads: what tools/make-envi-cubes says it holds.
TEST(Envi, CheckedInSequenceHoldsTheDescribedScene) {
  for (int f : {0, 9}) {
    char name[64];
    std::snprintf(name, sizeof name, "/configs/data/envi/scene_%03d.hdr", f);
    const envi::Cube c = envi::read_cube(std::string(PRISM_SOURCE_DIR_STR) + name);
    ASSERT_EQ(c.header.samples, 96);
    ASSERT_EQ(c.header.lines, 64);
    ASSERT_EQ(c.header.bands, 8);
    ASSERT_EQ(c.dtype, tensor::DType::U16);
    ASSERT_EQ(c.header.wavelengths.size(), 8u);
    auto at = [&](int x, int y, int b) { return value_at(c, (size_t(y) * 96 + x) * 8 + b); };
    const int ox = 4 + 4 * f;  // the painted object: bright in band 0, dark in band 7
    EXPECT_GT(at(ox + 10, 32, 0), 2400);
    EXPECT_LT(at(ox + 10, 32, 7), 450);
    EXPECT_GT(at(2, 5, 7), 2700);    // vegetation, top left: bright in the near infrared
    EXPECT_LT(at(90, 60, 7), 1450);  // soil, bottom right: flat
  }
}

TEST(Tensor, ToSignaturesReadsEveryTypeWithPaddedRows) {
  std::mt19937 rng(std::random_device{}());
  const int W = 5, H = 3, C = 3;
  for (tensor::DType t : {tensor::DType::U8, tensor::DType::U16, tensor::DType::F32}) {
    tensor::FrameLayout l;
    l.dtype = t;
    l.width = W;
    l.height = H;
    l.channels = C;
    l.row_bytes = l.packed_row_bytes() + 6;  // padding, and rows not aligned to 4 for u16
    std::vector<uint8_t> frame(size_t(l.row_bytes) * H, 0xEE);
    std::vector<float> expected(size_t(W) * H * C);
    for (int y = 0; y < H; ++y)
      for (int i = 0; i < W * C; ++i) {
        const uint32_t r = rng();
        uint8_t* p = &frame[y * l.row_bytes + size_t(i) * tensor::dtype_size(t)];
        float& e = expected[size_t(y) * W * C + i];
        if (t == tensor::DType::U8) {
          *p = r & 0xFF;
          e = *p;
        }
        if (t == tensor::DType::U16) {
          uint16_t v = r & 0xFFFF;
          std::memcpy(p, &v, 2);
          e = v;
        }
        if (t == tensor::DType::F32) {
          float v = float(r % 100000) / 7.f;
          std::memcpy(p, &v, 4);
          e = v;
        }
      }
    std::vector<float> out(expected.size(), -1.f);
    tensor::to_signatures_cpu(frame.data(), l, out.data());
    EXPECT_EQ(out, expected) << tensor::dtype_name(t);
  }
  tensor::DType parsed;
  EXPECT_TRUE(tensor::parse_dtype("u16", &parsed));
  EXPECT_EQ(parsed, tensor::DType::U16);
  EXPECT_FALSE(tensor::parse_dtype("f64", &parsed));
}

}  // namespace
}  // namespace prism
