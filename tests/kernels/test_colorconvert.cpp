// colorconvert CPU path against independent references: a double-precision colour model, OpenCV's
// cvtColor and resize, and a double-precision tent filter.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "colorconvert/colorconvert.h"
#include "image_util.h"
#include "prism_test.h"

using namespace prism::colorconvert;
using prism::test::HostImage;
using prism::test::make_image;

namespace {

struct DiffStats {
  int max = 0;
  double mean = 0;
  double frac_over_1 = 0;
};

DiffStats diff(const uint8_t* a, const uint8_t* b, size_t n) {
  DiffStats s;
  size_t over = 0;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    int d = std::abs(int(a[i]) - int(b[i]));
    s.max = std::max(s.max, d);
    sum += d;
    over += d > 1;
  }
  s.mean = sum / n;
  s.frac_over_1 = double(over) / n;
  return s;
}

// Loads a real photo as packed RGB (falls back to a synthetic gradient when data is missing).
cv::Mat real_rgb(int w, int h) {
  cv::Mat bgr = cv::imread(prism::test::data_dir() + "/images/baboon.jpg");
  if (bgr.empty()) {
    bgr.create(h, w, CV_8UC3);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) bgr.at<cv::Vec3b>(y, x) = cv::Vec3b(x * 255 / w, y * 255 / h, (x ^ y) & 255);
  }
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
  cv::resize(rgb, rgb, cv::Size(w, h), 0, 0, cv::INTER_AREA);
  return rgb;
}

HostImage from_mat_rgb(const cv::Mat& rgb, PixelFormat f) {
  // Packs RGB into RGBA (alpha varies) then converts with identity colour to `f` when RGB-like.
  HostImage im = make_image(f, rgb.cols, rgb.rows);
  for (int y = 0; y < rgb.rows; ++y)
    for (int x = 0; x < rgb.cols; ++x) {
      cv::Vec3b p = rgb.at<cv::Vec3b>(y, x);
      uint8_t* q = im.view.plane[0] + y * im.view.stride[0];
      if (f == PixelFormat::RGBA) {
        q += 4 * x;
        q[0] = p[0];
        q[1] = p[1];
        q[2] = p[2];
        q[3] = (x + y) & 255;
      }
      if (f == PixelFormat::BGRx) {
        q += 4 * x;
        q[0] = p[2];
        q[1] = p[1];
        q[2] = p[0];
        q[3] = 0;
      }
      if (f == PixelFormat::BGR) {
        q += 3 * x;
        q[0] = p[2];
        q[1] = p[1];
        q[2] = p[0];
      }
    }
  return im;
}

void run(const HostImage& src, HostImage& dst, Colorimetry sc = {}, Colorimetry dc = {}) {
  Plan p = make_plan(src.view.format, sc, src.view.width, src.view.height, dst.view.format, dc, dst.view.width,
                     dst.view.height);
  convert_cpu(p, src.view, dst.view);
}

}  // namespace

// Independent model: Y'CbCr from R'G'B' in double (BT.601/709, limited range), rounded.
TEST(ColorConvert, RgbToYuvMatchesDoublePrecisionModel) {
  for (YuvMatrix m : {YuvMatrix::BT601, YuvMatrix::BT709}) {
    const double kr = m == YuvMatrix::BT601 ? 0.299 : 0.2126, kb = m == YuvMatrix::BT601 ? 0.114 : 0.0722;
    const double kg = 1 - kr - kb;
    cv::Mat rgb = real_rgb(64, 48);
    HostImage src = from_mat_rgb(rgb, PixelFormat::RGBA);
    HostImage dst = make_image(PixelFormat::I420, 64, 48);
    run(src, dst, {}, Colorimetry{m, false});
    int max_d = 0;
    for (int y = 0; y < 48; ++y)
      for (int x = 0; x < 64; ++x) {
        cv::Vec3b p = rgb.at<cv::Vec3b>(y, x);
        double Y = kr * p[0] + kg * p[1] + kb * p[2];
        double ref = 16 + 219.0 / 255 * Y;
        max_d = std::max(max_d, std::abs(int(dst.view.plane[0][y * dst.view.stride[0] + x]) - int(std::lround(ref))));
      }
    // 1/256 coefficients and GStreamer's floor: at most 2 from the rounded exact value.
    EXPECT_LE(max_d, 2);
    // Chroma: average of the 2x2 block of exact Cb.
    int max_c = 0;
    for (int y = 0; y < 24; ++y)
      for (int x = 0; x < 32; ++x) {
        double cb = 0;
        for (int j = 0; j < 2; ++j)
          for (int i = 0; i < 2; ++i) {
            cv::Vec3b p = rgb.at<cv::Vec3b>(2 * y + j, 2 * x + i);
            double Y = kr * p[0] + kg * p[1] + kb * p[2];
            cb += (128 + 224.0 / 255 * (p[2] - Y) / (2 * (1 - kb))) / 4;
          }
        max_c = std::max(max_c, std::abs(int(dst.view.plane[1][y * dst.view.stride[1] + x]) - int(std::lround(cb))));
      }
    EXPECT_LE(max_c, 2);
  }
}

