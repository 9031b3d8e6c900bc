// Texture identification on the CPU: features, geometric verification against a known homography,
// the gallery's file format, atomic writes and refusal of corrupt files, and search/verify over
// fresh random textures (smoothed noise at two scales: blob-rich like wood or stone).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <opencv2/calib3d.hpp>
#include <opencv2/features2d.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/durable_file.h"
#include "image/decode.h"
#include "prism_test.h"
#include "gallery_v1.h"
#include "sift/sift.h"
#include "test_env.h"
#include "texture_cases.h"
#include "texture/gallery.h"
#include "texture/index.h"
#include "texture/verify.h"

namespace prism {
namespace {

namespace fs = std::filesystem;
using test::random_homography;
using test::random_texture;
using texture::Gallery;
using texture::GalleryEntry;
using texture::GalleryError;

double corner_error(const cv::Matx33d& a, const cv::Matx33d& b, int w, int h) {
  double worst = 0;
  for (cv::Point2d c : {cv::Point2d(0, 0), cv::Point2d(w, 0), cv::Point2d(w, h), cv::Point2d(0, h)}) {
    const cv::Vec3d p = a * cv::Vec3d(c.x, c.y, 1), q = b * cv::Vec3d(c.x, c.y, 1);
    worst = std::max(worst, std::hypot(p[0] / p[2] - q[0] / q[2], p[1] / p[2] - q[1] / q[2]));
  }
  return worst;
}

// 8-bit RootSIFT is round(512 x) of the unit FP16 RootSIFT (up to the FP16 rounding: within half a
// step, or saturated at 255), and the FP16 copy is there only when asked for.
TEST(TextureFeatures, StrongestFirstUnitRootSiftAndOriginalCoordinates) {
  std::mt19937 rng(std::random_device{}());
  const cv::Mat img = random_texture(rng, 640, 480);
  texture::FeatureParams both;
  both.keep_fp16 = true;
  const texture::Features f = texture::extract_features(img, both);
  ASSERT_GT(f.count(), 100);
  ASSERT_LE(f.count(), match::kSlot);
  EXPECT_EQ(f.width, 640);
  EXPECT_EQ(f.height, 480);
  ASSERT_EQ(f.descriptors.size(), size_t(f.count()) * match::kDim);
  ASSERT_EQ(f.descriptors_fp16.size(), f.descriptors.size());
  for (int i = 1; i < f.count(); ++i) ASSERT_GE(f.keypoints[i - 1].response, f.keypoints[i].response);
  int saturated = 0;
  for (int i = 0; i < f.count(); ++i) {
    double n2 = 0;
    for (int k = 0; k < match::kDim; ++k) {
      const size_t o = size_t(i) * match::kDim + k;
      const double x = match::half_to_float(f.descriptors_fp16[o]);
      n2 += x * x;
      if (512 * x >= 255.5) {
        ASSERT_EQ(f.descriptors[o], 255) << i << " " << k;
        ++saturated;
      } else {
        ASSERT_LE(std::abs(f.descriptors[o] - 512 * x), 0.5 + 512 * x * 1e-3) << i << " " << k;
      }
    }
    ASSERT_NEAR(n2, 1.0, 5e-3) << i;
  }
  EXPECT_LT(saturated, f.count());  // saturation is rare on real SIFT
  const texture::Features plain = texture::extract_features(img);
  EXPECT_TRUE(plain.descriptors_fp16.empty());
  EXPECT_EQ(plain.descriptors, f.descriptors);
  // Detection on a downscaled copy reports keypoints in the original frame.
  texture::FeatureParams small;
  small.max_side = 320;
  const texture::Features g = texture::extract_features(img, small);
  ASSERT_GT(g.count(), 50);
  float max_x = 0;
  for (const auto& k : g.keypoints) {
    ASSERT_GE(k.x, -1.f);
    ASSERT_LT(k.x, 641.f);
    max_x = std::max(max_x, k.x);
  }
  EXPECT_GT(max_x, 400.f);  // not squeezed into the 320-pixel detection image
  small.max_features = 50;
  EXPECT_EQ(texture::extract_features(img, small).count(), 50);
}

// A keypoint of a reduced copy maps back about the pixel edge: reduced pixel x covers the
// original's [x r, (x + 1) r).
TEST(TextureFeatures, ToOriginalPixelsScalesAboutThePixelEdge) {
  texture::Features f;
  f.width = 500;
  f.height = 376;
  f.keypoints = {{0, 0, 3, 45, 1, 0}, {10.25f, 99.5f, 8, 10, 0.5f, 1}};
  texture::Features one = f;
  texture::to_original_pixels(one, 1000, 751, 1);
  EXPECT_EQ(one.width, 1000);
  EXPECT_EQ(one.height, 751);
  EXPECT_EQ(one.keypoints[1].x, 10.25f);
  texture::to_original_pixels(f, 3999, 3001, 8);
  EXPECT_EQ(f.width, 3999);
  EXPECT_EQ(f.height, 3001);
  EXPECT_EQ(f.keypoints[0].x, 3.5f);  // the centre of the original's pixels 0..7
  EXPECT_EQ(f.keypoints[0].y, 3.5f);
  EXPECT_EQ(f.keypoints[0].size, 24.f);
  EXPECT_EQ(f.keypoints[1].x, 85.5f);  // (10.25 + 0.5) 8 - 0.5
  EXPECT_EQ(f.keypoints[1].y, 799.5f);
  EXPECT_EQ(f.keypoints[1].angle, 10.f);
  EXPECT_EQ(f.keypoints[1].octave, 1);
  EXPECT_THROW(texture::to_original_pixels(f, 1, 1, 0), std::invalid_argument);
}

// A large JPEG decoded reduced (1/2 here) and extracted, its features put in the original's
// pixels, has the size and keypoints of the full decode's features: the strongest keypoints land
// within 2 pixels of each other (the two detection images differ only by the decode).
TEST(TextureFeatures, AReducedJpegDecodeHasTheFullDecodesSizeAndKeypoints) {
  std::mt19937 rng(52);
  cv::Mat big;
  cv::resize(random_texture(rng, 1024, 768), big, cv::Size(2560, 1920), 0, 0, cv::INTER_CUBIC);
  std::vector<uint8_t> jpg;
  ASSERT_TRUE(cv::imencode(".jpg", big, jpg, {cv::IMWRITE_JPEG_QUALITY, 92}));
  texture::FeatureParams params;  // max_side 1024
  const cv::Mat full_grey = prism::image::decode_grey(jpg.data(), jpg.size());
  const texture::Features full = texture::extract_features(full_grey, params);
  const prism::image::ReducedGrey d = prism::image::decode_grey_reduced(jpg.data(), jpg.size(), params.max_side);
  ASSERT_EQ(d.reduction, 2);
  ASSERT_EQ(d.grey.size(), cv::Size(1280, 960));
  texture::Features reduced = texture::extract_features(d.grey, params);
  const texture::Features as_decoded = reduced;
  texture::to_original_pixels(reduced, int(d.width), int(d.height), d.reduction);
  EXPECT_EQ(full.width, 2560);
  EXPECT_EQ(reduced.width, 2560);
  EXPECT_EQ(reduced.height, 1920);
  ASSERT_GT(full.count(), 200);
  ASSERT_GT(reduced.count(), 200);
  // Of full's strongest 100, how many have a keypoint of `f` within 2 pixels and of a like size.
  const auto landed = [&](const texture::Features& f) {
    int n = 0;
    for (int i = 0; i < 100; ++i) {
      const texture::Keypoint& a = full.keypoints[i];
      for (const texture::Keypoint& b : f.keypoints)
        if (std::hypot(a.x - b.x, a.y - b.y) <= 2 && b.size > 0.8f * a.size && b.size < 1.25f * a.size) {
          ++n;
          break;
        }
    }
    return n;
  };
  const int same = landed(reduced);
  std::printf(
      "of the full decode's strongest 100 keypoints, %d within 2 px in the reduced decode's (%d before "
      "to_original_pixels)\n",
      same, landed(as_decoded));
  EXPECT_GE(same, 80);
  EXPECT_LT(landed(as_decoded), 20);  // in the reduced image's pixels they would not
}

// The real images of kernels/sift's tests (under test::data_dir()), shrunk to at most 640 pixels
// wide: our CPU SIFT is one plain thread.
const char* const kRealImages[] = {"images/box.png", "oxford-affine/graf/img1.png", "images/butterfly.jpg",
                                   "textures/kth-tips-gray/aluminium_foil/15-scale_1_im_1_grey.png"};
cv::Mat real_image(const std::string& path) {
  cv::Mat grey = cv::imread(path, cv::IMREAD_GRAYSCALE);
  if (grey.cols > 640) cv::resize(grey, grey, cv::Size(640, grey.rows * 640 / grey.cols), 0, 0, cv::INTER_AREA);
  return grey;
}

// cv::SIFT's keypoints, from per-thread lists in no fixed order, come out of extract_features
// sorted by an independent statement of the order (response descending, then y, x, size, angle,
// octave, then as found): the same keypoints and descriptors in the same order on real images.
TEST(TextureFeatures, OpenCvsKeypointsAreSortedStrongestFirst) {
  for (const char* name : kRealImages) {
    const std::string path = test::data_dir() + "/" + name;
    PRISM_NEED_FILE(path);
    const cv::Mat grey = real_image(path);
    ASSERT_FALSE(grey.empty()) << path;
    std::vector<cv::KeyPoint> kps;
    cv::Mat desc;
    cv::SIFT::create(match::kSlot)->detectAndCompute(grey, cv::noArray(), kps, desc);
    std::vector<int> want(kps.size());
    std::iota(want.begin(), want.end(), 0);
    std::sort(want.begin(), want.end(), [&](int a, int b) {
      const auto key = [&](int i) {
        const cv::KeyPoint& k = kps[size_t(i)];
        return std::make_tuple(-k.response, k.pt.y, k.pt.x, k.size, k.angle, k.octave, i);
      };
      return key(a) < key(b);
    });
    want.resize(std::min(want.size(), size_t(match::kSlot)));
    const texture::Features f = texture::extract_features(grey);
    ASSERT_EQ(f.count(), int(want.size())) << name;
    std::vector<uint8_t> root(match::kDim);
    for (size_t i = 0; i < want.size(); ++i) {
      const cv::KeyPoint& k = kps[size_t(want[i])];
      ASSERT_EQ(f.keypoints[i].x, k.pt.x) << name << " " << i;
      ASSERT_EQ(f.keypoints[i].y, k.pt.y) << name << " " << i;
      ASSERT_EQ(f.keypoints[i].response, k.response) << name << " " << i;
      ASSERT_EQ(f.keypoints[i].octave, k.octave) << name << " " << i;
      match::rootsift_u8(desc.ptr<float>(want[i]), 1, root.data());
      ASSERT_TRUE(std::equal(root.begin(), root.end(), f.descriptors.begin() + long(i) * match::kDim))
          << name << " " << i;
    }
  }
}

// kernels/sift lists its keypoints strongest first in texture::strongest_first's order, strictly
// (no two equal), so to_features takes them as they come: sorting them again, as it sorts
// cv::SIFT's, would leave every keypoint in place. The CPU path stands for the CUDA path here
// (SiftGpu.EqualsTheCpuPathBitForBit: the same keypoints in the same order).
TEST(TextureFeatures, OurSiftListsKeypointsInTheFeaturesOrder) {
  sift::Params p;
  p.nfeatures = match::kSlot;  // as extract_features asks
  for (const char* name : kRealImages) {
    const std::string path = test::data_dir() + "/" + name;
    PRISM_NEED_FILE(path);
    const cv::Mat grey = real_image(path);
    ASSERT_FALSE(grey.empty()) << path;
    const sift::Result r = sift::detect_and_compute_cpu(grey, p);
    ASSERT_GT(r.keypoints.size(), 100u) << name;
    for (size_t i = 1; i < r.keypoints.size(); ++i) {
      ASSERT_TRUE(texture::strongest_first(r.keypoints[i - 1], r.keypoints[i])) << name << " " << i;
      ASSERT_FALSE(texture::strongest_first(r.keypoints[i], r.keypoints[i - 1])) << name << " " << i;
    }
    std::vector<cv::KeyPoint> sorted = r.keypoints;
    std::stable_sort(sorted.begin(), sorted.end(), texture::strongest_first);
    for (size_t i = 0; i < sorted.size(); ++i) {
      ASSERT_EQ(sorted[i].pt, r.keypoints[i].pt) << name << " " << i;
      ASSERT_EQ(sorted[i].response, r.keypoints[i].response) << name << " " << i;
    }
  }
}

// Enrolment's batch: each image's features as extract_features gives them (sizes, channels, a flat
// and a tiny image, the shrink of large images, a normalisation), a bad image named by position.
// The digest orders against a brute-force statement of each: every one a permutation; strongest the
// stored order; largest non-increasing in size; spread taking, in its first round, the strongest of every
// occupied cell of the 4 x 4 grid before any cell's second.
TEST(TextureFeatures, DigestOrdersArePermutationsWithTheirProperty) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  texture::Features f;
  f.width = 640, f.height = 480;
  const int n = 300;
  for (int i = 0; i < n; ++i) {
    texture::Keypoint k;
    // most keypoints in the top-left cell: a strongest-first digest would hold few others
    const bool crowded = rng() % 4 != 0;
    k.x = float(rng() % (crowded ? 160 : 640));
    k.y = float(rng() % (crowded ? 120 : 480));
    k.size = float(1 + rng() % 40);
    k.response = float(n - i);  // stored strongest first
    f.keypoints.push_back(k);
  }
  auto cell = [&](int i) {
    return std::min(3, int(f.keypoints[i].y * 4 / 480)) * 4 + std::min(3, int(f.keypoints[i].x * 4 / 640));
  };
  for (texture::DigestOrder o :
       {texture::DigestOrder::kStrongest, texture::DigestOrder::kSpread, texture::DigestOrder::kLargest}) {
    SCOPED_TRACE(texture::digest_order_name(o));
    EXPECT_EQ(texture::parse_digest_order(texture::digest_order_name(o)), o);
    const std::vector<int> order = texture::digest_order(f, o);
    std::vector<int> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    ASSERT_EQ(sorted, all);
    if (o == texture::DigestOrder::kStrongest) {
      EXPECT_EQ(order, all);
    }
    // The first k alone (an index's digest rows): the same k, the others in the stored order.
    for (int k : {1, 128, n - 1, n}) {
      const std::vector<int> part = texture::digest_order(f, o, k);
      ASSERT_EQ(part.size(), size_t(n));
      EXPECT_TRUE(std::equal(part.begin(), part.begin() + k, order.begin())) << k;
      EXPECT_TRUE(std::is_sorted(part.begin() + k, part.end())) << k;
    }
    if (o == texture::DigestOrder::kLargest) {
      for (int i = 1; i < n; ++i) EXPECT_GE(f.keypoints[order[i - 1]].size, f.keypoints[order[i]].size);
    }
    if (o == texture::DigestOrder::kSpread) {
      std::set<int> occupied;
      for (int i = 0; i < n; ++i) occupied.insert(cell(i));
      const size_t first_round = occupied.size();
      std::set<int> cells;
      for (size_t i = 0; i < first_round; ++i) {
        cells.insert(cell(order[i]));
        int stronger_in_cell = 0;  // it is its cell's strongest
        for (int j = 0; j < order[i]; ++j) stronger_in_cell += cell(j) == cell(order[i]);
        EXPECT_EQ(stronger_in_cell, 0);
        if (i > 0) {
          EXPECT_LT(order[i - 1], order[i]);  // within the round, strongest first
        }
      }
      EXPECT_EQ(cells, occupied);
    }
  }
  EXPECT_THROW(texture::parse_digest_order("weakest"), std::invalid_argument);
}

TEST(TextureFeatures, BatchesEqualOneByOne) {
  std::mt19937 rng(std::random_device{}());
  cv::Mat bgr;
  cv::cvtColor(random_texture(rng, 300, 200), bgr, cv::COLOR_GRAY2BGR);
  const std::vector<cv::Mat> images = {
      random_texture(rng, 320, 240), random_texture(rng, 1300, 500), bgr, cv::Mat(200, 200, CV_8U, cv::Scalar(90)),
      random_texture(rng, 6, 5),     random_texture(rng, 320, 240)};
  for (const char* n : {"none", "clahe-4-8"}) {
    texture::FeatureParams p;
    p.normalisation = texture::parse_normalisation(n);
    const std::vector<texture::Features> batch = texture::extract_features_batch(images, p);
    ASSERT_EQ(batch.size(), images.size());
    for (size_t i = 0; i < images.size(); ++i)
      EXPECT_EQ(test::features_difference(batch[i], texture::extract_features(images[i], p)), "")
          << n << ", image " << i;
    EXPECT_GT(batch[0].count(), 50) << n;
    EXPECT_EQ(batch[3].count(), 0) << n;
  }
  EXPECT_TRUE(texture::extract_features_batch({}).empty());
  try {
    texture::extract_features_batch({images[0], cv::Mat(10, 10, CV_32F)});
    ADD_FAILURE() << "a float image accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(image 1)"), std::string::npos) << e.what();
  }
}

