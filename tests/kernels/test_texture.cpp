// Texture identification on the CPU: features, geometric verification against a known homography,
// the gallery's file format, atomic writes and refusal of corrupt files, and search/verify over
// fresh random textures (smoothed noise at two scales: blob-rich like wood or stone).
#include <gtest/gtest.h>
#include <unistd.h>

#include <opencv2/imgproc.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>

#include "common/durable_file.h"
#include "prism_test.h"
#include "texture_cases.h"
#include "texture/index.h"

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

TEST(TextureFeatures, StrongestFirstUnitRootSiftAndOriginalCoordinates) {
  std::mt19937 rng(std::random_device{}());
  const cv::Mat img = random_texture(rng, 640, 480);
  const texture::Features f = texture::extract_features(img);
  ASSERT_GT(f.count(), 100);
  ASSERT_LE(f.count(), match::kSlot);
  EXPECT_EQ(f.width, 640);
  EXPECT_EQ(f.height, 480);
  for (int i = 1; i < f.count(); ++i) ASSERT_GE(f.keypoints[i - 1].response, f.keypoints[i].response);
  for (int i = 0; i < f.count(); ++i) {
    double n2 = 0;
    for (int k = 0; k < match::kDim; ++k)
      n2 += std::pow(match::half_to_float(f.descriptors[size_t(i) * match::kDim + k]), 2);
    ASSERT_NEAR(n2, 1.0, 5e-3) << i;
  }
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
  index.build({GalleryEntry{"original", "", 0, texture::extract_features(img)}});
  const texture::SearchResult r = index.verify(texture::extract_features(warped), "original", {});
  ASSERT_TRUE(r.identified) << r.best.geometry.inliers;
  // The recovered homography maps the query (warped) to the gallery (original): the inverse of h.
  EXPECT_LT(corner_error(r.best.geometry.homography, h.inv(), img.cols, img.rows), 3.0);
  EXPECT_GT(r.best.geometry.query_box.area(), 0.3 * img.total());
}

// The significance is -log10 of a binomial upper tail: against a direct sum in long double over
// random (inliers, matches), the closed form p^n when every match is an inlier, and its order.
TEST(TextureVerify, SignificanceIsTheBinomialTailOfChanceInliers) {
  auto direct = [](int inliers, int matches) {
    const int n = matches - 4, k = inliers - 4;
    const long double p = texture::kChanceInlier;
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
              texture::chance_significance(r.best.geometry.inliers, r.best.geometry.matches));
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
  EXPECT_THROW(index.verify(texture::Features{}, "nobody", {}), GalleryError);
  texture::TextureIndex empty(texture::Device::kCpu);
  empty.build({});
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
  for (auto& d : e.features.descriptors) d = uint16_t(rng() & 0x3BFF);
  return e;
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

// Item 11 of issue 19: a reader listed entries/, then a writer deleted one before the reader opened
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
  auto damage = [&] { fs::resize_file(file, fs::file_size(file) / 2); };
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

}  // namespace
}  // namespace prism