// OpenCV's I420 -> RGB (BT.601 limited range, chroma replicated) as the reference.
TEST(ColorConvert, I420ToRgbMatchesOpenCV) {
  std::mt19937 rng(1234);
  cv::Mat rgb = real_rgb(320, 240);
  cv::Mat yuv;
  cv::cvtColor(rgb, yuv, cv::COLOR_RGB2YUV_I420);  // 240*3/2 rows of 320
  HostImage src = make_image(PixelFormat::I420, 320, 240, 0);
  std::memcpy(src.storage[0].data(), yuv.data, 320 * 240);
  std::memcpy(src.storage[1].data(), yuv.data + 320 * 240, 160 * 120);
  std::memcpy(src.storage[2].data(), yuv.data + 320 * 240 + 160 * 120, 160 * 120);
  HostImage dst = make_image(PixelFormat::BGR, 320, 240, 0);
  run(src, dst);
  cv::Mat ref;
  cv::cvtColor(yuv, ref, cv::COLOR_YUV2BGR_I420);
  DiffStats s = diff(dst.storage[0].data(), ref.data, ref.total() * 3);
  EXPECT_LE(s.max, 2) << "mean " << s.mean;
  EXPECT_LT(s.mean, 0.6);
}

TEST(ColorConvert, RgbToGrayMatchesOpenCV) {
  cv::Mat rgb = real_rgb(257, 129);
  HostImage src = from_mat_rgb(rgb, PixelFormat::BGR);
  HostImage dst = make_image(PixelFormat::GRAY8, 257, 129, 0);
  run(src, dst);
  cv::Mat ref;
  cv::cvtColor(rgb, ref, cv::COLOR_RGB2GRAY);
  DiffStats s = diff(dst.storage[0].data(), ref.data, ref.total());
  EXPECT_LE(s.max, 2);
  EXPECT_LT(s.mean, 0.6);
}

// Packed RGB reorderings are exact; alpha survives RGBA -> RGBA scaling of a constant alpha.
TEST(ColorConvert, PackedRgbReorderIsExact) {
  cv::Mat rgb = real_rgb(77, 31);
  HostImage rgba = from_mat_rgb(rgb, PixelFormat::RGBA);
  HostImage bgr = make_image(PixelFormat::BGR, 77, 31);
  HostImage bgrx = make_image(PixelFormat::BGRx, 77, 31);
  HostImage back = make_image(PixelFormat::RGBA, 77, 31);
  run(rgba, bgr);
  run(bgr, bgrx);
  run(bgrx, back);
  for (int y = 0; y < 31; ++y)
    for (int x = 0; x < 77; ++x) {
      const uint8_t* a = rgba.view.plane[0] + y * rgba.view.stride[0] + 4 * x;
      const uint8_t* b = back.view.plane[0] + y * back.view.stride[0] + 4 * x;
      ASSERT_EQ(a[0], b[0]);
      ASSERT_EQ(a[1], b[1]);
      ASSERT_EQ(a[2], b[2]);
      ASSERT_EQ(b[3], 255);  // BGR/BGRx carry no alpha: opaque
      ASSERT_EQ(bgrx.view.plane[0][y * bgrx.view.stride[0] + 4 * x + 3], 255);
    }
}