TEST(TextureFeatures, BadImagesAreRefusedAndFlatImagesHaveNone) {
  EXPECT_THROW(texture::extract_features(cv::Mat()), std::invalid_argument);
  EXPECT_THROW(texture::extract_features(cv::Mat(10, 10, CV_32F)), std::invalid_argument);
  EXPECT_EQ(texture::extract_features(cv::Mat(200, 200, CV_8U, cv::Scalar(90))).count(), 0);
}

TEST(TextureVerify, RecoversAKnownHomography) {
  std::mt19937 rng(std::random_device{}());
  const cv::Mat img = random_texture(rng);
  const cv::Matx33d h = random_homography(rng, img.cols, img.rows);
  cv::Mat warped;
  cv::warpPerspective(img, warped, cv::Mat(h), img.size(), cv::INTER_LINEAR, cv::BORDER_REFLECT);
  texture::TextureIndex index(texture::Device::kCpu);
  index.build(std::vector<GalleryEntry>{GalleryEntry{"original", "", 0, texture::extract_features(img)}});
  const texture::SearchResult r = index.verify(texture::extract_features(warped), "original", {});
  ASSERT_TRUE(r.identified) << r.best.geometry.inliers;
  // The recovered homography maps the query (warped) to the gallery (original): the inverse of h.
  EXPECT_LT(corner_error(r.best.geometry.homography, h.inv(), img.cols, img.rows), 3.0);
  EXPECT_GT(r.best.geometry.query_box.area(), 0.3 * img.total());
  // What textureid reports: the gallery image's corners in the query, where h put them.
  EXPECT_EQ(r.best.gallery_size, img.size());
  const texture::GalleryInQuery g = texture::gallery_in_query(r.best.geometry.homography, r.best.gallery_size);
  ASSERT_TRUE(g.valid);
  EXPECT_LT(corner_error(g.homography, h, img.cols, img.rows), 3.0);
}

// Strong perspective (issue 45): a plane tilted 30-60 degrees before a pinhole camera, as the eval's
// perspective family makes it, verifies with every match an inlier. Before, the check against folded
// homographies read the determinant of the upper-left 2x2, which is the local scale only for a nearly
// affine homography, and turned away 7 of 511 such captures with 44-275 matches and 0 inliers. A
// mirrored view, a collapsed one and one whose horizon crosses the matches still verify nothing.
TEST(TextureVerify, AcceptsAStronglyTiltedPlaneAndRejectsFoldedOnes) {
  std::mt19937 rng(45);
  std::uniform_real_distribution<double> u(0, 1);
  const double w = 320, h = 240, f = 320;
  texture::Features query;
  query.width = int(w);
  query.height = int(h);
  std::vector<cv::Point2f> gallery;
  std::vector<texture::Correspondence> matches;
  for (int i = 0; i < 60; ++i) {
    gallery.emplace_back(float(10 + u(rng) * (w - 20)), float(10 + u(rng) * (h - 20)));
    matches.push_back({i, i, 0});
  }
  // Gallery pixels -> query pixels by `view`; the query's keypoints where it puts the gallery's.
  auto verify = [&](const cv::Matx33d& view) {
    query.keypoints.clear();
    for (const cv::Point2f& g : gallery) {
      const cv::Vec3d q = view * cv::Vec3d(g.x, g.y, 1);
      query.keypoints.push_back({float(q[0] / q[2]), float(q[1] / q[2]), 4.f, 0.f, 0.f, 0});
    }
    return texture::verify_geometry(query, gallery, matches);
  };
  for (int k = 0; k < 12; ++k) {
    const double tilt = (30 + 30 * u(rng)) * CV_PI / 180, axis = 2 * CV_PI * u(rng);
    cv::Matx33d r;
    cv::Rodrigues(cv::Vec3d(std::cos(axis), std::sin(axis), 0) * tilt, r);
    // The plane's point (x - w/2, y - h/2, 0) rotated, at distance f, projected with focal length f and
    // shrunk to a third about the frame's centre.
    const cv::Matx33d centre(1, 0, -w / 2, 0, 1, -h / 2, 0, 0, 1);
    const cv::Matx33d camera(f / 3, 0, w / 2, 0, f / 3, h / 2, 0, 0, 1);
    const cv::Matx33d plane(r(0, 0), r(0, 1), 0, r(1, 0), r(1, 1), 0, r(2, 0), r(2, 1), f);
    const cv::Matx33d view = camera * plane * centre;
    const texture::Verification v = verify(view);
    EXPECT_EQ(v.inliers, 60) << "tilt " << tilt * 180 / CV_PI << " about " << axis * 180 / CV_PI;
    EXPECT_GT(v.significance, 50);
  }
  EXPECT_EQ(verify(cv::Matx33d(-1, 0, w, 0, 1, 0, 0, 0, 1)).inliers, 0) << "mirrored";
  EXPECT_EQ(verify(cv::Matx33d(0.01, 0, 100, 0, 0.01, 100, 0, 0, 1)).inliers, 0) << "collapsed";
  // The line w = 0 through the middle of the gallery image: its two halves land on either side.
  EXPECT_EQ(verify(cv::Matx33d(1, 0, 0, 0, 1, 0, 1 / 160.0, 0, -1)).inliers, 0) << "horizon across the matches";
}

