// The evaluation's data (--data, ../shared/data; see its README.md): which photos make the gallery,
// the open-set impostors and the real re-captures, and the real pairs of one surface.
//
// Gallery: the first N sun8 scene photos (sorted by path), skimage's brick/grass/gravel and img1 of
// the 8 Oxford affine sequences, each one product. Open-set impostors: the sun8 photos after them.
// Real re-captures: Oxford img2..6 of each sequence, with their ground-truth homographies. Pairs of
// one surface: Oxford img1 against img2..6; KTH-TIPS, one sample's first image at scale 5 against its
// other poses and lights.
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <opencv2/core.hpp>

namespace prism::eval {

struct Item {
  std::string id, path;
  cv::Mat grey;
};

// The Oxford affine sequences, in the order the report lists them.
extern const std::vector<std::string> kOxfordSequences;

struct Photos {
  std::vector<Item> gallery;    // `textures` sun8 photos, 3 skimage textures, 8 Oxford img1
  std::vector<Item> outsiders;  // up to `impostors` sun8 photos not enrolled
};
// Lists and loads them (in parallel; grey). Throws std::runtime_error naming what is missing, or when
// sun8 has fewer than textures + 1 photos.
Photos load_photos(const std::filesystem::path& data, int textures, int impostors);

// The real re-captures: Oxford img2..6 of every sequence, their product ("oxford-SEQUENCE") and name
// ("SEQUENCE/imgK"); with `homographies`, also the ground truth img1 -> imgK (H1toKp.xml).
struct Recaptures {
  std::vector<cv::Mat> images;
  std::vector<std::string> product, name;
  std::vector<cv::Matx33d> homography;  // with `homographies` only
};
Recaptures oxford_recaptures(const std::filesystem::path& data, bool homographies);

// Real pairs of one surface, for the ratio-test decisions against FP32.
struct PairSet {
  std::string name;
  std::vector<std::pair<std::string, std::string>> pairs;  // (gallery, query) paths
};
// One set per Oxford sequence, then one of KTH-TIPS (std::runtime_error when it is missing).
std::vector<PairSet> decision_pairs(const std::filesystem::path& data);

}  // namespace prism::eval
