// Host side of the OpenCV float DFT replay (opencv_dft.h): factorisation, stages, permutation and
// twiddle table as OpenCV 4.6's DFTFactorize and DFTInit produce them, and a sequential run.
#include "poisson/opencv_dft.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace prism::poisson::ocvdft {

std::vector<int> factorize(int n0) {
  if (n0 <= 5) return {n0};
  std::vector<int> f;
  int n = n0;
  const int pow2 = n & -n;  // the power-of-two factor, as one factor
  if (pow2 > 1) {
    f.push_back(pow2);
    n /= pow2;
  }
  for (int d = 3; n > 1;) {
    if (n % d == 0) {
      f.push_back(d);
      n /= d;
    } else {
      d += 2;
      if (d * d > n) break;
    }
  }
  if (n > 1) f.push_back(n);
  // Odd factors in reverse: the largest (last found) first.
  std::reverse(f.begin() + (f[0] % 2 == 0 ? 1 : 0), f.end());
  return f;
}

Plan make_plan(int n0, std::vector<int>& perm, std::vector<Cf>& wave) {
  if (n0 < 2) throw std::invalid_argument("ocvdft::make_plan: length " + std::to_string(n0));
  Plan plan;
  plan.n0 = n0;
  const std::vector<int> factors = factorize(n0);
  auto push = [&](int radix, int nx, int dw0) {
    if (plan.num_stages == kMaxStages) throw std::invalid_argument("ocvdft::make_plan: too many stages");
    plan.stages[plan.num_stages++] = {radix, nx, nx * radix, dw0};
  };
  int n = 1, dw0 = n0;
  size_t first_odd = 0;
  if (factors[0] % 2 == 0) {
    for (; n * 4 <= factors[0]; n *= 4) push(4, n, dw0 /= 4);
    for (; n < factors[0]; n *= 2) push(2, n, dw0 /= 2);
    first_odd = 1;
  }
  for (size_t i = first_odd; i < factors.size(); ++i) {
    push(factors[i], n, dw0 /= factors[i]);
    n *= factors[i];
  }
  perm.assign(n0, 0);
  // Digits from the last stage (most significant in the work position, least in the input index).
  for (int i = 0; i < n0; ++i) {
    int src = 0, scale = 1, rest = i;
    for (int s = plan.num_stages - 1; s >= 0; --s) {
      const Stage& st = plan.stages[s];
      int b = rest / st.nx;
      rest %= st.nx;
      if (st.radix == 4) b = (b == 1) ? 2 : (b == 2 ? 1 : b);
      src += b * scale;
      scale *= st.radix;
    }
    perm[i] = src;
  }

  // Twiddles: w = exp(-2 pi i / n0) by a double recurrence, stored rounded to float, the second half
  // conjugate (DFTInit). Power-of-two lengths start from cos/sin of 2 pi / n0 (OpenCV's DFTTab).
  wave.assign(n0, Cf{0.f, 0.f});
  double wre, wim;
  if ((n0 & (n0 - 1)) == 0) {
    const double t = 2.0 * 3.14159265358979323846 / n0;
    wre = n0 == 1 ? 1.0 : (n0 == 2 ? -1.0 : (n0 == 4 ? 0.0 : std::cos(t)));
    wim = n0 <= 2 ? -0.0 : (n0 == 4 ? -1.0 : -std::sin(t));
  } else {
    const double t = -3.14159265358979323846 * 2 / n0;
    wim = std::sin(t);
    wre = std::sqrt(1. - wim * wim);
  }
  const double w1re = wre, w1im = wim;
  const int half = (n0 + 1) / 2;
  wave[0] = {1.f, 0.f};
  if (n0 % 2 == 0) wave[half] = {-1.f, 0.f};
  for (int i = 1; i < half; ++i) {
    wave[i] = {static_cast<float>(wre), static_cast<float>(wim)};
    wave[n0 - i] = {static_cast<float>(wre), static_cast<float>(-wim)};
    const double t = wre * w1re - wim * w1im;
    wim = wre * w1im + wim * w1re;
    wre = t;
  }
  return plan;
}

void run_host(const Plan& plan, const std::vector<Cf>& wave, Cf* data, int prune_below, bool inverse) {
  const int n0 = plan.n0;
  if (inverse)
    for (int i = 0; i < n0; ++i) data[i] = inverse_input(data[i]);
  std::vector<Cf> a, b;
  for (int s = 0; s < plan.num_stages; ++s) {
    const Stage& st = plan.stages[s];
    const int cols = std::min(st.nx, prune_below);  // the columns that feed outputs below the bound
    for (int i = 0; i < n0; i += st.n) {
      Cf* blk = data + i;
      switch (st.radix) {
        case 2:
          for (int j = 0; j < cols; ++j) radix2(blk + j, st.nx, j, st.dw0, wave.data());
          break;
        case 3:
          for (int j = 0; j < cols; ++j) radix3(blk + j, st.nx, j, st.dw0, wave.data());
          break;
        case 4:
          for (int j = 0; j < cols; ++j) radix4(blk + j, st.nx, j, st.dw0, wave.data());
          break;
        case 5:
          for (int j = 0; j < cols; ++j) radix5(blk + j, st.nx, j, st.dw0, wave.data());
          break;
        default: {
          const int h = (st.radix - 1) / 2;
          a.resize(h);
          b.resize(h);
          for (int j = 0; j < cols; ++j) {
            Cf* v = blk + j;
            for (int p = 1; p <= h; ++p) generic_pair(v, st, j, p, wave.data(), a[p - 1], b[p - 1]);
            const Cf v0 = v[0];
            v[0] = generic_sum(v0, h, a.data(), b.data(), 1, 1);
            for (int p = 1; p <= h; ++p) {
              if (j + st.nx * p >= prune_below && j + st.n - st.nx * p >= prune_below) continue;
              Cf s0, s1;
              generic_output(v0, st, p, n0, wave.data(), a.data(), b.data(), 1, 1, s0, s1);
              v[st.nx * p] = s0;
              v[st.n - st.nx * p] = s1;
            }
          }
        }
      }
    }
  }
  if (inverse) {
    const float scale = inverse_scale(n0);
    for (int i = 0; i < n0; ++i) data[i] = {mul_rn(data[i].re, scale), inverse_output_im(data[i].im, scale)};
  }
}

}  // namespace prism::poisson::ocvdft