// The six packed RGB layouts against OpenCV's byte orders: RGBA -> each, byte for byte as
// cv::cvtColor orders them (the padding byte of RGBx/BGRx is 255, alpha kept where there is one),
// and each back to RGBA.
TEST(ColorConvert, EveryPackedRgbLayoutIsOpenCVsByteOrder) {
  const int W = 45, H = 23;
  const cv::Mat rgb = real_rgb(W, H);
  HostImage rgba = from_mat_rgb(rgb, PixelFormat::RGBA);
  const cv::Mat rgba_mat(H, W, CV_8UC4, rgba.view.plane[0], size_t(rgba.view.stride[0]));
  struct Case {
    PixelFormat f;
    int code;  // cv::cvtColor from RGBA; -1: copy
    bool pad;  // 4th byte is padding, 255
  };
  for (const Case& c :
       {Case{PixelFormat::RGBA, -1, false}, Case{PixelFormat::BGRA, cv::COLOR_RGBA2BGRA, false},
        Case{PixelFormat::RGBx, -1, true}, Case{PixelFormat::BGRx, cv::COLOR_RGBA2BGRA, true},
        Case{PixelFormat::RGB, cv::COLOR_RGBA2RGB, false}, Case{PixelFormat::BGR, cv::COLOR_RGBA2BGR, false}}) {
    HostImage out = make_image(c.f, W, H);
    run(rgba, out);
    cv::Mat want = rgba_mat.clone();
    if (c.code >= 0) cv::cvtColor(rgba_mat, want, c.code);
    if (c.pad) want.forEach<cv::Vec4b>([](cv::Vec4b& p, const int*) { p[3] = 255; });
    const size_t row = size_t(W) * want.elemSize();
    for (int y = 0; y < H; ++y)
      ASSERT_EQ(std::memcmp(out.view.plane[0] + y * out.view.stride[0], want.ptr(y), row), 0)
          << format_name(c.f) << " row " << y;
    HostImage back = make_image(PixelFormat::RGBA, W, H);
    run(out, back);
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        for (int k = 0; k < 4; ++k) {
          const int a = rgba.view.plane[0][y * rgba.view.stride[0] + 4 * x + k];
          const int b = back.view.plane[0][y * back.view.stride[0] + 4 * x + k];
          const bool alpha = c.f == PixelFormat::RGBA || c.f == PixelFormat::BGRA;
          ASSERT_EQ(b, k < 3 || alpha ? a : 255) << format_name(c.f) << " " << x << "," << y << " byte " << k;
        }
  }
}

