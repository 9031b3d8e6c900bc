// Colour conversion and scaling between 8-bit video formats (NV12, I420, YUY2, UYVY, RGBA, BGRA,
// RGBx, BGRx, RGB, BGR, GRAY8),
// one fused pass: each output pixel samples the source bilinearly, applies a fixed-point
// colour matrix and is packed into the destination format. The CPU path and the CUDA path run the
// same per-pixel code (colorconvert_pixel.h) in integer arithmetic, so they agree bit for bit.
//
// What it matches: GStreamer 1.22 videoconvert's 8-bit colour matrix (coefficients rounded to
// 1/256, result floored: video-converter.c prepare_matrix/matrix8) and videoscale's default
// "bilinear" method (2 taps per axis, pixel centres aligned, edge pixels repeated).
// Chroma of 4:2:0 sources is replicated over its 2x2 block, of 4:2:2 sources over its pixel pair;
// 4:2:0 output averages each 2x2 block, 4:2:2 output each pair.
// tests/kernels/test_colorconvert.cpp and tests/plugins measure the difference to videoconvert.
#pragma once

#include <cstdint>
#include <string>

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::colorconvert {

enum class PixelFormat : int { NV12, I420, RGBA, BGRx, BGR, GRAY8, RGB, BGRA, RGBx, YUY2, UYVY };

// Colour matrix of Y'CbCr data (ignored for RGB and GRAY8).
enum class YuvMatrix : int { BT601, BT709, BT2020 };

struct Colorimetry {
  YuvMatrix matrix = YuvMatrix::BT601;
  bool full_range = false;  // limited (16-235/240) unless set
};

// A frame in host or device memory. Plane pointers and strides (bytes) follow GstVideoInfo's
// layout: NV12 has Y and interleaved UV; I420 has Y, U, V; packed formats (YUY2 and UYVY too: one
// U and V per pixel pair) use plane 0.
struct Image {
  PixelFormat format = PixelFormat::RGBA;
  int width = 0;
  int height = 0;
  uint8_t* plane[3] = {nullptr, nullptr, nullptr};
  int stride[3] = {0, 0, 0};
};

// Everything the per-pixel code needs, computed once per caps (not per frame).
struct Plan {
  PixelFormat src_format, dst_format;
  int src_width, src_height, dst_width, dst_height;
  // 3x4 fixed-point matrix from source components to destination components, in 1/256
  // (GStreamer's SCALE of 8): out = (m0*c0 + m1*c1 + m2*c2 + m3) >> 8, then clamped to 0..255.
  int32_t matrix[3][4];
  bool identity_matrix;  // components copy straight through
  bool scaled;           // source and destination sizes differ
  // Tent filter per axis, in 16.16 fixed point: the source position of destination pixel centre
  // x is (2x+1)*step/2 - 0.5; taps reach `radius` either side; weights are (radius-|d|) >> shift.
  int64_t step_x, step_y;
  int64_t radius_x, radius_y;
  int weight_shift_x, weight_shift_y;
};

// Builds the plan; throws std::invalid_argument for sizes it cannot handle (empty frames, odd
// behaviour such as a scale ratio beyond 4096x).
Plan make_plan(PixelFormat src, const Colorimetry& src_colorimetry, int src_width, int src_height, PixelFormat dst,
               const Colorimetry& dst_colorimetry, int dst_width, int dst_height);

// CPU path. `src`/`dst` must match the plan's formats and sizes.
void convert_cpu(const Plan& plan, const Image& src, const Image& dst);

#if defined(PRISM_HAVE_CUDA)
// CUDA path on `stream`: enqueues one kernel, no allocation and no synchronisation. Throws
// gpu::CudaError when the launch fails, as every kernel in kernels/ does.
void convert_cuda(const Plan& plan, const Image& src, const Image& dst, cudaStream_t stream);
#endif

const char* format_name(PixelFormat f);
bool format_from_name(const std::string& name, PixelFormat* out);
// Bytes per pixel of plane 0 and the number of planes.
int plane_count(PixelFormat f);
bool is_yuv420(PixelFormat f);
bool is_yuv422(PixelFormat f);  // YUY2, UYVY
// Every format, in enum order.
constexpr PixelFormat kAllFormats[] = {PixelFormat::NV12, PixelFormat::I420,  PixelFormat::RGBA, PixelFormat::BGRx,
                                       PixelFormat::BGR,  PixelFormat::GRAY8, PixelFormat::RGB,  PixelFormat::BGRA,
                                       PixelFormat::RGBx, PixelFormat::YUY2,  PixelFormat::UYVY};

}  // namespace prism::colorconvert
