// The cache of large cv::Mat blocks (common/mat_cache.h): a freed block is handed to the next Mat of
// its size class, the cap bounds what is kept, threads never share a block, and cv::SIFT gives the
// same features from reused (dirty) memory as from fresh pages. The allocator is process-wide, so
// each test reads the statistics as differences and leaves the cap at 0 (nothing kept).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <opencv2/core.hpp>
#include <opencv2/features2d.hpp>
#include <random>
#include <thread>
#include <vector>

#include "common/mat_cache.h"
#include "sift/sift.h"
#include "texture_cases.h"

namespace prism {
namespace {

struct CapZeroAfter {
  ~CapZeroAfter() { mat_cache::install(0); }
};

TEST(MatCache, SizeClassesRoundUpByAtMostAnEighth) {
  EXPECT_EQ(mat_cache::size_class(1000), 1000u);  // small blocks are not the cache's
  EXPECT_EQ(mat_cache::size_class(mat_cache::kMinBytes - 1), mat_cache::kMinBytes - 1);
  EXPECT_EQ(mat_cache::size_class(mat_cache::kMinBytes), mat_cache::kMinBytes);
  EXPECT_EQ(mat_cache::size_class(size_t(4) << 20), size_t(4) << 20);
  EXPECT_EQ(mat_cache::size_class((size_t(4) << 20) + 1), (size_t(4) << 20) + (size_t(512) << 10));
  std::mt19937_64 rng(3);
  size_t last = 0;
  for (size_t bytes = mat_cache::kMinBytes; bytes < (size_t(1) << 34); bytes += rng() % (bytes / 3) + 1) {
    const size_t c = mat_cache::size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(c, bytes + bytes / 8) << bytes;
    EXPECT_GE(c, last) << "monotone";
    EXPECT_EQ(mat_cache::size_class(c), c) << "a class is its own class";
    last = c;
  }
}

TEST(MatCache, AFreedBlockIsHandedToTheNextMatOfItsClass) {
  CapZeroAfter after;
  mat_cache::install(size_t(64) << 20);
  const mat_cache::Stats s0 = mat_cache::stats();
  ASSERT_TRUE(s0.installed);
  const uchar* first = nullptr;
  {
    cv::Mat a(1024, 1024, CV_32F);  // 4 MiB
    first = a.data;
  }
  const mat_cache::Stats s1 = mat_cache::stats();
  EXPECT_EQ(s1.misses, s0.misses + 1);
  EXPECT_EQ(s1.kept_bytes, s0.kept_bytes + (size_t(4) << 20));
  {
    cv::Mat b(1000, 1024, CV_32F);  // 4,096,000 bytes: the same class
    EXPECT_EQ(b.data, first);
    b.setTo(7.f);
    EXPECT_EQ(b.at<float>(999, 1023), 7.f);
    cv::Mat small(10, 10, CV_8U);  // not the cache's
  }
  const mat_cache::Stats s2 = mat_cache::stats();
  EXPECT_EQ(s2.hits, s1.hits + 1);
  EXPECT_EQ(s2.misses, s1.misses);
  EXPECT_EQ(s2.in_use_bytes, s0.in_use_bytes);
  // A Mat over memory of its own is never taken into the cache.
  std::vector<float> own(1 << 20);
  { cv::Mat wrapped(1024, 1024, CV_32F, own.data()); }
  EXPECT_EQ(mat_cache::stats().kept_bytes, s2.kept_bytes);
}

TEST(MatCache, TheCapBoundsWhatIsKeptAndNothingInUseIsFreed) {
  CapZeroAfter after;
  mat_cache::install(0);
  mat_cache::install(size_t(10) << 20);
  const mat_cache::Stats s0 = mat_cache::stats();
  ASSERT_EQ(s0.kept_bytes, 0u);
  {
    std::vector<cv::Mat> three;
    for (int i = 0; i < 3; ++i) three.emplace_back(1024, 1024, CV_32F, cv::Scalar(i));  // 12 MiB in use
    for (int i = 0; i < 3; ++i) EXPECT_EQ(three[size_t(i)].at<float>(5, 5), float(i));
  }
  mat_cache::Stats s = mat_cache::stats();
  EXPECT_LE(s.kept_bytes + s.in_use_bytes, size_t(10) << 20);
  EXPECT_EQ(s.kept_bytes, size_t(8) << 20) << "two of the three blocks fit under the cap";
  EXPECT_EQ(s.freed, s0.freed + 1);
  // A miss of another class makes room from what is kept.
  { cv::Mat big(1024, 1024, CV_64F); }  // 8 MiB
  s = mat_cache::stats();
  EXPECT_LE(s.kept_bytes + s.in_use_bytes, size_t(10) << 20);
  mat_cache::install(0);
  EXPECT_EQ(mat_cache::stats().kept_bytes, 0u) << "a lower cap frees what is kept at once";
}

TEST(MatCache, ThreadsNeverShareABlock) {
  CapZeroAfter after;
  mat_cache::install(size_t(96) << 20);
  std::vector<std::thread> threads;
  std::vector<int> bad(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([t, &bad] {
      std::mt19937 rng{unsigned(t)};
      for (int i = 0; i < 100; ++i) {
        const int rows = 256 + int(rng() % 1024);
        cv::Mat m(rows, 1024, CV_32S, cv::Scalar(t * 1000 + i));
        std::this_thread::yield();
        bad[size_t(t)] += cv::countNonZero(m != t * 1000 + i);
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(bad[size_t(t)], 0) << "thread " << t;
  const mat_cache::Stats s = mat_cache::stats();
  EXPECT_GT(s.hits, 0u);
  EXPECT_LE(s.kept_bytes, size_t(96) << 20);
}

// cv::SIFT's features as a set (its threads find keypoints in a varying order).
std::vector<std::vector<float>> sorted_features(const cv::Mat& grey) {
  cv::Ptr<cv::SIFT> sift = cv::SIFT::create(768);
  std::vector<cv::KeyPoint> kps;
  cv::Mat desc;
  sift->detectAndCompute(grey, cv::noArray(), kps, desc);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < desc.rows; ++i) {
    std::vector<float> r = {kps[size_t(i)].pt.x, kps[size_t(i)].pt.y, kps[size_t(i)].size, kps[size_t(i)].angle,
                            kps[size_t(i)].response};
    r.insert(r.end(), desc.ptr<float>(i), desc.ptr<float>(i) + desc.cols);
    rows.push_back(std::move(r));
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

TEST(MatCache, SiftGivesTheSameFeaturesFromReusedMemory) {
  CapZeroAfter after;
  std::mt19937 rng(11);
  const cv::Mat grey = test::random_texture(rng, 640, 480);
  mat_cache::install(0);
  const auto fresh = sorted_features(grey);
  ASSERT_GT(fresh.size(), 100u);
  mat_cache::install(size_t(1) << 30);
  const mat_cache::Stats s0 = mat_cache::stats();
  (void)sorted_features(grey);  // fills the cache with this size's blocks
  {
    // Dirty the kept blocks: take those of the pyramid's large levels (1280x960 and 640x480
    // floats, 6 Gaussian and 5 DoG levels each) and fill them with what no image makes.
    std::vector<cv::Mat> dirty;
    for (int i = 0; i < 22; ++i) {
      dirty.emplace_back(i < 11 ? cv::Size(1280, 960) : cv::Size(640, 480), CV_32F);
      dirty.back().setTo(std::numeric_limits<float>::quiet_NaN());
    }
  }
  EXPECT_GE(mat_cache::stats().hits, s0.hits + 22) << "the pyramid's blocks were kept and dirtied";
  const auto reused = sorted_features(grey);
  EXPECT_GT(mat_cache::stats().hits, s0.hits);
  EXPECT_EQ(reused, fresh);
}

}  // namespace
}  // namespace prism
