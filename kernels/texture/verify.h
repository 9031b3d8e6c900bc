// Geometric verification of a candidate: the query's ratio-test matches into one gallery image,
// made one-to-one, then a RANSAC homography (OpenCV's cv::findHomography, which seeds its RNG
// fixedly, so the result is repeatable). The decision score is the significance of the inliers:
// how unlikely that many would be for a wrong product (chance_significance).
#pragma once
#include <cstdint>
#include <vector>

#include <opencv2/core.hpp>

#include "texture/features.h"

namespace prism::texture {

// A match carries its exact squared distance between the 8-bit descriptors (0 = identical), the
// integer the matcher ranked by: after rounding to 8 bits the vectors are no longer unit, so a dot
// product alone would not order matches the way the matcher did.
struct Correspondence {
  int query = 0, gallery = 0;  // descriptor indices
  int32_t distance = 0;        // squared distance of the two 8-bit descriptors
};

// The ratio-test matches of one gallery image from the 8-bit matcher's per-row outputs
// (match::MatchU8Outputs best/second/best_index for rows [0, rows)); the same test as the matcher's
// score (match::ratio_pass). Where several query descriptors pick one gallery descriptor only the
// closest is kept (on a tie, the lower query index).
std::vector<Correspondence> ratio_matches(const int32_t* best, const int32_t* second, const int* best_index, int rows,
                                          float ratio);
// The same from the FP16 matcher's outputs (match::MatchOutputs: best and second dot products),
// with its test (match::ratio_pass_dot); for comparisons of 8-bit against FP16 matching
// (IndexOptions::precision). Each distance is the squared distance of the unit vectors in the 8-bit
// descriptors' units (512^2 (2 - 2 dot), rounded), so that both variants' matches read alike.
std::vector<Correspondence> ratio_matches(const float* best, const float* second, const int* best_index, int rows,
                                          float ratio);

// One row's ratio test as ratio_matches applies it to the matchers' per-row outputs: the 8-bit
// matcher's squared distances (match::ratio_pass) and the FP16 matcher's dot products
// (match::ratio_pass_dot). An image with fewer than 2 descriptors has second == INT32_MAX (8-bit)
// or -inf (FP16; match_cpu counts no match there either): no row passes.
bool ratio_row_passes(int32_t best, int32_t second, float ratio);
bool ratio_row_passes(float best, float second, float ratio);

struct VerifyParams {
  double reprojection_px = 6.0;  // RANSAC inlier threshold, in gallery-image pixels
  int max_iterations = 2000;
  double confidence = 0.999;
};

struct Verification {
  int matches = 0;          // ratio-test matches (one-to-one)
  int inliers = 0;          // consistent with the homography; 0 when none was found or it is degenerate
  double chance = 0;        // chance_inlier of the homography (0 when none was found)
  double significance = 0;  // chance_significance(inliers, matches, chance)
  // Query-image pixels -> gallery-image pixels (findHomography from the query's keypoints to the
  // gallery's), both in the images' own coordinates (keypoints are reported unshrunk, Keypoint), pixel
  // centres at integers. gallery_in_query gives the other direction, which results report.
  cv::Matx33d homography = cv::Matx33d::eye();
  cv::Rect2f query_box;  // bounding box of the inliers in the query image
};

// The chance that a wrong product's matches are this consistent: RANSAC's 4-point sample is always
// consistent, and each of the other matches - 4 falls within the reprojection threshold with
// probability `chance`; the significance is -log10 P(Binomial(matches - 4, chance) >= inliers - 4),
// an a-contrario test in the spirit of Moisan & Stival's ORSA (IJCV 2004). Unlike the bare inlier
// count it tells 7 of 7 matches (a blurred re-capture) from 7 of 14 (chance). 0 below 5 inliers, and
// for a chance of 1 or more. The threshold on it is calibrated by `prism-texture-eval`
// (docs/TEXTUREID.md).
constexpr double kChanceInlier = 0.01;
double chance_significance(int inliers, int matches, double chance = kChanceInlier);

// The chance of one wrong match falling within the tolerance, for a homography `h` (query ->
// gallery pixels) whose local area scale at the inliers' centroid is `jacobian` (det(h) / w^3 there),
// between a query image of `query_area` pixels and a gallery image of `gallery_area` (issue 45).
// The tolerance is a disc of reprojection_px in the gallery image: kChanceInlier is its chance as a
// share of the gallery image (calibrated, docs/TEXTUREID.md). Seen from the query, the same disc is the
// area of the disc over `jacobian`: where the homography shrinks the query, a wrong match is
// consistent more easily from the query's side, and the chance is the larger of the two shares:
// kChanceInlier max(1, (gallery_area / query_area) / jacobian). The chance fits of wrong products are
// mostly such homographies, squeezing a spread of the query onto a patch of the gallery (a local
// scale of 0.003-0.03 against 0.5-16 for re-captures, docs/TEXTUREID.md). Image sizes of 0 count as
// equal; a jacobian that is not positive gives 1 (nothing is significant).
double chance_inlier(double jacobian, double query_area, double gallery_area);

// Where the gallery image lies in the query image (a frame): what textureid reports, so that a user
// can draw the texture's outline or warp the gallery image onto the frame (cv::warpPerspective with
// `homography`). `homography` is Verification::homography inverted (gallery-image pixels -> query
// pixels), scaled so that its [2][2] is 1; `quad` is the gallery image's outline, its corners
// (-0.5, -0.5), (w - 0.5, -0.5), (w - 0.5, h - 0.5), (-0.5, h - 0.5) (top-left, top-right,
// bottom-right, bottom-left: clockwise, the outer edges of its corner pixels) mapped by it. Pixel
// centres are at integers in both images, as for keypoints. `valid` is false (and the rest identity
// and zeros) when the homography is singular or a corner maps to infinity or beyond it (the
// horizon crosses the gallery image: no view of a flat surface does that).
struct GalleryInQuery {
  bool valid = false;
  cv::Matx33d homography = cv::Matx33d::eye();
  cv::Point2d quad[4];
};
GalleryInQuery gallery_in_query(const cv::Matx33d& query_to_gallery, cv::Size gallery);

// `gallery`: the gallery image's keypoint positions (all the index keeps of its geometry: 8 bytes
// per keypoint instead of the 24 of a Keypoint); `gallery_size` its image's size (Features::width and
// height; empty: taken as the query's), for chance_inlier.
Verification verify_geometry(const Features& query, const std::vector<cv::Point2f>& gallery,
                             const std::vector<Correspondence>& matches, const VerifyParams& params = {},
                             cv::Size gallery_size = {});

}  // namespace prism::texture
