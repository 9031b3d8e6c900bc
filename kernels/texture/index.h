// Texture identification over a gallery held in memory: 1:M search and 1:1 verification.
//
// Search: the fused matcher (match/) scores the query against every gallery image (ratio-test
// matches per image); the best `shortlist` images are re-matched for their correspondences and
// verified geometrically (verify.h); the candidate whose inliers are the most significant wins, and
// it is identified when that significance reaches `min_significance` (and it has `min_inliers`).
// Verification (1:1) is the same on the claimed
// image alone. On the GPU the descriptors live in device memory (uploaded once by build) and the
// matching runs on the index's own stream; the CPU path computes the same function.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "texture/gallery.h"
#include "texture/verify.h"

namespace prism::texture {

using Device = gpu::Device;

struct SearchParams {
  float ratio = 0.8f;  // Lowe's ratio
  int shortlist = 8;   // images verified geometrically per search
  // Decision threshold on chance_significance (verify.h): the smallest 0.1 step at which the 1:1
  // false-accept rate is at most 0.1%, calibrated by `prism texture eval` (docs/TEXTUREID.md).
  double min_significance = 3.6;
  int min_inliers = 5;  // a floor besides: RANSAC's 4-point sample is consistent by construction
  VerifyParams verify;
};

struct Candidate {
  int index = -1;  // into the index's ids()
  std::string id;
  int score = 0;  // ratio-test matches counted by the matcher
  Verification geometry;
  // The decision score: geometry.significance less log10 of the number of candidates verified
  // (Bonferroni: a search that tries 8 wrong products gets 8 chances at a chance fit); equal to it
  // for verify (1:1).
  double significance = 0;
};

// The decision for one verified candidate.
bool accepted(const Candidate& c, const SearchParams& params);

struct SearchResult {
  bool identified = false;            // best candidate passes min_significance and min_inliers
  Candidate best;                     // index -1 when the gallery is empty
  std::vector<Candidate> candidates;  // the verified shortlist, most significant first
  double match_ms = 0, verify_ms = 0;
};

class TextureIndex {
 public:
  // kCuda throws when no usable (sm_80+) GPU is present; kAuto then uses the CPU.
  explicit TextureIndex(Device device = Device::kAuto);
  ~TextureIndex();
  TextureIndex(const TextureIndex&) = delete;
  TextureIndex& operator=(const TextureIndex&) = delete;

  bool on_gpu() const;
  std::string device_description() const;  // "cuda:0 (NVIDIA H100 ...)" or "cpu (...why...)"

  // Replaces the indexed gallery with `entries` (their features are copied).
  void build(const std::vector<GalleryEntry>& entries);
  size_t size() const { return ids_.size(); }
  const std::vector<std::string>& ids() const { return ids_; }
  int find(const std::string& id) const;  // -1 when absent

  // Ratio-test scores of `query` against every indexed image.
  std::vector<int> scores(const Features& query, const SearchParams& params);
  SearchResult search(const Features& query, const SearchParams& params);
  // 1:1 against `id` (GalleryError when it is not indexed).
  SearchResult verify(const Features& query, const std::string& id, const SearchParams& params);

 private:
  struct Impl;
  Candidate verify_candidates(const Features& query, std::vector<Candidate>& candidates, const SearchParams& params,
                              SearchResult& result);
  std::vector<std::string> ids_;
  std::vector<Features> geometry_;  // keypoints per image (descriptors live in impl_)
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::texture