// chance_inlier against a brute-force count: the tolerance disc around a gallery point, pulled back into
// the query by a homography with perspective, covers (counted on a fine grid of query points) an area
// whose share of the query image, over the disc's share of the gallery image, is the factor by which
// chance_inlier raises kChanceInlier (never lowering it); a query at twice the gallery's resolution
// showing the same content changes nothing.
TEST(TextureVerify, ChanceInlierIsTheToleranceDiscsShareSeenFromTheQuery) {
  const double eps = 6.0;
  const cv::Size gallery(320, 240);
  for (const double zoom : {1.0, 0.5, 0.2, 0.12, 2.0}) {
    for (const cv::Size query : {cv::Size(320, 240), cv::Size(640, 480)}) {
      const double res = query.width / 320.0;  // query pixels per gallery-image pixel of the same content
      // Query -> gallery: the query's pixels back to the content's, the content zoomed about (160, 120)
      // and tilted (perspective row).
      const cv::Matx33d h = cv::Matx33d(zoom, 0, 160 * (1 - zoom), 0, zoom, 120 * (1 - zoom), 0.0004 * zoom, 0, 1) *
                            cv::Matx33d(1 / res, 0, 0, 0, 1 / res, 0, 0, 0, 1);
      const cv::Point2d c(150 * res, 110 * res);  // the inliers' centroid, in the query
      const cv::Vec3d hc = h * cv::Vec3d(c.x, c.y, 1);
      const double w = hc[2];
      const double jacobian = cv::determinant(h) / (w * w * w);
      const cv::Point2d gc(hc[0] / w, hc[1] / w);
      // The disc's preimage, counted on a grid of step `d` around c.
      const double reach = 1.5 * eps / std::sqrt(jacobian), d = reach / 400;
      long count = 0;
      for (double y = c.y - reach; y <= c.y + reach; y += d)
        for (double x = c.x - reach; x <= c.x + reach; x += d) {
          const cv::Vec3d g = h * cv::Vec3d(x, y, 1);
          const double dx = g[0] / g[2] - gc.x, dy = g[1] / g[2] - gc.y;
          count += dx * dx + dy * dy <= eps * eps;
        }
      const double query_share = count * d * d / query.area(), gallery_share = CV_PI * eps * eps / gallery.area();
      const double want = texture::kChanceInlier * std::max(1.0, query_share / gallery_share);
      EXPECT_NEAR(texture::chance_inlier(jacobian, query.area(), gallery.area()), std::min(1.0, want), 0.02 * want)
          << "zoom " << zoom << " query " << query;
    }
  }
  EXPECT_EQ(texture::chance_inlier(1.0, 0, 0), texture::kChanceInlier);  // sizes unknown: counted equal
  EXPECT_EQ(texture::chance_inlier(0.001, 76800, 76800), 1.0);           // capped: every match by chance
  EXPECT_EQ(texture::chance_inlier(0.0, 76800, 76800), 1.0);
  EXPECT_EQ(texture::chance_inlier(-0.5, 76800, 76800), 1.0);
}

// verify_geometry's significance uses chance_inlier of the homography found: a fit that squeezes the
// query's spread of matches onto a patch of the gallery (how wrong products fit, docs/TEXTUREID.md)
// counts for less than the same inliers of a re-capture, and a query at twice the gallery's resolution
// counts as one at the same.
TEST(TextureVerify, ASqueezingFitIsLessSignificant) {
  std::mt19937 rng(45);
  std::uniform_real_distribution<double> u(0, 1);
  texture::Features query;
  std::vector<texture::Correspondence> matches;
  std::vector<cv::Point2f> spread;
  for (int i = 0; i < 20; ++i) {
    spread.emplace_back(float(20 + u(rng) * 280), float(20 + u(rng) * 200));
    matches.push_back({i, i, 0});
  }
  // Query pixels -> gallery pixels by `h` for every match.
  auto verify = [&](const cv::Matx22d& a, double res) {
    query.width = int(320 * res);
    query.height = int(240 * res);
    query.keypoints.clear();
    std::vector<cv::Point2f> gallery;
    for (const cv::Point2f& p : spread) {
      query.keypoints.push_back({float(p.x * res), float(p.y * res), 4.f, 0.f, 0.f, 0});
      const cv::Vec2d g = a * cv::Vec2d(p.x - 160, p.y - 120);
      gallery.emplace_back(float(160 + g[0]), float(120 + g[1]));
    }
    return texture::verify_geometry(query, gallery, matches, {}, {320, 240});
  };
  const texture::Verification same = verify({1.0, 0.1, -0.1, 1.0}, 1);  // area scale 1.01
  ASSERT_EQ(same.inliers, 20);
  EXPECT_DOUBLE_EQ(same.chance, texture::kChanceInlier);
  EXPECT_DOUBLE_EQ(same.significance, texture::chance_significance(20, 20));
  const texture::Verification finer = verify({1.0, 0.1, -0.1, 1.0}, 2);
  ASSERT_EQ(finer.inliers, 20);
  EXPECT_NEAR(finer.chance, texture::kChanceInlier, 1e-9);
  const texture::Verification squeezed = verify({0.25, 0, 0, 0.2}, 1);  // area scale 0.05
  ASSERT_EQ(squeezed.inliers, 20);
  EXPECT_NEAR(squeezed.chance, texture::kChanceInlier / 0.05, 1e-5);  // (the homography from float points)
  EXPECT_EQ(squeezed.significance, texture::chance_significance(20, 20, squeezed.chance));
  EXPECT_LT(squeezed.significance, same.significance / 2);
}

// With digests (IndexOptions::host_digest_rows) a slot's rows are in digest order, the largest keypoints
// first; verification must map them back to their own keypoints: the same inliers and homography as an
// index whose slots keep the stored order.
TEST(TextureVerify, SlotsInDigestOrderVerifyAsStoredOnes) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const cv::Mat img = random_texture(rng);
  const cv::Matx33d h = random_homography(rng, img.cols, img.rows);
  cv::Mat warped;
  cv::warpPerspective(img, warped, cv::Mat(h), img.size(), cv::INTER_LINEAR, cv::BORDER_REFLECT);
  const texture::Features f = texture::extract_features(img);
  ASSERT_NE(texture::digest_order(f, texture::DigestOrder::kLargest),
            texture::digest_order(f, texture::DigestOrder::kStrongest));
  texture::IndexOptions o;
  o.device = texture::Device::kCpu;
  texture::TextureIndex plain(o);
  o.host_digest_rows = 128;
  texture::TextureIndex digested(o);
  for (texture::TextureIndex* x : {&plain, &digested})
    x->build(std::vector<GalleryEntry>{GalleryEntry{"original", "", 0, f}});
  const texture::Features q = texture::extract_features(warped);
  const texture::SearchResult a = plain.verify(q, "original", {}), b = digested.verify(q, "original", {});
  ASSERT_TRUE(b.identified) << b.best.geometry.inliers;
  EXPECT_EQ(b.best.score, a.best.score);
  EXPECT_EQ(b.best.geometry.matches, a.best.geometry.matches);
  EXPECT_EQ(b.best.geometry.inliers, a.best.geometry.inliers);
  EXPECT_LT(corner_error(b.best.geometry.homography, h.inv(), img.cols, img.rows), 3.0);
}

// The point p mapped by m, written out (x' = (m00 x + m01 y + m02) / (m20 x + m21 y + m22), ...).
cv::Point2d map_point(const cv::Matx33d& m, double x, double y) {
  const double z = m(2, 0) * x + m(2, 1) * y + m(2, 2);
  return {(m(0, 0) * x + m(0, 1) * y + m(0, 2)) / z, (m(1, 0) * x + m(1, 1) * y + m(1, 2)) / z};
}

// gallery_in_query inverts the query -> gallery homography verification finds: against random
// gallery -> query homographies g (their inverse given), it returns g scaled to [2][2] = 1 and the
// gallery image's outer corners mapped by g, clockwise from the top-left; degenerate cases are not
// valid.
TEST(TextureVerify, GalleryInQueryIsTheInverseWithTheGalleryCorners) {
  std::mt19937 rng(20261124);  // fixed: 1e-6 tolerances, a failure must replay
  std::uniform_real_distribution<double> scale(0.3, 3.0), shift(-200, 200);
  for (int t = 0; t < 200; ++t) {
    const int w = 50 + int(rng() % 600), h = 50 + int(rng() % 600);
    cv::Matx33d g = random_homography(rng, w, h);
    const double s = scale(rng);
    g = cv::Matx33d(s, 0, shift(rng), 0, s, shift(rng), 0, 0, 1) * g * (0.5 + scale(rng));  // any overall scale
    const texture::GalleryInQuery r = texture::gallery_in_query(g.inv(), cv::Size(w, h));
    ASSERT_TRUE(r.valid);
    for (int i = 0; i < 9; ++i)
      EXPECT_NEAR(r.homography.val[i], g.val[i] / g(2, 2), 1e-9 * (1 + std::abs(g.val[i] / g(2, 2))));
    const cv::Point2d corners[4] = {{-0.5, -0.5}, {w - 0.5, -0.5}, {w - 0.5, h - 0.5}, {-0.5, h - 0.5}};
    for (int i = 0; i < 4; ++i) {
      const cv::Point2d want = map_point(g, corners[i].x, corners[i].y);
      EXPECT_NEAR(r.quad[i].x, want.x, 1e-6);
      EXPECT_NEAR(r.quad[i].y, want.y, 1e-6);
    }
    // clockwise on screen (y down): positive signed area of the shoelace formula
    double area = 0;
    for (int i = 0; i < 4; ++i) area += r.quad[i].x * r.quad[(i + 1) % 4].y - r.quad[(i + 1) % 4].x * r.quad[i].y;
    EXPECT_GT(area, 0);
  }
  // A translation by (10, 20): the corners moved by it exactly.
  const texture::GalleryInQuery moved =
      texture::gallery_in_query(cv::Matx33d(1, 0, -10, 0, 1, -20, 0, 0, 1), cv::Size(100, 50));
  ASSERT_TRUE(moved.valid);
  EXPECT_EQ(moved.quad[0], cv::Point2d(9.5, 19.5));
  EXPECT_EQ(moved.quad[2], cv::Point2d(109.5, 69.5));
  // Singular, an empty gallery image, and a horizon through the image (a corner at or past infinity).
  EXPECT_FALSE(texture::gallery_in_query(cv::Matx33d::zeros(), cv::Size(100, 50)).valid);
  EXPECT_FALSE(texture::gallery_in_query(cv::Matx33d::eye(), cv::Size(0, 50)).valid);
  const cv::Matx33d horizon(1, 0, 0, 0, 1, 0, -0.02, 0, 1);  // z = 1 - 0.02 x: 0 at x = 50
  EXPECT_FALSE(texture::gallery_in_query(horizon.inv(), cv::Size(100, 50)).valid);
  EXPECT_TRUE(texture::gallery_in_query(horizon.inv(), cv::Size(40, 50)).valid);
}

