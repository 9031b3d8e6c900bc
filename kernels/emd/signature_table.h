// The open-addressing table that caches EMD results by signature, shared by the CPU path and the
// CUDA path: same hash, same key canonicalisation, same probing.
#pragma once
#include <cstdint>
#include <cstring>

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

// Table sizing: `entries` signatures fit (the cache capacity, at least one frame's pixels); the
// slot count is the next power of two of twice that (load factor <= 0.5 keeps probes short).
inline int64_t table_slots(int64_t entries) {
  int64_t s = 1024;
  while (s < 2 * entries) s <<= 1;
  return s;
}

}  // namespace prism::emd