// YUY2 and UYVY: 4:2:2 bytes read and written where they lie. Their luma is I420's exactly both
// ways; I420 -> 4:2:2 repeats each 4:2:0 chroma sample on both rows of its block; 4:2:2 -> I420
// averages the two rows' samples (rounded half up); and 4:2:2 -> RGB matches OpenCV's
// COLOR_YUV2RGB_YUY2 / _UYVY as I420 does.
TEST(ColorConvert, PackedYuv422IsWhereItLies) {
  const int W = 64, H = 40;
  std::mt19937 rng(42);
  HostImage i420 = make_image(PixelFormat::I420, W, H);
  for (int p = 0; p < 3; ++p)
    for (uint8_t& b : i420.storage[p]) b = uint8_t(16 + rng() % 220);
  for (PixelFormat f : {PixelFormat::YUY2, PixelFormat::UYVY}) {
    const bool yuy2 = f == PixelFormat::YUY2;
    const int yo = yuy2 ? 0 : 1, uo = yuy2 ? 1 : 0, vo = yuy2 ? 3 : 2;
    HostImage packed = make_image(f, W, H);
    run(i420, packed);
    for (int y = 0; y < H; ++y) {
      const uint8_t* row = packed.view.plane[0] + y * packed.view.stride[0];
      for (int x = 0; x < W; ++x)
        ASSERT_EQ(row[4 * (x / 2) + yo + 2 * (x % 2)], i420.view.plane[0][y * i420.view.stride[0] + x]);
      for (int x = 0; x < W / 2; ++x) {
        ASSERT_EQ(row[4 * x + uo], i420.view.plane[1][(y / 2) * i420.view.stride[1] + x]) << y << "," << x;
        ASSERT_EQ(row[4 * x + vo], i420.view.plane[2][(y / 2) * i420.view.stride[2] + x]) << y << "," << x;
      }
    }
    // Rows of the packed frame with chroma of their own, then back to I420.
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W / 2; ++x) {
        packed.view.plane[0][y * packed.view.stride[0] + 4 * x + uo] = uint8_t(16 + rng() % 220);
        packed.view.plane[0][y * packed.view.stride[0] + 4 * x + vo] = uint8_t(16 + rng() % 220);
      }
    HostImage back = make_image(PixelFormat::I420, W, H);
    run(packed, back);
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x)
        ASSERT_EQ(back.view.plane[0][y * back.view.stride[0] + x],
                  packed.view.plane[0][y * packed.view.stride[0] + 4 * (x / 2) + yo + 2 * (x % 2)]);
    for (int cy = 0; cy < H / 2; ++cy)
      for (int cx = 0; cx < W / 2; ++cx)
        for (int k = 1; k <= 2; ++k) {
          const int o = k == 1 ? uo : vo;
          const int a = packed.view.plane[0][(2 * cy) * packed.view.stride[0] + 4 * cx + o];
          const int b = packed.view.plane[0][(2 * cy + 1) * packed.view.stride[0] + 4 * cx + o];
          // Each row's pair averages two equal samples, then the block averages four: (2a + 2b + 2) / 4.
          ASSERT_EQ(back.view.plane[k][cy * back.view.stride[k] + cx], (2 * a + 2 * b + 2) / 4) << cy << "," << cx;
        }
    // Against OpenCV (BT.601, limited range, as ours by default), on a real photo.
    const cv::Mat rgb = real_rgb(320, 240);
    HostImage src = from_mat_rgb(rgb, PixelFormat::RGBA);
    HostImage yuv = make_image(f, 320, 240, 0);
    run(src, yuv);
    const cv::Mat yuv_mat(240, 320, CV_8UC2, yuv.view.plane[0], size_t(yuv.view.stride[0]));
    HostImage ours = make_image(PixelFormat::RGB, 320, 240, 0);
    run(yuv, ours);
    cv::Mat ref;
    cv::cvtColor(yuv_mat, ref, yuy2 ? cv::COLOR_YUV2RGB_YUY2 : cv::COLOR_YUV2RGB_UYVY);
    const DiffStats s = diff(ours.storage[0].data(), ref.data, ref.total() * 3);
    EXPECT_LE(s.max, 2) << format_name(f) << " mean " << s.mean;
    EXPECT_LT(s.mean, 0.6) << format_name(f);
  }
}

// Upscaling is bilinear with centred pixels, as OpenCV's INTER_LINEAR.
TEST(ColorConvert, UpscaleMatchesOpenCVBilinear) {
  cv::Mat rgb = real_rgb(160, 90);
  HostImage src = from_mat_rgb(rgb, PixelFormat::BGR);
  HostImage dst = make_image(PixelFormat::BGR, 413, 301, 0);
  run(src, dst);
  cv::Mat bgr, ref;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  cv::resize(bgr, ref, cv::Size(413, 301), 0, 0, cv::INTER_LINEAR);
  DiffStats s = diff(dst.storage[0].data(), ref.data, ref.total() * 3);
  EXPECT_LE(s.max, 1);
  EXPECT_LT(s.mean, 0.3);
}

// Downscaling is 2-tap bilinear too (videoscale's default): compare with a double-precision model.
TEST(ColorConvert, DownscaleMatchesDoubleBilinear) {
  for (auto [dw, dh] : {std::pair{100, 75}, std::pair{37, 19}, std::pair{320, 60}}) {
    cv::Mat rgb = real_rgb(320, 240);
    cv::Mat gray;
    cv::cvtColor(rgb, gray, cv::COLOR_RGB2GRAY);
    HostImage src = make_image(PixelFormat::GRAY8, 320, 240);
    for (int y = 0; y < 240; ++y) std::memcpy(src.view.plane[0] + y * src.view.stride[0], gray.ptr(y), 320);
    HostImage dst = make_image(PixelFormat::GRAY8, dw, dh);
    run(src, dst);
    auto taps = [](int i, int sl, int dl, std::vector<std::pair<int, double>>& t) {
      const double scale = double(sl) / dl, r = 1.0;  // 2-tap bilinear, as videoscale
      const double c = (i + 0.5) * scale - 0.5;
      t.clear();
      for (int k = int(std::floor(c - r)); k <= int(std::ceil(c + r)); ++k) {
        double w = r - std::abs(k - c);
        if (w > 0) t.push_back({std::clamp(k, 0, sl - 1), w});
      }
    };
    std::vector<std::pair<int, double>> tx, ty;
    int max_d = 0;
    for (int y = 0; y < dh; ++y) {
      taps(y, 240, dh, ty);
      for (int x = 0; x < dw; ++x) {
        taps(x, 320, dw, tx);
        double acc = 0, wsum = 0;
        for (auto [yy, wy] : ty)
          for (auto [xx, wx] : tx) {
            acc += wy * wx * gray.at<uint8_t>(yy, xx);
            wsum += wy * wx;
          }
        int ref = int(std::lround(acc / wsum));
        max_d = std::max(max_d, std::abs(ref - int(dst.view.plane[0][y * dst.view.stride[0] + x])));
      }
    }
    EXPECT_LE(max_d, 1) << dw << "x" << dh;
  }
}

