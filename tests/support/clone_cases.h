// Test cases for the seamless clone: OpenCV 4.6's cv::seamlessClone is the reference, run on fresh
// random and real images, every mode, binary and soft masks, from 3x3 boxes up. Shared by the CPU
// and GPU tests and bench_poisson, hence without gtest (poisson_cases.h adds the tests' assertion).
// The GPU binaries ship without OpenCV's imgcodecs, so real images come as PPM files (ppm.h).
#pragma once

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/photo.hpp>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "poisson/seamless_clone.h"
#include "ppm.h"

namespace prism::test {

struct CloneCase {
  std::string name;
  cv::Mat src, dst, mask;  // BGR, BGR, GRAY8 (mask the size of src)
  cv::Point p;
  int mode;  // cv::NORMAL_CLONE, ...
};

inline const char* mode_name(int m) {
  return m == cv::NORMAL_CLONE ? "normal" : m == cv::MIXED_CLONE ? "mixed" : "monochrome";
}

// A mask of the given size whose non-zero pixels have a bounding box of exactly box_w x box_h at
// (bx, by): kind 0 binary ellipse-with-corners, 1 soft (random 1..255 inside), 2 blurred binary.
inline cv::Mat make_mask(cv::Size size, int bx, int by, int box_w, int box_h, int kind, std::mt19937& rng) {
  cv::Mat m(size, CV_8U, cv::Scalar(0));
  cv::Mat roi = m(cv::Rect(bx, by, box_w, box_h));
  if (box_w >= 8 && box_h >= 8)
    cv::ellipse(roi, cv::Point(box_w / 2, box_h / 2), cv::Size(box_w / 2, box_h / 2), 0, 0, 360, cv::Scalar(255), -1);
  else
    roi.setTo(255);
  if (kind == 2 && box_w >= 16 && box_h >= 16) {
    cv::Mat blurred;
    cv::GaussianBlur(roi, blurred, cv::Size(0, 0), std::max(1.0, std::min(box_w, box_h) / 20.0));
    blurred.copyTo(roi);
  } else if (kind == 1) {
    std::uniform_int_distribution<int> d(1, 255);
    for (int y = 0; y < box_h; ++y)
      for (int x = 0; x < box_w; ++x)
        if (roi.at<uint8_t>(y, x)) roi.at<uint8_t>(y, x) = static_cast<uint8_t>(d(rng));
  }
  // Pin the box: one non-zero pixel on each edge of it.
  roi.at<uint8_t>(0, box_w / 2) = roi.at<uint8_t>(box_h - 1, box_w / 2) = 200;
  roi.at<uint8_t>(box_h / 2, 0) = roi.at<uint8_t>(box_h / 2, box_w - 1) = 200;
  return m;
}

// (From the case's own generator: cv::randu would draw from OpenCV's global one, whose state
// depends on every test run before.)
inline cv::Mat random_image(cv::Size size, std::mt19937& rng, bool smooth) {
  cv::Mat im(size, CV_8UC3);
  cv::RNG local(rng());
  local.fill(im, cv::RNG::UNIFORM, 0, 256);
  if (smooth) cv::GaussianBlur(im, im, cv::Size(0, 0), 3.0);
  return im;
}

// A crop/resize of a real image to `size`.
inline cv::Mat fit(const cv::Mat& im, cv::Size size) {
  cv::Mat out;
  cv::resize(im, out, size, 0, 0, cv::INTER_AREA);
  return out;
}

// One case: a box of box_w x box_h inside a src with a margin, pasted fully inside dst of dst_size.
inline CloneCase make_case(const std::string& name, int box_w, int box_h, cv::Size dst_size, int mode, int mask_kind,
                           const cv::Mat& src_image, const cv::Mat& dst_image, std::mt19937& rng) {
  CloneCase c;
  c.name = name + " " + std::to_string(box_w) + "x" + std::to_string(box_h) + " " + mode_name(mode) + " mask" +
           std::to_string(mask_kind);
  const int margin = 3;
  cv::Size src_size(box_w + 2 * margin + 5, box_h + 2 * margin + 2);
  c.src = src_image.empty() ? random_image(src_size, rng, mask_kind == 2) : fit(src_image, src_size);
  c.dst = dst_image.empty() ? random_image(dst_size, rng, mask_kind == 2) : fit(dst_image, dst_size);
  c.mask = make_mask(src_size, margin + 2, margin, box_w, box_h, mask_kind, rng);
  std::uniform_int_distribution<int> px(box_w / 2, dst_size.width - box_w + box_w / 2);
  std::uniform_int_distribution<int> py(box_h / 2, dst_size.height - box_h + box_h / 2);
  c.p = cv::Point(px(rng), py(rng));
  c.mode = mode;
  return c;
}

inline cv::Mat opencv_clone(const CloneCase& c) {
  cv::Mat out;
  cv::seamlessClone(c.src, c.dst, c.mask, c.p, out, c.mode);
  return out;
}

// The job for our kernels on BGR cv::Mats (host pointers; the GPU test swaps in device pointers).
inline poisson::CloneJob make_job(const CloneCase& c, cv::Mat& dst_inout) {
  poisson::CloneJob job;
  job.background = {dst_inout.data, dst_inout.cols, dst_inout.rows, static_cast<int64_t>(dst_inout.step), 3, 2, 1, 0};
  job.overlay = {
      const_cast<uint8_t*>(c.src.data), c.src.cols, c.src.rows, static_cast<int64_t>(c.src.step), 3, 2, 1, 0};
  job.mask = {c.mask.data, c.mask.cols, c.mask.rows, static_cast<int64_t>(c.mask.step), 1};
  job.placement = poisson::place(poisson::mask_box(job.mask), c.p.x, c.p.y, dst_inout.cols, dst_inout.rows);
  job.mode = static_cast<poisson::CloneMode>(c.mode);
  return job;
}

struct CloneDiff {
  int max_abs = 0;
  size_t differing = 0;
  size_t total = 0;
  double fraction() const { return total ? static_cast<double>(differing) / total : 0.0; }
  std::string str() const {
    std::ostringstream s;
    s << "max " << max_abs << ", " << differing << " of " << total << " values differ (" << 100.0 * fraction() << "%)";
    return s.str();
  }
};

inline CloneDiff compare(const cv::Mat& a, const cv::Mat& b) {
  CloneDiff d;
  cv::Mat diff;
  cv::absdiff(a, b, diff);
  double mx = 0;
  cv::minMaxLoc(diff.reshape(1), nullptr, &mx);
  d.max_abs = static_cast<int>(mx);
  d.differing = static_cast<size_t>(cv::countNonZero(diff.reshape(1)));
  d.total = diff.total() * diff.channels();
  return d;
}

}  // namespace prism::test
