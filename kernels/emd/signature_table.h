// The open-addressing table that caches EMD results by signature, shared by the CPU path and the
// CUDA path: same hash, same key canonicalisation, same probing.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/hostdevice.h"

namespace prism::emd {

// Keys are the signature with negative, NaN and -0 bins mapped to +0 (the solver treats them
// as 0, so such signatures have the same distance).
PRISM_HD float canonical_bin(float x) { return x > 0.f ? x : 0.f; }

PRISM_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

// 64-bit hash of a canonical signature (splitmix64's finaliser over a multiply-xor chain).
PRISM_HD uint64_t signature_hash(const float* s, int n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(n);
  for (int i = 0; i < n; ++i) {
    h ^= float_bits(canonical_bin(s[i]));
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  h ^= h >> 30;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 31;
  return h;
}

PRISM_HD bool same_signature(const float* key, const float* s, int n) {
  for (int i = 0; i < n; ++i)
    if (float_bits(key[i]) != float_bits(canonical_bin(s[i]))) return false;
  return true;
}

// Table sizing: `entries` signatures fit; the slot count is the next power of two of twice that
// (load factor <= 0.5 keeps probes short).
inline int64_t table_slots(int64_t entries) {
  int64_t s = 1024;
  while (s < 2 * entries) s <<= 1;
  return s;
}

// The entries a table grows to when the `need` signatures of the next frame (those cached plus the
// frame's pixels) do not fit in `current`: the table grows on demand, not to the cache capacity up
// front (that was about 400 MB for the default capacity, even for 64x64 frames). At least twice
// `current`, so a growing cache reallocates a logarithmic number of times; at least two frames of
// `pixels`, so a static scene's signatures plus one frame fit from the first frame on and its steady
// state never reallocates; at most `most`, the cache capacity plus one frame (all a frame can need).
inline int64_t grown_entries(int64_t current, int64_t need, int64_t pixels, int64_t most) {
  return std::min(most, std::max(need, std::max(2 * current, 2 * pixels)));
}

// CacheMemoryError's text (emd_map.h): a table of `entries` signatures, `bytes`, could not be had.
inline std::string cache_table_error(int64_t entries, double bytes) {
  char why[200];
  std::snprintf(why, sizeof why,
                "the EMD cache cannot grow to %lld signatures (%.3g MB): out of memory; lower the cache size",
                static_cast<long long>(entries), bytes / 1e6);
  return why;
}

}  // namespace prism::emd
