#include "colorconvert/colorconvert.h"

#include <cmath>
#include <stdexcept>

#include "colorconvert/colorconvert_pixel.h"

namespace prism::colorconvert {
namespace {

enum class Model { RGB, YUV, GRAY };

Model model_of(PixelFormat f) {
  switch (f) {
    case PixelFormat::NV12:
    case PixelFormat::I420:
    case PixelFormat::YUY2:
    case PixelFormat::UYVY: return Model::YUV;
    case PixelFormat::GRAY8: return Model::GRAY;
    default: return Model::RGB;
  }
}

// 3x4 affine map on component values in 0..255: out_i = sum_j m[i][j] * in_j + m[i][3].
struct Affine {
  double m[3][4];
};

Affine identity() { return Affine{{{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}}}; }

Affine compose(const Affine& outer, const Affine& inner) {
  Affine r{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      double v = (j == 3) ? outer.m[i][3] : 0.0;
      for (int k = 0; k < 3; ++k) v += outer.m[i][k] * inner.m[k][j];
      r.m[i][j] = v;
    }
  }
  return r;
}

void kr_kb(YuvMatrix m, double* kr, double* kb) {
  switch (m) {
    case YuvMatrix::BT709:
      *kr = 0.2126;
      *kb = 0.0722;
      return;
    case YuvMatrix::BT2020:
      *kr = 0.2627;
      *kb = 0.0593;
      return;
    case YuvMatrix::BT601:
    default:
      *kr = 0.299;
      *kb = 0.114;
      return;
  }
}

// Y'CbCr (8-bit, nominal ranges per GstVideoColorRange) -> R'G'B' 0..255.
Affine yuv_to_rgb(const Colorimetry& c) {
  double kr, kb;
  kr_kb(c.matrix, &kr, &kb);
  const double kg = 1.0 - kr - kb;
  const double yoff = c.full_range ? 0 : 16, ys = c.full_range ? 255 : 219, cs = c.full_range ? 255 : 224;
  // Normalised: Y' = (Y-yoff)/ys, Pb = (U-128)/cs, Pr = (V-128)/cs.
  const double r_pr = 2 * (1 - kr), b_pb = 2 * (1 - kb);
  const double g_pb = -kb * b_pb / kg, g_pr = -kr * r_pr / kg;
  Affine norm{{{1 / ys, 0, 0, -yoff / ys}, {0, 1 / cs, 0, -128 / cs}, {0, 0, 1 / cs, -128 / cs}}};
  Affine to_rgb{{{255, 0, 255 * r_pr, 0}, {255, 255 * g_pb, 255 * g_pr, 0}, {255, 255 * b_pb, 0, 0}}};
  return compose(to_rgb, norm);
}

// R'G'B' 0..255 -> Y'CbCr.
Affine rgb_to_yuv(const Colorimetry& c) {
  double kr, kb;
  kr_kb(c.matrix, &kr, &kb);
  const double kg = 1.0 - kr - kb;
  const double yoff = c.full_range ? 0 : 16, ys = c.full_range ? 255 : 219, cs = c.full_range ? 255 : 224;
  Affine ypbpr{{{kr / 255, kg / 255, kb / 255, 0},
                {-kr / (2 * (1 - kb)) / 255, -kg / (2 * (1 - kb)) / 255, 0.5 / 255, 0},
                {0.5 / 255, -kg / (2 * (1 - kr)) / 255, -kb / (2 * (1 - kr)) / 255, 0}}};
  Affine scale{{{ys, 0, 0, yoff}, {0, cs, 0, 128}, {0, 0, cs, 128}}};
  return compose(scale, ypbpr);
}

// GStreamer treats GRAY8 as full-range BT.601 luma: RGB -> GRAY8 keeps the luma, GRAY8 -> RGB
// replicates it, and GRAY8 <-> YUV copies Y (checked against videoconvert 1.22).
Affine gray_to_rgb() { return Affine{{{1, 0, 0, 0}, {1, 0, 0, 0}, {1, 0, 0, 0}}}; }
Affine rgb_to_gray() {
  Affine y = rgb_to_yuv(Colorimetry{YuvMatrix::BT601, true});
  return Affine{{{y.m[0][0], y.m[0][1], y.m[0][2], 0}, {0, 0, 0, 128}, {0, 0, 0, 128}}};
}

bool same_colorimetry(const Colorimetry& a, const Colorimetry& b) {
  return a.matrix == b.matrix && a.full_range == b.full_range;
}

// Smallest right shift of the tent weights that keeps one axis' weight sum under 2^24, so
// that the 2-D accumulators stay inside int64.
int weight_shift(int64_t radius) {
  int shift = 0;
  const int64_t taps = 2 * radius / 65536 + 2;
  while ((radius >> shift) * taps >= (int64_t{1} << 24)) ++shift;
  return shift;
}

}  // namespace

