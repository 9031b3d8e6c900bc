// OpenCV 4.6's single-precision complex DFT (modules/core/src/dxt.cpp, DFT<float>, on the path
// Debian 12's build takes: SSE2 baseline, no IPP, so the scalar radix-4 code), replayed operation
// for operation so that its outputs are reproduced bit for bit, roundings included.
//
// Why: OpenCV's seamlessClone solves with float DFTs whose rounding errors are part of its answer.
// The CUDA path solves in double, which differs from OpenCV wherever OpenCV's error moves a value
// across an integer. The errors that matter are those of the forward transforms at the lowest
// frequencies, which the division by the smallest eigenvalues (~1e-5 at 2400x1552) amplifies into
// smooth offsets over the whole box. Replaying OpenCV's arithmetic for just those outputs (the
// first K of each row) and splicing them into the double solve removes most of the difference
// (docs/benchmarks/poisson.md has the shares before and after). See dst_solve.cu.
//
// The algorithm is OpenCV's mixed-radix decimation in time: the input permuted into digit-reversed
// order, the power-of-two factor done as radix-4 stages (then one radix-2 if needed), then the odd
// factors, largest first, as radix-3, radix-5 or a generic odd radix that exploits the symmetry of
// the twiddles. Each butterfly below is one iteration of OpenCV's loops, on one block i and one
// column j, with the same expressions in the same order (mul/add/sub round separately, no FMA).
//
// Pruning: with decimation in time, output m of a stage's block reads only element m mod nx of each
// sub-block, so the first K outputs of the whole transform need only the first K outputs of every
// block of every stage: the butterflies of columns j < K. Every stage computes only those
// (prune_below). Elements that are not computed keep stale values and only ever feed outputs that
// are not computed either.
#pragma once

#include <cstdint>
#include <vector>

#include "common/hostdevice.h"
#include "poisson/poisson_pixel.h"

// Unrolled on the device so that the loads of several iterations are in flight together (the
// accumulation order is unchanged).
#if defined(__CUDA_ARCH__)
#define PRISM_UNROLL8 _Pragma("unroll 8")
#else
#define PRISM_UNROLL8
#endif