// The significance is -log10 of a binomial upper tail: against a direct sum in long double over
// random (inliers, matches), the closed form p^n when every match is an inlier, and its order.
TEST(TextureVerify, SignificanceIsTheBinomialTailOfChanceInliers) {
  auto direct = [](int inliers, int matches, long double p = texture::kChanceInlier) {
    const int n = matches - 4, k = inliers - 4;
    long double tail = 0;
    for (int i = k; i <= n; ++i) {
      long double c = 1;  // C(n, i), built as a product
      for (int j = 1; j <= i; ++j) c = c * (n - i + j) / j;
      tail += c * std::pow(p, (long double)i) * std::pow(1 - p, (long double)(n - i));
    }
    return double(-std::log10(tail));
  };
  std::mt19937 rng(std::random_device{}());
  for (int t = 0; t < 2000; ++t) {
    const int matches = std::uniform_int_distribution<int>(5, 400)(rng);
    const int inliers = std::uniform_int_distribution<int>(5, std::min(matches, 60))(rng);
    const double want = direct(inliers, matches);
    EXPECT_NEAR(texture::chance_significance(inliers, matches), want, 1e-9 * std::max(1.0, want))
        << inliers << " of " << matches;
  }
  // Any chance (chance_inlier's): the same sum.
  for (int t = 0; t < 500; ++t) {
    const int matches = std::uniform_int_distribution<int>(5, 200)(rng);
    const int inliers = std::uniform_int_distribution<int>(5, std::min(matches, 40))(rng);
    const double p = std::pow(10.0, std::uniform_real_distribution<double>(-3, -0.1)(rng));
    const double want = direct(inliers, matches, p);
    EXPECT_NEAR(texture::chance_significance(inliers, matches, p), want, 1e-8 * std::max(1.0, want))
        << inliers << " of " << matches << " at " << p;
  }
  EXPECT_EQ(texture::chance_significance(50, 50, 1.0), 0.0);  // every match consistent by chance: no evidence
  EXPECT_GT(texture::chance_significance(20, 30), texture::chance_significance(20, 30, 0.05));
  for (int m = 5; m < 200; ++m) EXPECT_NEAR(texture::chance_significance(m, m), 2.0 * (m - 4), 1e-9 * m);
  EXPECT_EQ(texture::chance_significance(4, 100), 0.0);  // the RANSAC sample alone is no evidence
  EXPECT_EQ(texture::chance_significance(0, 0), 0.0);
  EXPECT_GT(texture::chance_significance(7, 7), texture::chance_significance(7, 14));
  EXPECT_GT(texture::chance_significance(8, 14), texture::chance_significance(7, 14));
  EXPECT_GT(texture::chance_significance(40, 400), 20.0);  // many inliers stay significant among many matches
}

TEST(TextureIndex, SearchFindsTheRightTextureAndRejectsStrangers) {
  std::mt19937 rng(std::random_device{}());
  std::vector<cv::Mat> images;
  std::vector<GalleryEntry> entries;
  for (int i = 0; i < 12; ++i) {
    images.push_back(random_texture(rng));
    entries.push_back({"t" + std::to_string(i), "", 0, texture::extract_features(images.back())});
  }
  entries.push_back({"empty", "", 0, {}});  // an image without features must not disturb anything
  texture::TextureIndex index(texture::Device::kCpu);
  index.build(entries);
  EXPECT_FALSE(index.on_gpu());
  for (int i : {0, 5, 11}) {
    cv::Mat q;
    cv::warpPerspective(images[i], q, cv::Mat(random_homography(rng, 320, 240)), images[i].size());
    cv::GaussianBlur(q, q, cv::Size(0, 0), 1.0);
    const texture::SearchResult r = index.search(texture::extract_features(q), {});
    EXPECT_TRUE(r.identified) << i;
    EXPECT_EQ(r.best.id, "t" + std::to_string(i));
    // The search's decision score pays for the candidates it tried (Bonferroni); verify's does not.
    ASSERT_FALSE(r.candidates.empty());
    EXPECT_NEAR(r.best.significance, r.best.geometry.significance - std::log10(double(r.candidates.size())), 1e-9);
    EXPECT_EQ(r.best.geometry.significance,
              texture::chance_significance(r.best.geometry.inliers, r.best.geometry.matches, r.best.geometry.chance));
    EXPECT_GE(r.best.geometry.chance, texture::kChanceInlier);
    const texture::SearchResult right = index.verify(texture::extract_features(q), r.best.id, {});
    EXPECT_EQ(right.best.significance, right.best.geometry.significance);
    const texture::SearchResult wrong =
        index.verify(texture::extract_features(q), "t" + std::to_string((i + 1) % 12), {});
    EXPECT_FALSE(wrong.identified) << wrong.best.geometry.inliers;
  }
  const texture::SearchResult stranger = index.search(texture::extract_features(random_texture(rng)), {});
  EXPECT_FALSE(stranger.identified) << stranger.best.id << " " << stranger.best.geometry.inliers;
  const texture::SearchResult flat =
      index.search(texture::extract_features(cv::Mat(100, 100, CV_8U, cv::Scalar(3))), {});
  EXPECT_FALSE(flat.identified);
  EXPECT_THROW(index.verify(texture::Features{}, "nobody", {}), texture::IndexError);
  texture::TextureIndex empty(texture::Device::kCpu);
  empty.clear();
  EXPECT_FALSE(empty.search(entries[0].features, {}).identified);
}

// An entry of `n` random features (by default a random count that is enough to enrol).
GalleryEntry small_entry(const std::string& id, std::mt19937& rng, int n = -1) {
  GalleryEntry e;
  e.id = id;
  e.source = "/images/" + id + ".png";
  e.features.width = 64;
  e.features.height = 48;
  if (n < 0) n = int(rng() % 40) + texture::kMinFeatures;
  for (int i = 0; i < n; ++i) e.features.keypoints.push_back({float(i), float(2 * i), 3.f, 45.f, 0.01f * i, i});
  e.features.descriptors.resize(size_t(n) * match::kDim);
  for (auto& d : e.features.descriptors) d = uint8_t(rng());
  return e;
}

// The entry checksum (common/durable_file.h) against its definition, one bit at a time (reflected
// polynomial 0xEDB88320): every length around the 8-byte steps, at every alignment.
TEST(DurableFile, Crc32IsTheBitwiseCrc32AtEveryLengthAndAlignment) {
  auto bitwise = [](const uint8_t* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
  };
  const std::string check = "123456789";  // the catalogued check value of CRC-32/ISO-HDLC
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(check.data()), check.size()), 0xCBF43926u);
  EXPECT_EQ(crc32(nullptr, 0), 0u);
  std::mt19937 rng(32);
  std::vector<uint8_t> bytes(100008);
  for (auto& b : bytes) b = uint8_t(rng());
  for (size_t at = 0; at < 8; ++at) {
    for (size_t n = 0; n < 70; ++n)
      ASSERT_EQ(crc32(bytes.data() + at, n), bitwise(bytes.data() + at, n)) << at << " " << n;
    EXPECT_EQ(crc32(bytes.data() + at, 100000), bitwise(bytes.data() + at, 100000)) << at;
  }
}

TEST(TextureGallery, EntriesRoundTripThroughTheDirectory) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  EXPECT_THROW(Gallery::open(g), GalleryError);  // not created without `create`
  {
    Gallery gallery = Gallery::open(g, true);
    for (const char* id : {"b-2", "a.1", "c_3"}) gallery.add(small_entry(id, rng));
    EXPECT_THROW(gallery.add(small_entry("a.1", rng)), GalleryError);
    EXPECT_THROW(gallery.update(small_entry("zz", rng)), GalleryError);
    EXPECT_THROW(gallery.remove("zz"), GalleryError);
    EXPECT_THROW(gallery.add(small_entry("../evil", rng)), GalleryError);
    EXPECT_THROW(gallery.add(small_entry(".hidden", rng)), GalleryError);
    GalleryEntry updated = small_entry("b-2", rng);
    gallery.update(updated);
    gallery.remove("c_3");
  }
  const Gallery reopened = Gallery::open(g);
  ASSERT_EQ(reopened.entries().size(), 2u);
  EXPECT_EQ(reopened.entries()[0].id, "a.1");  // sorted by id
  EXPECT_EQ(reopened.entries()[1].id, "b-2");
  EXPECT_EQ(reopened.find("c_3"), nullptr);
  const GalleryEntry& b = *reopened.find("b-2");
  EXPECT_EQ(b.source, "/images/b-2.png");
  EXPECT_GT(b.enrolled_unix, 0);
  EXPECT_EQ(b.features.descriptors.size(), size_t(b.features.count()) * match::kDim);
  EXPECT_EQ(Gallery::encode(Gallery::decode(Gallery::encode(b), "x")), Gallery::encode(b));
}

