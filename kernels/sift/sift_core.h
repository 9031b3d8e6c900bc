// The arithmetic of kernels/sift shared by its CPU path (sift.cpp) and its CUDA path (sift.cu):
// each function here runs on one pixel, one candidate or one lane of one keypoint, so both paths
// run the same source and, compiled without FMA contraction (sift.cpp: -ffp-contract=off; sift.cu:
// --fmad=false), the same float operations. Explicit fmaf() is where OpenCV's AVX2 build uses FMA.
// Not a public header: kernels/sift/sift.h is.
#pragma once
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/border.h"
#include "common/hostdevice.h"

namespace prism::sift::detail {

// OpenCV 4.6's constants (features2d/src/sift.simd.hpp).
constexpr int kBorder = 5;  // no extremum closer to an edge
constexpr int kMaxInterpSteps = 5;
constexpr int kOriBins = 36;
constexpr float kOriSigFactor = 1.5f;
constexpr float kOriRadius = 4.5f;  // 3 x kOriSigFactor
constexpr float kOriPeakRatio = 0.8f;
constexpr int kDescWidth = 4;
constexpr int kDescBins = 8;
constexpr float kDescSclFactor = 3.f;
constexpr float kDescMagThr = 0.2f;
constexpr float kIntDescFactor = 512.f;
constexpr float kInitSigma = 0.5f;
constexpr int kDescHistLen = (kDescWidth + 2) * (kDescWidth + 2) * (kDescBins + 2);
// A circular histogram of 36 bins has at most 18 strict local maxima.
constexpr int kMaxOrientations = kOriBins / 2;
// Partial sums per keypoint histogram: a warp's lanes on the GPU, a loop on the CPU.
constexpr int kLanes = 32;

PRISM_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// cvRound: to nearest, ties to even (the default rounding mode on the CPU).
PRISM_HD int round_even(float x) { return int(rintf(x)); }
PRISM_HD int round_even(double x) { return int(rint(x)); }

// e^x for x <= 88: Cody-Waite reduction by ln 2 and Cephes' expf polynomial (S. Moshier), within
// 2 ulp of expf. OpenCV's hal::exp32f is a table method of similar accuracy.
PRISM_HD float exp_f(float x) {
  x = fmaxf(x, -87.f);
  const float n = rintf(x * 1.44269504088896341f);
  float r = fmaf(n, -0.693359375f, x);
  r = fmaf(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  const float y = fmaf(p, r * r, r) + 1.f;
  return y * bits_to_float(uint32_t(int(n) + 127) << 23);
}

// 2^t (|t| < 126): kpt.size's powf(2, (layer + xi) / nOctaveLayers).
PRISM_HD float exp2_f(float t) { return exp_f(t * 0.693147180559945309f); }

// atan2 in degrees [0, 360): OpenCV's fastAtan2 polynomial (core/src/mathfuncs_core.simd.hpp),
// about 0.3 degrees at worst, which is what the orientation bins were tuned with.
PRISM_HD float atan2_deg(float y, float x) {
  const float p1 = 0.9997878412794807f * 57.29577951308232f, p3 = -0.3258083974640975f * 57.29577951308232f,
              p5 = 0.1555786518463281f * 57.29577951308232f, p7 = -0.04432655554792128f * 57.29577951308232f;
  const float ax = fabsf(x), ay = fabsf(y);
  float a;
  if (ax >= ay) {
    const float c = ay / (ax + float(DBL_EPSILON)), c2 = c * c;
    a = (((p7 * c2 + p5) * c2 + p3) * c2 + p1) * c;
  } else {
    const float c = ax / (ay + float(DBL_EPSILON)), c2 = c * c;
    a = 90.f - (((p7 * c2 + p5) * c2 + p3) * c2 + p1) * c;
  }
  if (x < 0) a = 180.f - a;
  if (y < 0) a = 360.f - a;
  return a;
}

// sin and cos of a in [-4 pi, 4 pi] radians: quadrant reduction, Cephes' sinf/cosf polynomials on
// [-pi/4, pi/4]; within about 1 ulp of sinf/cosf.
PRISM_HD void sincos_f(float a, float* s, float* c) {
  const float q = rintf(a * 0.636619772367581343f);
  float r = fmaf(q, -1.5703125f, a);
  r = fmaf(q, -4.837512969970703125e-4f, r);
  r = fmaf(q, -7.54978995489188216e-8f, r);
  const float z = r * r;
  const float sr = fmaf(r * z, fmaf(fmaf(-1.9515295891e-4f, z, 8.3321608736e-3f), z, -1.6666654611e-1f), r);
  const float cr = fmaf(z * z, fmaf(fmaf(2.443315711809948e-5f, z, -1.388731625493765e-3f), z, 4.166664568298827e-2f),
                        fmaf(-0.5f, z, 1.f));
  const int k = int(q) & 3;
  const float sv = (k & 1) ? cr : sr, cv = (k & 1) ? sr : cr;
  *s = (k & 2) ? -sv : sv;
  *c = ((k + 1) & 2) ? -cv : cv;
}

// One output of the separable Gaussian blur (OpenCV's RowVec_32f / SymmColumnVec_32f on AVX2+FMA):
// the row pass sums all taps from zero, the column pass starts at the centre tap and adds the
// symmetric pairs. `at(k)` reads the input k taps from the left (row) or from the centre (column).
template <class At>
PRISM_HD float blur_row(const float* kernel, int ksize, At at) {
  float s = 0.f;
  for (int k = 0; k < ksize; ++k) s = fmaf(at(k), kernel[k], s);
  return s;
}
template <class At>
PRISM_HD float blur_column(const float* kernel, int ksize, At at) {
  const int r = ksize / 2;
  float s = fmaf(at(0), kernel[r], 0.f);
  for (int k = 1; k <= r; ++k) s = fmaf(at(k) + at(-k), kernel[r + k], s);
  return s;
}

// The first octave's 2x INTER_LINEAR upsampling of an 8-bit image (weights 0.25 / 0.75, so exact
// in float whatever the order): output (x, y) of a (2w) x (2h) image.
template <class Src>
PRISM_HD float upsample2x(Src src, int w, int h, int x, int y) {
  auto tap = [](int d, int n, int* i0, float* f) {
    const float fx = (d + 0.5f) * 0.5f - 0.5f;
    int s = int(floorf(fx));
    float t = fx - s;
    if (s < 0) s = 0, t = 0.f;
    if (s >= n - 1) s = n - 1, t = 0.f;
    *i0 = s;
    *f = t;
  };
  int x0, y0;
  float fx, fy;
  tap(x, w, &x0, &fx);
  tap(y, h, &y0, &fy);
  const int x1 = x0 + 1 < w ? x0 + 1 : x0, y1 = y0 + 1 < h ? y0 + 1 : y0;
  const float top = float(src(x0, y0)) * (1.f - fx) + float(src(x1, y0)) * fx;
  const float bottom = float(src(x0, y1)) * (1.f - fx) + float(src(x1, y1)) * fx;
  return top * (1.f - fy) + bottom * fy;
}

// A DoG octave as the extremum search sees it: layers 0 .. nOctaveLayers + 1, each `plane` floats
// after the one before, rows of `step` floats.
struct DogOctave {
  const float* base;
  size_t plane;
  int rows, cols, step;
  PRISM_HD float at(int l, int r, int c) const { return base[size_t(l) * plane + size_t(r) * step + c]; }
};

// findScaleSpaceExtrema's test: |v| above the threshold and >= (or <=) all 26 neighbours. The
// pixel's own layer is looked at first, its 8 neighbours loaded together (no early exit between
// them, so that a GPU thread has them in flight at once): most pixels fail there.
PRISM_HD bool extremum_in(const float* p, int step, float val, bool is_max, bool skip_centre) {
  float v[9];
  for (int dr = -1; dr <= 1; ++dr)
    for (int dc = -1; dc <= 1; ++dc) v[(dr + 1) * 3 + dc + 1] = p[dr * step + dc];
  bool ok = true;
  for (int k = 0; k < 9; ++k)
    if (!(skip_centre && k == 4)) ok = ok && (is_max ? val >= v[k] : val <= v[k]);
  return ok;
}
PRISM_HD bool is_extremum(const DogOctave& d, int l, int r, int c, int threshold) {
  const float* p = d.base + size_t(l) * d.plane + size_t(r) * d.step + c;
  const float val = *p;
  if (!(fabsf(val) > float(threshold)) || val == 0) return false;
  const bool is_max = val > 0;
  return extremum_in(p, d.step, val, is_max, true) && extremum_in(p - d.plane, d.step, val, is_max, false) &&
         extremum_in(p + d.plane, d.step, val, is_max, false);
}

// A refined extremum, before its orientations: OpenCV's KeyPoint fields in octave-`octave`
// pyramid coordinates (octave 0 = the upsampled image), plus where the orientation is measured.
struct Extremum {
  float x, y, size, response;
  int32_t packed_octave;  // octave | layer << 8 | round((xi + 0.5) x 255) << 16
  int octave, layer, r, c;
};

// adjustLocalExtrema (Lowe 2004, section 4): up to 5 Newton steps on the DoG's quadratic fit,
// then the contrast and edge (principal curvature ratio) tests.
PRISM_HD bool refine_extremum(const DogOctave& d, int octave, int layer, int r, int c, int octave_layers,
                              float contrast_threshold, float edge_threshold, float sigma, Extremum* out) {
  const float img_scale = 1.f / 255.f, deriv_scale = img_scale * 0.5f, second_deriv_scale = img_scale,
              cross_deriv_scale = img_scale * 0.25f;
  float xi = 0, xr = 0, xc = 0;
  int i = 0;
  for (; i < kMaxInterpSteps; ++i) {
    const float dx = (d.at(layer, r, c + 1) - d.at(layer, r, c - 1)) * deriv_scale;
    const float dy = (d.at(layer, r + 1, c) - d.at(layer, r - 1, c)) * deriv_scale;
    const float ds = (d.at(layer + 1, r, c) - d.at(layer - 1, r, c)) * deriv_scale;
    const float v2 = d.at(layer, r, c) * 2;
    const float dxx = (d.at(layer, r, c + 1) + d.at(layer, r, c - 1) - v2) * second_deriv_scale;
    const float dyy = (d.at(layer, r + 1, c) + d.at(layer, r - 1, c) - v2) * second_deriv_scale;
    const float dss = (d.at(layer + 1, r, c) + d.at(layer - 1, r, c) - v2) * second_deriv_scale;
    const float dxy = (d.at(layer, r + 1, c + 1) - d.at(layer, r + 1, c - 1) - d.at(layer, r - 1, c + 1) +
                       d.at(layer, r - 1, c - 1)) *
                      cross_deriv_scale;
    const float dxs = (d.at(layer + 1, r, c + 1) - d.at(layer + 1, r, c - 1) - d.at(layer - 1, r, c + 1) +
                       d.at(layer - 1, r, c - 1)) *
                      cross_deriv_scale;
    const float dys = (d.at(layer + 1, r + 1, c) - d.at(layer + 1, r - 1, c) - d.at(layer - 1, r + 1, c) +
                       d.at(layer - 1, r - 1, c)) *
                      cross_deriv_scale;
    // H X = dD by Cramer's rule, as Matx33f::solve(DECOMP_LU) does; a singular H gives X = 0.
    const float a00 = dxx, a01 = dxy, a02 = dxs, a10 = dxy, a11 = dyy, a12 = dys, a20 = dxs, a21 = dys, a22 = dss;
    float det = a00 * (a11 * a22 - a21 * a12) - a01 * (a10 * a22 - a20 * a12) + a02 * (a10 * a21 - a20 * a11);
    float X0 = 0, X1 = 0, X2 = 0;
    if (det != 0) {
      det = 1 / det;
      X0 = det * (dx * (a11 * a22 - a12 * a21) - a01 * (dy * a22 - a12 * ds) + a02 * (dy * a21 - a11 * ds));
      X1 = det * (a00 * (dy * a22 - a12 * ds) - dx * (a10 * a22 - a12 * a20) + a02 * (a10 * ds - dy * a20));
      X2 = det * (a00 * (a11 * ds - dy * a21) - a01 * (a10 * ds - dy * a20) + dx * (a10 * a21 - a11 * a20));
    }
    xi = -X2;
    xr = -X1;
    xc = -X0;
    if (fabsf(xi) < 0.5f && fabsf(xr) < 0.5f && fabsf(xc) < 0.5f) break;
    if (fabsf(xi) > float(INT_MAX / 3) || fabsf(xr) > float(INT_MAX / 3) || fabsf(xc) > float(INT_MAX / 3))
      return false;
    c += round_even(xc);
    r += round_even(xr);
    layer += round_even(xi);
    if (layer < 1 || layer > octave_layers || c < kBorder || c >= d.cols - kBorder || r < kBorder ||
        r >= d.rows - kBorder)
      return false;
  }
  if (i >= kMaxInterpSteps) return false;

  const float dx = (d.at(layer, r, c + 1) - d.at(layer, r, c - 1)) * deriv_scale;
  const float dy = (d.at(layer, r + 1, c) - d.at(layer, r - 1, c)) * deriv_scale;
  const float ds = (d.at(layer + 1, r, c) - d.at(layer - 1, r, c)) * deriv_scale;
  float t = 0;
  t += dx * xc;
  t += dy * xr;
  t += ds * xi;
  const float contr = d.at(layer, r, c) * img_scale + t * 0.5f;
  if (fabsf(contr) * octave_layers < contrast_threshold) return false;
  const float v2 = d.at(layer, r, c) * 2.f;
  const float dxx = (d.at(layer, r, c + 1) + d.at(layer, r, c - 1) - v2) * second_deriv_scale;
  const float dyy = (d.at(layer, r + 1, c) + d.at(layer, r - 1, c) - v2) * second_deriv_scale;
  const float dxy =
      (d.at(layer, r + 1, c + 1) - d.at(layer, r + 1, c - 1) - d.at(layer, r - 1, c + 1) + d.at(layer, r - 1, c - 1)) *
      cross_deriv_scale;
  const float tr = dxx + dyy, det = dxx * dyy - dxy * dxy;
  if (det <= 0 || tr * tr * edge_threshold >= (edge_threshold + 1) * (edge_threshold + 1) * det) return false;

  out->x = (c + xc) * float(1 << octave);
  out->y = (r + xr) * float(1 << octave);
  out->packed_octave = octave + (layer << 8) + (round_even((double(xi) + 0.5) * 255) << 16);
  out->size = sigma * exp2_f((layer + xi) / octave_layers) * float(1 << octave) * 2;
  out->response = fabsf(contr);
  out->octave = octave;
  out->layer = layer;
  out->r = r;
  out->c = c;
  return true;
}

// A Gaussian level of one octave, row-major.
struct Level {
  const float* data;
  int rows, cols, step;
  PRISM_HD float at(int r, int c) const { return data[r * step + c]; }
};

// The orientation histogram's geometry for an extremum (calcOrientationHist's arguments).
struct OrientationWindow {
  int radius;
  float exp_scale;  // -1 / (2 sigma^2)
};
PRISM_HD OrientationWindow orientation_window(const Extremum& e) {
  const float scl_octv = e.size * 0.5f / float(1 << e.octave);
  const float sigma = kOriSigFactor * scl_octv;
  return {round_even(kOriRadius * scl_octv), -1.f / (2.f * sigma * sigma)};
}

// One lane's share of the raw orientation histogram: samples lane, lane + kLanes, ... of the
// window in row-major order (so every lane has the same count, give or take one), added in that
// order to `hist[bin * stride]`, kOriBins bins, zeroed by the caller.
PRISM_HD void orientation_partial(const Level& img, const Extremum& e, const OrientationWindow& w, int lane,
                                  float* hist, int stride) {
  const int side = 2 * w.radius + 1, count = side * side;
  for (int k = lane; k < count; k += kLanes) {
    const int i = k / side - w.radius, j = k % side - w.radius;
    const int y = e.r + i, x = e.c + j;
    if (y <= 0 || y >= img.rows - 1 || x <= 0 || x >= img.cols - 1) continue;
    const float dx = img.at(y, x + 1) - img.at(y, x - 1);
    const float dy = img.at(y - 1, x) - img.at(y + 1, x);
    const float weight = exp_f(float(i * i + j * j) * w.exp_scale);
    const float ori = atan2_deg(dy, dx);
    const float mag = sqrtf(fmaf(dx, dx, dy * dy));
    int bin = round_even((kOriBins / 360.f) * ori);
    if (bin >= kOriBins) bin -= kOriBins;
    if (bin < 0) bin += kOriBins;
    hist[bin * stride] += weight * mag;
  }
}

// The [1 4 6 4 1]/16 circular smoothing of the summed histogram `raw`, bin `i`.
PRISM_HD float orientation_smoothed(const float* raw, int i) {
  auto t = [raw](int k) { return raw[(k + kOriBins) % kOriBins]; };
  return fmaf(t(i - 2) + t(i + 2), 1.f / 16.f, fmaf(t(i - 1) + t(i + 1), 4.f / 16.f, t(i) * (6.f / 16.f)));
}

// Bin j of the smoothed histogram as a keypoint orientation (parabolic peak interpolation), or a
// negative value when j is not a peak at kOriPeakRatio of the highest.
PRISM_HD float orientation_peak(const float* hist, float max_value, int j) {
  const float mag_thr = max_value * kOriPeakRatio;
  const int l = j > 0 ? j - 1 : kOriBins - 1, r2 = j < kOriBins - 1 ? j + 1 : 0;
  if (!(hist[j] > hist[l] && hist[j] > hist[r2] && hist[j] >= mag_thr)) return -1.f;
  float bin = j + 0.5f * (hist[l] - hist[r2]) / (hist[l] - 2 * hist[j] + hist[r2]);
  bin = bin < 0 ? kOriBins + bin : bin >= kOriBins ? bin - kOriBins : bin;
  float angle = 360.f - (360.f / kOriBins) * bin;
  if (fabsf(angle - 360.f) < FLT_EPSILON) angle = 0.f;
  return angle;
}

// calcSIFTDescriptor's geometry for a keypoint on its Gaussian level.
struct DescriptorWindow {
  int px, py, radius;
  float ori, cos_t, sin_t;  // cos and sin already divided by the histogram width
};
PRISM_HD DescriptorWindow descriptor_window(float x, float y, float ori, float scl, int rows, int cols) {
  DescriptorWindow w;
  w.px = round_even(x);
  w.py = round_even(y);
  w.ori = ori;
  float s, c;
  sincos_f(ori * float(3.14159265358979323846 / 180), &s, &c);
  const float hist_width = kDescSclFactor * scl;
  w.radius = round_even(hist_width * 1.4142135623730951f * (kDescWidth + 1) * 0.5f);
  const int diagonal = int(sqrt(double(cols) * cols + double(rows) * rows));
  if (w.radius > diagonal) w.radius = diagonal;
  w.cos_t = c / hist_width;
  w.sin_t = s / hist_width;
  return w;
}

// The descriptor histogram is summed in fixed point, 2^-28 of a unit: integer sums do not depend
// on the order of the additions, so a block's threads add their samples with shared-memory
// atomics and still match the CPU path's loop bit for bit (float atomics would not; see
// ../shared/FACTS.md on kornia-rs). A sample adds at most 361 x 2^28 to a bin; the CUDA path
// splits that at bit 18 into two 32-bit sums, exact for windows up to kMaxDescSamples samples.
constexpr float kDescFixedScale = 268435456.f;  // 2^28
constexpr int kMaxDescSamples = 11000;
PRISM_HD long long to_fixed(float v) { return llrintf(v * kDescFixedScale); }
PRISM_HD float from_fixed(long long v) { return float(double(v) * (1.0 / 268435456.0)); }

// The samples of the (2 radius + 1)^2 window in rows row0, row0 + row_step, ... and columns col0,
// col0 + col_step, ... (0-based), each added to the 4x4x8 histogram with its one-cell margins
// (kDescHistLen bins, fixed point) by `add(bin, value)`.
template <class Add>
PRISM_HD void descriptor_samples(const Level& img, const DescriptorWindow& w, int row0, int row_step, int col0,
                                 int col_step, Add add) {
  constexpr int d = kDescWidth, n = kDescBins;
  const float bins_per_rad = n / 360.f, exp_scale = -1.f / (d * d * 0.5f);
  for (int i = -w.radius + row0; i <= w.radius; i += row_step)
    for (int j = -w.radius + col0; j <= w.radius; j += col_step) {
      const float c_rot = j * w.cos_t - i * w.sin_t;
      const float r_rot = j * w.sin_t + i * w.cos_t;
      float rbin = r_rot + d / 2 - 0.5f;
      float cbin = c_rot + d / 2 - 0.5f;
      const int r = w.py + i, c = w.px + j;
      if (!(rbin > -1 && rbin < d && cbin > -1 && cbin < d && r > 0 && r < img.rows - 1 && c > 0 && c < img.cols - 1))
        continue;
      const float dx = img.at(r, c + 1) - img.at(r, c - 1);
      const float dy = img.at(r - 1, c) - img.at(r + 1, c);
      const float weight = exp_f((c_rot * c_rot + r_rot * r_rot) * exp_scale);
      const float ori = atan2_deg(dy, dx);
      float obin = (ori - w.ori) * bins_per_rad;
      const float mag = sqrtf(fmaf(dx, dx, dy * dy)) * weight;
      const int r0 = int(floorf(rbin)), c0 = int(floorf(cbin));
      int o0 = int(floorf(obin));
      rbin -= r0;
      cbin -= c0;
      obin -= o0;
      if (o0 < 0) o0 += n;
      if (o0 >= n) o0 -= n;
      // trilinear interpolation
      const float v_r1 = mag * rbin, v_r0 = mag - v_r1;
      const float v_rc11 = v_r1 * cbin, v_rc10 = v_r1 - v_rc11;
      const float v_rc01 = v_r0 * cbin, v_rc00 = v_r0 - v_rc01;
      const float v_rco111 = v_rc11 * obin, v_rco110 = v_rc11 - v_rco111;
      const float v_rco101 = v_rc10 * obin, v_rco100 = v_rc10 - v_rco101;
      const float v_rco011 = v_rc01 * obin, v_rco010 = v_rc01 - v_rco011;
      const float v_rco001 = v_rc00 * obin, v_rco000 = v_rc00 - v_rco001;
      const int idx = ((r0 + 1) * (d + 2) + c0 + 1) * (n + 2) + o0;
      add(idx, to_fixed(v_rco000));
      add(idx + 1, to_fixed(v_rco001));
      add(idx + (n + 2), to_fixed(v_rco010));
      add(idx + (n + 3), to_fixed(v_rco011));
      add(idx + (d + 2) * (n + 2), to_fixed(v_rco100));
      add(idx + (d + 2) * (n + 2) + 1, to_fixed(v_rco101));
      add(idx + (d + 3) * (n + 2), to_fixed(v_rco110));
      add(idx + (d + 3) * (n + 2) + 1, to_fixed(v_rco111));
    }
}

// The summed histogram (kDescHistLen bins, modified) to the descriptor: fold the circular
// orientation margin, clamp at 0.2 of the norm, scale to 512 / norm and round to 0..255.
PRISM_HD void descriptor_finish(float* hist, float* dst) {
  constexpr int d = kDescWidth, n = kDescBins, len = d * d * n;
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) {
      const int idx = ((i + 1) * (d + 2) + (j + 1)) * (n + 2);
      hist[idx] += hist[idx + n];
      hist[idx + 1] += hist[idx + n + 1];
      for (int k = 0; k < n; ++k) dst[(i * d + j) * n + k] = hist[idx + k];
    }
  float nrm2 = 0;
  for (int k = 0; k < len; ++k) nrm2 = fmaf(dst[k], dst[k], nrm2);
  const float thr = sqrtf(nrm2) * kDescMagThr;
  nrm2 = 0;
  for (int k = 0; k < len; ++k) {
    const float v = fminf(dst[k], thr);
    dst[k] = v;
    nrm2 = fmaf(v, v, nrm2);
  }
  nrm2 = kIntDescFactor / fmaxf(sqrtf(nrm2), FLT_EPSILON);
  for (int k = 0; k < len; ++k) {
    const int v = round_even(dst[k] * nrm2);
    dst[k] = float(v < 0 ? 0 : v > 255 ? 255 : v);
  }
}

}  // namespace prism::sift::detail