namespace prism::poisson::ocvdft {

struct Cf {
  float re, im;
};

// Each product and sum rounded on its own (common/rounding.h: prism::mul_rn and its kin; nvcc would
// contract into FMAs).

// (x * w).re and (x * w).im as OpenCV spells them.
PRISM_HD float cmul_re(Cf x, Cf w) { return sub_rn(mul_rn(x.re, w.re), mul_rn(x.im, w.im)); }
PRISM_HD float cmul_im(Cf x, Cf w) { return add_rn(mul_rn(x.re, w.im), mul_rn(x.im, w.re)); }

// One stage: butterflies combine `radix` sub-blocks of length nx into blocks of length n = nx*radix;
// twiddle step dw0 (wave index of butterfly column j is j*dw0). radix 2, 3, 4, 5, or any odd number
// for the generic butterfly.
struct Stage {
  int radix, nx, n, dw0;
};

constexpr int kMaxStages = 40;

// Radix 2, 3, 4 and 5 have butterflies of their own; any other (odd) radix takes the generic one.
PRISM_HD bool is_generic(const Stage& s) { return s.radix != 2 && s.radix != 3 && s.radix != 4 && s.radix != 5; }

// What a transform of length n0 needs besides its data: the stages, the input permutation and the
// twiddle table, as OpenCV's DFTFactorize/DFTInit make them.
struct Plan {
  int n0 = 0;
  int num_stages = 0;
  Stage stages[kMaxStages];
};

// Host: the plan, the permutation (work[i] = input[perm[i]]) and the wave table (n0 entries).
Plan make_plan(int n0, std::vector<int>& perm, std::vector<Cf>& wave);

// OpenCV's factor order for n0 (power of two first, then the odd factors largest first).
std::vector<int> factorize(int n0);

// --- butterflies: v points at element j of block i (v = data + i + j) -----------------------------

PRISM_HD void radix2(Cf* v, int nx, int j, int dw0, const Cf* wave) {
  if (j == 0) {
    const float r0 = add_rn(v[0].re, v[nx].re), i0 = add_rn(v[0].im, v[nx].im);
    const float r1 = sub_rn(v[0].re, v[nx].re), i1 = sub_rn(v[0].im, v[nx].im);
    v[0] = {r0, i0};
    v[nx] = {r1, i1};
    return;
  }
  const Cf w = wave[j * dw0];
  const float r1 = sub_rn(mul_rn(v[nx].re, w.re), mul_rn(v[nx].im, w.im));
  const float i1 = add_rn(mul_rn(v[nx].im, w.re), mul_rn(v[nx].re, w.im));
  const float r0 = v[0].re, i0 = v[0].im;
  v[0] = {add_rn(r0, r1), add_rn(i0, i1)};
  v[nx] = {sub_rn(r0, r1), sub_rn(i0, i1)};
}

// Radix 4 over the sub-blocks in bit-reversed order (v0[0], v0[nx], v1[0] = v0[2nx], v1[nx]).
PRISM_HD void radix4(Cf* v0, int nx, int j, int dw0, const Cf* wave) {
  Cf* v1 = v0 + nx * 2;
  float r0, i0, r1, i1, r2, i2, r3, i3, r4, i4;
  if (j == 0) {
    r0 = v1[0].re;
    i0 = v1[0].im;
    r4 = v1[nx].re;
    i4 = v1[nx].im;
    r1 = add_rn(r0, r4);
    i1 = add_rn(i0, i4);
    r3 = sub_rn(i0, i4);
    i3 = sub_rn(r4, r0);
    r2 = v0[0].re;
    i2 = v0[0].im;
    r4 = v0[nx].re;
    i4 = v0[nx].im;
    r0 = add_rn(r2, r4);
    i0 = add_rn(i2, i4);
    r2 = sub_rn(r2, r4);
    i2 = sub_rn(i2, i4);
  } else {
    const int dw = j * dw0;
    const Cf w1 = wave[dw], w2 = wave[dw * 2], w3 = wave[dw * 3];
    r2 = cmul_re(v0[nx], w2);
    i2 = cmul_im(v0[nx], w2);
    r0 = add_rn(mul_rn(v1[0].re, w1.im), mul_rn(v1[0].im, w1.re));  // Im(v1[0] w1)
    i0 = sub_rn(mul_rn(v1[0].re, w1.re), mul_rn(v1[0].im, w1.im));  // Re(v1[0] w1)
    r3 = add_rn(mul_rn(v1[nx].re, w3.im), mul_rn(v1[nx].im, w3.re));
    i3 = sub_rn(mul_rn(v1[nx].re, w3.re), mul_rn(v1[nx].im, w3.im));
    r1 = add_rn(i0, i3);
    i1 = add_rn(r0, r3);
    r3 = sub_rn(r0, r3);
    i3 = sub_rn(i3, i0);
    r4 = v0[0].re;
    i4 = v0[0].im;
    r0 = add_rn(r4, r2);
    i0 = add_rn(i4, i2);
    r2 = sub_rn(r4, r2);
    i2 = sub_rn(i4, i2);
  }
  v0[0] = {add_rn(r0, r1), add_rn(i0, i1)};
  v1[0] = {sub_rn(r0, r1), sub_rn(i0, i1)};
  v0[nx] = {add_rn(r2, r3), add_rn(i2, i3)};
  v1[nx] = {sub_rn(r2, r3), sub_rn(i2, i3)};
}

PRISM_HD void radix3(Cf* v, int nx, int j, int dw0, const Cf* wave) {
  const float sin_120 = 0.86602540378443864676372317075294f;
  float r0, i0, r1, i1, r2, i2;
  if (j == 0) {
    r1 = add_rn(v[nx].re, v[nx * 2].re);
    i1 = add_rn(v[nx].im, v[nx * 2].im);
    r0 = v[0].re;
    i0 = v[0].im;
    r2 = mul_rn(sin_120, sub_rn(v[nx].im, v[nx * 2].im));
    i2 = mul_rn(sin_120, sub_rn(v[nx * 2].re, v[nx].re));
  } else {
    const int dw = j * dw0;
    const Cf w1 = wave[dw], w2 = wave[dw * 2];
    r0 = cmul_re(v[nx], w1);
    i0 = cmul_im(v[nx], w1);
    i2 = cmul_re(v[nx * 2], w2);
    r2 = cmul_im(v[nx * 2], w2);
    r1 = add_rn(r0, i2);
    i1 = add_rn(i0, r2);
    r2 = mul_rn(sin_120, sub_rn(i0, r2));
    i2 = mul_rn(sin_120, sub_rn(i2, r0));
    r0 = v[0].re;
    i0 = v[0].im;
  }
  v[0] = {add_rn(r0, r1), add_rn(i0, i1)};
  r0 = sub_rn(r0, mul_rn(0.5f, r1));
  i0 = sub_rn(i0, mul_rn(0.5f, i1));
  v[nx] = {add_rn(r0, r2), add_rn(i0, i2)};
  v[nx * 2] = {sub_rn(r0, r2), sub_rn(i0, i2)};
}

PRISM_HD void radix5(Cf* v0, int nx, int j, int dw0, const Cf* wave) {
  const float fft5_2 = 0.559016994374947424102293417182819f;
  const float fft5_3 = -0.951056516295153572116439333379382f;
  const float fft5_4 = -1.538841768587626701285145288018455f;
  const float fft5_5 = 0.363271264002680442947733378740309f;
  Cf* v1 = v0 + nx * 2;
  Cf* v2 = v1 + nx * 2;
  const int dw = j * dw0;  // j == 0 multiplies by wave[0] = (1, 0), exactly as OpenCV does
  float r0, i0, r1, i1, r2, i2, r3, i3, r4, i4, r5, i5;
  r3 = cmul_re(v0[nx], wave[dw]);
  i3 = cmul_im(v0[nx], wave[dw]);
  r2 = cmul_re(v2[0], wave[dw * 4]);
  i2 = cmul_im(v2[0], wave[dw * 4]);
  r1 = add_rn(r3, r2);
  i1 = add_rn(i3, i2);
  r3 = sub_rn(r3, r2);
  i3 = sub_rn(i3, i2);
  r4 = cmul_re(v1[nx], wave[dw * 3]);
  i4 = cmul_im(v1[nx], wave[dw * 3]);
  r0 = cmul_re(v1[0], wave[dw * 2]);
  i0 = cmul_im(v1[0], wave[dw * 2]);
  r2 = add_rn(r4, r0);
  i2 = add_rn(i4, i0);
  r4 = sub_rn(r4, r0);
  i4 = sub_rn(i4, i0);
  r0 = v0[0].re;
  i0 = v0[0].im;
  r5 = add_rn(r1, r2);
  i5 = add_rn(i1, i2);
  v0[0] = {add_rn(r0, r5), add_rn(i0, i5)};
  r0 = sub_rn(r0, mul_rn(0.25f, r5));
  i0 = sub_rn(i0, mul_rn(0.25f, i5));
  r1 = mul_rn(fft5_2, sub_rn(r1, r2));
  i1 = mul_rn(fft5_2, sub_rn(i1, i2));
  r2 = mul_rn(-fft5_3, add_rn(i3, i4));
  i2 = mul_rn(fft5_3, add_rn(r3, r4));
  i3 = mul_rn(i3, -fft5_5);
  r3 = mul_rn(r3, fft5_5);
  i4 = mul_rn(i4, -fft5_4);
  r4 = mul_rn(r4, fft5_4);
  r5 = add_rn(r2, i3);
  i5 = add_rn(i2, r3);
  r2 = sub_rn(r2, i4);
  i2 = sub_rn(i2, r4);
  r3 = add_rn(r0, r1);
  i3 = add_rn(i0, i1);
  r0 = sub_rn(r0, r1);
  i0 = sub_rn(i0, i1);
  v0[nx] = {add_rn(r3, r2), add_rn(i3, i2)};
  v2[0] = {sub_rn(r3, r2), sub_rn(i3, i2)};
  v1[0] = {add_rn(r0, r5), add_rn(i0, i5)};
  v1[nx] = {sub_rn(r0, r5), sub_rn(i0, i5)};
}

// Generic odd radix f (h = (f-1)/2), first half: the symmetric sum a and difference b of the
// (twiddled) pair (v[p nx], v[n - p nx]) for one p in 1..h. Independent per p; OpenCV's running sum
// v[0] + sum_p (a.re, b.im) is taken by generic_sum afterwards, in p order.
PRISM_HD void generic_pair(const Cf* v, const Stage& s, int j, int p, const Cf* wave, Cf& a, Cf& b) {
  const Cf x = v[s.nx * p], y = v[s.n - s.nx * p];
  if (j == 0) {
    a = {add_rn(x.re, y.re), sub_rn(x.im, y.im)};
    b = {sub_rn(x.re, y.re), add_rn(x.im, y.im)};
    return;
  }
  const int dw = j * s.dw0, d = dw * p;
  const Cf w = wave[d], w_ = wave[dw * s.radix - d];
  const float r2 = cmul_re(x, w), i2 = cmul_im(x, w);
  const float r1 = cmul_re(y, w_), i1 = cmul_im(y, w_);
  a = {add_rn(r2, r1), sub_rn(i2, i1)};
  b = {sub_rn(r2, r1), add_rn(i2, i1)};
}

// a[q] is at a[q * a_step], b[q] at b[q * b_step] (the device keeps them in place of the pairs).
// v[0] + a[0].re + a[1].re + ..., and the same over b[].im, in p order as OpenCV accumulates them.
PRISM_HD void generic_sum_term(Cf& v0, Cf a, Cf b) {
  v0.re = add_rn(v0.re, a.re);
  v0.im = add_rn(v0.im, b.im);
}
PRISM_HD Cf generic_sum(Cf v0, int h, const Cf* a, const Cf* b, int a_step, int b_step) {
  PRISM_UNROLL8
  for (int q = 0; q < h; ++q) generic_sum_term(v0, a[q * a_step], b[q * b_step]);
  return v0;
}

// Term q of the generic butterfly's outputs s0 and s1 (below): twiddle w = wave[d], x = a[q],
// y = b[q]. kBoth = false updates s0 only (when s1 = v[n - p nx] is not wanted).
template <bool kBoth>
PRISM_HD void generic_term(Cf w, Cf x, Cf y, Cf& s0, Cf& s1) {
  const float r0 = mul_rn(w.re, x.re), i0 = mul_rn(w.im, x.im);
  const float r1 = mul_rn(w.re, y.im), i1 = mul_rn(w.im, y.re);
  if (kBoth) s1.re = add_rn(s1.re, add_rn(r0, i0));
  s0.re = add_rn(s0.re, sub_rn(r0, i0));
  if (kBoth) s1.im = add_rn(s1.im, sub_rn(r1, i1));
  s0.im = add_rn(s0.im, add_rn(r1, i1));
}

// Outputs s0 = v[p nx] and s1 = v[n - p nx] of the generic butterfly, from the original v[0].
PRISM_HD void generic_output(Cf v0, const Stage& s, int p, int tab_size, const Cf* wave, const Cf* a, const Cf* b,
                             int a_step, int b_step, Cf& s0, Cf& s1) {
  const int h = (s.radix - 1) / 2, dd = tab_size / s.radix * p;
  s0 = s1 = v0;
  int d = dd;
  PRISM_UNROLL8
  for (int q = 0; q < h; ++q) {
    generic_term<true>(wave[d], a[q * a_step], b[q * b_step], s0, s1);
    d += dd;
    if (d >= tab_size) d -= tab_size;
  }
}

// OpenCV's inverse with DFT_SCALE (the DST's second half, DFT_ROWS + DFT_SCALE + DFT_INVERSE): the
// input conjugated as it is permuted, the same stages, then re * scale and im * -scale, with scale
// the float of 1. / n0.
PRISM_HD float inverse_scale(int n0) { return static_cast<float>(1. / n0); }
PRISM_HD Cf inverse_input(Cf x) { return {x.re, -x.im}; }
PRISM_HD float inverse_output_im(float im, float scale) { return mul_rn(im, -scale); }

// Host, sequential: the transform of `data` (n0 complex values, already permuted) in place, every
// stage computing only the outputs below `prune_below` of every block (n0: everything).
// Outputs [0, prune_below) equal OpenCV's cv::dft (forward, no scaling; or inverse with DFT_SCALE)
// bit for bit.
void run_host(const Plan& plan, const std::vector<Cf>& wave, Cf* data, int prune_below, bool inverse = false);

}  // namespace prism::poisson::ocvdft