// Version 2 stores the 8-bit descriptors and the collection byte for byte; an invalid collection is
// refused by name when written and when read.
TEST(TextureGallery, VersionTwoStoresEightBitDescriptorsAndTheCollection) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  GalleryEntry e = small_entry("p1", rng);
  e.collection = "lot-2024.07";
  {
    Gallery gallery = Gallery::open(g, true);
    gallery.add(e);
    gallery.add(small_entry("p2", rng));  // no collection
    GalleryEntry bad = small_entry("p3", rng);
    for (const std::string& c : std::vector<std::string>{"a/b", ".x", "-x", std::string(129, 'c'), "tab\tx"}) {
      bad.collection = c;
      try {
        gallery.add(bad);
        ADD_FAILURE() << "collection '" << c << "' accepted";
      } catch (const GalleryError& err) {
        EXPECT_NE(std::string(err.what()).find("invalid collection '" + c + "'"), std::string::npos) << err.what();
      }
    }
  }
  const Gallery reopened = Gallery::open(g);
  ASSERT_EQ(reopened.entries().size(), 2u);
  const GalleryEntry& a = *reopened.find("p1");
  EXPECT_EQ(a.collection, "lot-2024.07");
  EXPECT_EQ(a.version, 2);
  EXPECT_EQ(a.features.descriptors, e.features.descriptors);
  EXPECT_EQ(reopened.find("p2")->collection, "");
  // The file: 48-byte header, version 2, then one byte per descriptor component.
  const std::vector<uint8_t> bytes = Gallery::encode(a);
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, 2u);
  EXPECT_EQ(bytes.size(), 48 + a.id.size() + a.source.size() + a.collection.size() +
                              size_t(a.features.count()) * (sizeof(texture::Keypoint) + match::kDim) + 4);
  EXPECT_EQ(fs::file_size(g / "entries" / "p1.tex"), bytes.size());
  // A stored collection that breaks the rules (CRC recomputed, so only the check can catch it).
  GalleryEntry odd = a;
  odd.collection = "lot-2024.07";
  std::vector<uint8_t> forged = Gallery::encode(odd);
  forged[48 + odd.id.size() + odd.source.size()] = '/';
  const uint32_t crc = crc32(forged.data(), forged.size() - 4);
  std::memcpy(forged.data() + forged.size() - 4, &crc, 4);
  try {
    Gallery::decode(forged, "f.tex");
    ADD_FAILURE() << "decoded an invalid collection";
  } catch (const GalleryError& err) {
    EXPECT_NE(std::string(err.what()).find("f.tex: corrupt gallery entry: invalid collection '/ot-2024.07'"),
              std::string::npos)
        << err.what();
  }
}

// A version-1 entry (FP16 RootSIFT, written by the old encoder) is read with its descriptors
// converted by match::half_to_u8, which equals the 8-bit extraction but where FP16 rounding moved a
// component across a rounding boundary (by one step, rarely).
TEST(TextureGallery, VersionOneEntriesAreReadConverted) {
  std::mt19937 rng(std::random_device{}());
  texture::FeatureParams both;
  both.keep_fp16 = true;
  const texture::Features f = texture::extract_features(random_texture(rng), both);
  ASSERT_GT(f.count(), 20);
  const std::vector<uint8_t> v1 = test::encode_gallery_entry_v1("old-1", "/img/old.png", 1700000000, f);
  const GalleryEntry e = Gallery::decode(v1, "old-1.tex");
  EXPECT_EQ(e.version, 1);
  EXPECT_EQ(e.id, "old-1");
  EXPECT_EQ(e.source, "/img/old.png");
  EXPECT_EQ(e.collection, "");
  EXPECT_EQ(e.enrolled_unix, 1700000000);
  EXPECT_EQ(e.features.width, f.width);
  EXPECT_EQ(e.features.height, f.height);
  ASSERT_EQ(e.features.count(), f.count());
  EXPECT_EQ(std::memcmp(e.features.keypoints.data(), f.keypoints.data(), f.keypoints.size() * sizeof(f.keypoints[0])),
            0);
  ASSERT_EQ(e.features.descriptors.size(), f.descriptors.size());
  size_t differ = 0;
  for (size_t i = 0; i < f.descriptors.size(); ++i) {
    ASSERT_EQ(e.features.descriptors[i], match::half_to_u8(f.descriptors_fp16[i])) << i;
    ASSERT_LE(std::abs(int(e.features.descriptors[i]) - int(f.descriptors[i])), 1) << i;
    differ += e.features.descriptors[i] != f.descriptors[i];
  }
  EXPECT_LT(differ, f.descriptors.size() / 20);  // about 1.4%: FP16 steps are 1/8 of a u8 step here
  EXPECT_TRUE(e.features.descriptors_fp16.empty());
  // Re-encoded, it is a version-2 entry; a damaged version-1 entry is refused like any other.
  EXPECT_EQ(Gallery::decode(Gallery::encode(e), "x").version, 2);
  std::vector<uint8_t> damaged = v1;
  damaged[v1.size() / 2] ^= 1;
  EXPECT_THROW(Gallery::decode(damaged, "old-1.tex"), GalleryError);
  std::vector<uint8_t> v3 = v1;
  v3[8] = 3;
  try {
    Gallery::decode(v3, "old-1.tex");
    ADD_FAILURE() << "decoded version 3";
  } catch (const GalleryError& err) {
    EXPECT_NE(std::string(err.what()).find("format version 3, this build reads 1 and 2"), std::string::npos);
  }
}

// A gallery of version-1 entries (the old encoder) opens and searches as the same gallery written
// in version 2; migrate rewrites the entries, and one stopped half way leaves every entry readable,
// the rest still version 1, and a second run finishes them. Writes meanwhile store version 2.
TEST(TextureGallery, VersionOneGalleryOpensSearchesTheSameAndMigrates) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path v1 = dir.path() / "v1", v2 = dir.path() / "v2";
  std::vector<cv::Mat> images;
  Gallery fresh = Gallery::open(v2, true);
  Gallery::open(v1, true);
  texture::FeatureParams both;
  both.keep_fp16 = true;
  for (int i = 0; i < 6; ++i) {
    images.push_back(random_texture(rng));
    const texture::Features f = texture::extract_features(images.back(), both);
    const std::string id = "p" + std::to_string(i);
    const std::vector<uint8_t> bytes = test::encode_gallery_entry_v1(id, "/img/" + id, 1700000000 + i, f);
    std::ofstream(v1 / "entries" / (id + ".tex"), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    fresh.add(Gallery::decode(bytes, id));  // the same converted entry, written as version 2
  }
  const Gallery old = Gallery::open(v1);
  ASSERT_EQ(old.entries().size(), 6u);
  for (const GalleryEntry& e : old.entries()) EXPECT_EQ(e.version, 1);
  texture::TextureIndex a(texture::Device::kCpu), b(texture::Device::kCpu);
  a.build(old.entries());
  b.build(Gallery::open(v2).entries());
  cv::Mat q;
  cv::warpPerspective(images[3], q, cv::Mat(random_homography(rng, 320, 240)), images[3].size());
  const texture::Features qf = texture::extract_features(q);
  const texture::SearchResult ra = a.search(qf, {}), rb = b.search(qf, {});
  EXPECT_TRUE(ra.identified);
  EXPECT_EQ(ra.best.id, "p3");
  EXPECT_EQ(a.scores(qf, {}), b.scores(qf, {}));
  EXPECT_EQ(ra.best.geometry.inliers, rb.best.geometry.inliers);

  // Stopped after 3 entries (as a kill between two entries would).
  Gallery writer = Gallery::open(v1, false, Gallery::Load::kNoEntries);
  int seen = 0;
  EXPECT_THROW(writer.migrate([&](const std::string&, bool migrated) {
    EXPECT_TRUE(migrated);
    if (++seen == 3) throw std::runtime_error("stop");
  }),
               std::runtime_error);
  std::vector<GalleryEntry> half = Gallery::open(v1).entries();
  ASSERT_EQ(half.size(), 6u);
  EXPECT_EQ(std::count_if(half.begin(), half.end(), [](const GalleryEntry& e) { return e.version == 2; }), 3);
  GalleryEntry changed = Gallery::decode(Gallery::encode(half[5]), "x");
  changed.collection = "lot-7";
  writer.update(changed);  // a write in a half-migrated gallery stores version 2
  EXPECT_EQ(writer.read_entry(half[5].id).version, 2);
  EXPECT_EQ(writer.read_entry(half[5].id).collection, "lot-7");
  const std::vector<GalleryEntry> now = Gallery::open(v1).entries();
  const auto left = std::count_if(now.begin(), now.end(), [](const GalleryEntry& e) { return e.version == 1; });
  EXPECT_TRUE(left == 2 || left == 3) << left;  // 3, less the updated one if it was among them
  EXPECT_EQ(writer.migrate(), left);            // the rest
  EXPECT_EQ(writer.migrate(), 0);
  const Gallery done = Gallery::open(v1);
  ASSERT_EQ(done.entries().size(), 6u);
  const Gallery expected = Gallery::open(v2);
  for (size_t i = 0; i < 6; ++i) {
    const GalleryEntry& e = done.entries()[i];
    const GalleryEntry& want = expected.entries()[i];
    EXPECT_EQ(e.version, 2);
    EXPECT_EQ(e.id, want.id);
    EXPECT_EQ(e.source, want.source);
    EXPECT_EQ(e.enrolled_unix, want.enrolled_unix);
    EXPECT_EQ(e.features.descriptors, want.features.descriptors);
  }
  texture::TextureIndex c(texture::Device::kCpu);
  c.build(done.entries());
  EXPECT_EQ(c.scores(qf, {}), b.scores(qf, {}));
}

// Found by tests/fuzz/fuzz_gallery: an entry without features (written before kMinFeatures) made
// decode pass a null pointer to memcpy (UBSan, tools/sanitize); a CRC-valid entry declaring a width
// or height beyond int came back with a negative size.
TEST(TextureGallery, DecodeTakesAnEntryWithoutFeaturesAndRefusesImpossibleSizes) {
  std::mt19937 rng(7);
  const GalleryEntry none = small_entry("none", rng, 0);
  const std::vector<uint8_t> bytes = Gallery::encode(none);
  const GalleryEntry back = Gallery::decode(bytes, "entries/none.tex");
  EXPECT_EQ(back.id, "none");
  EXPECT_EQ(back.features.count(), 0);
  EXPECT_TRUE(back.features.descriptors.empty());
  EXPECT_EQ(Gallery::encode(back), bytes);
  for (const size_t field : {20, 24}) {  // the header's width, then height (after magic, version, dim, count)
    std::vector<uint8_t> wide = Gallery::encode(small_entry("wide", rng));
    const uint32_t huge = 0x80000000u;
    std::memcpy(wide.data() + field, &huge, 4);
    const uint32_t crc = prism::crc32(wide.data(), wide.size() - 4);
    std::memcpy(wide.data() + wide.size() - 4, &crc, 4);
    try {
      Gallery::decode(wide, "entries/wide.tex");
      ADD_FAILURE() << "decoded an entry of size 2^31 (field at byte " << field << ")";
    } catch (const GalleryError& e) {
      EXPECT_NE(std::string(e.what()).find("entries/wide.tex: corrupt gallery entry: image size"), std::string::npos)
          << e.what();
    }
  }
}

