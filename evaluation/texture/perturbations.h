// The synthetic re-captures the evaluation queries with: one per gallery photo and perturbation,
// from a fixed seed. viewpoint (a random homography), illumination (gain, offset, gradient), gamma,
// 30% occlusion, blur, noise, JPEG, all of them mildly at once ("combined"), low light (gain,
// gamma, shot and read noise, half of them also occluded), dark captures as a phone makes them
// ("darkphone": geometric jitter, blur, darkness, sensor noise, JPEG and, in half, occlusion, all at
// once) and strong perspective ("perspective": the plane tilted 30-60 degrees before a pinhole
// camera). docs/TEXTUREID.md describes each family.
#pragma once
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace prism::eval {

// New families go at the end: a family's queries are seeded by its position (perturbed_queries), and
// the 1:1 impostor claims are drawn in this order, so appending keeps every earlier family's figures.
inline const char* const kPerturbations[] = {"viewpoint", "illumination", "gamma",      "occlusion30",
                                             "blur",      "noise",        "jpeg",       "combined",
                                             "lowlight",  "darkphone",    "perspective"};
constexpr int kPerturbationCount = int(std::size(kPerturbations));

// --perturbations NAME[,NAME...]: the kPerturbations positions named, in kPerturbations order (a name
// given twice counts once). Throws std::runtime_error naming `option` and the first name that is
// not a perturbation (an empty list or item too).
std::vector<int> parse_perturbations(const std::string& option, const std::string& list);

// What perturb drew for one capture, for the tests and the docs; only its family's fields are set
// (the rest stay 0 / false / empty).
struct CaptureLog {
  bool occluded = false;          // lowlight, darkphone: the 30% occluder is in the scene
  double gain = 0, gamma = 0;     // lowlight, darkphone: v = black + 255 gain (x / 255)^gamma
  double black = 0;               // darkphone: the black offset, grey levels
  double noise_sigma = 0;         // darkphone: the sensor noise, grey levels (lowlight: its read noise)
  double blur_sigma = 0;          // darkphone
  int jpeg_quality = 0;           // darkphone
  double tilt_degrees = 0;        // perspective: the out-of-plane rotation
  std::vector<cv::Point2f> quad;  // perspective: where the image's corners land (TL, TR, BR, BL)
};

// One capture of `g` (8-bit grey) changed by perturbation `kind` (a kPerturbations name), drawing
// from `rng` (and from cv::theRNG(), seeded from it, for noise); what it drew goes to `log` if given.
cv::Mat perturb(const cv::Mat& g, const std::string& kind, std::mt19937& rng, CaptureLog* log = nullptr);

// The queries of perturbation `p` (kPerturbations[p]): one per image of `gallery`, image i's seeded
// by (seed, p, i), so that a query does not depend on the others or on the threads.
std::vector<cv::Mat> perturbed_queries(const std::vector<cv::Mat>& gallery, unsigned seed, int p);

}  // namespace prism::eval
