// Multispectral frames as Prism passes them between elements (caps other/x-prism-tensor): a
// height x width grid of pixels, each `channels` values of one element type, interleaved (channels
// last, ENVI's BIP), rows `row_bytes` apart. This header names the element types and turns such a
// frame into the float signatures [pixels][channels] the EMD map solves on.
#pragma once
#include <cstdint>
#include <string>

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::tensor {

enum class DType : int { U8 = 0, U16 = 1, F32 = 2 };

int dtype_size(DType t);
const char* dtype_name(DType t);  // "u8", "u16", "f32": the caps' dtype strings
// false when `name` is not one of dtype_name's strings.
bool parse_dtype(const std::string& name, DType* out);

struct FrameLayout {
  DType dtype = DType::F32;
  int width = 0, height = 0, channels = 0;
  int64_t row_bytes = 0;  // >= width * channels * dtype_size
  int64_t packed_row_bytes() const { return int64_t(width) * channels * dtype_size(dtype); }
};

// The frame's values as floats, packed [height * width][channels] (exact for u8 and u16).
void to_signatures_cpu(const void* frame, const FrameLayout& layout, float* out);
#if defined(PRISM_HAVE_CUDA)
void to_signatures_cuda(const void* frame, const FrameLayout& layout, float* out, cudaStream_t stream);
#endif

}  // namespace prism::tensor