// Odd sizes through 4:2:0 and back stay close to the original and touch no padding.
TEST(ColorConvert, OddSizesRoundTripAndRespectStrides) {
  for (PixelFormat yuv : {PixelFormat::NV12, PixelFormat::I420, PixelFormat::YUY2, PixelFormat::UYVY}) {
    cv::Mat rgb = real_rgb(33, 17);
    cv::GaussianBlur(rgb, rgb, cv::Size(5, 5), 2.0);  // smooth, so 4:2:0 loses little
    HostImage src = from_mat_rgb(rgb, PixelFormat::RGBA);
    HostImage mid = make_image(yuv, 33, 17, 5, 0xAB);
    HostImage back = make_image(PixelFormat::RGBA, 33, 17, 3, 0xAB);
    run(src, mid);
    run(mid, back);
    int max_d = 0;
    for (int y = 0; y < 17; ++y)
      for (int x = 0; x < 33; ++x)
        for (int c = 0; c < 3; ++c)
          max_d = std::max(max_d, std::abs(int(src.view.plane[0][y * src.view.stride[0] + 4 * x + c]) -
                                           int(back.view.plane[0][y * back.view.stride[0] + 4 * x + c])));
    EXPECT_LE(max_d, 24) << format_name(yuv);
    if (is_yuv422(yuv))  // the last pair of an odd width is whole: its second luma repeats the first
      for (int y = 0; y < 17; ++y) {
        const uint8_t* q = mid.view.plane[0] + y * mid.view.stride[0] + 4 * 16;
        ASSERT_EQ(yuv == PixelFormat::YUY2 ? q[2] : q[3], yuv == PixelFormat::YUY2 ? q[0] : q[1]) << y;
      }
    // padding bytes untouched
    int rb, rows;
    prism::test::plane_geometry(yuv, 33, 17, 0, &rb, &rows);
    for (int y = 0; y < rows; ++y)
      for (int x = rb; x < mid.view.stride[0]; ++x) ASSERT_EQ(mid.view.plane[0][y * mid.view.stride[0] + x], 0xAB);
  }
}

TEST(ColorConvert, GrayAndYuvShareLuma) {
  std::mt19937 rng(7);
  HostImage g = make_image(PixelFormat::GRAY8, 20, 10);
  prism::test::fill_random(g, rng);
  HostImage nv12 = make_image(PixelFormat::NV12, 20, 10);
  HostImage g2 = make_image(PixelFormat::GRAY8, 20, 10);
  run(g, nv12);
  run(nv12, g2);
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 20; ++x) {
      ASSERT_EQ(g.view.plane[0][y * g.view.stride[0] + x], nv12.view.plane[0][y * nv12.view.stride[0] + x]);
      ASSERT_EQ(g.view.plane[0][y * g.view.stride[0] + x], g2.view.plane[0][y * g2.view.stride[0] + x]);
    }
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 20; ++x) ASSERT_EQ(nv12.view.plane[1][y * nv12.view.stride[1] + x], 128);
}

TEST(ColorConvert, RejectsBadSizes) {
  EXPECT_THROW(make_plan(PixelFormat::RGBA, {}, 0, 10, PixelFormat::NV12, {}, 10, 10), std::invalid_argument);
  EXPECT_THROW(make_plan(PixelFormat::RGBA, {}, 10, 10, PixelFormat::NV12, {}, 10, -1), std::invalid_argument);
}
