#include "envi/envi.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/regular_file.h"

namespace prism::envi {
namespace {

[[noreturn]] void fail(const std::string& path, int line, const std::string& what) {
  throw std::invalid_argument(path + ":" + std::to_string(line) + ": " + what);
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int64_t parse_int(const std::string& path, int line, const std::string& key, const std::string& v) {
  size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::out_of_range&) {
    fail(path, line, "'" + key + "' is '" + v + "', beyond a 64-bit integer");
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || trim(v.substr(used)) != "") fail(path, line, "'" + key + "' is '" + v + "', not an integer");
  return x;
}

// A dimension, range-checked as parsed: what a tensor frame carries (and no product of them
// overflows).
int parse_dimension(const std::string& path, int line, const std::string& key, const std::string& v, int max) {
  const int64_t x = parse_int(path, line, key, v);
  if (x < 1 || x > max)
    fail(path, line, "'" + key + "' is " + std::to_string(x) + "; 1 to " + std::to_string(max) + " are supported");
  return int(x);
}

// a * b, or -1 when that overflows (sizes are never negative).
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

// Bytes of a header's data (after its offset), or -1 when that overflows 64 bits.
int64_t data_bytes(const Header& h) {
  return checked_mul(checked_mul(checked_mul(h.samples, h.lines), h.bands), data_type_size(h.data_type));
}

// A name the reader can open: existing, by stat (opening a FIFO to test it would block).
bool file_exists(const std::string& p) {
  std::error_code ec;
  return std::filesystem::exists(p, ec);
}

bool host_is_big_endian() {
  const uint16_t one = 1;
  uint8_t b;
  std::memcpy(&b, &one, 1);
  return b == 0;
}

void swap_bytes(uint8_t* p, size_t count, int size) {
  if (size == 1) return;
  for (size_t i = 0; i < count; ++i) std::reverse(p + i * size, p + (i + 1) * size);
}

// Offset (in values) of (line y, sample x, band b) in a file of the given interleave.
int64_t file_index(const Header& h, int y, int x, int b) {
  switch (h.interleave) {
    case Interleave::BSQ: return (int64_t(b) * h.lines + y) * h.samples + x;
    case Interleave::BIL: return (int64_t(y) * h.bands + b) * h.samples + x;
    case Interleave::BIP: break;
  }
  return (int64_t(y) * h.samples + x) * h.bands + b;
}

template <class From, class To>
void convert(const uint8_t* raw, const Header& h, To* out) {
  for (int y = 0; y < h.lines; ++y)
    for (int x = 0; x < h.samples; ++x)
      for (int b = 0; b < h.bands; ++b) {
        From v;
        std::memcpy(&v, raw + file_index(h, y, x, b) * sizeof(From), sizeof(From));
        out[(int64_t(y) * h.samples + x) * h.bands + b] = static_cast<To>(v);
      }
}

const char* interleave_name(Interleave i) {
  switch (i) {
    case Interleave::BSQ: return "bsq";
    case Interleave::BIL: return "bil";
    case Interleave::BIP: break;
  }
  return "bip";
}

void write_atomically(const std::string& path, const void* data, size_t size) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error(tmp + ": cannot open for writing");
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    f.flush();
    if (!f) throw std::runtime_error(tmp + ": write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error(path + ": cannot rename " + tmp);
}

}  // namespace

int data_type_size(int t) {
  switch (t) {
    case 1: return 1;
    case 2:
    case 12: return 2;
    case 3:
    case 4:
    case 13: return 4;
    case 5: return 8;
    default: return 0;
  }
}

tensor::DType dtype_of(int t) {
  return t == 1 ? tensor::DType::U8 : (t == 12 ? tensor::DType::U16 : tensor::DType::F32);
}

Header read_header(const std::string& path) {
  std::istringstream f;
  try {
    f.str(RegularFile(path).read_text());
  } catch (const FileError& e) {
    throw std::invalid_argument(e.what());
  }
  std::string text;
  int line_no = 0;
  if (!std::getline(f, text)) fail(path, 1, "empty file; an ENVI header starts with the line 'ENVI'");
  ++line_no;
  if (trim(text) != "ENVI") fail(path, 1, "an ENVI header starts with the line 'ENVI', not '" + trim(text) + "'");
  Header h;
  bool have_samples = false, have_lines = false, have_bands = false, have_type = false, have_interleave = false;
  int wavelength_line = 0, offset_line = 0;
  std::string line;
  while (std::getline(f, line)) {
    ++line_no;
    const int key_line = line_no;
    if (trim(line).empty() || trim(line)[0] == ';') continue;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) fail(path, key_line, "expected 'key = value', got '" + trim(line) + "'");
    const std::string key = lower(trim(line.substr(0, eq)));
    std::string value = trim(line.substr(eq + 1));
    if (!value.empty() && value[0] == '{') {  // a brace value may run over several lines
      while (value.find('}') == std::string::npos) {
        std::string more;
        if (!std::getline(f, more)) fail(path, key_line, "'" + key + "': the '{' is never closed");
        ++line_no;
        value += " " + trim(more);
      }
      value = trim(value.substr(1, value.find('}') - 1));
    }
    if (key == "samples")
      h.samples = parse_dimension(path, key_line, key, value, kMaxSide), have_samples = true;
    else if (key == "lines")
      h.lines = parse_dimension(path, key_line, key, value, kMaxSide), have_lines = true;
    else if (key == "bands")
      h.bands = parse_dimension(path, key_line, key, value, kMaxBands), have_bands = true;
    else if (key == "header offset") {
      h.header_offset = parse_int(path, key_line, key, value);
      offset_line = key_line;
      if (h.header_offset < 0)
        fail(path, key_line, "'header offset' is " + std::to_string(h.header_offset) + "; it cannot be negative");
    } else if (key == "byte order") {
      const int64_t order = parse_int(path, key_line, key, value);
      if (order != 0 && order != 1)
        fail(path, key_line, "'byte order' is " + std::to_string(order) + "; 0 or 1 expected");
      h.byte_order = int(order);
    } else if (key == "data type") {
      const int64_t type = parse_int(path, key_line, key, value);
      have_type = true;
      if (type < 1 || type > 13 || data_type_size(int(type)) == 0)
        fail(path, key_line,
             "data type " + value + " is not supported (1 u8, 2 i16, 3 i32, 4 f32, 5 f64, 12 u16, 13 u32 are)");
      h.data_type = int(type);
    } else if (key == "interleave") {
      const std::string v = lower(value);
      if (v == "bsq")
        h.interleave = Interleave::BSQ;
      else if (v == "bil")
        h.interleave = Interleave::BIL;
      else if (v == "bip")
        h.interleave = Interleave::BIP;
      else
        fail(path, key_line, "interleave is '" + value + "'; bsq, bil or bip expected");
      have_interleave = true;
    } else if (key == "wavelength") {
      wavelength_line = key_line;
      std::stringstream ss(value);
      std::string tok;
      while (std::getline(ss, tok, ',')) {
        tok = trim(tok);
        if (tok.empty()) continue;
        size_t used = 0;
        double w = 0;
        try {
          w = std::stod(tok, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != tok.size()) fail(path, key_line, "wavelength '" + tok + "' is not a number");
        h.wavelengths.push_back(w);
      }
    }
    // Other keys (description, file type, sensor type, band names, ...) carry nothing we use.
  }
  const char* missing = !have_samples      ? "samples"
                        : !have_lines      ? "lines"
                        : !have_bands      ? "bands"
                        : !have_type       ? "data type"
                        : !have_interleave ? "interleave"
                                           : nullptr;
  if (missing) fail(path, 0, std::string("the header has no '") + missing + "'");
  const int64_t bytes = data_bytes(h);  // the dimensions are capped: this never overflows
  int64_t end;
  if (bytes < 0) fail(path, 0, "the data's size overflows 64 bits");
  if (__builtin_add_overflow(h.header_offset, bytes, &end))
    fail(path, offset_line,
         "'header offset' is " + std::to_string(h.header_offset) + "; with the " + std::to_string(bytes) +
             " bytes of data that is beyond any file size");
  if (!h.wavelengths.empty() && int(h.wavelengths.size()) != h.bands)
    fail(path, wavelength_line,
         std::to_string(h.wavelengths.size()) + " wavelengths for " + std::to_string(h.bands) + " bands");
  return h;
}

std::string data_path(const std::string& hdr_path) {
  std::string stem = hdr_path;
  const std::string lo = lower(hdr_path);
  if (lo.size() > 4 && lo.compare(lo.size() - 4, 4, ".hdr") == 0) stem = hdr_path.substr(0, hdr_path.size() - 4);
  if (stem != hdr_path && file_exists(stem)) return stem;
  for (const char* ext : {".img", ".dat", ".raw", ".bsq", ".bil", ".bip"})
    if (file_exists(stem + ext)) return stem + ext;
  return "";
}

Cube read_cube(const std::string& hdr_path) {
  Cube c;
  c.header = read_header(hdr_path);
  const Header& h = c.header;
  const std::string raw_path = data_path(hdr_path);
  if (raw_path.empty()) throw std::invalid_argument(hdr_path + ": no data file beside the header");
  const int size = data_type_size(h.data_type);
  const int64_t values = int64_t(h.samples) * h.lines * h.bands;  // read_header capped each: no overflow
  std::vector<uint8_t> raw;
  try {
    const RegularFile f(raw_path);
    const int64_t needed = h.header_offset + values * size;
    if (f.size() < needed)
      throw std::invalid_argument(raw_path + ": " + std::to_string(f.size()) + " bytes; the header (" +
                                  std::to_string(h.samples) + "x" + std::to_string(h.lines) + "x" +
                                  std::to_string(h.bands) + ", data type " + std::to_string(h.data_type) + ", offset " +
                                  std::to_string(h.header_offset) + ") needs " + std::to_string(needed));
    raw.resize(size_t(values) * size);
    f.read_at(h.header_offset, raw.data(), raw.size());
  } catch (const FileError& e) {
    throw std::invalid_argument(e.what());
  }
  if ((h.byte_order == 1) != host_is_big_endian()) swap_bytes(raw.data(), size_t(values), size);

  c.dtype = dtype_of(h.data_type);
  c.bip.resize(size_t(values) * tensor::dtype_size(c.dtype));
  auto* f32 = reinterpret_cast<float*>(c.bip.data());
  switch (h.data_type) {
    case 1: convert<uint8_t>(raw.data(), h, c.bip.data()); break;
    case 12: convert<uint16_t>(raw.data(), h, reinterpret_cast<uint16_t*>(c.bip.data())); break;
    case 2: convert<int16_t>(raw.data(), h, f32); break;
    case 3: convert<int32_t>(raw.data(), h, f32); break;
    case 13: convert<uint32_t>(raw.data(), h, f32); break;
    case 4: convert<float>(raw.data(), h, f32); break;
    case 5: convert<double>(raw.data(), h, f32); break;
  }
  return c;
}

void write_cube(const std::string& hdr_path, const Header& h, const void* bip_values) {
  const int size = data_type_size(h.data_type);
  if (size == 0) throw std::invalid_argument("write_cube: unsupported data type " + std::to_string(h.data_type));
  const std::string lo = lower(hdr_path);
  if (lo.size() <= 4 || lo.compare(lo.size() - 4, 4, ".hdr") != 0)
    throw std::invalid_argument(hdr_path + ": an ENVI header's name ends in .hdr");
  const int64_t values = int64_t(h.samples) * h.lines * h.bands;
  std::vector<uint8_t> raw(size_t(h.header_offset + values * size), 0);
  const auto* in = static_cast<const uint8_t*>(bip_values);
  for (int y = 0; y < h.lines; ++y)
    for (int x = 0; x < h.samples; ++x)
      for (int b = 0; b < h.bands; ++b)
        std::memcpy(&raw[size_t(h.header_offset + file_index(h, y, x, b) * size)],
                    in + ((int64_t(y) * h.samples + x) * h.bands + b) * size, size);
  if ((h.byte_order == 1) != host_is_big_endian()) swap_bytes(raw.data() + h.header_offset, size_t(values), size);

  std::ostringstream hdr;
  hdr << "ENVI\ndescription = {Prism test cube}\nsamples = " << h.samples << "\nlines = " << h.lines
      << "\nbands = " << h.bands << "\nheader offset = " << h.header_offset << "\nfile type = ENVI Standard\n"
      << "data type = " << h.data_type << "\ninterleave = " << interleave_name(h.interleave)
      << "\nbyte order = " << h.byte_order << "\n";
  if (!h.wavelengths.empty()) {
    hdr << "wavelength = {";
    for (size_t i = 0; i < h.wavelengths.size(); ++i) hdr << (i ? ", " : "") << h.wavelengths[i];
    hdr << "}\n";
  }
  const std::string text = hdr.str();
  // Data first, header last: a header on disk always describes a complete data file.
  write_atomically(hdr_path.substr(0, hdr_path.size() - 4), raw.data(), raw.size());
  write_atomically(hdr_path, text.data(), text.size());
}

}  // namespace prism::envi