// Creating a gallery takes a new or empty folder (or one a killed creator left behind); a folder of
// other files is refused untouched, never silently turned into a gallery.
// A gallery created with a default before its deployment's normalisation was known takes that one
// while it holds nothing; once it holds an entry it keeps its record (its entries were extracted so).
TEST(TextureGallery, RenormalisingTouchesOnlyAnEmptyGallery) {
  test::TempDir dir;
  std::mt19937 rng(11);
  const fs::path g = dir.path() / "g";
  const texture::Normalisation clahe = texture::parse_normalisation("clahe-4-8");
  Gallery::open(g, true, Gallery::Load::kEntries, clahe);
  EXPECT_TRUE(Gallery::renormalise_if_empty(g, texture::Normalisation{}));
  EXPECT_EQ(Gallery::read_normalisation(g), texture::Normalisation{});
  EXPECT_EQ(Gallery::open(g).normalisation(), texture::Normalisation{});
  EXPECT_TRUE(Gallery::renormalise_if_empty(g, clahe));
  {
    Gallery gallery = Gallery::open(g);
    gallery.add(small_entry("p1", rng));
  }
  EXPECT_FALSE(Gallery::renormalise_if_empty(g, texture::Normalisation{}));
  EXPECT_EQ(Gallery::read_normalisation(g), clahe);
  EXPECT_EQ(Gallery::open(g).entries().size(), 1u);
  EXPECT_THROW(Gallery::renormalise_if_empty(dir.path() / "none", clahe), GalleryError);
}

TEST(TextureGallery, CreatingRefusesAFolderThatIsNotEmptyAndNotAGallery) {
  test::TempDir dir;
  const fs::path g = dir.path() / "photos";
  fs::create_directory(g);
  { std::ofstream(g / "notes.txt") << "keep me"; }
  try {
    Gallery::open(g, true);
    ADD_FAILURE() << "a folder of other files became a gallery";
  } catch (const GalleryError& e) {
    EXPECT_EQ(std::string(e.what()),
              g.string() + ": not a Prism texture gallery and not empty; choose a new or empty folder");
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(g)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"notes.txt"});  // no marker, lock or entries/ written
  std::ifstream in(g / "notes.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep me");

  // An empty folder, and one a creator was killed in (entries/, .lock, its temporary marker).
  const fs::path empty = dir.path() / "empty";
  fs::create_directory(empty);
  EXPECT_NO_THROW(Gallery::open(empty, true));
  EXPECT_NO_THROW(Gallery::open(empty));
  const fs::path killed = dir.path() / "killed";
  fs::create_directories(killed / "entries");
  { std::ofstream(killed / ".lock"); }
  { std::ofstream(killed / ".tmp-marker-12345") << "prism"; }
  { std::ofstream(killed / "entries" / ".tmp-p1-12345") << "half"; }
  EXPECT_NO_THROW(Gallery::open(killed, true));
  EXPECT_NO_THROW(Gallery::open(killed));
}

TEST(TextureGallery, CorruptOrStrayFilesAreRefusedByName) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery::open(g, true).add(small_entry("p1", rng));
  const fs::path file = g / "entries" / "p1.tex";
  std::vector<char> bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto expect_refused = [&](const std::vector<char>& content, const std::string& why) {
    std::ofstream(file, std::ios::binary | std::ios::trunc).write(content.data(), std::streamsize(content.size()));
    fs::remove(g / "pack.log");  // else its intact copy of the entry is read
    try {
      Gallery::open(g);
      ADD_FAILURE() << "opened a gallery with a corrupt entry (" << why << ")";
    } catch (const GalleryError& e) {
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  std::vector<char> flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;
  expect_refused(flipped, "CRC-32");
  expect_refused(std::vector<char>(bytes.begin(), bytes.begin() + bytes.size() / 3), "size");
  expect_refused(std::vector<char>(10, 'x'), "truncated");
  std::vector<char> magic = bytes;
  magic[0] = 'X';
  expect_refused(magic, "magic");
  std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
  EXPECT_EQ(Gallery::open(g).entries().size(), 1u);
  // The same bytes under another product's name.
  fs::copy_file(file, g / "entries" / "p2.tex");
  EXPECT_THROW(Gallery::open(g), GalleryError);
  fs::remove(g / "entries" / "p2.tex");
  std::ofstream(g / "entries" / "notes.txt") << "hello";
  EXPECT_THROW(Gallery::open(g), GalleryError);
  fs::remove(g / "entries" / "notes.txt");
  std::ofstream(g / "gallery.prism", std::ios::trunc) << "something else\n";
  EXPECT_THROW(Gallery::open(g), GalleryError);
}

// What Gallery::open(g) threw, within 10 s: an entry or marker that is a FIFO or /dev/zero was once
// read (or waited on) forever.
std::string open_error(const fs::path& g) {
  std::string what = "no error";
  test::within_seconds(10, "Gallery::open(" + g.string() + ")", [&] {
    try {
      Gallery::open(g);
    } catch (const GalleryError& e) {
      what = e.what();
    }
  });
  return what;
}

TEST(TextureGallery, NonRegularEntriesAreRefusedByName) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery::open(g, true).add(small_entry("p1", rng));
  const fs::path fifo = dir.fifo("gallery/entries/f.tex");
  EXPECT_EQ(open_error(g), fifo.string() + ": not a regular file (a FIFO)");
  fs::remove(fifo);
  const fs::path zero = g / "entries" / "z.tex";
  fs::create_symlink("/dev/zero", zero);
  EXPECT_EQ(open_error(g), zero.string() + ": not a regular file (a character device)");
  fs::remove(zero);
  // A symlink to a regular entry file is read.
  const std::vector<uint8_t> bytes = Gallery::encode(small_entry("l", rng));
  std::ofstream(dir.path() / "l.tex", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  fs::create_symlink(dir.path() / "l.tex", g / "entries" / "l.tex");
  EXPECT_EQ(open_error(g), "no error");
  EXPECT_EQ(Gallery::open(g).entries().size(), 2u);
  // The marker too.
  fs::remove(g / "gallery.prism");
  dir.fifo("gallery/gallery.prism");
  EXPECT_EQ(open_error(g), (g / "gallery.prism").string() + ": not a regular file (a FIFO)");
}

TEST(TextureGallery, AKilledWritersTemporaryFileIsIgnoredThenCleared) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery gallery = Gallery::open(g, true);
  gallery.add(small_entry("kept", rng));
  const std::vector<uint8_t> half = Gallery::encode(small_entry("lost", rng));
  const fs::path tmp = g / "entries" / ".tmp-lost-99999";
  std::ofstream(tmp, std::ios::binary)
      .write(reinterpret_cast<const char*>(half.data()), std::streamsize(half.size() / 2));
  const Gallery reader = Gallery::open(g);
  ASSERT_EQ(reader.entries().size(), 1u);
  EXPECT_EQ(reader.entries()[0].id, "kept");
  gallery.add(small_entry("next", rng));  // the next writer clears the leftover
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(Gallery::open(g).entries().size(), 2u);
}

// A reader listed entries/, then a writer deleted one before the reader opened
// it. The reader skips it instead of failing with "cannot read".
TEST(TextureGallery, AnEntryDeletedAfterTheListingIsSkipped) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery writer = Gallery::open(g, true);
  for (const char* id : {"a", "b", "c"}) writer.add(small_entry(id, rng));
  const std::vector<fs::path> listing = Gallery::list_entry_files(g);
  ASSERT_EQ(listing.size(), 3u);
  writer.remove("b");
  std::vector<GalleryEntry> read;
  ASSERT_NO_THROW(read = Gallery::read_entries(listing));
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].id, "a");
  EXPECT_EQ(read[1].id, "c");
  // Any other failure to open an entry is still an error naming it.
  fs::permissions(g / "entries" / "c.tex", fs::perms::none);
  if (::access((g / "entries" / "c.tex").c_str(), R_OK) != 0) {  // not when running as root
    try {
      Gallery::read_entries(listing);
      ADD_FAILURE() << "read an unreadable entry";
    } catch (const GalleryError& e) {
      EXPECT_NE(std::string(e.what()).find("c.tex: cannot read"), std::string::npos) << e.what();
    }
  }
}

// Item 12: a damaged entry makes every reader refuse the gallery, saying how to repair it, and the
// writers can still replace or remove it because they do not read the entries.
TEST(TextureGallery, ADamagedEntryIsRefusedWithTheRepairAndCanBeReplacedOrRemoved) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery::open(g, true).add(small_entry("p1", rng));
  Gallery::open(g).add(small_entry("p2", rng));
  const fs::path file = g / "entries" / "p1.tex";
  auto damage = [&] {  // the entry file and the pack's copy of it
    fs::resize_file(file, fs::file_size(file) / 2);
    fs::remove(g / "pack.log");
  };
  auto refusal = [&]() -> std::string {
    try {
      Gallery::open(g);
    } catch (const GalleryError& e) {
      return e.what();
    }
    return "opened";
  };
  damage();
  const std::string why = refusal();
  EXPECT_NE(why.find(file.string() + ": corrupt gallery entry"), std::string::npos) << why;
  EXPECT_NE(why.find("prism texture delete --gallery " + g.string() + " p1"), std::string::npos) << why;
  EXPECT_NE(why.find("prism texture update --gallery " + g.string() + " --id p1 IMAGE"), std::string::npos) << why;

  Gallery repair = Gallery::open(g, false, Gallery::Load::kNoEntries);
  EXPECT_TRUE(repair.entries().empty());
  repair.update(small_entry("p1", rng));
  ASSERT_EQ(Gallery::open(g).entries().size(), 2u);
  damage();
  Gallery::open(g, false, Gallery::Load::kNoEntries).remove("p1");
  const Gallery after = Gallery::open(g);
  ASSERT_EQ(after.entries().size(), 1u);
  EXPECT_EQ(after.entries()[0].id, "p2");
  // Not a gallery is still refused without reading the entries.
  EXPECT_THROW(Gallery::open(dir.path() / "nothing", false, Gallery::Load::kNoEntries), GalleryError);
}

