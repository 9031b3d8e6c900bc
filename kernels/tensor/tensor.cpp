#include "tensor/tensor.h"

#include <cstring>
#include <stdexcept>

namespace prism::tensor {

int dtype_size(DType t) {
  switch (t) {
    case DType::U8: return 1;
    case DType::U16: return 2;
    case DType::F32: return 4;
  }
  throw std::invalid_argument("unknown tensor dtype");
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::U8: return "u8";
    case DType::U16: return "u16";
    case DType::F32: return "f32";
  }
  return "?";
}

bool parse_dtype(const std::string& name, DType* out) {
  for (DType t : {DType::U8, DType::U16, DType::F32})
    if (name == dtype_name(t)) {
      *out = t;
      return true;
    }
  return false;
}

namespace {
template <class T>
void rows_to_float(const uint8_t* frame, const FrameLayout& l, float* out) {
  const int64_t n = int64_t(l.width) * l.channels;
  for (int y = 0; y < l.height; ++y) {
    const uint8_t* row = frame + y * l.row_bytes;
    float* o = out + y * n;
    for (int64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, row + i * sizeof(T), sizeof(T));  // rows need not be aligned to T
      o[i] = static_cast<float>(v);
    }
  }
}
}  // namespace

void to_signatures_cpu(const void* frame, const FrameLayout& l, float* out) {
  const auto* p = static_cast<const uint8_t*>(frame);
  switch (l.dtype) {
    case DType::U8: rows_to_float<uint8_t>(p, l, out); break;
    case DType::U16: rows_to_float<uint16_t>(p, l, out); break;
    case DType::F32: rows_to_float<float>(p, l, out); break;
  }
}

}  // namespace prism::tensor
