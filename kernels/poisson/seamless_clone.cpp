// CPU path of the seamless clone: the RHS from poisson_pixel.h, then OpenCV's own transform
// sequence (complex float DFTs of the odd extensions, the same calls in the same order), with rows
// and channels processed in parallel, so the CPU path reproduces cv::seamlessClone bit for bit.
#include <opencv2/core.hpp>

#include <algorithm>
#include <vector>

#include "poisson/poisson_pixel.h"
#include "poisson/seamless_clone.h"

namespace prism::poisson {

using detail::Geometry;

Box mask_box(const MaskView& m) {
  int x0 = m.width, y0 = m.height, x1 = -1, y1 = -1;
  for (int y = 1; y < m.height - 1; ++y) {
    const uint8_t* row = m.data + y * m.stride;
    for (int x = 1; x < m.width - 1; ++x)
      if (row[static_cast<int64_t>(x) * m.step]) {
        x0 = std::min(x0, x);
        x1 = std::max(x1, x);
        y0 = std::min(y0, y);
        y1 = y;
      }
  }
  if (x1 < 0) return {};
  return {x0, y0, x1 - x0 + 1, y1 - y0 + 1};
}

Placement place(const Box& box, int px, int py, int bw, int bh) {
  Placement pl;
  if (box.empty()) return pl;
  // OpenCV: roi_d = (p.x - w/2, p.y - h/2, w, h), C++ integer division. In 64 bits: xpos/ypos
  // may be anywhere in int's range, and p - w/2 or p - w/2 + w would overflow int there.
  const int64_t dx = int64_t(px) - box.width / 2, dy = int64_t(py) - box.height / 2;
  const int64_t x0 = std::max<int64_t>(dx, 0), y0 = std::max<int64_t>(dy, 0);
  const int64_t x1 = std::min<int64_t>(dx + box.width, bw), y1 = std::min<int64_t>(dy + box.height, bh);
  pl.clipped = x0 != dx || y0 != dy || x1 != dx + box.width || y1 != dy + box.height;
  if (x1 <= x0 || y1 <= y0) {
    pl.clipped = true;
    return pl;
  }
  // Inside the background now: every value below fits in int.
  pl.dst = {int(x0), int(y0), int(x1 - x0), int(y1 - y0)};
  pl.src = {int(box.x + (x0 - dx)), int(box.y + (y0 - dy)), int(x1 - x0), int(y1 - y0)};
  return pl;
}

namespace {

// OpenCV's Cloning::dst (seamless_cloning_impl.cpp), rows processed in parallel: DST-I of every row
// of `src` through the complex DFT of its odd extension (imaginary part), transposed, the same
// along the other axis, transposed back. Same calls, same order, so the same float results.
void dst_opencv(const cv::Mat& src, cv::Mat& dest, bool invert) {
  const int flag = invert ? cv::DFT_ROWS + cv::DFT_SCALE + cv::DFT_INVERSE : cv::DFT_ROWS;
  const int rows = src.rows, cols = src.cols;
  // Pass 1 along rows; its imaginary part lands transposed in `t` (cols x (2 rows + 2)).
  cv::Mat t(cols, 2 * rows + 2, CV_32F, cv::Scalar(0));
  cv::parallel_for_(
      cv::Range(0, rows),
      [&](const cv::Range& range) {
        cv::Mat ext(range.size(), 2 * cols + 2, CV_32FC2, cv::Scalar(0, 0));
        for (int j = range.start; j < range.end; ++j) {
          const float* s = src.ptr<float>(j);
          cv::Vec2f* e = ext.ptr<cv::Vec2f>(j - range.start);
          for (int i = 0; i < cols; ++i) {
            e[1 + i][0] = s[i];
            e[cols + 2 + i][0] = -s[cols - 1 - i];
          }
        }
        cv::dft(ext, ext, flag);
        for (int j = range.start; j < range.end; ++j) {
          const cv::Vec2f* e = ext.ptr<cv::Vec2f>(j - range.start);
          for (int i = 0; i < cols; ++i) {
            const float val = e[i + 1][1];
            t.at<float>(i, j + 1) = val;
            t.at<float>(i, t.cols - 1 - j) = -val;
          }
        }
      },
      std::max(1, rows / 32));
  // Pass 2 along the rows of t; imaginary part transposed back into dest (rows x cols).
  dest.create(rows, cols, CV_32F);
  cv::parallel_for_(
      cv::Range(0, cols),
      [&](const cv::Range& range) {
        cv::Mat ext(range.size(), t.cols, CV_32FC2, cv::Scalar(0, 0));
        for (int j = range.start; j < range.end; ++j) {
          const float* s = t.ptr<float>(j);
          cv::Vec2f* e = ext.ptr<cv::Vec2f>(j - range.start);
          for (int i = 0; i < t.cols; ++i) e[i][0] = s[i];
        }
        cv::dft(ext, ext, flag);
        for (int j = range.start; j < range.end; ++j) {
          const cv::Vec2f* e = ext.ptr<cv::Vec2f>(j - range.start);
          for (int i = 0; i < rows; ++i) dest.at<float>(i, j) = e[i + 1][1];
        }
      },
      std::max(1, cols / 32));
}

}  // namespace

void clone_cpu(const CloneJob& job) {
  const Placement& pl = job.placement;
  if (!pl.solvable()) return;
  const Geometry g{pl.dst.width, pl.dst.height, pl.src.x, pl.src.y, pl.dst.x, pl.dst.y};
  const int N = g.W - 2, M = g.H - 2;

  std::vector<uint8_t> eroded(static_cast<size_t>(g.W) * g.H);
  cv::parallel_for_(cv::Range(0, g.H), [&](const cv::Range& r) {
    for (int y = r.start; y < r.end; ++y)
      for (int x = 0; x < g.W; ++x) eroded[static_cast<size_t>(y) * g.W + x] = detail::eroded_at(job.mask, g, x, y);
  });
  auto eroded_fn = [&](int x, int y) { return static_cast<int>(eroded[static_cast<size_t>(y) * g.W + x]); };

  std::vector<float> fx(N), fy(M);
  detail::dst_filter(N, fx.data());
  detail::dst_filter(M, fy.data());

  const PackedImage& bg = job.background;
  std::vector<cv::Mat> rhs(3);
  for (int c = 0; c < 3; ++c) {
    rhs[c].create(M, N, CV_32F);
    cv::parallel_for_(cv::Range(0, M), [&](const cv::Range& r) {
      for (int j = r.start; j < r.end; ++j) {
        float* out = rhs[c].ptr<float>(j);
        for (int i = 0; i < N; ++i)
          out[i] = detail::rhs_at(job.background, job.overlay, job.mask, g, i + 1, j + 1, c, job.mode, eroded_fn);
      }
    });
  }
  // Only now write the background: every channel's RHS has read the original ROI.
  for (int c = 0; c < 3; ++c) {
    cv::Mat res, u;
    dst_opencv(rhs[c], res, false);
    for (int j = 0; j < M; ++j) {
      float* row = res.ptr<float>(j);
      for (int i = 0; i < N; ++i) row[i] /= (fx[i] + fy[j] - 4);
    }
    dst_opencv(res, u, true);
    const int off = detail::channel_offset(bg, c);
    for (int j = 0; j < M; ++j) {
      const float* row = u.ptr<float>(j);
      uint8_t* out = bg.data + (g.dy + j + 1) * bg.stride + static_cast<int64_t>(g.dx + 1) * bg.channels + off;
      for (int i = 0; i < N; ++i) out[static_cast<int64_t>(i) * bg.channels] = detail::to_u8_truncate(row[i]);
    }
  }
}

}  // namespace prism::poisson
