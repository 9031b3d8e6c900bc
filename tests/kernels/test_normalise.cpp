// Contrast normalisation before SIFT, for captures in poor light: our CLAHE
// (texture/normalise_pixel.h, the arithmetic a CUDA kernel shares) against OpenCV 4.6's cv::CLAHE,
// which it must equal bit for bit on random and real images of sizes that do and do not divide into
// the tile grid; the names `--normalise` and the gallery record use; and extract_features applying
// it after the shrink.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "prism_test.h"
#include "test_env.h"
#include "texture_cases.h"
#include "texture/features.h"
#include "texture/gallery.h"
#include "texture/normalise.h"

namespace prism {
namespace {

using texture::Normalisation;

cv::Mat opencv_clahe(const cv::Mat& grey, double clip, int tx, int ty) {
  cv::Mat out;
  cv::createCLAHE(clip, cv::Size(tx, ty))->apply(grey, out);
  return out;
}

// Pixels where two images differ (0: equal).
int differing(const cv::Mat& a, const cv::Mat& b) {
  EXPECT_EQ(a.size(), b.size());
  EXPECT_EQ(a.type(), b.type());
  cv::Mat d;
  cv::compare(a, b, d, cv::CMP_NE);
  return cv::countNonZero(d);
}

TEST(Normalise, ClaheEqualsOpenCvOnRandomImages) {
  std::mt19937 rng(22);
  std::uniform_int_distribution<int> side(1, 300);
  const double clips[] = {0.0, 1.0, 2.0, 2.5, 4.0, 40.0};
  for (int trial = 0; trial < 60; ++trial) {
    const int w = trial < 4 ? 64 * (trial + 1) : side(rng), h = trial < 4 ? 48 * (trial + 1) : side(rng);
    cv::Mat g(h, w, CV_8UC1);
    cv::theRNG().state = rng();
    // Dark and low-contrast half of the time (what the normalisation is for), full range otherwise.
    if (trial % 2)
      cv::randu(g, 0, 256);
    else
      cv::randu(g, 0, 1 + trial % 40);
    if (trial % 3 == 0) cv::GaussianBlur(g, g, cv::Size(0, 0), 2);
    const double clip = clips[trial % 6];
    const int tx = 1 + int(rng() % 16), ty = 1 + int(rng() % 16);
    cv::Mat ours;
    texture::clahe(g, clip, tx, ty, ours);
    EXPECT_EQ(differing(ours, opencv_clahe(g, clip, tx, ty)), 0)
        << w << "x" << h << " clip " << clip << " tiles " << tx << "x" << ty;
  }
}

TEST(Normalise, ClaheEqualsOpenCvOnRealImages) {
  for (const char* name : {"fruits.jpg", "baboon.jpg", "building.jpg", "box.png"}) {
    const std::string path = test::data_dir() + "/images/" + name;
    PRISM_NEED_FILE(path);
    cv::Mat grey = cv::imread(path, cv::IMREAD_GRAYSCALE);
    ASSERT_FALSE(grey.empty()) << path;
    // As a dim capture too: a quarter of the light.
    cv::Mat dark;
    grey.convertTo(dark, CV_8U, 0.25);
    for (const cv::Mat& g : {grey, dark})
      for (const auto& [clip, tiles] : {std::pair<int, int>{2, 8}, {4, 8}, {2, 4}, {3, 16}}) {
        const Normalisation n =
            texture::parse_normalisation("clahe-" + std::to_string(clip) + "-" + std::to_string(tiles));
        EXPECT_EQ(differing(texture::normalise(g, n), opencv_clahe(g, clip, tiles, tiles)), 0)
            << path << " " << n.name() << " mean " << cv::mean(g)[0];
      }
  }
}

TEST(Normalise, InPlaceEqualsOutOfPlace) {
  std::mt19937 rng(5);
  cv::Mat g(97, 131, CV_8UC1);
  cv::theRNG().state = rng();
  cv::randu(g, 0, 60);
  cv::Mat out;
  texture::clahe(g, 2, 8, 8, out);
  texture::clahe(g, 2, 8, 8, g);
  EXPECT_EQ(differing(g, out), 0);
}

TEST(Normalise, NamesRoundTripAndBadOnesAreRefusedByName) {
  EXPECT_EQ(texture::parse_normalisation("none"), Normalisation{});
  EXPECT_EQ(texture::parse_normalisation("none").name(), "none");
  for (const char* name : {"clahe-2-8", "clahe-1-1", "clahe-40-32", "clahe-3-16"})
    EXPECT_EQ(texture::parse_normalisation(name).name(), name);
  const Normalisation n = texture::parse_normalisation("clahe-4-16");
  EXPECT_EQ(n.kind, Normalisation::Kind::kClahe);
  EXPECT_EQ(n.clip, 4);
  EXPECT_EQ(n.tiles, 16);
  EXPECT_EQ(texture::poor_light_normalisation().name(), "clahe-4-8");
  for (const char* bad :
       {"", "None", "clahe", "clahe-2", "clahe-2-", "clahe--8", "clahe-0-8", "clahe-2-0", "clahe-41-8", "clahe-2-33",
        "clahe-02-8", "clahe-+2-8", "clahe-2.5-8", "clahe-2-8-1", "clahe-2-8x8", "equalize", "clahe-999999999999-8"}) {
    try {
      texture::parse_normalisation(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(bad) + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("clahe-CLIP-TILES"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(texture::normalise(cv::Mat(8, 8, CV_8UC3), texture::poor_light_normalisation()), std::invalid_argument);
}

TEST(Normalise, ExtractFeaturesNormalisesAfterTheShrink) {
  // A dim textured image over 1024 px: extraction with the poor-light CLAHE equals extraction without any of the
  // shrunk-then-normalised image (keypoints scaled back), and finds more keypoints than none.
  std::mt19937 rng(7);
  cv::Mat g = test::random_texture(rng, 1400, 700);
  g.convertTo(g, CV_8U, 0.12, 2);
  texture::FeatureParams p;
  p.normalisation = texture::poor_light_normalisation();
  const texture::Features with = texture::extract_features(g, p);
  const texture::Features without = texture::extract_features(g);
  cv::Mat small;
  cv::resize(g, small, cv::Size(1024, 512), 0, 0, cv::INTER_AREA);
  const texture::Features manual = texture::extract_features(texture::normalise(small, p.normalisation));
  ASSERT_EQ(with.count(), manual.count());
  EXPECT_EQ(with.descriptors, manual.descriptors);
  for (int i = 0; i < with.count(); ++i) {
    EXPECT_NEAR(with.keypoints[i].x, (manual.keypoints[i].x + 0.5) * 1400.0 / 1024 - 0.5, 1e-3);
    EXPECT_NEAR(with.keypoints[i].y, (manual.keypoints[i].y + 0.5) * 1400.0 / 1024 - 0.5, 1e-3);
  }
  EXPECT_EQ(with.width, 1400);
  EXPECT_GT(with.count(), without.count() + 50) << "none " << without.count() << ", clahe " << with.count();
}

std::string marker_of(const std::filesystem::path& dir) {
  std::ifstream in(dir / "gallery.prism");
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_marker(const std::filesystem::path& dir, const std::string& text) {
  std::ofstream(dir / "gallery.prism", std::ios::trunc) << text;
}

texture::GalleryEntry entry_of(const std::string& id, std::mt19937& rng, const Normalisation& n) {
  texture::FeatureParams p;
  p.normalisation = n;
  return {id, "test", 0, texture::extract_features(test::random_texture(rng), p)};
}

// The gallery's record: written at creation (format 3 with a normalisation, format 2 without, as
// before), read back by open() and read_normalisation(), kept by writes and by a rebuilt pack.
TEST(GalleryNormalisation, RecordRoundTripsAndSurvivesWritesAndRebuilds) {
  test::TempDir dir;
  const auto g = dir.path() / "g";
  const Normalisation n = texture::parse_normalisation("clahe-4-16");
  std::mt19937 rng(3);
  {
    texture::Gallery created = texture::Gallery::open(g, /*create=*/true, texture::Gallery::Load::kEntries, n);
    EXPECT_EQ(created.normalisation(), n);
    created.add(entry_of("a", rng, n));
  }
  EXPECT_EQ(marker_of(g), "prism texture gallery, format 3\nnormalise clahe-4-16\n");
  EXPECT_EQ(texture::Gallery::read_normalisation(g), n);
  EXPECT_EQ(texture::Gallery::open(g).normalisation(), n);
  EXPECT_EQ(texture::Gallery::open(g, false, texture::Gallery::Load::kNoEntries).normalisation(), n);
  // A lost pack is rebuilt by the next reader, and the marker keeps the record.
  std::filesystem::remove(g / "pack.log");
  const texture::Gallery reread = texture::Gallery::open(g);
  EXPECT_NE(reread.pack_note().find("rebuilt"), std::string::npos) << reread.pack_note();
  EXPECT_EQ(reread.entries().size(), 1u);
  EXPECT_EQ(marker_of(g), "prism texture gallery, format 3\nnormalise clahe-4-16\n");
  texture::Gallery::open(g, false, texture::Gallery::Load::kNoEntries).add(entry_of("b", rng, n));
  EXPECT_EQ(texture::Gallery::open(g).entries().size(), 2u);
  EXPECT_EQ(texture::Gallery::read_normalisation(g), n);

  // Created without one: format 2 exactly as older builds wrote it.
  const auto plain = dir.path() / "plain";
  EXPECT_EQ(texture::Gallery::open(plain, true).normalisation(), Normalisation{});
  EXPECT_EQ(marker_of(plain), "prism texture gallery, format 2\n");
}

// Galleries from before the record (format 1: entry files only; format 2) mean none and keep
// working: read, written (format 1 becomes 2), searched with unnormalised features.
TEST(GalleryNormalisation, OlderGalleriesMeanNone) {
  test::TempDir dir;
  std::mt19937 rng(4);
  for (const char* marker : {"prism texture gallery, format 1\n", "prism texture gallery, format 2\n"}) {
    const auto g = dir.path() / (marker[30] == '1' ? "f1" : "f2");
    texture::Gallery::open(g, true).add(entry_of("a", rng, {}));
    write_marker(g, marker);
    EXPECT_EQ(texture::Gallery::read_normalisation(g), Normalisation{}) << marker;
    texture::Gallery opened = texture::Gallery::open(g);
    EXPECT_EQ(opened.normalisation(), Normalisation{}) << marker;
    EXPECT_EQ(opened.entries().size(), 1u);
    opened.add(entry_of("b", rng, {}));
    EXPECT_EQ(marker_of(g), "prism texture gallery, format 2\n") << marker;
    EXPECT_EQ(texture::Gallery::open(g).entries().size(), 2u);
  }
}

// A damaged or unknown record is refused naming the marker file and its line, never read as none.
TEST(GalleryNormalisation, ABadRecordIsRefusedNamingTheLine) {
  test::TempDir dir;
  const auto g = dir.path() / "g";
  texture::Gallery::open(g, true, texture::Gallery::Load::kEntries, texture::poor_light_normalisation());
  const std::pair<const char*, const char*> cases[] = {
      {"prism texture gallery, format 3\n", "gallery.prism:2: expected 'normalise NAME', not ''"},
      {"prism texture gallery, format 3\nnormalise\n", "gallery.prism:2: expected 'normalise NAME'"},
      {"prism texture gallery, format 3\nnormalise clahe-2-8 extra\n", "gallery.prism:2: expected 'normalise NAME'"},
      {"prism texture gallery, format 3\nnormalise retinex\n", "gallery.prism:2: unknown normalisation 'retinex'"},
      {"prism texture gallery, format 4\n", "gallery.prism:1: unknown gallery format"},
  };
  for (const auto& [text, error] : cases) {
    write_marker(g, text);
    for (int reader = 0; reader < 2; ++reader) {
      try {
        if (reader == 0)
          texture::Gallery::open(g);
        else
          texture::Gallery::read_normalisation(g);
        ADD_FAILURE() << "accepted " << text;
      } catch (const texture::GalleryError& e) {
        EXPECT_NE(std::string(e.what()).find(error), std::string::npos) << e.what();
      }
    }
  }
}

// Two creators of one new folder with different normalisations (two `prism texture enroll
// --normalise` at once): both pass the fresh-folder check, then wait for the writer lock the test
// holds. The first to get it records its normalisation; the other must open the gallery as it now
// is and report the first's record, never write its own over it (which would relabel the first's
// entries). Each round, the two objects and the marker agree.
TEST(GalleryNormalisation, RacingCreatorsAgreeOnTheRecord) {
  test::TempDir dir;
  const Normalisation none{}, clahe = texture::poor_light_normalisation();
  int won[2] = {0, 0};
  for (int round = 0; round < 6; ++round) {
    const auto g = dir.path() / ("g" + std::to_string(round));
    std::filesystem::create_directories(g);
    // the writer lock, held while both creators start (an empty folder with .lock is still fresh)
    const int lock = ::open((g / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(lock, 0);
    ASSERT_EQ(::flock(lock, LOCK_EX), 0);
    Normalisation seen[2];
    std::string errors[2];
    std::thread creators[2];
    for (int i = 0; i < 2; ++i)
      creators[i] = std::thread([&, i] {
        try {
          seen[i] =
              texture::Gallery::open(g, true, texture::Gallery::Load::kNoEntries, i ? clahe : none).normalisation();
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    // Give both time to reach the lock (a sequencing aid, not an assertion: one that comes later
    // finds the marker and opens the gallery, which must give the same answer).
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::close(lock);
    for (std::thread& t : creators) t.join();
    ASSERT_EQ(errors[0], "") << "round " << round;
    ASSERT_EQ(errors[1], "") << "round " << round;
    const Normalisation recorded = texture::Gallery::read_normalisation(g);
    EXPECT_EQ(seen[0], recorded) << "round " << round << ": creator 0 (none) believes " << seen[0].name()
                                 << ", the marker says " << recorded.name();
    EXPECT_EQ(seen[1], recorded) << "round " << round << ": creator 1 (" << clahe.name() << ") believes "
                                 << seen[1].name() << ", the marker says " << recorded.name();
    ++won[recorded == clahe];
    EXPECT_EQ(texture::Gallery::open(g).entries().size(), 0u);
  }
  std::cout << "rounds won: none " << won[0] << ", " << clahe.name() << " " << won[1] << "\n";
}

}  // namespace
}  // namespace prism
