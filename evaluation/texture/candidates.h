// --candidates: the contrast normalisations compared on the synthetic perturbations and the Oxford
// re-captures before the evaluation proper (the table docs/TEXTUREID.md's choice rests on): ours
// (texture::Normalisation: none and CLAHE settings) and baselines only the evaluation applies
// (OpenCV's cv::equalizeHist, a local mean/std normalisation), each on an 8-bit index of the gallery.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "datasets.h"
#include "texture/index.h"

namespace prism::eval {

struct CandidateResult {
  std::string name;
  // Per perturbation (of `perturbations`), then the Oxford re-captures (with `oxford`): queries ranked first, and
  // identified at the default threshold, of n; the queries' keypoints.
  struct Set {
    std::string name;  // the perturbation's, or "oxford-affine"
    int top1 = 0, identified = 0, n = 0;
    int keypoints_median = 0, keypoints_min = 0;
  };
  std::vector<Set> sets;
  int top1 = 0, identified = 0, n = 0;  // over all of them
};

// `images`: the gallery's grey images (gallery[i].grey); queries are perturbed from them with `seed`.
// `params`: the search (its min_significance decides "identified"). `perturbations`: the kPerturbations
// positions compared (--perturbations); `oxford`: the Oxford re-captures too (no --skip oxford).
std::vector<CandidateResult> compare_normalisations(const std::vector<Item>& gallery,
                                                    const std::vector<cv::Mat>& images,
                                                    const std::filesystem::path& data, unsigned seed,
                                                    texture::Device device, const texture::SearchParams& params,
                                                    const std::vector<int>& perturbations, bool oxford);

}  // namespace prism::eval