Plan make_plan(PixelFormat src, const Colorimetry& src_c, int src_width, int src_height, PixelFormat dst,
               const Colorimetry& dst_c, int dst_width, int dst_height) {
  if (src_width <= 0 || src_height <= 0 || dst_width <= 0 || dst_height <= 0)
    throw std::invalid_argument("colorconvert: frame sizes must be positive");
  if (src_width > 4096 * dst_width || src_height > 4096 * dst_height)
    throw std::invalid_argument("colorconvert: shrinking by more than 4096x is not supported");
  Plan p{};
  p.src_format = src;
  p.dst_format = dst;
  p.src_width = src_width;
  p.src_height = src_height;
  p.dst_width = dst_width;
  p.dst_height = dst_height;

  const Model sm = model_of(src), dm = model_of(dst);
  Affine a = identity();
  bool ident = false;
  if (sm == dm) {
    ident = sm != Model::YUV || same_colorimetry(src_c, dst_c);
    if (!ident) a = compose(rgb_to_yuv(dst_c), yuv_to_rgb(src_c));
  } else if ((sm == Model::GRAY && dm == Model::YUV) || (sm == Model::YUV && dm == Model::GRAY)) {
    ident = true;
  } else {
    const Affine to_rgb = sm == Model::YUV ? yuv_to_rgb(src_c) : sm == Model::GRAY ? gray_to_rgb() : identity();
    const Affine from_rgb = dm == Model::YUV ? rgb_to_yuv(dst_c) : dm == Model::GRAY ? rgb_to_gray() : identity();
    a = compose(from_rgb, to_rgb);
  }
  p.identity_matrix = ident;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) p.matrix[i][j] = static_cast<int32_t>(std::rint(a.m[i][j] * 256.0));

  p.scaled = src_width != dst_width || src_height != dst_height;
  p.step_x = (static_cast<int64_t>(src_width) * 65536) / dst_width;
  p.step_y = (static_cast<int64_t>(src_height) * 65536) / dst_height;
  // One source pixel either side: 2-tap bilinear, videoscale's default method (which, like it,
  // does not widen the filter when shrinking).
  p.radius_x = 65536;
  p.radius_y = 65536;
  p.weight_shift_x = weight_shift(p.radius_x);
  p.weight_shift_y = weight_shift(p.radius_y);
  return p;
}

void convert_cpu(const Plan& plan, const Image& src, const Image& dst) {
  for (int by = 0; by < dst.height; by += 2)
    for (int bx = 0; bx < dst.width; bx += 2) detail::convert_block(plan, src, dst, bx, by);
}

const char* format_name(PixelFormat f) {
  switch (f) {
    case PixelFormat::NV12: return "NV12";
    case PixelFormat::I420: return "I420";
    case PixelFormat::RGBA: return "RGBA";
    case PixelFormat::BGRx: return "BGRx";
    case PixelFormat::BGR: return "BGR";
    case PixelFormat::GRAY8: return "GRAY8";
    case PixelFormat::RGB: return "RGB";
    case PixelFormat::BGRA: return "BGRA";
    case PixelFormat::RGBx: return "RGBx";
    case PixelFormat::YUY2: return "YUY2";
    case PixelFormat::UYVY: return "UYVY";
  }
  return "?";
}

bool format_from_name(const std::string& name, PixelFormat* out) {
  for (PixelFormat f : kAllFormats) {
    if (name == format_name(f)) {
      *out = f;
      return true;
    }
  }
  return false;
}

int plane_count(PixelFormat f) { return f == PixelFormat::NV12 ? 2 : f == PixelFormat::I420 ? 3 : 1; }

bool is_yuv420(PixelFormat f) { return f == PixelFormat::NV12 || f == PixelFormat::I420; }

bool is_yuv422(PixelFormat f) { return f == PixelFormat::YUY2 || f == PixelFormat::UYVY; }

}  // namespace prism::colorconvert