// Item 14: an entry with too few features can never be identified (RANSAC's sample is 4 points and
// the significance is 0 below 5 inliers), so add and update refuse it, naming the image and count.
TEST(TextureGallery, EntriesWithTooFewFeaturesAreRefused) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery gallery = Gallery::open(g, true);
  EXPECT_GE(texture::kMinFeatures, texture::SearchParams{}.min_inliers);
  for (int n : {0, 1, texture::kMinFeatures - 1}) {
    try {
      gallery.add(small_entry("few", rng, n));
      ADD_FAILURE() << "enrolled " << n << " features";
    } catch (const GalleryError& e) {
      const std::string why = e.what();
      EXPECT_NE(why.find("/images/few.png: " + std::to_string(n) + " features"), std::string::npos) << why;
      EXPECT_NE(why.find("at least " + std::to_string(texture::kMinFeatures)), std::string::npos) << why;
    }
  }
  EXPECT_EQ(Gallery::open(g).entries().size(), 0u);
  gallery.add(small_entry("few", rng, texture::kMinFeatures));
  EXPECT_THROW(gallery.update(small_entry("few", rng, 0)), GalleryError);
  ASSERT_EQ(Gallery::open(g).entries().size(), 1u);
  EXPECT_EQ(Gallery::open(g).entries()[0].features.count(), texture::kMinFeatures);
}

// ---- The pack: pack.log beside the entry files -----------------------------------------------------

// Every entry as bytes (encode) with its format version: what "the same gallery" means below.
std::vector<std::string> as_bytes(const std::vector<GalleryEntry>& entries) {
  std::vector<std::string> out;
  for (const GalleryEntry& e : entries) {
    const std::vector<uint8_t> b = Gallery::encode(e);
    out.push_back(std::to_string(e.version) + ":" + std::string(b.begin(), b.end()));
  }
  return out;
}
// The gallery read file by file, the way it was read before the pack (the independent reference).
std::vector<std::string> per_file(const fs::path& g) {
  return as_bytes(Gallery::read_entries(Gallery::list_entry_files(g)));
}
std::vector<std::string> streamed(const fs::path& g, Gallery::ReadSummary* summary = nullptr) {
  std::vector<GalleryEntry> all;
  const Gallery::ReadSummary s = Gallery::for_each_entry(g, [&](GalleryEntry&& e) { all.push_back(std::move(e)); });
  EXPECT_EQ(s.entries, all.size());
  if (summary) *summary = s;
  return as_bytes(all);
}
std::string text_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// After random adds, updates and deletes the pack reads as the entry files do: same entries, same
// order, from the pack; for_each_entry streams the same.
TEST(TextureGalleryPack, AgreesWithTheEntryFilesAfterAddUpdateDelete) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery gallery = Gallery::open(g, true);
  EXPECT_EQ(text_of(g / "gallery.prism"), "prism texture gallery, format 2\n");
  std::set<std::string> ids;
  for (int i = 0; i < 60; ++i) {
    const std::string id = "p" + std::to_string(rng() % 25);
    const int op = int(rng() % 3);
    if (!ids.count(id)) {
      gallery.add(small_entry(id, rng));
      ids.insert(id);
    } else if (op == 0) {
      gallery.remove(id);
      ids.erase(id);
    } else {
      GalleryEntry e = small_entry(id, rng);
      e.collection = op == 1 ? "lot-1" : "";
      gallery.update(e);
    }
  }
  EXPECT_FALSE(fs::exists(g / "pack.dirty"));
  const Gallery reopened = Gallery::open(g);
  EXPECT_EQ(reopened.entries().size(), ids.size());
  EXPECT_EQ(as_bytes(reopened.entries()), per_file(g));
  EXPECT_EQ(as_bytes(reopened.entries()), as_bytes(gallery.entries()));
  Gallery::ReadSummary s;
  EXPECT_EQ(streamed(g, &s), per_file(g));
  EXPECT_TRUE(s.from_pack);
  // Read from the pack alone: with every entry file gone but one (behind the gallery's back), the
  // listing disagrees and the files decide; the pack still held every one of them.
  ASSERT_GE(ids.size(), 2u);
  const std::string kept = *ids.begin();
  for (const std::string& id : ids)
    if (id != kept) fs::rename(g / "entries" / (id + ".tex"), dir.path() / (id + ".tex"));
  ASSERT_EQ(Gallery::open(g).entries().size(), 1u);
  for (const std::string& id : ids)
    if (id != kept) fs::rename(dir.path() / (id + ".tex"), g / "entries" / (id + ".tex"));
  EXPECT_EQ(as_bytes(Gallery::open(g).entries()), per_file(g));
}

// A record cut short at the end (a writer killed while appending, its pack.dirty left) is ignored by
// readers; the next writer cuts it off and goes on. Damage before it is not a torn tail: readers
// rebuild the pack from the entry files (and say so).
TEST(TextureGalleryPack, ATornTailIsIgnoredAndDamageRebuilds) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery gallery = Gallery::open(g, true);
  for (const char* id : {"a", "b", "c"}) gallery.add(small_entry(id, rng));
  const std::vector<std::string> before = per_file(g);
  const uint64_t end = fs::file_size(g / "pack.log");
  // Half of a record for "d" (its entry file was never renamed in: the write died before).
  struct stat st {};
  ASSERT_EQ(::stat((g / "pack.log").c_str(), &st), 0);
  {
    std::ofstream(g / "pack.dirty") << "d " << end << " " << st.st_ino << "\n";
    std::ofstream log(g / "pack.log", std::ios::binary | std::ios::app);
    const std::vector<uint8_t> half = Gallery::encode(small_entry("d", rng));
    log.write("PREC", 4).write(reinterpret_cast<const char*>(half.data()), std::streamsize(half.size() / 2));
  }
  Gallery::ReadSummary s;
  EXPECT_EQ(streamed(g, &s), before);  // the reader finished the dead write: the note says so
  EXPECT_TRUE(s.from_pack);
  EXPECT_NE(s.note.find("interrupted"), std::string::npos) << s.note;
  EXPECT_FALSE(fs::exists(g / "pack.dirty"));
  EXPECT_EQ(fs::file_size(g / "pack.log"), end + 24 + 1);  // cut back, then a delete record of "d"
  gallery.add(small_entry("e", rng));
  EXPECT_EQ(as_bytes(Gallery::open(g).entries()), per_file(g));
  // A flipped byte in the middle of the log, no write in flight: not trusted, rebuilt.
  {
    std::fstream log(g / "pack.log", std::ios::binary | std::ios::in | std::ios::out);
    log.seekp(16 + 5);
    log.put('\x7f');
  }
  const std::vector<std::string> now = per_file(g);
  EXPECT_EQ(streamed(g, &s), now);
  EXPECT_NE(s.note.find("damaged record at byte 16; rebuilt the pack"), std::string::npos) << s.note;
  EXPECT_EQ(streamed(g, &s), now);
  EXPECT_TRUE(s.note.empty()) << s.note;
  // A damaged payload (header intact): that record falls back to its entry file.
  const Gallery g2 = Gallery::open(g);
  {
    std::fstream log(g / "pack.log", std::ios::binary | std::ios::in | std::ios::out);
    log.seekp(16 + 24 + 1 + 200);  // inside the first entry's bytes ("a")
    log.put('\x01');
  }
  // The lost copy is said and restored (its record written again from the entry file).
  const uint64_t damaged_size = fs::file_size(g / "pack.log");
  EXPECT_EQ(streamed(g, &s), now);
  EXPECT_NE(s.note.find("1 damaged record in " + (g / "pack.log").string() +
                        " ('a'): read from the entry files; wrote their records again"),
            std::string::npos)
      << s.note;
  EXPECT_GT(fs::file_size(g / "pack.log"), damaged_size);
  EXPECT_EQ(streamed(g, &s), now);
  EXPECT_TRUE(s.note.empty()) << s.note;
  EXPECT_EQ(as_bytes(Gallery::open(g).entries()), now);
}

// The other direction: a damaged entry file went unseen while the pack served the
// gallery (and a read of that entry failed). read_entry reads it from its pack record, says so and
// writes the file again; with both copies damaged it throws, naming the file.
TEST(TextureGalleryPack, ADamagedEntryFileIsReadFromItsRecordAndWrittenAgain) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery gallery = Gallery::open(g, true);
  for (const char* id : {"a", "b"}) gallery.add(small_entry(id, rng));
  const std::vector<std::string> good = per_file(g);
  const fs::path a = g / "entries" / "a.tex";
  const auto flip = [](const fs::path& file, uint64_t at) {
    std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(std::streamoff(at));
    const char c = char(f.get());
    f.seekp(std::streamoff(at));
    f.put(char(c ^ 0x5a));
  };
  flip(a, 200);
  ASSERT_THROW(per_file(g), GalleryError);  // file by file, the damage shows
  std::string note;
  const GalleryEntry e = gallery.read_entry("a", &note);
  EXPECT_EQ(as_bytes({e}), std::vector<std::string>{good[0]});
  EXPECT_NE(note.find(a.string()), std::string::npos) << note;
  EXPECT_NE(note.find("read from its copy in " + (g / "pack.log").string() + "; wrote the entry file again"),
            std::string::npos)
      << note;
  EXPECT_EQ(per_file(g), good);  // both copies are back
  note.clear();
  gallery.read_entry("a", &note);
  EXPECT_TRUE(note.empty()) << note;
  // Both copies damaged: an error naming the entry file, nothing invented.
  flip(a, 200);
  {
    std::fstream log(g / "pack.log", std::ios::binary | std::ios::in | std::ios::out);
    log.seekp(16 + 24 + 1 + 200);  // inside the first record's payload ("a")
    log.put('\x01');
  }
  try {
    gallery.read_entry("a", &note);
    ADD_FAILURE() << "a read of two damaged copies returned";
  } catch (const GalleryError& x) {
    EXPECT_NE(std::string(x.what()).find(a.string()), std::string::npos) << x.what();
  }
  EXPECT_EQ(as_bytes({gallery.read_entry("b")}), std::vector<std::string>{good[1]});
}

