#include "perturbations.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "texture_util.h"

namespace prism::eval {

namespace {

cv::Mat warp_viewpoint(const cv::Mat& g, std::mt19937& rng, double strength) {
  std::uniform_real_distribution<double> u(-1, 1);
  const double w = g.cols, h = g.rows;
  const double angle = u(rng) * 25 * strength * CV_PI / 180, scale = 1 + 0.25 * strength * u(rng);
  std::vector<cv::Point2f> src{{0, 0}, {float(w), 0}, {float(w), float(h)}, {0, float(h)}}, dst;
  for (const auto& p : src) {
    const double x = p.x - w / 2, y = p.y - h / 2;
    double xr = scale * (std::cos(angle) * x - std::sin(angle) * y),
           yr = scale * (std::sin(angle) * x + std::cos(angle) * y);
    xr += u(rng) * 0.12 * strength * w;  // perspective: each corner moves independently
    yr += u(rng) * 0.12 * strength * h;
    dst.emplace_back(float(xr + w / 2), float(yr + h / 2));
  }
  cv::Mat out;
  cv::warpPerspective(g, out, cv::getPerspectiveTransform(src, dst), g.size(), cv::INTER_LINEAR, cv::BORDER_CONSTANT,
                      cv::Scalar(u(rng) * 60 + 64));
  return out;
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

// A dim capture: the scene (occluded by 30% in half of the captures, the occluder lit
// like the rest) through gain 0.25-0.5 and gamma 1-2.2, v = 255 gain (x / 255)^gamma, then sensor
// noise in grey levels: shot noise of a sensor at high gain, one electron per level (sigma sqrt(v)),
// and read noise sigma 1-3, rounded and clipped to 8 bits. Most captures end with a mean grey under 40.
cv::Mat low_light(const cv::Mat& g, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  const double gain = 0.25 + 0.25 * u(rng), gamma = 1.0 + 1.2 * u(rng), read = 1 + 2 * u(rng);
  cv::theRNG().state = rng();  // the occluder's noise and the sensor's
  const cv::Mat scene = u(rng) < 0.5 ? occlude30(g, rng) : g;
  cv::Mat lut(1, 256, CV_32F);
  for (int i = 0; i < 256; ++i) lut.at<float>(i) = float(255 * gain * std::pow(i / 255.0, gamma));
  cv::Mat v(scene.size(), CV_32F), shot(scene.size(), CV_32F), rd(scene.size(), CV_32F);
  for (int y = 0; y < scene.rows; ++y)
    for (int x = 0; x < scene.cols; ++x) v.at<float>(y, x) = lut.at<float>(scene.at<uchar>(y, x));
  cv::randn(shot, 0, 1);
  cv::randn(rd, 0, read);
  cv::Mat sigma;  // shot noise: sqrt(v) levels
  cv::sqrt(v, sigma);
  cv::Mat noisy = v + sigma.mul(shot) + rd, out;
  noisy.convertTo(out, CV_8U);  // rounded, saturated
  return out;
}

}  // namespace

cv::Mat perturb(const cv::Mat& g, const std::string& kind, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  cv::Mat f, out;
  if (kind == "viewpoint") return warp_viewpoint(g, rng, 1.0);
  if (kind == "lowlight") return low_light(g, rng);
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
