#include "sift/sift.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "sift/sift_core.h"
#include "sift/sift_plan.h"

namespace prism::sift {

bool strongest_first(const cv::KeyPoint& p, const cv::KeyPoint& q) {
  if (p.response != q.response) return p.response > q.response;
  if (p.pt.y != q.pt.y) return p.pt.y < q.pt.y;
  if (p.pt.x != q.pt.x) return p.pt.x < q.pt.x;
  if (p.size != q.size) return p.size < q.size;
  if (p.angle != q.angle) return p.angle < q.angle;
  return p.octave < q.octave;
}

namespace detail {

namespace {

// getGaussianKernel(ksize, sigma, CV_32F) for a float image (ksize = round(8 sigma + 1) | 1):
// OpenCV computes it in soft double and rounds to float; double is the same function.
std::vector<float> gaussian_kernel(double sigma) {
  const int n = int(std::lrint(sigma * 4 * 2 + 1)) | 1;
  const double scale2x = -0.125 / (sigma * sigma);
  const int half = (n - 1) / 2;
  std::vector<double> values(half);
  double sum = 0;
  for (int i = 0, x = 1 - n; i < half; ++i, x += 2) {
    values[i] = std::exp(double(x * x) * scale2x);
    sum += values[i];
  }
  sum = sum * 2 + 1;
  const double mul = 1 / sum;
  std::vector<float> k(n);
  for (int i = 0; i < half; ++i) k[i] = k[n - 1 - i] = float(values[i] * mul);
  k[half] = float(mul);
  return k;
}

}  // namespace

void check_grey(const cv::Mat& grey) {
  if (grey.empty()) throw std::invalid_argument("sift: empty image");
  if (grey.type() != CV_8UC1) throw std::invalid_argument("sift: the image must be 8-bit grey (CV_8UC1)");
  check_size(grey.cols, grey.rows);
}

void check_size(int width, int height) {
  // The pyramid of the upsampled image takes about 176 bytes per input pixel (44 on each of 4
  // upsampled pixels): 64 Mpx is 11 GiB, past which a caller should shrink first (texture
  // features shrink to 1024 px).
  if (width < 8 || height < 8 || width > 16384 || height > 16384 || int64_t(width) * height > (int64_t(1) << 26))
    throw std::invalid_argument("sift: the image is " + std::to_string(width) + "x" + std::to_string(height) +
                                ", outside 8x8 .. 16384x16384 or above 64 Mpx");
}

Pyramid plan_pyramid(int width, int height, const Params& params) {
  if (params.octave_layers < 1 || params.octave_layers > 5)
    throw std::invalid_argument("sift: octave_layers must be 1..5, not " + std::to_string(params.octave_layers));
  if (!(params.sigma > 0) || !(params.contrast_threshold >= 0) || !(params.edge_threshold > 0) || params.nfeatures < 0)
    throw std::invalid_argument(
        "sift: sigma and edge_threshold must be positive, contrast_threshold and nfeatures >= 0");
  Pyramid p;
  p.layers = params.octave_layers;
  const int base_w = width * 2, base_h = height * 2;  // firstOctave = -1
  p.octaves = int(std::lrint(std::log(double(std::min(base_w, base_h))) / std::log(2.) - 2)) + 1;
  p.threshold = int(std::floor(0.5 * params.contrast_threshold / p.layers * 255));
  cv::Size s(base_w, base_h);
  for (int o = 0; o < p.octaves; ++o) {
    p.size.push_back(s);
    s = cv::Size(s.width / 2, s.height / 2);
  }
  const float sigma = float(params.sigma);
  p.kernel.push_back(gaussian_kernel(std::sqrt(std::max(sigma * sigma - kInitSigma * kInitSigma * 4, 0.01f))));
  const double k = std::pow(2., 1. / p.layers);
  for (int i = 1; i < p.layers + 3; ++i) {
    const double prev = std::pow(k, double(i - 1)) * params.sigma, total = prev * k;
    p.kernel.push_back(gaussian_kernel(std::sqrt(total * total - prev * prev)));
  }
  return p;
}

namespace {

// Duplicates out, strongest first in a total order, the first `nfeatures` kept (all when 0).
std::vector<cv::KeyPoint> dedupe_sort_cut(std::vector<cv::KeyPoint> kps, int nfeatures) {
  // removeDuplicatedSorted: one keypoint per (x, y, size, angle), the strongest.
  std::sort(kps.begin(), kps.end(), [](const cv::KeyPoint& a, const cv::KeyPoint& b) {
    if (a.pt.x != b.pt.x) return a.pt.x < b.pt.x;
    if (a.pt.y != b.pt.y) return a.pt.y < b.pt.y;
    if (a.size != b.size) return a.size > b.size;
    if (a.angle != b.angle) return a.angle < b.angle;
    if (a.response != b.response) return a.response > b.response;
    return a.octave > b.octave;
  });
  kps.erase(std::unique(kps.begin(), kps.end(),
                        [](const cv::KeyPoint& a, const cv::KeyPoint& b) {
                          return a.pt.x == b.pt.x && a.pt.y == b.pt.y && a.size == b.size && a.angle == b.angle;
                        }),
            kps.end());
  // Strongest first, then a total order (texture/features.cpp sorts cv::SIFT's output the same way).
  std::sort(kps.begin(), kps.end(), strongest_first);
  if (nfeatures > 0 && int(kps.size()) > nfeatures) kps.resize(nfeatures);
  return kps;
}

}  // namespace

std::vector<cv::KeyPoint> select_keypoints(const RawKeypoint* raw, size_t count, int nfeatures) {
  auto keypoints = [&](float cut) {
    std::vector<cv::KeyPoint> kps;
    for (size_t i = 0; i < count; ++i)
      if (raw[i].response >= cut)
        kps.emplace_back(raw[i].x, raw[i].y, raw[i].size, raw[i].angle, raw[i].response, raw[i].octave);
    return kps;
  };
  std::vector<cv::KeyPoint> out;
  // Thousands of keypoints, hundreds kept: first everything as strong as the strongest
  // nfeatures + 1/8 (ties included), which holds the answer unless duplicates removed more than
  // the margin; then the full selection only in that rare case.
  const size_t margin = size_t(nfeatures) + size_t(nfeatures) / 8 + 8;
  if (nfeatures > 0 && count > 2 * margin) {
    std::vector<float> responses(count);
    for (size_t i = 0; i < count; ++i) responses[i] = raw[i].response;
    std::nth_element(responses.begin(), responses.begin() + (margin - 1), responses.end(), std::greater<float>());
    std::vector<cv::KeyPoint> strong = keypoints(responses[margin - 1]);
    const size_t candidates = strong.size();
    out = dedupe_sort_cut(std::move(strong), nfeatures);
    if (out.size() < size_t(nfeatures) && candidates < count)
      out = dedupe_sort_cut(keypoints(-std::numeric_limits<float>::infinity()), nfeatures);
  } else {
    out = dedupe_sort_cut(keypoints(-std::numeric_limits<float>::infinity()), nfeatures);
  }
  for (cv::KeyPoint& k : out) {  // firstOctave = -1: back to the input's coordinates
    k.octave = (k.octave & ~255) | ((k.octave - 1) & 255);
    k.pt *= 0.5f;
    k.size *= 0.5f;
  }
  return out;
}

DescriptorSource descriptor_source(const cv::KeyPoint& kp) {
  int octave = kp.octave & 255;
  const int layer = (kp.octave >> 8) & 255;
  octave = octave < 128 ? octave : (-128 | octave);
  const float scale = octave >= 0 ? 1.f / float(1 << octave) : float(1 << -octave);
  float angle = 360.f - kp.angle;
  if (std::abs(angle - 360.f) < FLT_EPSILON) angle = 0.f;
  return {octave + 1, layer, kp.pt.x * scale, kp.pt.y * scale, kp.size * scale * 0.5f, angle};
}

}  // namespace detail

namespace {

using namespace detail;

// One separable blur pass on the CPU, the same per-pixel arithmetic as sift.cu's.
void blur(const cv::Mat& src, cv::Mat& tmp, cv::Mat& dst, const std::vector<float>& k) {
  const int rows = src.rows, cols = src.cols, ksize = int(k.size()), r = ksize / 2;
  tmp.create(rows, cols, CV_32F);
  dst.create(rows, cols, CV_32F);
  std::vector<int> xmap(cols + 2 * r);
  for (int i = 0; i < cols + 2 * r; ++i) xmap[i] = reflect101(i - r, cols);
  for (int y = 0; y < rows; ++y) {
    const float* s = src.ptr<float>(y);
    float* t = tmp.ptr<float>(y);
    for (int x = 0; x < cols; ++x) t[x] = blur_row(k.data(), ksize, [&](int j) { return s[xmap[x + j]]; });
  }
  for (int y = 0; y < rows; ++y) {
    float* d = dst.ptr<float>(y);
    for (int x = 0; x < cols; ++x)
      d[x] = blur_column(k.data(), ksize, [&](int j) { return tmp.at<float>(reflect101(y + j, rows), x); });
  }
}

}  // namespace

Result detect_and_compute_cpu(const cv::Mat& grey, const Params& params) {
  check_grey(grey);
  const Pyramid plan = plan_pyramid(grey.cols, grey.rows, params);
  const int L = plan.layers, levels = L + 3;
  std::vector<cv::Mat> gauss(plan.octaves * levels), dog(plan.octaves);  // dog[o]: its L + 2 layers stacked
  cv::Mat up(plan.size[0], CV_32F), tmp;
  for (int y = 0; y < up.rows; ++y)
    for (int x = 0; x < up.cols; ++x)
      up.at<float>(y, x) =
          upsample2x([&](int sx, int sy) { return grey.at<uint8_t>(sy, sx); }, grey.cols, grey.rows, x, y);
  blur(up, tmp, gauss[0], plan.kernel[0]);
  for (int o = 0; o < plan.octaves; ++o) {
    if (o > 0) {  // INTER_NEAREST halving of the previous octave's level L
      const cv::Mat& src = gauss[(o - 1) * levels + L];
      cv::Mat& base = gauss[o * levels];
      base.create(plan.size[o], CV_32F);
      for (int y = 0; y < base.rows; ++y)
        for (int x = 0; x < base.cols; ++x) base.at<float>(y, x) = src.at<float>(2 * y, 2 * x);
    }
    for (int i = 1; i < levels; ++i) blur(gauss[o * levels + i - 1], tmp, gauss[o * levels + i], plan.kernel[i]);
    dog[o].create((L + 2) * plan.size[o].height, plan.size[o].width, CV_32F);
    for (int i = 0; i < L + 2; ++i) {
      cv::Mat layer = dog[o].rowRange(i * plan.size[o].height, (i + 1) * plan.size[o].height);
      cv::subtract(gauss[o * levels + i + 1], gauss[o * levels + i], layer);
    }
  }

  std::vector<RawKeypoint> raw;
  std::vector<float> partial(kOriBins * kLanes), summed(kDescHistLen);
  std::vector<long long> fixed(kDescHistLen);
  for (int o = 0; o < plan.octaves; ++o) {
    const DogOctave d{dog[o].ptr<float>(), size_t(plan.size[o].area()), plan.size[o].height, plan.size[o].width,
                      plan.size[o].width};
    for (int layer = 1; layer <= L; ++layer)
      for (int r = kBorder; r < d.rows - kBorder; ++r)
        for (int c = kBorder; c < d.cols - kBorder; ++c) {
          Extremum e;
          if (!is_extremum(d, layer, r, c, plan.threshold) ||
              !refine_extremum(d, o, layer, r, c, L, float(params.contrast_threshold), float(params.edge_threshold),
                               float(params.sigma), &e))
            continue;
          const cv::Mat& g = gauss[o * levels + e.layer];
          const Level img{g.ptr<float>(), g.rows, g.cols, g.cols};
          const OrientationWindow w = orientation_window(e);
          std::fill(partial.begin(), partial.end(), 0.f);
          for (int lane = 0; lane < kLanes; ++lane) orientation_partial(img, e, w, lane, &partial[lane], kLanes);
          float raw_hist[kOriBins], hist[kOriBins];
          for (int b = 0; b < kOriBins; ++b) {
            float s = 0;
            for (int lane = 0; lane < kLanes; ++lane) s += partial[b * kLanes + lane];
            raw_hist[b] = s;
          }
          float max_value = 0;
          for (int b = 0; b < kOriBins; ++b) {
            hist[b] = orientation_smoothed(raw_hist, b);
            max_value = b == 0 ? hist[0] : std::max(max_value, hist[b]);
          }
          for (int j = 0; j < kOriBins; ++j) {
            const float angle = orientation_peak(hist, max_value, j);
            if (angle >= 0) raw.push_back({e.x, e.y, e.size, angle, e.response, e.packed_octave});
          }
        }
  }

  Result out;
  out.keypoints = select_keypoints(raw.data(), raw.size(), params.nfeatures);
  out.descriptors.create(int(out.keypoints.size()), kDescriptorSize, CV_32F);
  for (size_t i = 0; i < out.keypoints.size(); ++i) {
    const DescriptorSource src = descriptor_source(out.keypoints[i]);
    const cv::Mat& g = gauss[src.octave * levels + src.layer];
    const Level img{g.ptr<float>(), g.rows, g.cols, g.cols};
    const DescriptorWindow w = descriptor_window(src.x, src.y, src.angle, src.scl, g.rows, g.cols);
    std::fill(fixed.begin(), fixed.end(), 0);
    descriptor_samples(img, w, 0, 1, 0, 1, [&](int bin, long long v) { fixed[bin] += v; });
    for (int b = 0; b < kDescHistLen; ++b) summed[b] = from_fixed(fixed[b]);
    descriptor_finish(summed.data(), out.descriptors.ptr<float>(int(i)));
  }
  return out;
}

}  // namespace prism::sift
