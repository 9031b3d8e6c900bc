// The parallel JPEG decoder's CPU path (kernels/image/jpeg_parallel.h) against libjpeg-turbo
// decoding to grey as image/decode.h asks it (tests/support/jpeg_cases.h's libjpeg_grey), bit for
// bit: JPEGs written by libjpeg-turbo (noise and smooth images, qualities 10..100, 4:4:4, 4:2:2,
// 4:2:0, 4:4:0 and grey, standard and optimal Huffman tables, odd sizes, restart intervals), the
// photos of the test data, at every reduction and several subsequence and group sizes, the
// sequential fallback forced; damaged files never crash and either fail or give libjpeg's pixels;
// what the decoder does not handle is refused.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "image/decode.h"
#include "image/jpeg_parallel.h"
#include "image/jpeg_parse.h"
#include "jpeg_cases.h"
#include "prism_test.h"
#include "test_env.h"

namespace prism {
namespace {

using image::jpeg::decode_grey_parallel;
using image::jpeg::ParallelParams;
using image::jpeg::ParallelStats;
using test::JpegCase;

// Decodes `b` at `reduction` with `p` and expects libjpeg's pixels; returns the stats.
ParallelStats expect_equal(const std::vector<uint8_t>& b, int reduction, const ParallelParams& p,
                           const std::string& what) {
  SCOPED_TRACE(what + " at 1/" + std::to_string(reduction) + ", " + std::to_string(p.seq_bits) + " bits, groups of " +
               std::to_string(p.group));
  std::string error;
  const std::optional<cv::Mat> want = test::libjpeg_grey(b.data(), b.size(), reduction, &error);
  EXPECT_TRUE(want) << "libjpeg: " << error;
  std::string why;
  ParallelStats stats;
  const std::optional<cv::Mat> got = decode_grey_parallel(b.data(), b.size(), reduction, p, &why, &stats);
  EXPECT_TRUE(got) << "not decoded: " << why;
  if (!want || !got) return stats;
  EXPECT_EQ(got->size(), want->size());
  if (got->size() == want->size()) {
    EXPECT_EQ(cv::norm(*got, *want, cv::NORM_INF), 0) << "pixels differ from libjpeg-turbo's";
  }
  return stats;
}

TEST(JpegParallel, EqualsLibjpegOnWrittenJpegsAtEveryReduction) {
  const unsigned seed = 20240601;
  std::mt19937 rng(seed);
  std::vector<JpegCase> cases;
  // the fixed ones: odd sizes, every sampling, restart intervals, grey
  for (cv::Size s : {cv::Size(1, 1), cv::Size(17, 9), cv::Size(8, 8), cv::Size(16, 16), cv::Size(9, 31),
                     cv::Size(100, 3), cv::Size(257, 129)})
    for (int sampling = 0; sampling < 5; ++sampling) {
      JpegCase c;
      c.width = s.width;
      c.height = s.height;
      c.grey = sampling == 4;
      c.h = sampling == 1 || sampling == 2 ? 2 : 1;
      c.v = sampling == 2 || sampling == 3 ? 2 : 1;
      c.quality = 10 + 18 * sampling;
      c.seed = uint32_t(cases.size() + 1);
      cases.push_back(c);
    }
  for (int i = 0; i < 60; ++i) {
    JpegCase c;
    c.width = 1 + int(rng() % 400);
    c.height = 1 + int(rng() % 300);
    c.quality = 10 + int(rng() % 91);
    const int sampling = int(rng() % 5);
    c.grey = sampling == 4;
    c.h = sampling == 1 || sampling == 2 ? 2 : 1;
    c.v = sampling == 2 || sampling == 3 ? 2 : 1;
    c.restart_mcus = rng() % 3 == 0 ? 1 + int(rng() % 9) : 0;
    c.restart_rows = c.restart_mcus == 0 && rng() % 4 == 0 ? 1 + int(rng() % 2) : 0;
    c.optimize = rng() % 2 == 0;
    c.smooth = rng() % 2 == 0;
    c.seed = rng();
    cases.push_back(c);
  }
  int compared = 0;
  for (const JpegCase& c : cases) {
    const std::vector<uint8_t> b = test::encode_jpeg_case(c);
    for (int r : {1, 2, 4, 8}) {
      ParallelParams p;
      p.seq_bits = (compared % 3 == 0) ? 64 : (compared % 3 == 1) ? 256 : 1024;
      p.group = compared % 2 ? 128 : 7;
      expect_equal(b, r, p, c.name());
      ++compared;
    }
  }
  std::cout << cases.size() << " JPEGs, " << compared << " decodes compared with libjpeg-turbo\n";
}

TEST(JpegParallel, QualityHundredAndTenAndRestartEveryMcu) {
  int compared = 0;
  for (int q : {10, 50, 90, 100})
    for (int dri : {0, 1, 5, 64}) {
      JpegCase c;
      c.width = 333;
      c.height = 211;
      c.quality = q;
      c.restart_mcus = dri;
      c.seed = uint32_t(q * 100 + dri);
      const std::vector<uint8_t> b = test::encode_jpeg_case(c);
      for (int r : {1, 2, 8}) {
        ParallelParams p;
        p.seq_bits = 128;
        p.group = 32;
        expect_equal(b, r, p, c.name());
        ++compared;
      }
    }
  std::cout << compared << " decodes compared\n";
}

TEST(JpegParallel, LargePhotoSizedImage) {
  JpegCase c;
  c.width = 4001;
  c.height = 3001;
  c.quality = 80;
  c.smooth = true;
  const std::vector<uint8_t> b = test::encode_jpeg_case(c);
  for (int r : {2, 1}) {
    const ParallelStats s = expect_equal(b, r, ParallelParams(), c.name());
    std::cout << c.name() << " 1/" << r << ": " << s.subsequences << " subsequences, " << s.rounds
              << " rounds at most, " << s.resynced << " re-decoded by phase 2, sequential " << s.sequential << "\n";
  }
}

TEST(JpegParallel, TheSequentialFallbackGivesTheSamePixels) {
  JpegCase c;
  c.width = 640;
  c.height = 480;
  c.quality = 85;
  const std::vector<uint8_t> b = test::encode_jpeg_case(c);
  ParallelParams p;
  p.max_rounds = 1;  // phase 1 cannot converge: phase 3 decodes
  const ParallelStats s = expect_equal(b, 2, p, "max_rounds 1");
  EXPECT_TRUE(s.sequential);
  p.max_rounds = 0;
  p.seq_bits = 64;
  p.group = 1;  // every group of one: phase 2 does all the synchronisation
  const ParallelStats s2 = expect_equal(b, 2, p, "groups of 1");
  EXPECT_GT(s2.resynced, 0u);
}

// Photos written at the quality phones use (90-95, YCbCr 4:2:0, the standard tables): a chain
// started from a wrong guess often meets a bit pattern that is no code of its table. It goes on from a
// new guess and soon meets the true chain, so phase 3's one thread per restart interval, a whole
// photo in one GPU thread without restart markers, does not run.
TEST(JpegParallel, HighQualityPhotosSynchroniseWithoutTheSequentialPass) {
  const std::string folder = test::data_dir() + "/oxford-affine";
  PRISM_NEED_FILE(folder + "/leuven/img3.png");
  int decoded = 0;
  for (const char* name : {"leuven/img3", "graf/img1", "trees/img1", "bark/img1", "boat/img1"}) {
    const std::vector<uint8_t> png = test::read_file_bytes(folder + "/" + name + ".png");
    if (png.empty()) continue;
    const cv::Mat grey = image::decode_grey(png.data(), png.size());
    cv::Mat bgr;
    cv::merge(std::vector<cv::Mat>{grey, grey, grey}, bgr);
    for (int quality : {90, 95}) {
      JpegCase c;
      c.quality = quality;
      const std::vector<uint8_t> b = test::encode_jpeg(bgr, c);
      for (int r : {1, 2}) {
        const ParallelStats s =
            expect_equal(b, r, ParallelParams(), std::string(name) + " q" + std::to_string(quality));
        EXPECT_FALSE(s.sequential) << name << " q" << quality << " 1/" << r << ": " << s.rounds << " rounds, "
                                   << s.resynced << " re-decoded by phase 2";
        ++decoded;
      }
    }
  }
  EXPECT_GE(decoded, 8);
}

TEST(JpegParallel, EqualsLibjpegOnThePhotosOfTheTestData) {
  const std::string folder = test::data_dir() + "/images";
  PRISM_NEED_FILE(folder + "/fruits.jpg");
  std::vector<std::string> files = test::jpeg_files(folder, 100);
  for (const std::string& f : test::jpeg_files(test::data_dir() + "/sun8", 24)) files.push_back(f);
  int compared = 0, refused = 0;
  for (const std::string& f : files) {
    const std::vector<uint8_t> b = test::read_file_bytes(f);
    std::string why;
    if (!image::jpeg::parse_jpeg(b.data(), b.size(), &why)) {
      std::cout << f << ": not handled (" << why << ")\n";
      ++refused;
      continue;
    }
    for (int r : {1, 2, 4, 8}) {
      expect_equal(b, r, ParallelParams(), f);
      ++compared;
    }
    // and against the product's own decoder where it picks that reduction
    const image::ReducedGrey product = image::decode_grey_reduced(b.data(), b.size(), 100);
    const std::optional<cv::Mat> ours = decode_grey_parallel(b.data(), b.size(), product.reduction);
    ASSERT_TRUE(ours) << f;
    EXPECT_EQ(cv::norm(*ours, product.grey, cv::NORM_INF), 0) << f << " against decode_grey_reduced";
  }
  std::cout << files.size() << " photos, " << compared << " decodes compared, " << refused << " not handled\n";
  EXPECT_GE(compared, 4 * 10);
}

TEST(JpegParallel, RefusesWhatItDoesNotHandle) {
  struct Refusal {
    JpegCase c;
    const char* why;
  };
  std::vector<Refusal> rows;
  JpegCase base;
  base.width = 40;
  base.height = 24;
  {
    JpegCase c = base;
    c.progressive = true;
    rows.push_back({c, "progressive"});
  }
  {
    JpegCase c = base;
    c.arithmetic = true;
    rows.push_back({c, "arithmetic"});
  }
  {
    JpegCase c = base;
    c.rgb = true;
    rows.push_back({c, "RGB"});
  }
  {
    JpegCase c = base;
    c.one_scan_per_component = true;
    rows.push_back({c, "one scan per component"});
  }
  for (const Refusal& row : rows) {
    const std::vector<uint8_t> b = test::encode_jpeg_case(row.c);
    std::string why;
    EXPECT_FALSE(image::jpeg::parse_jpeg(b.data(), b.size(), &why)) << row.c.name();
    EXPECT_NE(why.find(row.why), std::string::npos) << row.c.name() << ": " << why;
    EXPECT_FALSE(decode_grey_parallel(b.data(), b.size(), 2)) << row.c.name();
    EXPECT_TRUE(test::libjpeg_grey(b.data(), b.size(), 2)) << row.c.name() << ": libjpeg decodes it";
  }
  // a first component sampled below the others (its grey would need upsampling)
  JpegCase c = base;
  c.h = c.v = 1;
  std::vector<uint8_t> b = test::encode_jpeg_case(c);
  // SOF's first component: its sampling byte follows its id; swap to Y 1x1, Cb 2x2
  std::optional<image::jpeg::JpegLayout> l = image::jpeg::parse_jpeg(b.data(), b.size());
  ASSERT_TRUE(l);
  for (size_t i = 2; i + 20 < b.size(); ++i)
    if (b[i] == 0xff && b[i + 1] == 0xc0) {
      b[i + 10 + 3 + 1] = 0x22;  // the second component's sampling
      break;
    }
  std::string why;
  EXPECT_FALSE(image::jpeg::parse_jpeg(b.data(), b.size(), &why));
  EXPECT_NE(why.find("upsampling"), std::string::npos) << why;
  EXPECT_FALSE(decode_grey_parallel(b.data(), b.size(), 1, ParallelParams(), &why));
  // a chroma component whose quantisation table is not defined: libjpeg fails, whatever the grey
  // needs (found by mutating files; the first component's table alone was checked)
  b = test::encode_jpeg_case(base);
  for (size_t i = 2; i + 20 < b.size(); ++i)
    if (b[i] == 0xff && b[i + 1] == 0xc0) {
      b[i + 10 + 3 * 2 + 2] = 3;  // the third component's table
      break;
    }
  EXPECT_FALSE(image::jpeg::parse_jpeg(b.data(), b.size(), &why));
  EXPECT_NE(why.find("quantisation table"), std::string::npos) << why;
  EXPECT_FALSE(test::libjpeg_grey(b.data(), b.size(), 1));
  // a scan naming the frame's components in another order (1, 3, 2): libjpeg-turbo refuses it
  // ("Invalid component ID 2 in SOS"), so must this (fuzz_image, tests/fuzz/FINDINGS.md)
  b = test::encode_jpeg_case(base);
  for (size_t i = 2; i + 12 < b.size(); ++i)
    if (b[i] == 0xff && b[i + 1] == 0xda) {
      std::swap(b[i + 5 + 2], b[i + 5 + 4]);  // the second and third components' ids
      std::swap(b[i + 5 + 3], b[i + 5 + 5]);  // and their tables
      break;
    }
  std::string libjpeg_error;
  EXPECT_FALSE(test::libjpeg_grey(b.data(), b.size(), 1, &libjpeg_error));
  EXPECT_NE(libjpeg_error.find("Invalid component ID"), std::string::npos) << libjpeg_error;
  EXPECT_FALSE(image::jpeg::parse_jpeg(b.data(), b.size(), &why));
  EXPECT_NE(why.find("not in the frame"), std::string::npos) << why;
  EXPECT_FALSE(decode_grey_parallel(nullptr, 0, 1, ParallelParams(), &why));
  const uint8_t junk[] = {0xff, 0xd8, 0xff, 0xd9};
  EXPECT_FALSE(decode_grey_parallel(junk, sizeof junk, 1, ParallelParams(), &why));
}

// Damage: the decode must not crash or read out of bounds (ASan in tools/sanitize), and where it
// decodes, libjpeg-turbo must decode the same pixels (else the caller would not fall back).
void expect_damage_handled(const std::vector<uint8_t>& b, const std::string& what, int* decoded, int* failed) {
  for (int r : {1, 2, 8}) {
    ParallelParams p;
    p.seq_bits = 128;
    p.group = 16;
    std::string why;
    const std::optional<cv::Mat> got = decode_grey_parallel(b.data(), b.size(), r, p, &why);
    if (!got) {
      ++*failed;
      continue;
    }
    ++*decoded;
    std::string error;
    const std::optional<cv::Mat> want = test::libjpeg_grey(b.data(), b.size(), r, &error);
    ASSERT_TRUE(want) << what << " 1/" << r << ": decoded here, libjpeg fails: " << error;
    ASSERT_EQ(got->size(), want->size()) << what;
    EXPECT_EQ(cv::norm(*got, *want, cv::NORM_INF), 0) << what << " 1/" << r << ": pixels differ from libjpeg's";
  }
}

TEST(JpegParallel, DamagedFilesFailOrGiveLibjpegsPixels) {
  std::mt19937 rng(7);
  int decoded = 0, failed = 0, files = 0;
  for (int restart : {0, 3}) {
    JpegCase c;
    c.width = 120;
    c.height = 72;
    c.quality = 60;
    c.restart_mcus = restart;
    const std::vector<uint8_t> good = test::encode_jpeg_case(c);
    const size_t scan = image::jpeg::parse_jpeg(good.data(), good.size())->scan_begin;
    // truncated anywhere
    for (size_t n = 0; n < good.size(); n += 1 + good.size() / 97) {
      expect_damage_handled(std::vector<uint8_t>(good.begin(), good.begin() + long(n)),
                            c.name() + " cut at " + std::to_string(n), &decoded, &failed);
      ++files;
    }
    // bits flipped, bytes replaced, set to FF, removed or inserted, in the headers and in the scan
    for (int i = 0; i < 300; ++i) {
      std::vector<uint8_t> b = good;
      const int changes = 1 + int(rng() % 3);
      for (int f = 0; f < changes; ++f) {
        const size_t at = i % 4 == 0 ? rng() % b.size() : scan + rng() % (b.size() - scan);
        switch (i % 5) {
          case 0: b[at] = uint8_t(rng()); break;
          case 1: b[at] = 0xff; break;
          case 2: b.erase(b.begin() + long(at)); break;
          case 3: b.insert(b.begin() + long(at), uint8_t(rng())); break;
          default: b[at] ^= uint8_t(1u << (rng() % 8));
        }
      }
      expect_damage_handled(b, c.name() + " flipped #" + std::to_string(i), &decoded, &failed);
      ++files;
    }
  }
  std::cout << files << " damaged files: " << decoded << " decodes equal to libjpeg's, " << failed
            << " reported not handled or damaged\n";
}

}  // namespace
}  // namespace prism
