// texture::Catalog, the gallery and its index as one: a write the index refuses leaves the gallery as
// it was (nothing unacknowledged stays on disk), a reopened catalog answers as the one that wrote, a
// normalisation that disagrees with the gallery's record is refused naming both, and a read-only
// catalog writes nothing.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "gallery_cases.h"
#include "match/match.h"
#include "test_env.h"
#include "texture/catalog.h"

namespace prism {
namespace {

texture::CatalogOptions writable(const std::filesystem::path& g, int64_t host_slots = 1000) {
  texture::CatalogOptions o;
  o.gallery = g;
  o.writable = o.create = true;
  o.index.device = texture::Device::kCpu;
  o.index.host_budget = host_slots * int64_t(match::kSlotBytes);
  o.normalisation = texture::Normalisation{};
  return o;
}

TEST(TextureCatalog, AWriteTheIndexRefusesLeavesTheGalleryAsItWas) {
  test::TempDir dir;
  const auto g = dir.path() / "g";
  std::mt19937 rng(std::random_device{}());
  texture::Catalog c(writable(g, 2));
  c.load();
  c.add(test::random_index_entry("a", rng, 64));
  c.add(test::random_index_entry("b", rng, 64));
  EXPECT_THROW(c.add(test::random_index_entry("c", rng, 64)), texture::IndexFull);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_FALSE(c.contains("c"));
  const texture::Gallery reread = texture::Gallery::open(g);
  ASSERT_EQ(reread.entries().size(), 2u);
  EXPECT_EQ(reread.find("c"), nullptr);
  // After a removal there is room again, and the refused id can be enrolled.
  EXPECT_TRUE(c.remove("a"));
  EXPECT_FALSE(c.remove("a"));
  c.add(test::random_index_entry("c", rng, 64));
  EXPECT_EQ(texture::Gallery::open(g).entries().size(), 2u);
}

TEST(TextureCatalog, AReopenedCatalogAnswersAsTheOneThatWrote) {
  test::TempDir dir;
  const auto g = dir.path() / "g";
  std::mt19937 rng(std::random_device{}());
  std::vector<texture::GalleryEntry> entries;
  texture::SearchParams p;
  texture::SearchResult first;
  {
    texture::Catalog c(writable(g));
    c.load();
    for (int i = 0; i < 12; ++i) {
      entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, 200, i % 2 ? "odd" : ""));
      c.add(entries.back());
    }
    texture::GalleryEntry changed = test::random_index_entry("p3", rng, 150, "odd");
    c.update(changed);
    entries[3] = changed;
    EXPECT_EQ(c.read("p3").features.count(), 150);
    first = c.search(entries[3].features, p);
    EXPECT_TRUE(first.identified);
    EXPECT_EQ(first.best.id, "p3");
  }
  texture::CatalogOptions ro;
  ro.gallery = g;
  ro.index.device = texture::Device::kCpu;
  texture::Catalog again(ro);
  size_t progress = 0;
  again.load([&](size_t done) { progress = done; });
  EXPECT_EQ(progress, 12u);
  EXPECT_EQ(again.size(), 12u);
  const texture::SearchResult second = again.search(entries[3].features, p);
  EXPECT_EQ(second.best.id, first.best.id);
  EXPECT_EQ(second.best.score, first.best.score);
  EXPECT_EQ(second.best.geometry.inliers, first.best.geometry.inliers);
  // Read-only: no write reaches the gallery.
  EXPECT_THROW(again.add(test::random_index_entry("new", rng, 64)), texture::GalleryError);
  EXPECT_THROW(again.remove("p1"), texture::GalleryError);
  EXPECT_EQ(texture::Gallery::open(g).entries().size(), 12u);
}

TEST(TextureCatalog, ANormalisationThatDisagreesIsRefusedNamingBoth) {
  test::TempDir dir;
  const auto g = dir.path() / "g";
  { texture::Catalog c(writable(g)); }
  texture::CatalogOptions o = writable(g);
  o.normalisation = texture::parse_normalisation("clahe-4-8");
  o.setting = "--normalise";
  try {
    texture::Catalog c(o);
    FAIL() << "a gallery recording none was opened as clahe-4-8";
  } catch (const texture::NormalisationMismatch& e) {
    EXPECT_NE(
        std::string(e.what()).find("--normalise clahe-4-8: the gallery " + g.string() + " records normalisation none"),
        std::string::npos)
        << e.what();
  }
  texture::CatalogOptions missing;
  missing.gallery = dir.path() / "nothing-here";
  EXPECT_THROW(texture::Catalog{missing}, texture::GalleryError);
}

}  // namespace
}  // namespace prism
