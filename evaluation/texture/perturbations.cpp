#include "perturbations.h"

#include <opencv2/calib3d.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "texture_util.h"

namespace prism::eval {

namespace {

// `g` warped so that its corners (0, 0), (w, 0), (w, h), (0, h) land on `dst`, in a frame of g's size
// (`supersample`: rendered at that many times the size, then averaged down with INTER_AREA, as a
// sensor integrates over its pixels), the uncovered background one random grey.
cv::Mat warp_corners(const cv::Mat& g, const std::vector<cv::Point2f>& dst, std::mt19937& rng, int supersample = 1) {
  std::uniform_real_distribution<double> u(-1, 1);
  const float w = float(g.cols), h = float(g.rows);
  const std::vector<cv::Point2f> src{{0, 0}, {w, 0}, {w, h}, {0, h}};
  cv::Matx33d m = cv::Matx33d(cv::getPerspectiveTransform(src, dst));
  const double s = supersample;
  // Supersampled pixel centres: pixel x covers s x .. s x + s - 1, centred on s x + (s - 1) / 2.
  if (supersample > 1) m = cv::Matx33d(s, 0, (s - 1) / 2, 0, s, (s - 1) / 2, 0, 0, 1) * m;
  cv::Mat out;
  cv::warpPerspective(g, out, m, cv::Size(g.cols * supersample, g.rows * supersample), cv::INTER_LINEAR,
                      cv::BORDER_CONSTANT, cv::Scalar(u(rng) * 60 + 64));
  if (supersample > 1) cv::resize(out, out, g.size(), 0, 0, cv::INTER_AREA);
  return out;
}

// A random homography about the centre: a rotation up to `degrees`, a scale 1 +- `scale`, then each
// corner moved by up to `jitter` of the side independently (perspective).
cv::Mat warp_viewpoint(const cv::Mat& g, std::mt19937& rng, double degrees, double scale_range, double jitter) {
  std::uniform_real_distribution<double> u(-1, 1);
  const double w = g.cols, h = g.rows;
  const double angle = u(rng) * degrees * CV_PI / 180, scale = 1 + scale_range * u(rng);
  std::vector<cv::Point2f> dst;
  for (const cv::Point2d p : {cv::Point2d(0, 0), cv::Point2d(w, 0), cv::Point2d(w, h), cv::Point2d(0, h)}) {
    const double x = p.x - w / 2, y = p.y - h / 2;
    double xr = scale * (std::cos(angle) * x - std::sin(angle) * y),
           yr = scale * (std::sin(angle) * x + std::cos(angle) * y);
    xr += u(rng) * jitter * w;  // perspective: each corner moves independently
    yr += u(rng) * jitter * h;
    dst.emplace_back(float(xr + w / 2), float(yr + h / 2));
  }
  return warp_corners(g, dst, rng);
}

// The viewpoint family's change at `strength` (1: rotation up to 25 degrees, scale 0.75-1.25,
// corners moved up to 12%).
cv::Mat warp_viewpoint(const cv::Mat& g, std::mt19937& rng, double strength) {
  return warp_viewpoint(g, rng, 25 * strength, 0.25 * strength, 0.12 * strength);
}

// Strong perspective: the image is a plane tilted by 30-60 degrees about a random axis in its plane
// through its centre, seen by a pinhole camera of focal length f = the longer side from the distance
// f (where the untilted plane fills the frame exactly); the view is then scaled about its centre so
// that the whole plane fits the frame (the product stays in view), rendered 2x supersampled.
cv::Mat tilt_perspective(const cv::Mat& g, std::mt19937& rng, CaptureLog* log) {
  std::uniform_real_distribution<double> u(0, 1);
  const double w = g.cols, h = g.rows, f = std::max(w, h);
  const double tilt = (30 + 30 * u(rng)) * CV_PI / 180, axis = 2 * CV_PI * u(rng);
  cv::Matx33d r;
  cv::Rodrigues(cv::Vec3d(std::cos(axis), std::sin(axis), 0) * tilt, r);
  std::vector<cv::Point2d> seen;
  double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
  for (const cv::Point2d p : {cv::Point2d(0, 0), cv::Point2d(w, 0), cv::Point2d(w, h), cv::Point2d(0, h)}) {
    // Camera coordinates: z >= f - sin(60) |corner| >= 0.38 f (a corner is at most f / sqrt 2 from the
    // centre), every corner in front of the camera.
    const cv::Vec3d c = r * cv::Vec3d(p.x - w / 2, p.y - h / 2, 0) + cv::Vec3d(0, 0, f);
    seen.emplace_back(f * c[0] / c[2], f * c[1] / c[2]);
    x0 = std::min(x0, seen.back().x), x1 = std::max(x1, seen.back().x);
    y0 = std::min(y0, seen.back().y), y1 = std::max(y1, seen.back().y);
  }
  const double fit = std::min(w / (x1 - x0), h / (y1 - y0));
  std::vector<cv::Point2f> dst;
  for (const cv::Point2d& p : seen)
    dst.emplace_back(float((p.x - (x0 + x1) / 2) * fit + w / 2), float((p.y - (y0 + y1) / 2) * fit + h / 2));
  if (log) {
    log->tilt_degrees = tilt * 180 / CV_PI;
    log->quad = dst;
  }
  return warp_corners(g, dst, rng, 2);
}

// A rectangle of 30% of the area, filled with smoothed noise.
cv::Mat occlude30(const cv::Mat& g, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  cv::Mat out = g.clone();
  const double aspect = 0.5 + u(rng);
  const int w = std::min(g.cols, int(std::sqrt(0.3 * g.total() * aspect))),
            h = std::min(g.rows, int(0.3 * g.total() / w));
  const int x = int(u(rng) * (g.cols - w)), y = int(u(rng) * (g.rows - h));
  cv::Mat block = out(cv::Rect(x, y, w, h));
  cv::randu(block, 0, 256);
  cv::GaussianBlur(block, block, cv::Size(0, 0), 3);
  return out;
}

// A dim exposure in float grey levels: v = black + 255 gain (x / 255)^gamma.
cv::Mat expose(const cv::Mat& scene, double gain, double gamma, double black) {
  cv::Mat lut(1, 256, CV_32F);
  for (int i = 0; i < 256; ++i) lut.at<float>(i) = float(255 * gain * std::pow(i / 255.0, gamma) + black);
  cv::Mat v(scene.size(), CV_32F);
  for (int y = 0; y < scene.rows; ++y)
    for (int x = 0; x < scene.cols; ++x) v.at<float>(y, x) = lut.at<float>(scene.at<uchar>(y, x));
  return v;
}

// Sensor noise on an exposure `v` (from cv::theRNG()): shot noise of a sensor at high gain, one
// electron per level (sigma sqrt(v)), when `shot`, and Gaussian read noise sigma `read`; rounded and
// clipped to 8 bits.
cv::Mat sensor(const cv::Mat& v, bool shot, double read) {
  cv::Mat noisy = v.clone(), rd(v.size(), CV_32F), out;
  if (shot) {
    cv::Mat n(v.size(), CV_32F), sigma;
    cv::randn(n, 0, 1);
    cv::sqrt(v, sigma);
    noisy += sigma.mul(n);
  }
  cv::randn(rd, 0, read);
  noisy += rd;
  noisy.convertTo(out, CV_8U);  // rounded, saturated
  return out;
}

// A dim capture: the scene (occluded by 30% in half of the captures, the occluder lit
// like the rest) through gain 0.25-0.5 and gamma 1-2.2, v = 255 gain (x / 255)^gamma, then sensor
// noise in grey levels: shot noise sigma sqrt(v) and read noise sigma 1-3, rounded and clipped to 8
// bits. Most captures end with a mean grey under 40.
cv::Mat low_light(const cv::Mat& g, std::mt19937& rng, CaptureLog* log) {
  std::uniform_real_distribution<double> u(0, 1);
  const double gain = 0.25 + 0.25 * u(rng), gamma = 1.0 + 1.2 * u(rng), read = 1 + 2 * u(rng);
  cv::theRNG().state = rng();  // the occluder's noise and the sensor's
  const bool occluded = u(rng) < 0.5;
  const cv::Mat scene = occluded ? occlude30(g, rng) : g;
  if (log) {
    log->occluded = occluded;
    log->gain = gain;
    log->gamma = gamma;
    log->noise_sigma = read;
  }
  return sensor(expose(scene, gain, gamma, 0), true, read);
}

// A dark capture as a phone makes it (issue 45): the scene (occluded by 30% in half of the captures)
// seen with its corners jittered by up to 12% of the side, through a lens blur sigma 0.3-1.5, exposed
// with gain 0.25-0.5, gamma 1.4-2.2 and a black offset of 2-8 grey levels, with sensor noise sigma
// 2-6, then JPEG at quality 50-85.
cv::Mat dark_phone(const cv::Mat& g, std::mt19937& rng, CaptureLog* log) {
  std::uniform_real_distribution<double> u(0, 1);
  cv::theRNG().state = rng();  // the occluder's noise and the sensor's
  CaptureLog c;
  c.occluded = u(rng) < 0.5;
  cv::Mat out = warp_viewpoint(c.occluded ? occlude30(g, rng) : g, rng, 0, 0, 0.12);
  c.blur_sigma = 0.3 + 1.2 * u(rng);
  cv::GaussianBlur(out, out, cv::Size(0, 0), c.blur_sigma);
  c.gain = 0.25 + 0.25 * u(rng);
  c.gamma = 1.4 + 0.8 * u(rng);
  c.black = 2 + 6 * u(rng);
  c.noise_sigma = 2 + 4 * u(rng);
  c.jpeg_quality = std::min(85, 50 + int(36 * u(rng)));
  if (log) *log = c;
  return cli::jpeg_roundtrip(sensor(expose(out, c.gain, c.gamma, c.black), false, c.noise_sigma), c.jpeg_quality);
}

}  // namespace

cv::Mat perturb(const cv::Mat& g, const std::string& kind, std::mt19937& rng, CaptureLog* log) {
  std::uniform_real_distribution<double> u(0, 1);
  cv::Mat f, out;
  if (log) *log = {};
  if (kind == "viewpoint") return warp_viewpoint(g, rng, 1.0);
  if (kind == "lowlight") return low_light(g, rng, log);
  if (kind == "darkphone") return dark_phone(g, rng, log);
  if (kind == "perspective") return tilt_perspective(g, rng, log);
  if (kind == "illumination") {  // gain, offset and a linear light gradient
    g.convertTo(f, CV_32F);
    const double gain = 0.55 + 0.9 * u(rng), offset = (u(rng) - 0.5) * 60, slope = (u(rng) - 0.5) * 0.8;
    for (int y = 0; y < f.rows; ++y)
      for (int x = 0; x < f.cols; ++x)
        f.at<float>(y, x) = float(f.at<float>(y, x) * gain * (1 + slope * (double(x) / f.cols - 0.5)) + offset);
    f.convertTo(out, CV_8U);
    return out;
  }
  if (kind == "gamma") {
    const double gamma = u(rng) < 0.5 ? 0.5 + 0.3 * u(rng) : 1.4 + 0.8 * u(rng);
    cv::Mat lut(1, 256, CV_8U);
    for (int i = 0; i < 256; ++i) lut.at<uchar>(i) = cv::saturate_cast<uchar>(255 * std::pow(i / 255.0, gamma));
    cv::LUT(g, lut, out);
    return out;
  }
  if (kind == "occlusion30") return occlude30(g, rng);
  if (kind == "blur") {
    cv::GaussianBlur(g, out, cv::Size(0, 0), 1.2 + 1.0 * u(rng));
    return out;
  }
  if (kind == "noise") {
    g.convertTo(f, CV_32F);
    cv::Mat n(f.size(), CV_32F);
    cv::theRNG().state = rng();
    cv::randn(n, 0, 8 + 7 * u(rng));
    f += n;
    f.convertTo(out, CV_8U);
    return out;
  }
  if (kind == "jpeg") return cli::jpeg_roundtrip(g, 15 + int(20 * u(rng)));
  // combined: mild versions of everything (a realistic re-capture)
  out = warp_viewpoint(g, rng, 0.5);
  out.convertTo(out, CV_8U, 0.75 + 0.5 * u(rng), (u(rng) - 0.5) * 30);
  cv::GaussianBlur(out, out, cv::Size(0, 0), 0.6 + 0.4 * u(rng));
  out.convertTo(f, CV_32F);
  cv::Mat n(f.size(), CV_32F);
  cv::theRNG().state = rng();
  cv::randn(n, 0, 4);
  f += n;
  f.convertTo(out, CV_8U);
  return cli::jpeg_roundtrip(out, 50 + int(30 * u(rng)));
}

std::vector<cv::Mat> perturbed_queries(const std::vector<cv::Mat>& gallery, unsigned seed, int p) {
  std::vector<cv::Mat> queries(gallery.size());
  cv::parallel_for_(cv::Range(0, int(gallery.size())), [&](const cv::Range& r) {
    for (int i = r.start; i < r.end; ++i) {
      std::mt19937 rng(seed * 1000003u + unsigned(p) * 7919u + unsigned(i));
      queries[i] = perturb(gallery[i], kPerturbations[p], rng);
    }
  });
  return queries;
}

std::vector<int> parse_perturbations(const std::string& option, const std::string& list) {
  std::vector<bool> named(kPerturbationCount);
  auto refuse = [&](const std::string& item) {
    std::string names;
    for (int p = 0; p < kPerturbationCount; ++p)
      names += std::string(p == 0 ? "" : p + 1 < kPerturbationCount ? ", " : " or ") + kPerturbations[p];
    return std::runtime_error(option + " takes " + names + " (comma-separated), not '" + item + "'");
  };
  if (list.empty()) throw refuse(list);
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    const auto* at = std::find(std::begin(kPerturbations), std::end(kPerturbations), item);
    if (at == std::end(kPerturbations)) throw refuse(item);
    named[size_t(at - std::begin(kPerturbations))] = true;
  }
  std::vector<int> out;
  for (int p = 0; p < kPerturbationCount; ++p)
    if (named[size_t(p)]) out.push_back(p);
  return out;
}

}  // namespace prism::eval
