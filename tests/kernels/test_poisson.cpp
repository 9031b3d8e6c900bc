// CPU path of the seamless clone against OpenCV 4.6's cv::seamlessClone (see poisson_cases.h).
#include <gtest/gtest.h>
#include <opencv2/imgcodecs.hpp>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>

#include "poisson/opencv_dft.h"
#include "poisson_cases.h"
#include "poisson_yuv_cases.h"
#include "prism_test.h"

using namespace prism::test;
namespace poisson = prism::poisson;

namespace {

cv::Mat ours_cpu(const CloneCase& c) {
  cv::Mat out = c.dst.clone();
  poisson::clone_cpu(make_job(c, out));
  return out;
}

void check_sizes(const std::vector<std::pair<int, int>>& sizes, const cv::Mat& src_image, const cv::Mat& dst_image,
                 unsigned seed) {
  std::mt19937 rng(seed);
  for (auto [w, h] : sizes)
    for (int mode : {cv::NORMAL_CLONE, cv::MIXED_CLONE, cv::MONOCHROME_TRANSFER})
      for (int kind : {0, 1, 2}) {
        const cv::Size dst_size(std::max(64, w + 20), std::max(48, h + 12));
        CloneCase c =
            make_case(src_image.empty() ? "random" : "real", w, h, dst_size, mode, kind, src_image, dst_image, rng);
        const cv::Mat ours = ours_cpu(c), ref = opencv_clone(c);
        EXPECT_TRUE(matches_opencv(c, ours, ref));
        // The CPU path runs OpenCV's transform sequence: it reproduces it bit for bit.
        EXPECT_EQ(compare(ours, ref).differing, 0u) << c.name;
      }
}

cv::Mat real(const char* name) {
  const std::string path = data_dir() + "/images/" + name;
  return cv::imread(path, cv::IMREAD_COLOR);
}

// clone_yuv_cpu written out: the rectangle's planes, colorconvert to RGBA, clone_cpu into it, back.
void clone_yuv_by_hand(const cc::Image& frame, const cc::Colorimetry& cm, poisson::CloneJob job) {
  const poisson::Box r = poisson::yuv_rectangle(job.placement.dst, frame.width, frame.height);
  cc::Image rect = frame;
  rect.width = r.width;
  rect.height = r.height;
  rect.plane[0] += static_cast<int64_t>(r.y) * frame.stride[0] + r.x;
  if (frame.format == cc::PixelFormat::NV12) {
    rect.plane[1] += static_cast<int64_t>(r.y / 2) * frame.stride[1] + r.x;
  } else {
    rect.plane[1] += static_cast<int64_t>(r.y / 2) * frame.stride[1] + r.x / 2;
    rect.plane[2] += static_cast<int64_t>(r.y / 2) * frame.stride[2] + r.x / 2;
  }
  std::vector<uint8_t> rgba(static_cast<size_t>(r.width) * r.height * 4);
  cc::Image rgba_image;
  rgba_image.format = cc::PixelFormat::RGBA;
  rgba_image.width = r.width;
  rgba_image.height = r.height;
  rgba_image.plane[0] = rgba.data();
  rgba_image.stride[0] = r.width * 4;
  cc::convert_cpu(cc::make_plan(frame.format, cm, r.width, r.height, cc::PixelFormat::RGBA, cm, r.width, r.height),
                  rect, rgba_image);
  job.background = {rgba.data(), r.width, r.height, r.width * 4, 4, 0, 1, 2};
  job.placement.dst.x -= r.x;
  job.placement.dst.y -= r.y;
  poisson::clone_cpu(job);
  cc::convert_cpu(cc::make_plan(cc::PixelFormat::RGBA, cm, r.width, r.height, frame.format, cm, r.width, r.height),
                  rgba_image, rect);
}

}  // namespace

TEST(PoissonMaskBox, IgnoresTheMasksOuterFrameAndFindsNonZeroBox) {
  cv::Mat m(10, 12, CV_8U, cv::Scalar(0));
  m.at<uint8_t>(0, 5) = 255;  // outer frame: ignored, as OpenCV zeroes it
  m.at<uint8_t>(9, 0) = 255;
  EXPECT_TRUE(poisson::mask_box({m.data, m.cols, m.rows, (int64_t)m.step, 1}).empty());
  m.at<uint8_t>(2, 3) = 1;  // any non-zero value counts, not only 255
  m.at<uint8_t>(6, 8) = 128;
  const poisson::Box b = poisson::mask_box({m.data, m.cols, m.rows, (int64_t)m.step, 1});
  EXPECT_EQ(b, (poisson::Box{3, 2, 6, 5}));
  // Alpha channel of an RGBA image as the mask (step 4, offset 3).
  cv::Mat rgba(10, 12, CV_8UC4, cv::Scalar(9, 9, 9, 0));
  rgba.at<cv::Vec4b>(4, 4)[3] = 255;
  const poisson::Box a = poisson::mask_box({rgba.data + 3, rgba.cols, rgba.rows, (int64_t)rgba.step, 4});
  EXPECT_EQ(a, (poisson::Box{4, 4, 1, 1}));
}

