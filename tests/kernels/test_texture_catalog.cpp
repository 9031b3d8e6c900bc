// texture::Catalog, the gallery and its index as one: a write the index refuses leaves the gallery as
// it was (nothing unacknowledged stays on disk), a reopened catalog answers as the one that wrote, a
// normalisation that disagrees with the gallery's record is refused naming both, a read-only
// catalog writes nothing, reads each entry as stored through the gallery it opened, and
// for_each_entry passes on what read() of each indexed id would, in id order, from one stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

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

// An entry as bytes (the entry file's encoding), what "the same entry" means below.
std::string bytes_of(const texture::GalleryEntry& e) {
  const std::vector<uint8_t> b = texture::Gallery::encode(e);
  return std::string(b.begin(), b.end());
}
std::string file_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void flip_byte(const std::filesystem::path& p, size_t at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  const char c = char(f.get());
  f.seekp(std::streamoff(at));
  f.put(char(c ^ 0x5a));
}

// A read-only catalog reads through the gallery it opened, each read the entry as stored then: what
// another writer changed since is read as it now is, what it removed is not enrolled, and a damaged
// entry file is read from its copy in the pack, noted and counted.
TEST(TextureCatalog, AReadOnlyCatalogReadsEachEntryAsStored) {
  test::TempDir dir;
  const auto g = dir.path() / "g";
  std::mt19937 rng(std::random_device{}());
  std::vector<texture::GalleryEntry> entries;
  {
    texture::Catalog c(writable(g));
    c.load();
    for (int i = 0; i < 6; ++i) {
      entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, 40 + 10 * i, i % 2 ? "odd" : ""));
      entries.back().source = "source " + std::to_string(i);
      entries.back().enrolled_unix = 1000 + i;
      c.add(entries.back());
    }
  }
  texture::CatalogOptions ro;
  ro.gallery = g;
  ro.index.device = texture::Device::kCpu;
  texture::Catalog c(ro);
  std::vector<std::string> notes;
  c.on_note([&](const std::string& n) { notes.push_back(n); });
  c.load();
  for (int round = 0; round < 2; ++round)  // the same answers read after read
    for (const texture::GalleryEntry& e : entries) EXPECT_EQ(bytes_of(c.read(e.id)), bytes_of(e)) << e.id;
  EXPECT_THROW(c.read("absent"), texture::GalleryError);
  // Another writer (another process, as far as this catalog knows) updates p1, removes p2, adds p9.
  texture::Gallery other = texture::Gallery::open(g, false, texture::Gallery::Load::kNoEntries);
  texture::GalleryEntry p1 = test::random_index_entry("p1", rng, 99, "changed");
  p1.enrolled_unix = 2000;
  other.update(p1);
  other.remove("p2");
  texture::GalleryEntry p9 = test::random_index_entry("p9", rng, 30);
  p9.enrolled_unix = 3000;
  other.add(p9);
  EXPECT_EQ(bytes_of(c.read("p1")), bytes_of(p1));
  EXPECT_EQ(c.read("p1").collection, "changed");
  EXPECT_THROW(c.read("p2"), texture::GalleryError);
  EXPECT_EQ(bytes_of(c.read("p9")), bytes_of(p9));
  EXPECT_EQ(bytes_of(c.read("p0")), bytes_of(entries[0]));
  EXPECT_EQ(c.size(), 6u);  // the index is as it was opened
  // A damaged entry file: read from the pack's copy, and said.
  flip_byte(g / "entries" / "p3.tex", 100);
  EXPECT_EQ(c.copies_repaired(), 0);
  EXPECT_EQ(bytes_of(c.read("p3")), bytes_of(entries[3]));
  EXPECT_EQ(c.copies_repaired(), 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("p3"), std::string::npos) << notes[0];
  EXPECT_EQ(bytes_of(c.read("p4")), bytes_of(entries[4]));
}

// for_each_entry: every indexed entry as read() gives it, sorted by id (ids whose files' names sort
// otherwise included), after the catalog's own updates and removals; not the entries another writer
// added since; an indexed id another writer removed is not enrolled (GalleryError, as read() says);
// and a damaged pack record is read from its entry file, noted and counted.
TEST(TextureCatalog, ForEachEntryPassesWhatReadWouldInIdOrder) {
  test::TempDir dir;
  const auto g = dir.path() / "g";
  std::mt19937 rng(std::random_device{}());
  texture::Catalog c(writable(g));
  std::vector<std::string> notes;
  c.on_note([&](const std::string& n) { notes.push_back(n); });
  c.load();
  std::vector<std::string> ids = {"m", "a-b", "z", "a", "a.c", "b_1", "a_c", "q", "c"};
  for (size_t i = 0; i < ids.size(); ++i) c.add(test::random_index_entry(ids[i], rng, 20 + int(i), i % 3 ? "lot" : ""));
  c.update(test::random_index_entry("q", rng, 77, "other"));
  EXPECT_TRUE(c.remove("m"));
  ids.erase(std::find(ids.begin(), ids.end(), "m"));
  std::sort(ids.begin(), ids.end());
  const auto listed = [&] {
    std::vector<std::string> out;
    c.for_each_entry([&](texture::GalleryEntry&& e) { out.push_back(bytes_of(e)); });
    return out;
  };
  const auto read_each = [&] {
    std::vector<std::string> out;
    for (const std::string& id : ids) out.push_back(bytes_of(c.read(id)));
    return out;
  };
  EXPECT_EQ(listed(), read_each());
  std::vector<std::string> order;
  c.for_each_entry([&](texture::GalleryEntry&& e) { order.push_back(e.id); });
  EXPECT_EQ(order, ids);
  // Written by another writer since: not indexed, not passed on (a changed entry is, as stored).
  texture::Gallery other = texture::Gallery::open(g, false, texture::Gallery::Load::kNoEntries);
  other.add(test::random_index_entry("a0", rng, 30));
  other.add(test::random_index_entry("zz", rng, 30));
  other.update(test::random_index_entry("c", rng, 55));
  EXPECT_EQ(listed(), read_each());
  EXPECT_EQ(c.read("c").features.count(), 55);
  // A damaged pack record: the entry file's copy, noted and counted.
  const std::string pack = file_text(g / "pack.log");
  const size_t at = pack.rfind(bytes_of(c.read("b_1")));
  ASSERT_NE(at, std::string::npos);
  flip_byte(g / "pack.log", at + 200);
  EXPECT_EQ(c.copies_repaired(), 0);
  EXPECT_EQ(listed(), read_each());
  EXPECT_EQ(c.copies_repaired(), 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("b_1"), std::string::npos) << notes[0];
  // An indexed id removed behind the catalog's back: not enrolled, as read() says; at the end of the
  // id order (read after the stream) and within it.
  other.remove("z");
  EXPECT_THROW(c.read("z"), texture::GalleryError);
  EXPECT_THROW(listed(), texture::GalleryError);
  other.add(test::random_index_entry("z", rng, 33));
  EXPECT_EQ(listed(), read_each());
  other.remove("a.c");
  EXPECT_THROW(listed(), texture::GalleryError);
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
