#include "texture/affine_views.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace prism::texture {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kBorderPx = 8;  // keypoints this close to the canvas around the image are dropped

}  // namespace

std::vector<AffineView> default_affine_views() {
  const double r2 = std::sqrt(2.0);
  return {{r2, 0}, {r2, 90}, {2, 0}, {2, 45}, {2, 90}, {2, 135}};
}

cv::Matx23d affine_view_matrix(cv::Size image, const AffineView& v, cv::Size* canvas, cv::Size* view) {
  if (!(v.tilt >= 1) || !std::isfinite(v.tilt) || !std::isfinite(v.longitude))
    throw std::invalid_argument("affine view: the tilt must be finite and at least 1");
  const double a = v.longitude * kPi / 180.0, c = std::cos(a), s = std::sin(a);
  // The rotation (counter-clockwise on the screen, y down: x' = c x + s y, y' = -s x + c y) of the
  // outline's corners, the outer edges of the corner pixels.
  const double w = image.width, h = image.height;
  const double xs[4] = {-0.5, w - 0.5, w - 0.5, -0.5}, ys[4] = {-0.5, -0.5, h - 0.5, h - 0.5};
  double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
  for (int i = 0; i < 4; ++i) {
    const double rx = c * xs[i] + s * ys[i], ry = -s * xs[i] + c * ys[i];
    x0 = std::min(x0, rx), x1 = std::max(x1, rx), y0 = std::min(y0, ry), y1 = std::max(y1, ry);
  }
  // The canvas: whole pixels around the rotated outline (a rotation of 0 keeps the image's own size).
  const int cw = std::max(1, int(std::lround(x1 - x0))), ch = std::max(1, int(std::lround(y1 - y0)));
  const int vw = std::max(1, int(std::lround(cw / v.tilt)));
  if (canvas) *canvas = {cw, ch};
  if (view) *view = {vw, ch};
  const double sx = double(vw) / cw;
  // Rotated, then shifted so that the outline's top-left edge is at -0.5, -0.5; then x' = (x + 0.5) sx - 0.5.
  const double tx = -0.5 - x0, ty = -0.5 - y0;
  return {sx * c, sx * s, (tx + 0.5) * sx - 0.5,  //
          -s,     c,      ty};
}

SimulatedView simulate_view(const cv::Mat& grey, const AffineView& v) {
  if (grey.empty() || grey.type() != CV_8UC1) throw std::invalid_argument("affine view: a CV_8U grey image is needed");
  SimulatedView out;
  cv::Size canvas, view;
  out.to_view = affine_view_matrix(grey.size(), v, &canvas, &view);
  // The rotation and shift alone (to_view before the subsampling): to_view's x shift is
  // (tx + 0.5) sx - 0.5, so tx = (shift + 0.5) / sx - 0.5.
  const double sx = double(view.width) / canvas.width;
  cv::Matx23d r(out.to_view(0, 0) / sx, out.to_view(0, 1) / sx, (out.to_view(0, 2) + 0.5) / sx - 0.5,  //
                out.to_view(1, 0), out.to_view(1, 1), out.to_view(1, 2));
  cv::Mat rotated, mask;
  if (v.longitude == 0) {
    rotated = grey;
    mask = cv::Mat(grey.size(), CV_8U, cv::Scalar(255));
  } else {
    cv::warpAffine(grey, rotated, cv::Mat(r), canvas, cv::INTER_LINEAR, cv::BORDER_CONSTANT, cv::Scalar(0));
    cv::warpAffine(cv::Mat(grey.size(), CV_8U, cv::Scalar(255)), mask, cv::Mat(r), canvas, cv::INTER_NEAREST,
                   cv::BORDER_CONSTANT, cv::Scalar(0));
  }
  if (v.tilt == 1 && view == canvas) {
    out.image = rotated.clone();
    out.valid = mask;
    return out;
  }
  // ASIFT's anti-aliasing along x, then the subsampling.
  const double sigma = 0.8 * std::sqrt(v.tilt * v.tilt - 1);
  cv::Mat blurred = rotated;  // (a new image below: rotated may be `grey` itself)
  if (sigma > 0) {
    blurred = cv::Mat();
    const int k = 2 * int(std::ceil(3 * sigma)) + 1;
    cv::sepFilter2D(rotated, blurred, -1, cv::getGaussianKernel(k, sigma, CV_64F), cv::Mat::ones(1, 1, CV_64F),
                    cv::Point(-1, -1), 0, cv::BORDER_REPLICATE);
  }
  cv::resize(blurred, out.image, view, 0, 0, cv::INTER_LINEAR);
  cv::resize(mask, out.valid, view, 0, 0, cv::INTER_NEAREST);
  return out;
}

Features extract_view_features(const cv::Mat& grey, const AffineView& v, const FeatureParams& params) {
  const SimulatedView sv = simulate_view(grey, v);
  return features_in_image(sv, extract_features(sv.image, params), grey.size());
}

Features features_in_image(const SimulatedView& sv, const Features& f, cv::Size image) {
  cv::Mat inside;
  cv::erode(sv.valid, inside, cv::getStructuringElement(cv::MORPH_RECT, {2 * kBorderPx + 1, 2 * kBorderPx + 1}),
            cv::Point(-1, -1), 1, cv::BORDER_CONSTANT, cv::Scalar(0));
  cv::Matx23d back;
  cv::invertAffineTransform(sv.to_view, back);
  Features out;
  out.width = image.width;
  out.height = image.height;
  const size_t dim = f.keypoints.empty() ? 0 : f.descriptors.size() / f.keypoints.size();
  for (size_t i = 0; i < f.keypoints.size(); ++i) {
    Keypoint k = f.keypoints[i];
    const int xi = int(std::lround(k.x)), yi = int(std::lround(k.y));
    if (xi < 0 || yi < 0 || xi >= inside.cols || yi >= inside.rows || !inside.at<uchar>(yi, xi)) continue;
    const double x = back(0, 0) * k.x + back(0, 1) * k.y + back(0, 2);
    const double y = back(1, 0) * k.x + back(1, 1) * k.y + back(1, 2);
    k.x = float(x);
    k.y = float(y);
    out.keypoints.push_back(k);
    out.descriptors.insert(out.descriptors.end(), f.descriptors.begin() + i * dim,
                           f.descriptors.begin() + (i + 1) * dim);
  }
  return out;
}

}  // namespace prism::texture
