// Affine-simulated views of an image (ASIFT's idea, Morel & Yu, SIAM J. Imaging Sciences 2009): the
// image as a camera would see it with its optical axis tilted away from the surface's normal, so
// that an enrolment can hold features of the product seen obliquely. A view of tilt t at longitude
// phi is the image rotated by phi, blurred along x by a Gaussian of sigma 0.8 sqrt(t^2 - 1) (ASIFT's
// anti-aliasing) and subsampled along x by t. Everything is host-side image work before the feature
// extraction, so a view's features are whatever the chosen SIFT (CPU or CUDA) extracts from the same
// pixels.
#pragma once
#include <vector>

#include <opencv2/core.hpp>

#include "texture/features.h"

namespace prism::texture {

struct AffineView {
  double tilt = 1;       // t >= 1: the view's x axis is shortened by 1 / t
  double longitude = 0;  // phi, degrees: the direction of the tilt, counter-clockwise from the x axis
};

// The views of ASIFT's first tilts, t = sqrt(2) and 2, at the longitudes 0, 90 (sqrt(2)) and 0, 45, 90,
// 135 (2): six views. (ASIFT itself samples phi every 72 / t degrees over 180, and more tilts.)
std::vector<AffineView> default_affine_views();

struct SimulatedView {
  cv::Mat image;        // CV_8U, the view
  cv::Mat valid;        // CV_8U, 255 where the view shows the image, 0 on the canvas around it
  cv::Matx23d to_view;  // image pixels -> view pixels (pixel centres at integers in both)
};

// The rotation by `v.longitude` about the origin, then the shift that puts the rotated image's
// outline at the canvas's top left, then the subsampling of x by the canvas's width over the
// view's (round(width / t)), as cv::resize maps pixel centres: x' = (x + 0.5) s - 0.5. `size`
// receives the canvas (before subsampling) and `view` the view's size.
cv::Matx23d affine_view_matrix(cv::Size image, const AffineView& v, cv::Size* canvas = nullptr,
                               cv::Size* view = nullptr);

// `grey` (CV_8U) seen through `v`. A tilt of 1 at longitude 0 returns the image itself.
SimulatedView simulate_view(const cv::Mat& grey, const AffineView& v);

// `f`, the features of `view`'s image, put back in the pixels of the image (of size `image`) it was
// simulated from, less the keypoints of the view's border (extract_view_features).
Features features_in_image(const SimulatedView& view, const Features& f, cv::Size image);

// The features of `grey` seen through `v`, with every keypoint put back in `grey`'s pixels (the
// inverse of to_view: positions only; size and angle stay the view's) and the keypoints of the view's
// border dropped (those within 8 px of the canvas around the image, where the outline itself makes
// corners). Width and height are `grey`'s. `params` as extract_features (its device included).
Features extract_view_features(const cv::Mat& grey, const AffineView& v, const FeatureParams& params);

}  // namespace prism::texture