TEST(PoissonPlace, CentreOfTheBoxLandsOnPAndClipsAtTheEdges) {
  const poisson::Box box{5, 7, 11, 6};
  poisson::Placement p = poisson::place(box, 50, 40, 100, 80);
  EXPECT_FALSE(p.clipped);
  EXPECT_EQ(p.dst, (poisson::Box{45, 37, 11, 6}));  // 50 - 11/2, 40 - 6/2
  EXPECT_EQ(p.src, box);
  p = poisson::place(box, 2, 1, 100, 80);  // roi_d = (-3, -2): cut on the left and top
  EXPECT_TRUE(p.clipped);
  EXPECT_EQ(p.dst, (poisson::Box{0, 0, 8, 4}));
  EXPECT_EQ(p.src, (poisson::Box{8, 9, 8, 4}));
  p = poisson::place(box, 98, 79, 100, 80);  // cut on the right and bottom
  EXPECT_EQ(p.dst, (poisson::Box{93, 76, 7, 4}));
  EXPECT_EQ(p.src, (poisson::Box{5, 7, 7, 4}));
  p = poisson::place(box, 500, 40, 100, 80);  // wholly outside
  EXPECT_TRUE(p.clipped);
  EXPECT_FALSE(p.solvable());
  EXPECT_FALSE(poisson::place(poisson::Box{}, 5, 5, 100, 80).solvable());
  // xpos/ypos at the ends of int's range: wholly outside, no signed overflow (UBSan in tools/sanitize)
  for (const int v : {INT_MIN, INT_MIN + 1, INT_MAX - 1, INT_MAX}) {
    p = poisson::place(box, v, v, 100, 80);
    EXPECT_TRUE(p.clipped) << v;
    EXPECT_FALSE(p.solvable()) << v;
  }
  p = poisson::place(box, 50, INT_MIN, 100, 80);
  EXPECT_FALSE(p.solvable());
}

TEST(PoissonCpu, MatchesOpenCVOnSmallBoxesRandom) {
  check_sizes({{3, 3}, {3, 5}, {4, 3}, {5, 4}, {7, 9}, {16, 9}, {33, 47}}, {}, {}, 1);
}

TEST(PoissonCpu, MatchesOpenCVOnReferenceSizesRandom) { check_sizes({{154, 100}, {300, 194}}, {}, {}, 2); }

// 360 - 1 = 359 and 258 - 1 = 257 are prime: DFT lengths 720 = 2*359+2 and 516 = 2*257+2.
TEST(PoissonCpu, MatchesOpenCVOnPrimeLengthsRandom) { check_sizes({{360, 258}, {241, 199}}, {}, {}, 3); }

TEST(PoissonCpu, MatchesOpenCVOnRealImages) {
  PRISM_NEED_FILE(data_dir() + "/images/fruits.jpg");
  PRISM_NEED_FILE(data_dir() + "/images/baboon.jpg");
  check_sizes({{154, 100}, {301, 197}}, real("baboon.jpg"), real("fruits.jpg"), 4);
}

TEST(PoissonCpu, MatchesOpenCVAt592x592) {
  PRISM_NEED_FILE(data_dir() + "/images/fruits.jpg");
  std::mt19937 rng(5);
  for (int mode : {cv::NORMAL_CLONE, cv::MIXED_CLONE, cv::MONOCHROME_TRANSFER}) {
    CloneCase c =
        make_case("real", 592, 592, cv::Size(1920, 1080), mode, 0, real("fruits.jpg"), real("baboon.jpg"), rng);
    const cv::Mat ours = ours_cpu(c), ref = opencv_clone(c);
    EXPECT_EQ(compare(ours, ref).differing, 0u) << c.name;
  }
}

