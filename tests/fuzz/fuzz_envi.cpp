// Fuzz target: ENVI headers and cubes (kernels/envi: read_header, read_cube), what envisrc reads.
// Input: the header text, then optionally a NUL byte and the data file's bytes (a header has no NUL).
// Checks: an accepted header has every dimension in range and a supported type; an accepted cube holds
// exactly lines x samples x bands values; a refusal is an std::exception naming the header or data file.
#include <cstring>
#include <stdexcept>
#include <string>

#include "envi/envi.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prism;
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t header_size = nul ? size_t(nul - data) : size;
  const std::string hdr = fuzz::write_input("cube.hdr", data, header_size);
  const std::string raw = fuzz::write_input("cube", nul ? nul + 1 : data, nul ? size - header_size - 1 : 0);
  envi::Header h;
  try {
    h = envi::read_header(hdr);
  } catch (const std::exception& e) {
    FUZZ_CHECK(std::string(e.what()).rfind(hdr + ":", 0) == 0, e.what());
    return 0;
  }
  FUZZ_CHECK(h.samples >= 1 && h.samples <= envi::kMaxSide, "samples");
  FUZZ_CHECK(h.lines >= 1 && h.lines <= envi::kMaxSide, "lines");
  FUZZ_CHECK(h.bands >= 1 && h.bands <= envi::kMaxBands, "bands");
  FUZZ_CHECK(h.header_offset >= 0, "header offset");
  FUZZ_CHECK(envi::data_type_size(h.data_type) > 0, "data type");
  FUZZ_CHECK(h.byte_order == 0 || h.byte_order == 1, "byte order");
  FUZZ_CHECK(h.wavelengths.empty() || int(h.wavelengths.size()) == h.bands, "wavelengths");
  try {
    const envi::Cube cube = envi::read_cube(hdr);
    const size_t values = size_t(h.samples) * size_t(h.lines) * size_t(h.bands);
    FUZZ_CHECK(cube.bip.size() == values * size_t(tensor::dtype_size(cube.dtype)), "cube size");
  } catch (const std::exception& e) {
    const std::string what = e.what();
    FUZZ_CHECK(what.rfind(hdr + ":", 0) == 0 || what.rfind(raw + ":", 0) == 0, e.what());
  }
  return 0;
}
