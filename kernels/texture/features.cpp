#include "texture/features.h"

#include <opencv2/features2d.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace prism::texture {

namespace {

cv::Mat to_grey(const cv::Mat& image) {
  if (image.empty()) throw std::invalid_argument("extract_features: empty image");
  if (image.depth() != CV_8U) throw std::invalid_argument("extract_features: the image must be 8-bit");
  cv::Mat grey;
  switch (image.channels()) {
    case 1: return image;
    case 3: cv::cvtColor(image, grey, cv::COLOR_BGR2GRAY); return grey;
    case 4: cv::cvtColor(image, grey, cv::COLOR_BGRA2GRAY); return grey;
    default: throw std::invalid_argument("extract_features: the image must have 1, 3 or 4 channels");
  }
}

}  // namespace

Features extract_features(const cv::Mat& image, const FeatureParams& params) {
  const int max_features = std::clamp(params.max_features, 1, match::kSlot);
  const cv::Mat grey = to_grey(image);
  Features f;
  f.width = grey.cols;
  f.height = grey.rows;

  cv::Mat detect = grey;
  double scale = 1.0;  // original / detection coordinates
  const int side = std::max(grey.cols, grey.rows);
  if (params.max_side > 0 && side > params.max_side) {
    scale = double(side) / params.max_side;
    cv::resize(grey, detect, cv::Size(int(grey.cols / scale + 0.5), int(grey.rows / scale + 0.5)), 0, 0,
               cv::INTER_AREA);
  }
  detect = normalise(detect, params.normalisation);

  // cv::SIFT keeps the strongest nfeatures (ties at the cut may add a few): sort and cut exactly.
  cv::Ptr<cv::SIFT> sift = cv::SIFT::create(max_features);
  std::vector<cv::KeyPoint> kps;
  cv::Mat desc;
  sift->detectAndCompute(detect, cv::noArray(), kps, desc);
  std::vector<int> order(kps.size());
  std::iota(order.begin(), order.end(), 0);
  // A total order: SIFT gathers its keypoints from per-thread lists, whose order varies from run to run.
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const cv::KeyPoint &p = kps[a], &q = kps[b];
    if (p.response != q.response) return p.response > q.response;
    if (p.pt.y != q.pt.y) return p.pt.y < q.pt.y;
    if (p.pt.x != q.pt.x) return p.pt.x < q.pt.x;
    if (p.size != q.size) return p.size < q.size;
    if (p.angle != q.angle) return p.angle < q.angle;
    if (p.octave != q.octave) return p.octave < q.octave;
    return a < b;
  });
  if (int(order.size()) > max_features) order.resize(max_features);

  f.keypoints.reserve(order.size());
  f.descriptors.resize(order.size() * match::kDim);
  if (params.keep_fp16) f.descriptors_fp16.resize(order.size() * match::kDim);
  if (params.keep_fp32) f.descriptors_fp32.resize(order.size() * match::kDim);
  for (size_t i = 0; i < order.size(); ++i) {
    const cv::KeyPoint& k = kps[order[i]];
    // cv::KeyPoint coordinates have pixel centres at integers, so scale about the half-pixel edge.
    f.keypoints.push_back({float((k.pt.x + 0.5) * scale - 0.5), float((k.pt.y + 0.5) * scale - 0.5),
                           float(k.size * scale), k.angle, k.response, k.octave});
    match::rootsift_u8(desc.ptr<float>(order[i]), 1, &f.descriptors[i * match::kDim]);
    if (params.keep_fp16) match::rootsift(desc.ptr<float>(order[i]), 1, &f.descriptors_fp16[i * match::kDim]);
    if (params.keep_fp32) match::rootsift_float(desc.ptr<float>(order[i]), 1, &f.descriptors_fp32[i * match::kDim]);
  }
  return f;
}

double sharpness(const cv::Mat& grey, cv::Mat* scratch) {
  cv::Mat local;
  cv::Mat& lap = scratch ? *scratch : local;
  cv::Laplacian(grey, lap, CV_32F);
  cv::Scalar mean, stddev;
  cv::meanStdDev(lap, mean, stddev);
  return stddev[0] * stddev[0];
}

}  // namespace prism::texture
