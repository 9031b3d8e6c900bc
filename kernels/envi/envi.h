// ENVI hyperspectral cubes: a text header (`NAME.hdr`) and a raw data file (band sequential BSQ,
// band interleaved by line BIL, or by pixel BIP), as written by ENVI, Spectral Python and GDAL.
// Reading turns any of them into Prism's interleaved layout (BIP, host byte order); writing does
// the reverse (used for test cubes).
//
// Element types: data type 1 (u8) and 12 (u16) keep their type; 2 (i16), 3 (i32), 13 (u32),
// 4 (f32) and 5 (f64) become f32 (i32/u32/f64 values beyond float's precision round). Complex
// and 64-bit integer types are refused.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace prism::envi {

enum class Interleave { BSQ, BIL, BIP };

// The largest cube read: what an other/x-prism-tensor frame carries (its caps' ranges).
constexpr int kMaxSide = 32768;  // samples and lines
constexpr int kMaxBands = 1024;

struct Header {
  int samples = 0, lines = 0, bands = 0;  // width, height, channels
  int64_t header_offset = 0;              // bytes to skip at the start of the data file
  int data_type = 0;                      // ENVI's code
  Interleave interleave = Interleave::BSQ;
  int byte_order = 0;               // 0 little-endian, 1 big-endian
  std::vector<double> wavelengths;  // empty when the header has none
};

// Parses a header. Throws std::invalid_argument "<path>:<line>: <what>" (line 0 for the whole
// file, e.g. a missing key): also for dimensions beyond kMaxSide/kMaxBands, an offset that with the
// data's size overflows, and a path that is not a regular file (a FIFO, a device: RegularFile).
Header read_header(const std::string& hdr_path);

// The data file of a header: NAME.hdr -> NAME, else NAME.img/.dat/.raw/.bsq/.bil/.bip (ENVI's
// conventions); "" when none exists.
std::string data_path(const std::string& hdr_path);

// Size in bytes of one value of an ENVI data type (0 when unsupported).
int data_type_size(int data_type);
// The Prism element type a data type is read as.
tensor::DType dtype_of(int data_type);

struct Cube {
  Header header;
  tensor::DType dtype = tensor::DType::F32;
  std::vector<uint8_t> bip;  // lines x samples x bands values of dtype, packed, host byte order
};

// Reads a cube. Errors name the file: an unreadable, short or not regular data file, an unsupported
// type.
Cube read_cube(const std::string& hdr_path);

// Writes NAME.hdr and NAME (the data) for `header`, from packed BIP values of the header's data
// type in host byte order, converting to its interleave and byte order. Each file is written to a
// temporary name and renamed, so a reader never sees half a cube.
void write_cube(const std::string& hdr_path, const Header& header, const void* bip_values);

}  // namespace prism::envi
