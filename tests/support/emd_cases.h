// Random EMD problems for the CPU and GPU tests: dense, sparse, integer counts (degenerate, like
// window histograms of pixels) and unequal masses, with random or |i-j| ground distances.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace prism::test {

enum class SignatureKind { Dense, Sparse, Counts, Unequal };

inline const char* kind_name(SignatureKind k) {
  switch (k) {
    case SignatureKind::Dense: return "dense";
    case SignatureKind::Sparse: return "sparse";
    case SignatureKind::Counts: return "counts";
    default: return "unequal";
  }
}

// One signature of n bins. Counts: 121 pixels (an 11x11 window) spread over few bins; Unequal:
// dense, total mass scaled by a random factor in [0.3, 3].
inline std::vector<float> random_signature(std::mt19937& rng, int n, SignatureKind kind) {
  std::uniform_real_distribution<float> u(0.f, 1.f);
  std::vector<float> s(n, 0.f);
  switch (kind) {
    case SignatureKind::Dense:
      for (float& x : s) x = u(rng);
      break;
    case SignatureKind::Sparse: {
      const int k = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < k; ++i) s[rng() % n] += u(rng) + 0.01f;
      break;
    }
    case SignatureKind::Counts: {
      const int centre = static_cast<int>(rng() % n), spread = 1 + static_cast<int>(rng() % 3);
      std::uniform_int_distribution<int> d(-spread, spread);
      for (int p = 0; p < 121; ++p) s[std::min(n - 1, std::max(0, centre + d(rng)))] += 1.f;
      break;
    }
    case SignatureKind::Unequal: {
      const float scale = 0.3f + 2.7f * u(rng);
      for (float& x : s) x = u(rng) * scale;
      break;
    }
  }
  return s;
}

// Random ground distance: symmetric or not, with zeros and ties (integers 0..4) half the time.
inline std::vector<float> random_cost(std::mt19937& rng, int n) {
  std::uniform_real_distribution<float> u(0.f, 10.f);
  const bool ties = rng() % 2 == 0;
  std::vector<float> c(static_cast<size_t>(n) * n);
  for (float& x : c) x = ties ? static_cast<float>(rng() % 5) : u(rng);
  return c;
}

// Problems per size: PRISM_EMD_PROBLEMS (the GPU suite sets 100000), else `fallback`.
inline int problems_per_size(int fallback) {
  const char* e = std::getenv("PRISM_EMD_PROBLEMS");
  return e ? std::atoi(e) : fallback;
}

// A grey frame for emd::Tracker: a fixed noisy gradient with a checkerboard patch (24x24, 3-pixel
// squares) at (24 + 3f, 20 + 2f) in frame f; rows `stride` bytes apart (padding 0).
inline std::vector<uint8_t> tracker_scene(int width, int height, int64_t stride, int f) {
  std::vector<uint8_t> img(static_cast<size_t>(stride) * height, 0);
  std::mt19937 rng(7);  // the same noise every frame: a fixed camera
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) img[y * stride + x] = static_cast<uint8_t>(90 + (x + y) / 8 % 40 + rng() % 3);
  const int px = 24 + 3 * f, py = 20 + 2 * f;
  for (int y = py; y < py + 24 && y < height; ++y)
    for (int x = px; x < px + 24 && x < width; ++x) img[y * stride + x] = ((x - px) / 3 + (y - py) / 3) % 2 ? 220 : 30;
  return img;
}

}  // namespace prism::test
