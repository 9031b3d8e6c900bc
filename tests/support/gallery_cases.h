// Generated gallery entries for the texture index's tests and benchmarks (gtest-free):
// - random_gallery_entry: n sparse random SIFT-like vectors as 8-bit and FP16 RootSIFT at random
//   keypoint positions (the unit tests' entries);
// - SiftPool / pooled_gallery_entry: real SIFT descriptors of fresh random textures, 768 rows drawn
//   at random per entry, so that a million-image benchmark gallery has real SIFT's sparsity and
//   value distribution without a million extractions.
#pragma once
#include <random>
#include <string>
#include <vector>

#include "match/match.h"
#include "texture/features.h"
#include "texture/gallery.h"
#include "texture_cases.h"

namespace prism::test {

inline texture::GalleryEntry random_gallery_entry(const std::string& id, std::mt19937& rng, int n,
                                                  const std::string& collection = "") {
  texture::GalleryEntry e;
  e.id = id;
  e.collection = collection;
  e.features.width = 640;
  e.features.height = 480;
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> sift(size_t(n) * match::kDim);
  for (float& v : sift) v = u(rng) < 0.4f ? u(rng) : 0.f;
  e.features.descriptors.resize(sift.size());
  match::rootsift_u8(sift.data(), n, e.features.descriptors.data());
  e.features.descriptors_fp16.resize(sift.size());
  match::rootsift(sift.data(), n, e.features.descriptors_fp16.data());
  for (int i = 0; i < n; ++i)
    e.features.keypoints.push_back({u(rng) * 640, u(rng) * 480, 3.f, 45.f, 1.f - i * 1e-3f, 0});
  return e;
}

// Keypoint sizes in no relation to the stored order, so that an index's digest rows (the largest
// keypoints': IndexOptions::digest_order) are not its first ones. Not in random_gallery_entry: the fuzz
// corpora hold entries that it wrote.
inline void vary_keypoint_sizes(texture::Features& f) {
  for (size_t i = 0; i < f.keypoints.size(); ++i) f.keypoints[i].size = 2.f + float(i * 37 % 29);
}

// The index tests' entries: random_gallery_entry with varied keypoint sizes.
inline texture::GalleryEntry random_index_entry(const std::string& id, std::mt19937& rng, int n,
                                                const std::string& collection = "") {
  texture::GalleryEntry e = random_gallery_entry(id, rng, n, collection);
  vary_keypoint_sizes(e.features);
  return e;
}

struct SiftPool {
  std::vector<texture::Keypoint> keypoints;
  std::vector<uint8_t> descriptors;  // 8-bit RootSIFT, kDim per keypoint
  size_t size() const { return keypoints.size(); }
};

// The features of `textures` fresh 640x480 random textures (SIFT on all cores).
inline SiftPool sift_pool(int textures, std::mt19937& rng) {
  SiftPool pool;
  for (int i = 0; i < textures; ++i) {
    const texture::Features f = texture::extract_features(random_texture(rng, 640, 480));
    pool.keypoints.insert(pool.keypoints.end(), f.keypoints.begin(), f.keypoints.end());
    pool.descriptors.insert(pool.descriptors.end(), f.descriptors.begin(), f.descriptors.end());
  }
  return pool;
}

inline texture::GalleryEntry pooled_gallery_entry(const SiftPool& pool, std::mt19937& rng, const std::string& id) {
  texture::GalleryEntry e;
  e.id = id;
  e.features.width = 640;
  e.features.height = 480;
  e.features.keypoints.resize(match::kSlot);
  e.features.descriptors.resize(match::kSlotBytes);
  for (int r = 0; r < match::kSlot; ++r) {
    const size_t k = rng() % pool.size();
    e.features.keypoints[r] = pool.keypoints[k];
    std::copy_n(&pool.descriptors[k * match::kDim], match::kDim, &e.features.descriptors[size_t(r) * match::kDim]);
  }
  return e;
}

}  // namespace prism::test
