// The synthetic re-captures the evaluation queries with: one per gallery photo and perturbation,
// from a fixed seed. viewpoint (a random homography), illumination (gain, offset, gradient), gamma,
// 30% occlusion, blur, noise, JPEG, all of them mildly at once ("combined"), and low light (gain,
// gamma, shot and read noise, half of them also occluded).
#pragma once
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace prism::eval {

inline const char* const kPerturbations[] = {"viewpoint", "illumination", "gamma",    "occlusion30", "blur",
                                             "noise",     "jpeg",         "combined", "lowlight"};
constexpr int kPerturbationCount = int(std::size(kPerturbations));

// --perturbations NAME[,NAME...]: the kPerturbations positions named, in kPerturbations order (a name
// given twice counts once). Throws std::runtime_error naming `option` and the first name that is
// not a perturbation (an empty list or item too).
std::vector<int> parse_perturbations(const std::string& option, const std::string& list);

// One capture of `g` (8-bit grey) changed by perturbation `kind` (a kPerturbations name), drawing
// from `rng` (and from cv::theRNG(), seeded from it, for noise).
cv::Mat perturb(const cv::Mat& g, const std::string& kind, std::mt19937& rng);

// The queries of perturbation `p` (kPerturbations[p]): one per image of `gallery`, image i's seeded
// by (seed, p, i), so that a query does not depend on the others or on the threads.
std::vector<cv::Mat> perturbed_queries(const std::vector<cv::Mat>& gallery, unsigned seed, int p);

}  // namespace prism::eval