// 2400x1552 takes OpenCV about 40 s: run with PRISM_LARGE_TESTS=1 (the GPU suite does).
TEST(PoissonCpu, MatchesOpenCVAt1200x776And2400x1552) {
  std::mt19937 rng(6);
  CloneCase c = make_case("random", 1200, 776, cv::Size(1920, 1080), cv::MIXED_CLONE, 2, {}, {}, rng);
  EXPECT_EQ(compare(ours_cpu(c), opencv_clone(c)).differing, 0u) << c.name;
  const char* large = std::getenv("PRISM_LARGE_TESTS");
  if (!large || std::string(large) != "1") {
    std::cerr << "*** 2400x1552 skipped (set PRISM_LARGE_TESTS=1) ***\n";
    return;
  }
  c = make_case("random", 2400, 1552, cv::Size(3840, 2160), cv::NORMAL_CLONE, 2, {}, {}, rng);
  EXPECT_EQ(compare(ours_cpu(c), opencv_clone(c)).differing, 0u) << c.name;
}

TEST(PoissonCpu, EmptyMaskAndWhollyOutsideLeaveTheBackgroundUnchanged) {
  std::mt19937 rng(7);
  CloneCase c = make_case("random", 20, 20, cv::Size(64, 48), cv::NORMAL_CLONE, 0, {}, {}, rng);
  cv::Mat out = c.dst.clone();
  poisson::CloneJob job = make_job(c, out);
  job.placement = poisson::place(job.placement.src, 1000, 1000, out.cols, out.rows);
  poisson::clone_cpu(job);
  EXPECT_EQ(compare(out, c.dst).differing, 0u);
  c.mask.setTo(0);
  out = c.dst.clone();
  poisson::clone_cpu(make_job(c, out));
  EXPECT_EQ(compare(out, c.dst).differing, 0u);
}

// A box cut at the background's edge is solved as if the mask's box were the cut box: with a mask
// that is non-zero over the whole box, that equals OpenCV given the mask cut to the visible part.
TEST(PoissonCpu, ClippedOverlayEqualsOpenCVOnTheVisiblePart) {
  std::mt19937 rng(8);
  for (int mode : {cv::NORMAL_CLONE, cv::MIXED_CLONE, cv::MONOCHROME_TRANSFER}) {
    CloneCase c = make_case("random", 40, 30, cv::Size(100, 80), mode, 1, {}, {}, rng);
    c.mask.setTo(0);
    const cv::Rect box(5, 3, 40, 30);
    c.mask(box).setTo(255);
    c.p = cv::Point(6, 70);  // roi_d = (-14, 55, 40, 30): 14 columns cut left, 5 rows cut at the bottom
    cv::Mat ours = c.dst.clone();
    poisson::CloneJob job = make_job(c, ours);
    ASSERT_TRUE(job.placement.clipped);
    ASSERT_EQ(job.placement.dst, (poisson::Box{0, 55, 26, 25}));
    poisson::clone_cpu(job);
    CloneCase visible = c;
    visible.mask = cv::Mat::zeros(c.mask.size(), CV_8U);
    visible.mask(cv::Rect(5 + 14, 3, 26, 25)).setTo(255);
    visible.p = cv::Point(0 + 26 / 2, 55 + 25 / 2);
    EXPECT_TRUE(matches_opencv(visible, ours, opencv_clone(visible)));
  }
}

// The replay of OpenCV's float DFT (poisson/opencv_dft.h) against cv::dft itself: every output bit
// for bit on random complex rows, for lengths covering every butterfly (radix 2, 4, 3, 5, generic
// odd radices up to 2399, powers of two, products of several odd primes), whole and pruned, forward
// and inverse with DFT_SCALE.
TEST(OpenCvDftReplay, EqualsCvDftBitForBit) {
  namespace ocv = prism::poisson::ocvdft;
  std::mt19937 rng(21);
  std::vector<int> lengths = {4,   6,    8,    10,   12,   14,   16,   18,   20,   22,   26,  30,
                              32,  36,   50,   64,   98,   100,  128,  150,  210,  256,  294, 486,
                              512, 1000, 1024, 1182, 1438, 2048, 2154, 2310, 3102, 4096, 4798};
  for (int i = 0; i < 20; ++i) lengths.push_back(2 * std::uniform_int_distribution<int>(2, 2500)(rng));
  std::uniform_real_distribution<float> val(-300.f, 300.f);
  for (int n0 : lengths) {
    std::vector<int> perm;
    std::vector<ocv::Cf> wave;
    const ocv::Plan plan = ocv::make_plan(n0, perm, wave);
    cv::Mat x(1, n0, CV_32FC2);
    for (int i = 0; i < n0; ++i) x.at<cv::Vec2f>(0, i) = {val(rng), i % 3 == 0 ? 0.f : val(rng)};
    for (bool inverse : {false, true}) {
      cv::Mat ref;
      cv::dft(x, ref, inverse ? cv::DFT_ROWS + cv::DFT_SCALE + cv::DFT_INVERSE : cv::DFT_ROWS);
      for (int prune : {n0, 33}) {
        std::vector<ocv::Cf> work(n0);
        for (int i = 0; i < n0; ++i) work[i] = {x.at<cv::Vec2f>(0, perm[i])[0], x.at<cv::Vec2f>(0, perm[i])[1]};
        ocv::run_host(plan, wave, work.data(), prune, inverse);
        int bad = 0;
        for (int k = 0; k < std::min(prune, n0); ++k) {
          const cv::Vec2f r = ref.at<cv::Vec2f>(0, k);
          if (std::memcmp(&r[0], &work[k].re, 4) || std::memcmp(&r[1], &work[k].im, 4)) ++bad;
        }
        EXPECT_EQ(bad, 0) << (inverse ? "inverse, " : "") << "length " << n0 << " (factors "
                          << ::testing::PrintToString(ocv::factorize(n0)) << "), outputs below " << prune;
      }
    }
  }
}