// pack.dirty left by a dead writer whose entry file changed but whose record never reached the
// pack: a reader that cannot take the lock reads that id from its file; one that can (or the next
// writer) appends its record, and the pack agrees with the files again.
TEST(TextureGalleryPack, AStaleDirtyMarkerIsResolvedFromTheEntryFile) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery gallery = Gallery::open(g, true);
  for (const char* id : {"a", "b"}) gallery.add(small_entry(id, rng));
  struct stat st {};
  ASSERT_EQ(::stat((g / "pack.log").c_str(), &st), 0);
  // The dead writer's update of "b" and add of... one write only: the update of "b".
  const std::vector<uint8_t> b2 = Gallery::encode(small_entry("b", rng));
  std::ofstream(g / "entries" / "b.tex", std::ios::binary)
      .write(reinterpret_cast<const char*>(b2.data()), std::streamsize(b2.size()));
  std::ofstream(g / "pack.dirty") << "b " << fs::file_size(g / "pack.log") << " " << st.st_ino << "\n";
  {
    // Another process holds the writer lock: this reader cannot repair, it reads "b" from its file.
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    const pid_t holder = fork();
    if (holder == 0) {
      const int fd = ::open((g / ".lock").c_str(), O_RDWR);
      if (fd >= 0 && ::flock(fd, LOCK_EX) == 0) (void)!::write(ready[1], "x", 1);
      ::pause();
      _exit(0);
    }
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    ::close(ready[1]);
    Gallery::ReadSummary s;
    EXPECT_EQ(streamed(g, &s), per_file(g));
    EXPECT_TRUE(s.note.empty()) << s.note;
    EXPECT_TRUE(fs::exists(g / "pack.dirty"));  // not repaired: the lock was taken
    kill(holder, SIGKILL);
    waitpid(holder, nullptr, 0);
  }
  EXPECT_EQ(Gallery::open(g).find("b")->features.descriptors, Gallery::decode(b2, "b").features.descriptors);
  EXPECT_FALSE(fs::exists(g / "pack.dirty"));  // repaired by that open: the pack now holds the new "b"
  EXPECT_NE(text_of(g / "pack.log").find(std::string(b2.begin(), b2.end())), std::string::npos);
  EXPECT_EQ(as_bytes(Gallery::open(g).entries()), per_file(g));
}

// A pack that cannot be trusted while another process holds the writer lock: the reader reads the
// entry files one by one, and passes them on in id order as the pack would ("a" before "a-b", where
// their files' names order "a-b.tex" before "a.tex").
TEST(TextureGalleryPack, EntryFilesReadOneByOneComeInIdOrder) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery gallery = Gallery::open(g, true);
  for (const char* id : {"a-b", "a", "a_c", "a.d", "b"}) gallery.add(small_entry(id, rng));
  { std::fstream(g / "pack.log", std::ios::in | std::ios::out | std::ios::binary).write("XXXX", 4); }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    const int fd = ::open((g / ".lock").c_str(), O_RDWR);
    if (fd >= 0 && ::flock(fd, LOCK_EX) == 0) (void)!::write(ready[1], "x", 1);
    ::pause();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ::close(ready[1]);
  std::vector<std::string> ids;
  const Gallery::ReadSummary s = Gallery::for_each_entry(g, [&](GalleryEntry&& e) { ids.push_back(e.id); });
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  EXPECT_FALSE(s.from_pack);
  EXPECT_NE(s.note.find("read the entry files one by one"), std::string::npos) << s.note;
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "a-b", "a.d", "a_c", "b"}));
}

// Readers open while a writer adds, updates and deletes: every open succeeds, reads what was
// acknowledged before it began, and never a damaged or half-written entry.
TEST(TextureGalleryPack, ReadersOpenWhileAWriterWrites) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery::open(g, true).add(small_entry("base", rng));
  std::atomic<int> acked{0};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::mt19937 wr(rng());
    Gallery w = Gallery::open(g, false, Gallery::Load::kNoEntries);
    for (int i = 0; i < 400 && !stop; ++i) {
      w.add(small_entry("n" + std::to_string(i), wr));
      if (i % 3 == 0) w.update(small_entry("base", wr));
      if (i % 5 == 4) w.remove("n" + std::to_string(i - 1));
      acked = i + 1;
    }
  });
  int opens = 0;
  while (acked < 60 && opens < 2000) {
    const int before = acked;
    Gallery::ReadSummary s;
    std::vector<GalleryEntry> seen;
    ASSERT_NO_THROW(s = Gallery::for_each_entry(g, [&](GalleryEntry&& e) { seen.push_back(std::move(e)); }));
    EXPECT_TRUE(s.from_pack) << s.note;
    std::set<std::string> ids;
    for (const GalleryEntry& e : seen) ids.insert(e.id);
    EXPECT_TRUE(ids.count("base"));
    for (int i = 0; i < before; ++i)
      if (i % 5 != 3) {
        EXPECT_TRUE(ids.count("n" + std::to_string(i))) << "acknowledged n" << i << " missing";
      }
    ++opens;
  }
  stop = true;
  writer.join();
  EXPECT_EQ(as_bytes(Gallery::open(g).entries()), per_file(g));
}

// A writer process killed (SIGKILL) at random points of adds, updates and deletes: the gallery opens
// with every acknowledged write, reads from the pack as from the entry files, and goes on.
TEST(TextureGalleryPack, KilledWritersLeaveEveryAcknowledgedEntry) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery::open(g, true);
  std::set<std::string> present, deleted;  // acknowledged
  for (int round = 0; round < 8; ++round) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const unsigned seed = rng();
    const pid_t pid = fork();
    if (pid == 0) {
      ::close(fds[0]);
      std::mt19937 cr(seed);
      Gallery w = Gallery::open(g, false, Gallery::Load::kNoEntries);
      // Each acknowledged ("A id", "D id") after it returned; "d id": a delete begins.
      auto say = [&](const std::string& line) {
        if (::write(fds[1], line.data(), line.size()) != ssize_t(line.size())) _exit(1);
      };
      for (int i = 0;; ++i) {
        const std::string id = "r" + std::to_string(round) + "-" + std::to_string(i);
        w.add(small_entry(id, cr));
        say("A " + id + "\n");
        if (i % 4 == 3) {
          const std::string gone = "r" + std::to_string(round) + "-" + std::to_string(i - 2);
          say("d " + gone + "\n");
          w.remove(gone);
          say("D " + gone + "\n");
        }
        if (i % 3 == 2) w.update(small_entry(id, cr));
      }
    }
    ::close(fds[1]);
    // A few acknowledgements, then a random moment of the writes that follow.
    std::string acks;
    char buf[4096];
    const size_t want = 2 + rng() % 6;
    while (size_t(std::count(acks.begin(), acks.end(), 'A')) < want) {
      const ssize_t n = ::read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      acks.append(buf, size_t(n));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 5000));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) acks.append(buf, size_t(n));
    ::close(fds[0]);
    std::istringstream in(acks);
    std::string deleting;  // a delete in flight when killed: either way is right
    for (std::string op, id; in >> op >> id;) {
      if (op == "A") present.insert(id);
      if (op == "d") deleting = id;
      if (op == "D") present.erase(id), deleted.insert(id), deleting.clear();
    }
    const Gallery opened = Gallery::open(g);  // throws on anything damaged
    for (const std::string& id : present)
      if (id != deleting) {
        EXPECT_NE(opened.find(id), nullptr) << "acknowledged " << id << " lost";
      }
    if (!deleting.empty() && !opened.find(deleting)) present.erase(deleting), deleted.insert(deleting);
    for (const std::string& id : deleted) EXPECT_EQ(opened.find(id), nullptr) << "deleted " << id << " is back";
    EXPECT_EQ(as_bytes(opened.entries()), per_file(g)) << "round " << round;
  }
  EXPECT_GT(present.size(), 8u);
}

// The marker: a new gallery is format 2 (an older build reads only format 1 and refuses it rather
// than write entries the pack never sees); a format-1 gallery gets its pack on the first read that
// can take the lock; an unknown format is refused by name.
TEST(TextureGalleryPack, MarkerVersionsAreHandledClearly) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  Gallery::open(g, true).add(small_entry("a", rng));
  EXPECT_EQ(text_of(g / "gallery.prism"), "prism texture gallery, format 2\n");
  // An older build's gallery: format 1, no pack.
  fs::remove(g / "pack.log");
  std::ofstream(g / "gallery.prism", std::ios::trunc) << "prism texture gallery, format 1\n";
  Gallery::open(g, false, Gallery::Load::kNoEntries).add(small_entry("b", rng));  // a write builds the pack
  EXPECT_EQ(text_of(g / "gallery.prism"), "prism texture gallery, format 2\n");
  fs::remove(g / "pack.log");
  std::ofstream(g / "gallery.prism", std::ios::trunc) << "prism texture gallery, format 1\n";
  const Gallery opened = Gallery::open(g);
  EXPECT_EQ(opened.entries().size(), 2u);
  EXPECT_NE(opened.pack_note().find("format 1, no pack yet; rebuilt the pack"), std::string::npos)
      << opened.pack_note();
  EXPECT_EQ(text_of(g / "gallery.prism"), "prism texture gallery, format 2\n");
  EXPECT_TRUE(fs::exists(g / "pack.log"));
  std::ofstream(g / "gallery.prism", std::ios::trunc) << "prism texture gallery, format 4\n";
  for (auto load : {Gallery::Load::kEntries, Gallery::Load::kNoEntries}) {
    try {
      Gallery::open(g, false, load);
      ADD_FAILURE() << "opened a format-4 gallery";
    } catch (const GalleryError& e) {
      EXPECT_EQ(std::string(e.what()), (g / "gallery.prism").string() +
                                           ":1: unknown gallery format 'prism texture gallery, format 4' (this "
                                           "build reads formats 1, 2 and 3; a newer Prism wrote it?)");
    }
  }
}

// More than half of the log dead (updates and deletes): the next open rewrites it with the live
// records only, in id order, and reads the same.
TEST(TextureGalleryPack, ALogMoreThanHalfDeadIsCompacted) {
  std::mt19937 rng(std::random_device{}());
  test::TempDir dir;
  const fs::path g = dir.path() / "gallery";
  {
    Gallery w = Gallery::open(g, true, Gallery::Load::kNoEntries);  // knows no sizes: never compacts
    for (const char* id : {"c", "a", "b"}) w.add(small_entry(id, rng, 40));
    for (int i = 0; i < 6; ++i) w.update(small_entry("a", rng, 40));
  }
  const uint64_t grown = fs::file_size(g / "pack.log");
  const std::vector<std::string> want = per_file(g);
  Gallery::ReadSummary s;
  EXPECT_EQ(streamed(g, &s), want);
  EXPECT_NE(s.note.find("compacted pack.log"), std::string::npos) << s.note;
  const uint64_t compacted = fs::file_size(g / "pack.log");
  EXPECT_LT(compacted, grown / 2);
  EXPECT_EQ(streamed(g, &s), want);
  EXPECT_TRUE(s.note.empty()) << s.note;
  // A writer that read the gallery knows the sizes and compacts as it goes.
  Gallery w = Gallery::open(g);
  for (int i = 0; i < 6; ++i) w.update(small_entry("b", rng, 40));
  EXPECT_LE(fs::file_size(g / "pack.log"), 2 * compacted + 16);
  EXPECT_EQ(as_bytes(Gallery::open(g).entries()), per_file(g));
}

}  // namespace
}  // namespace prism