// The RGB round trip of a YUV 4:2:0 background: the rectangle covers the destination box grown by
// one pixel, with even origin and even end or the frame's edge.
TEST(PoissonYuv, RectangleHoldsTheGrownBoxInWholeChromaSamples) {
  for (const poisson::Box dst : {poisson::Box{10, 7, 20, 15}, poisson::Box{0, 0, 9, 5}, poisson::Box{1, 1, 3, 3},
                                 poisson::Box{91, 70, 9, 10}, poisson::Box{90, 69, 9, 10}}) {
    const int w = 100, h = 80;
    const poisson::Box r = poisson::yuv_rectangle(dst, w, h);
    EXPECT_EQ(r.x % 2, 0);
    EXPECT_EQ(r.y % 2, 0);
    EXPECT_TRUE((r.x + r.width) % 2 == 0 || r.x + r.width == w);
    EXPECT_TRUE((r.y + r.height) % 2 == 0 || r.y + r.height == h);
    EXPECT_LE(r.x, std::max(0, dst.x - 1));
    EXPECT_LE(r.y, std::max(0, dst.y - 1));
    EXPECT_GE(r.x + r.width, std::min(w, dst.x + dst.width + 1));
    EXPECT_GE(r.y + r.height, std::min(h, dst.y + dst.height + 1));
    EXPECT_LE(r.x + r.width, w);
    EXPECT_LE(r.y + r.height, h);
  }
}

// clone_yuv_cpu equals the conversion and clone written out with colorconvert and clone_cpu, bit for
// bit, in NV12 and I420, for boxes inside, at odd positions and clipped at every edge.
TEST(PoissonYuv, CpuEqualsConversionAndCloneByHand) {
  std::mt19937 rng(41);
  const cc::Colorimetry bt709{cc::YuvMatrix::BT709, false}, bt601_full{cc::YuvMatrix::BT601, true};
  for (cc::PixelFormat format : {cc::PixelFormat::NV12, cc::PixelFormat::I420})
    for (cv::Point p : {cv::Point(-1, -1), cv::Point(61, 47), cv::Point(80, 60), cv::Point(3, 90), cv::Point(158, 2),
                        cv::Point(150, 115)})
      for (int mode : {cv::NORMAL_CLONE, cv::MIXED_CLONE, cv::MONOCHROME_TRANSFER}) {
        CloneCase c = make_case("random", 40, 30, cv::Size(160, 120), mode, mode - 1, {}, {}, rng);
        if (p.x >= 0) c.p = p;
        const cc::Colorimetry cm = mode == cv::MIXED_CLONE ? bt601_full : bt709;
        YuvFrame ours(format, c.dst, cm), by_hand(format, c.dst, cm);
        cv::Mat unused = c.dst.clone();
        const poisson::CloneJob job = make_job(c, unused);
        ASSERT_TRUE(job.placement.solvable()) << c.name << " at " << c.p;
        std::vector<uint8_t> scratch(static_cast<size_t>(c.dst.cols) * c.dst.rows * 4);
        poisson::clone_yuv_cpu(poisson::YuvBackground{ours.image, cm, scratch.data()}, job);
        clone_yuv_by_hand(by_hand.image, cm, job);
        EXPECT_EQ(ours.bytes, by_hand.bytes) << cc::format_name(format) << " " << c.name << " at " << c.p;
        const YuvFrame before(format, c.dst, cm);
        EXPECT_NE(ours.bytes, before.bytes) << "nothing was cloned: " << c.name;
      }
}
