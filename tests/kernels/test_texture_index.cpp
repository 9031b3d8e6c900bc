// The texture index's bookkeeping on the CPU: scores equal to the matcher run over the same
// entries laid out flat, live add/update/remove against a model, the host budget's refusal,
// collections as search scopes, writes visible to searches running in other threads, and planted
// queries identified.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "match/match.h"
#include "texture/features.h"
#include "gallery_cases.h"
#include "search_cases.h"
#include "texture/index.h"
#include "texture_cases.h"

namespace prism {
namespace {

using texture::GalleryEntry;
using texture::TextureIndex;

// An entry of `n` random sparse RootSIFT descriptors (8-bit and FP16) at random keypoint positions, of
// sizes that put its digest rows out of the stored order.

// The reference: the matcher over the entries packed flat in `order`, one slot each.
std::vector<int> flat_scores(const std::vector<const GalleryEntry*>& order, const texture::Features& q) {
  std::vector<uint8_t> gallery(order.size() * match::kSlotBytes, 0);
  std::vector<int> counts(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& d = order[i]->features.descriptors;
    std::copy(d.begin(), d.end(), gallery.begin() + i * match::kSlotBytes);
    counts[i] = order[i]->features.count();
  }
  const int rows = std::max(16, (q.count() + 15) / 16 * 16);
  std::vector<uint8_t> query(size_t(rows) * match::kDim, 0);
  std::copy(q.descriptors.begin(), q.descriptors.end(), query.begin());
  std::vector<int> scores(order.size(), 0);
  if (order.empty() || q.count() == 0) return scores;
  match::MatchU8Problem p;
  p.query = query.data();
  p.rows = p.query_rows = rows;
  p.gallery = gallery.data();
  p.counts = counts.data();
  p.images = int(order.size());
  match::match_u8_cpu(p, {}, {scores.data()});
  return scores;
}

// A query sharing `shared` descriptors with `e` among random ones.
texture::Features query_from(const GalleryEntry& e, std::mt19937& rng, int shared) {
  texture::Features q = test::random_index_entry("q", rng, 48).features;
  shared = std::min(shared, e.features.count());
  std::copy_n(e.features.descriptors.begin(), size_t(shared) * match::kDim, q.descriptors.begin());
  return q;
}

// A query sharing the first `shared` rows of e's digest (IndexOptions::digest_order, the default's).
texture::Features digest_query_from(const GalleryEntry& e, std::mt19937& rng, int shared) {
  GalleryEntry d = e;
  const std::vector<int> order = texture::digest_order(e.features, texture::IndexOptions{}.digest_order);
  for (size_t r = 0; r < order.size(); ++r) {
    std::copy_n(e.features.descriptors.begin() + size_t(order[r]) * match::kDim, match::kDim,
                d.features.descriptors.begin() + r * match::kDim);
  }
  return query_from(d, rng, shared);
}

texture::IndexOptions small_blocks(int64_t host_slots = 1000) {
  texture::IndexOptions o;
  o.device = texture::Device::kCpu;
  o.host_budget = host_slots * int64_t(match::kSlotBytes);
  o.block_slots = 4;  // several blocks even for a handful of entries
  return o;
}

// An 8-bit index's entries and queries carry one descriptor a keypoint (a slot in digest order reads
// them by keypoint): fewer are refused naming the product, the counts and the query.
TEST(TextureIndexLive, DescriptorsShortOfTheKeypointsAreRefusedNamingThem) {
  std::mt19937 rng(std::random_device{}());
  texture::IndexOptions o = small_blocks(100);
  o.host_digest_rows = 128;
  TextureIndex index(o);
  GalleryEntry e = test::random_index_entry("widget-9", rng, 40);
  e.features.descriptors.resize(30 * match::kDim);
  for (bool update : {false, true}) {
    try {
      update ? index.update(e) : index.add(e);
      ADD_FAILURE() << "an entry with 40 keypoints and 30 descriptors was taken";
    } catch (const std::invalid_argument& ex) {
      EXPECT_NE(std::string(ex.what()).find("widget-9"), std::string::npos) << ex.what();
      EXPECT_NE(std::string(ex.what()).find("40 keypoints"), std::string::npos) << ex.what();
    }
    if (!update) index.add(test::random_index_entry("widget-9", rng, 40));
  }
  EXPECT_EQ(index.size(), 1u);
  try {
    index.search(e.features, {});
    ADD_FAILURE() << "a query with 40 keypoints and 30 descriptors ran";
  } catch (const std::invalid_argument& ex) {
    EXPECT_NE(std::string(ex.what()).find("the query"), std::string::npos) << ex.what();
  }
}

// Counts of streams, verification lanes, batch and block slots below 1 are refused naming them, on
// either path (the CPU path keeps no lanes but takes the same options).
TEST(TextureIndexLive, ResourceCountsBelowOneAreRefused) {
  for (int which = 0; which < 3; ++which) {
    texture::IndexOptions o = small_blocks(10);
    (which == 0 ? o.streams : which == 1 ? o.verify_lanes : o.host_batch) = 0;
    try {
      TextureIndex index(o);
      ADD_FAILURE() << "option " << which << " = 0 was taken";
    } catch (const std::invalid_argument& ex) {
      EXPECT_NE(std::string(ex.what()).find("verify lanes"), std::string::npos) << ex.what();
    }
  }
}

// Real features (SIFT on generated textures, queries seen through a homography): every planted query
// is identified, and a wrong claim rejected.
TEST(TextureIndexLive, PlantedQueriesAreIdentified) {
  std::mt19937 rng(7);
  texture::FeatureParams fp;
  std::vector<cv::Mat> images;
  std::vector<GalleryEntry> entries;
  for (int i = 0; i < 6; ++i) {
    images.push_back(test::random_texture(rng, 320, 240));
    entries.push_back({"t" + std::to_string(i), "", 0, texture::extract_features(images.back(), fp)});
  }
  TextureIndex index(small_blocks());
  index.build(entries);
  for (int i : {0, 3, 5}) {
    cv::Mat q;
    cv::warpPerspective(images[i], q, cv::Mat(test::random_homography(rng, 320, 240)), images[i].size());
    const texture::Features f = texture::extract_features(q, fp);
    const texture::SearchResult r = index.search(f, {});
    EXPECT_TRUE(r.identified) << "query " << i;
    EXPECT_EQ(r.best.id, "t" + std::to_string(i));
    EXPECT_FALSE(index.verify(f, "t" + std::to_string((i + 1) % 6), {}).identified);
  }
}

// search() in two halves (what a sharded search runs: the shortlists of every shard pooled before
// any is verified): the same candidates, geometry and significances as search() itself; a
// candidate removed between the halves is left out.
TEST(TextureIndexLive, ShortlistThenVerifyIsTheSearch) {
  std::mt19937 rng(11);
  texture::FeatureParams fp;
  std::vector<cv::Mat> images;
  std::vector<GalleryEntry> entries;
  for (int i = 0; i < 8; ++i) {
    images.push_back(test::random_texture(rng, 320, 240));
    entries.push_back({"t" + std::to_string(i), "", 0, texture::extract_features(images.back(), fp)});
  }
  TextureIndex index(small_blocks());
  index.build(entries);
  texture::SearchParams params;
  params.shortlist = 3;
  for (int i : {0, 4, 7}) {
    cv::Mat warped;
    cv::warpPerspective(images[i], warped, cv::Mat(test::random_homography(rng, 320, 240)), images[i].size());
    const texture::Features q = texture::extract_features(warped, fp);
    const texture::SearchResult whole = index.search(q, params), first = index.shortlist(q, params);
    EXPECT_EQ(first.searched, whole.searched);
    EXPECT_FALSE(first.identified);
    ASSERT_EQ(first.candidates.size(), whole.candidates.size());
    for (const texture::Candidate& c : first.candidates) EXPECT_EQ(c.geometry.inliers, 0) << "verified already";
    const texture::SearchResult second = index.verify_shortlist(q, first.candidates, params);
    EXPECT_EQ(second.identified, whole.identified) << "query " << i;
    EXPECT_EQ(second.best.id, "t" + std::to_string(i));
    ASSERT_EQ(second.candidates.size(), whole.candidates.size());
    for (size_t c = 0; c < whole.candidates.size(); ++c) {
      const texture::Candidate &a = second.candidates[c], &b = whole.candidates[c];
      EXPECT_EQ(a.id, b.id);
      EXPECT_EQ(a.score, b.score);
      EXPECT_EQ(a.geometry.inliers, b.geometry.inliers);
      EXPECT_EQ(a.geometry.significance, b.geometry.significance);
      EXPECT_EQ(a.significance, b.significance);
      EXPECT_EQ(a.gallery_size, b.gallery_size);
    }
  }
  // Removed between the halves: left out (and an empty list verifies nothing).
  const texture::SearchResult first = index.shortlist(entries[2].features, params);
  ASSERT_FALSE(first.candidates.empty());
  EXPECT_EQ(first.best.id, "t2");
  ASSERT_TRUE(index.remove("t2"));
  const texture::SearchResult second = index.verify_shortlist(entries[2].features, first.candidates, params);
  EXPECT_EQ(second.candidates.size(), first.candidates.size() - 1);
  for (const texture::Candidate& c : second.candidates) EXPECT_NE(c.id, "t2");
  EXPECT_TRUE(index.verify_shortlist(entries[2].features, {}, params).candidates.empty());
}

TEST(TextureIndexLive, AddUpdateRemoveMatchAModel) {
  std::mt19937 rng(std::random_device{}());
  TextureIndex index(small_blocks());
  std::map<std::string, GalleryEntry> model;
  int next = 0;
  for (int step = 0; step < 120; ++step) {
    const int op = int(rng() % 4);
    if (op <= 1 || model.size() < 3) {
      GalleryEntry e =
          test::random_index_entry("p" + std::to_string(next++), rng, 5 + int(rng() % 60), rng() % 2 ? "a" : "");
      index.add(e);
      EXPECT_THROW(index.add(e), texture::IndexError);  // the id is taken
      model[e.id] = e;
    } else {
      auto it = std::next(model.begin(), rng() % model.size());
      if (op == 2) {
        GalleryEntry e = test::random_index_entry(it->first, rng, 5 + int(rng() % 60), rng() % 2 ? "b" : "");
        index.update(e);
        it->second = e;
      } else {
        EXPECT_TRUE(index.remove(it->first));
        EXPECT_FALSE(index.remove(it->first));
        model.erase(it);
      }
    }
    ASSERT_EQ(index.size(), model.size());
    if (step % 10 != 9) continue;
    // Every id where ids() says; scores equal to the matcher over the model in the index's order.
    std::vector<const GalleryEntry*> order;
    for (size_t i = 0; i < index.ids().size(); ++i) {
      const std::string& id = index.ids()[i];
      ASSERT_EQ(index.find(id), int(i));
      ASSERT_EQ(model.count(id), 1u) << id;
      order.push_back(&model.at(id));
    }
    const GalleryEntry& target = *order[rng() % order.size()];
    const texture::Features q = query_from(target, rng, 10);
    EXPECT_EQ(index.scores(q, {}), flat_scores(order, q)) << "step " << step;
    const texture::SearchResult r = index.search(q, {});
    EXPECT_EQ(r.searched, model.size());
    EXPECT_EQ(r.best.id, target.id);
  }
  EXPECT_THROW(index.update(test::random_index_entry("nobody", rng, 8)), texture::IndexError);
  index.clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.search(test::random_index_entry("q", rng, 8).features, {}).best.index, -1);
}

TEST(TextureIndexLive, AnAddPastTheHostBudgetIsRefusedNamingIt) {
  std::mt19937 rng(7);
  TextureIndex index(small_blocks(3));
  for (int i = 0; i < 3; ++i) index.add(test::random_index_entry("p" + std::to_string(i), rng, 20));
  const texture::IndexStats s = index.stats();
  EXPECT_EQ(s.host_images, 3u);
  EXPECT_EQ(s.host_capacity, 3u);
  EXPECT_EQ(s.gpu_images, 0u);
  try {
    index.add(test::random_index_entry("p3", rng, 20));
    FAIL() << "an add past the budget must throw";
  } catch (const texture::IndexFull& e) {
    EXPECT_NE(std::string(e.what()).find("host budget"), std::string::npos) << e.what();
  }
  EXPECT_EQ(index.size(), 3u);
  EXPECT_EQ(index.find("p3"), -1);
  EXPECT_TRUE(index.remove("p1"));
  index.add(test::random_index_entry("p3", rng, 20));  // room again
  EXPECT_EQ(index.find("p3"), 2);
}

// A budget larger than the machine holds ends in IndexFull naming host memory, not in the OOM killer
// (as a 2,000,000-image benchmark once did: docs/benchmarks/texture-index.md, "2,000,000 images on one node").
TEST(TextureIndexLive, AnAddPastTheMachinesMemoryIsRefusedNamingIt) {
  std::ifstream meminfo("/proc/meminfo");
  const std::string info((std::istreambuf_iterator<char>(meminfo)), std::istreambuf_iterator<char>());
  if (info.find("MemAvailable:") == std::string::npos)
    GTEST_SKIP() << "no MemAvailable in /proc/meminfo: the host memory check is off";
  std::mt19937 rng(8);
  texture::IndexOptions o = small_blocks(1000);
  o.host_reserve = std::numeric_limits<int64_t>::max() / 4;  // more than any machine has available
  TextureIndex index(o);
  try {
    index.add(test::random_index_entry("p0", rng, 20));
    FAIL() << "an add that would leave less than the reserve must throw";
  } catch (const texture::IndexFull& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("host memory"), std::string::npos) << what;
    EXPECT_NE(what.find("to the rest of the machine"), std::string::npos) << what;
    EXPECT_NE(what.find("host budget"), std::string::npos) << what;
  }
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.stats().host_bytes, 0u);
  EXPECT_EQ(index.search(test::random_index_entry("q", rng, 8).features, {}).best.index, -1);  // still usable

  o.host_reserve = 0;  // the check off: the budget alone decides
  TextureIndex unchecked(o);
  for (int i = 0; i < 6; ++i) unchecked.add(test::random_index_entry("p" + std::to_string(i), rng, 20));
  EXPECT_EQ(unchecked.size(), 6u);
}

TEST(TextureIndexLive, CollectionsScopeTheSearch) {
  std::mt19937 rng(std::random_device{}());
  TextureIndex index(small_blocks());
  std::vector<GalleryEntry> entries;
  for (int i = 0; i < 24; ++i) {
    entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, 30,
                                               i % 3 == 0   ? "lotA"
                                               : i % 3 == 1 ? "lotB"
                                                            : ""));
    index.add(entries.back());
  }
  const texture::Features q = query_from(entries[4], rng, 12);  // p4 is in lotB
  texture::SearchParams in_a, in_b, in_both, unknown;
  in_a.collections = {"lotA"};
  in_b.collections = {"lotB"};
  in_both.collections = {"lotB", "lotA", "lotB"};  // a repeated name counts once
  unknown.collections = {"nope"};
  const texture::SearchResult a = index.search(q, in_a), b = index.search(q, in_b);
  EXPECT_EQ(a.searched, 8u);
  EXPECT_NE(a.best.id, "p4");
  EXPECT_EQ(b.searched, 8u);
  EXPECT_EQ(b.best.id, "p4");
  EXPECT_EQ(index.search(q, in_both).searched, 16u);
  const texture::SearchResult none = index.search(q, unknown);
  EXPECT_EQ(none.searched, 0u);
  EXPECT_EQ(none.best.index, -1);
  // Scoped scores are the whole index's scores, restricted to the members.
  const std::vector<int> all = index.scores(q, {}), scoped = index.scores(q, in_a);
  for (size_t i = 0; i < all.size(); ++i)
    EXPECT_EQ(scoped[i], entries[std::stoi(index.ids()[i].substr(1))].collection == "lotA" ? all[i] : 0) << i;
  // Moving p4 to lotA moves it between scopes; removing members shrinks them.
  GalleryEntry moved = entries[4];
  moved.collection = "lotA";
  index.update(moved);
  EXPECT_EQ(index.search(q, in_a).best.id, "p4");
  EXPECT_EQ(index.search(q, in_b).searched, 7u);
  EXPECT_TRUE(index.remove("p0"));
  EXPECT_EQ(index.search(q, in_a).searched, 8u);
  EXPECT_EQ(index.stats().collections, 2u);
}

// Queries of every length (none, one row, a few, a full slot), planted or not, for search_many: more
// than one batch of the matcher's (kMaxQueries, 8), and one that is not full.
std::vector<texture::Features> mixed_queries(const std::vector<GalleryEntry>& entries, std::mt19937& rng, int n) {
  std::vector<texture::Features> out;
  for (int i = 0; i < n; ++i) {
    const int rows = i == 0 ? 0 : i == 1 ? 1 : i == 2 ? match::kSlot : 20 + int(rng() % 500);
    texture::Features q = test::random_index_entry("q", rng, rows).features;
    const GalleryEntry& e = entries[rng() % entries.size()];
    const int shared = std::min({rows, e.features.count(), 10 + int(rng() % 40)});
    std::copy_n(e.features.descriptors.begin(), size_t(shared) * match::kDim, q.descriptors.begin());
    out.push_back(std::move(q));
  }
  return out;
}

// search_many against search one query at a time: the same results, field by field, over the whole
// index and collection scopes (one with an unknown collection), and on an index with digests, whose
// approximate searches search_many leaves to search.
TEST(TextureIndexLive, SearchManyEqualsSearchingOneByOne) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  texture::IndexOptions with_digests = small_blocks();
  with_digests.host_digest_rows = 128;
  for (const texture::IndexOptions& o : {small_blocks(), with_digests}) {
    SCOPED_TRACE("host_digest_rows " + std::to_string(o.host_digest_rows));
    TextureIndex index(o);
    std::vector<GalleryEntry> entries;
    for (int i = 0; i < 40; ++i) {
      const int n = i == 0 ? 0 : i == 1 ? 1 : i == 2 ? match::kSlot : 5 + int(rng() % 300);
      entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, n, i % 3 ? "a" : "b"));
      index.add(entries.back());
    }
    const std::vector<texture::Features> queries = mixed_queries(entries, rng, 11);
    std::vector<const texture::Features*> ptrs;
    for (const auto& q : queries) ptrs.push_back(&q);
    texture::SearchParams whole, in_b, scoped, digest;
    in_b.collections = {"b"};
    scoped.collections = {"a", "nope"};
    scoped.shortlist = 3;
    digest.digest_candidates = 2;
    const std::vector<texture::SearchParams> params{whole, in_b, scoped, digest};
    for (size_t k = 0; k < params.size(); ++k) {
      const std::vector<texture::SearchResult> many = index.search_many(ptrs, params[k]);
      ASSERT_EQ(many.size(), queries.size());
      size_t verified = 0;  // (the comparison is of verified shortlists, not only of empty ones)
      for (const auto& r : many) verified += r.candidates.size();
      if (k == 0) {
        EXPECT_GE(verified, queries.size() / 2);  // most of them planted
      }
      for (size_t i = 0; i < queries.size(); ++i)
        EXPECT_EQ(test::search_difference(many[i], index.search(queries[i], params[k])), "")
            << "query " << i << " (" << queries[i].count() << " rows), params " << k;
    }
    EXPECT_TRUE(index.search_many({}, whole).empty());
  }
}

// A query that search refuses makes search_many throw (the same error), whichever its place.
TEST(TextureIndexLive, SearchManyRefusesWhatSearchRefuses) {
  std::mt19937 rng(std::random_device{}());
  TextureIndex index(small_blocks());
  index.add(test::random_index_entry("p0", rng, 40));
  texture::Features good = test::random_index_entry("q", rng, 40).features, bad = good;
  bad.descriptors.resize(30 * match::kDim);
  EXPECT_THROW(index.search(bad, {}), std::invalid_argument);
  EXPECT_THROW(index.search_many({&good, &good, &bad}, {}), std::invalid_argument);
  EXPECT_EQ(index.search_many({&good, &good}, {}).size(), 2u);
}

TEST(TextureIndexLive, ConcurrentSearchesSeeEveryReturnedWrite) {
  std::mt19937 rng(std::random_device{}());
  TextureIndex index(small_blocks());
  std::vector<GalleryEntry> stable;
  for (int i = 0; i < 8; ++i) {
    stable.push_back(test::random_index_entry("s" + std::to_string(i), rng, 24));
    index.add(stable.back());
  }
  std::vector<texture::Features> stable_queries;
  for (const auto& e : stable) stable_queries.push_back(query_from(e, rng, 10));
  std::atomic<bool> done{false};
  std::atomic<int> searches{0}, wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t)
    readers.emplace_back([&, t] {
      for (size_t k = t; !done; ++k) {
        const size_t i = k % stable.size();
        if (index.search(stable_queries[i], {}).best.id != stable[i].id) ++wrong;
        ++searches;
      }
    });
  // The writer churns other products; each write is visible to its own next search.
  int failures = 0;
  std::vector<std::string> churn;
  for (int k = 0; k < 60; ++k) {
    GalleryEntry e = test::random_index_entry("c" + std::to_string(k), rng, 24);
    index.add(e);
    failures += index.search(query_from(e, rng, 10), {}).best.id != e.id;
    churn.push_back(e.id);
    if (k % 3 == 2) {
      GalleryEntry u = test::random_index_entry(churn[k - 1], rng, 24);
      index.update(u);
      failures += index.search(query_from(u, rng, 10), {}).best.id != u.id;
    }
    if (k % 4 == 3) {
      const std::string gone = churn[k - 3];
      index.remove(gone);
      failures += index.find(gone) != -1;
    }
  }
  done = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(wrong.load(), 0) << "of " << searches.load() << " concurrent searches";
  EXPECT_GT(searches.load(), 0);
}

// IndexOptions::host_digest_rows: the host tier's digests follow every add, update, removal and
// swap-with-last. Each image, queried with rows of its own digest (its largest keypoints'),
// must be found by a search that re-matches only the best digest slot, with the exact score the index
// without digests gives it; a search re-matching every digest slot equals the exact search. Host blocks
// of 8 slots leave each block's last digest slot part-used, and images shorter than the digest leave
// padding in the middle of a slot.
TEST(TextureIndexDigest, EveryImageIsFoundByItsDigestThroughLiveUpdates) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int rows : {128, 256}) {
    SCOPED_TRACE("host_digest_rows " + std::to_string(rows));
    texture::IndexOptions o = small_blocks(1000);
    o.block_slots = 8;
    TextureIndex exact(o);
    o.host_digest_rows = rows;
    TextureIndex digested(o);
    o.stream_host_digests = true;
    TextureIndex streamed(o);  // the same digests, gathered from the host slots by each search
    const int per = match::kSlot / rows;
    std::vector<GalleryEntry> entries;
    int next = 0;
    auto fresh = [&] {
      return test::random_index_entry("p" + std::to_string(next++), rng,
                                      rng() % 3 ? 20 + int(rng() % 749) : 5 + int(rng() % 40));
    };
    auto check = [&](const char* when) {
      SCOPED_TRACE(when);
      ASSERT_EQ(digested.size(), exact.size());
      EXPECT_GT(digested.stats().digest_bytes, 0u);
      EXPECT_EQ(streamed.stats().digest_bytes, 0u);
      texture::SearchParams one, all;
      one.digest_candidates = 1;
      all.digest_candidates = 1 << 20;
      for (const GalleryEntry& e : entries) {
        const texture::Features q = digest_query_from(e, rng, std::min(40, rows));
        const std::vector<int> want = exact.scores(q, {});
        const std::vector<int> got = digested.scores(q, one);
        const int at = digested.find(e.id);
        ASSERT_GE(at, 0) << e.id;
        EXPECT_GT(got[at], 0) << e.id << " not found by its digest";
        EXPECT_EQ(got[at], want[exact.find(e.id)]) << e.id;
        EXPECT_EQ(streamed.scores(q, one), got) << e.id << ": streamed digests";
        EXPECT_LE(std::count_if(got.begin(), got.end(), [](int v) { return v > 0; }), per) << e.id;
        const texture::SearchResult r = digested.search(q, one);
        EXPECT_EQ(r.searched + r.digested, digested.size());
        EXPECT_LE(r.searched, size_t(per));
        EXPECT_EQ(digested.scores(q, all), want) << "a digest search of every slot is the exact search";
      }
    };
    for (int i = 0; i < 30; ++i) {
      entries.push_back(fresh());
      exact.add(entries.back());
      digested.add(entries.back());
      streamed.add(entries.back());
    }
    check("after adds");
    for (int i = 0; i < 8; ++i) {  // removals anywhere: the last slot moves into the hole
      const size_t at = rng() % entries.size();
      EXPECT_TRUE(exact.remove(entries[at].id));
      EXPECT_TRUE(digested.remove(entries[at].id));
      EXPECT_TRUE(streamed.remove(entries[at].id));
      entries.erase(entries.begin() + long(at));
    }
    for (int i = 0; i < 6; ++i) {  // updates in place
      GalleryEntry& e = entries[rng() % entries.size()];
      GalleryEntry changed = fresh();
      changed.id = e.id;
      e = changed;
      exact.update(e);
      digested.update(e);
      streamed.update(e);
    }
    for (int i = 0; i < 7; ++i) {
      entries.push_back(fresh());
      exact.add(entries.back());
      digested.add(entries.back());
      streamed.add(entries.back());
    }
    check("after removals, updates and adds");
    digested.clear();
    EXPECT_EQ(digested.stats().digest_bytes, 0u);
  }
}

// A one-row image alone in its digest slot (the 7th of a host block of 7, 3 digests a slot): among
// 255s its row would be every query row's only real neighbour and pass every ratio test, and its
// slot would outrank the genuine one; written twice, it passes none (as the matcher's one-row images).
// Kept and streamed digests alike.
TEST(TextureIndexDigest, AOneRowImageNeverOutranksTheOthers) {
  std::mt19937 rng(13);
  texture::IndexOptions o = small_blocks(1000);
  o.block_slots = 7;
  TextureIndex exact(o);
  o.host_digest_rows = 256;
  TextureIndex digested(o);
  o.stream_host_digests = true;
  TextureIndex streamed(o);
  std::vector<GalleryEntry> entries;
  for (int i = 0; i < 14; ++i) {
    entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, i == 6 ? 1 : 30 + int(rng() % 170)));
    exact.add(entries.back());
    digested.add(entries.back());
    streamed.add(entries.back());
  }
  texture::SearchParams one;
  one.digest_candidates = 1;
  for (const GalleryEntry& e : entries) {
    if (e.id == "p6") continue;
    const texture::Features q = query_from(e, rng, 40);
    const int want = exact.scores(q, {})[exact.find(e.id)];
    EXPECT_GT(want, 0) << e.id;
    EXPECT_EQ(digested.scores(q, one)[digested.find(e.id)], want) << e.id << " outranked";
    EXPECT_EQ(streamed.scores(q, one)[streamed.find(e.id)], want) << e.id << " outranked, streamed";
  }
}

// Digests share the host budget on the CPU path (the GPU's on the GPU path), streamed ones take none,
// and bad settings are refused naming the option.
TEST(TextureIndexDigest, DigestsShareTheBudgetAndBadSettingsAreRefused) {
  std::mt19937 rng(11);
  texture::IndexOptions o = small_blocks(30);
  o.block_slots = 8;
  o.host_digest_rows = 256;  // 3 images a digest slot
  o.stream_host_digests = true;
  EXPECT_EQ(TextureIndex(o).stats().host_capacity, 30u);
  o.stream_host_digests = false;
  TextureIndex index(o);
  const size_t capacity = index.stats().host_capacity;
  EXPECT_LT(capacity, 30u);
  EXPECT_GE(capacity, 20u);
  for (size_t i = 0; i < capacity; ++i) index.add(test::random_index_entry("p" + std::to_string(i), rng, 30));
  const texture::IndexStats s = index.stats();
  EXPECT_LE(s.host_bytes + s.digest_bytes, size_t(o.host_budget));
  EXPECT_THROW(index.add(test::random_index_entry("over", rng, 30)), texture::IndexFull);
  for (int bad : {100, 8, 768, -3}) {
    o.host_digest_rows = bad;
    try {
      TextureIndex refused(o);
      FAIL() << bad << " must be refused";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("host_digest_rows"), std::string::npos) << e.what();
    }
  }
}

// The decision (decision.h), which the index and the service's merge of shards share: each key of
// the order in turn, the multiple-test term, acceptance at its thresholds exactly.
TEST(TextureDecision, OrdersSignificanceAndAcceptanceAtTheirEdges) {
  using texture::VerifiedKey;
  EXPECT_TRUE(texture::verified_before(VerifiedKey{5.0, 10, 20, "b"}, VerifiedKey{4.9, 90, 90, "a"}));
  EXPECT_TRUE(texture::verified_before(VerifiedKey{5.0, 11, 20, "b"}, VerifiedKey{5.0, 10, 90, "a"}));
  EXPECT_TRUE(texture::verified_before(VerifiedKey{5.0, 10, 21, "b"}, VerifiedKey{5.0, 10, 20, "a"}));
  EXPECT_TRUE(texture::verified_before(VerifiedKey{5.0, 10, 20, "a"}, VerifiedKey{5.0, 10, 20, "b"}));
  EXPECT_FALSE(texture::verified_before(VerifiedKey{5.0, 10, 20, "a"}, VerifiedKey{5.0, 10, 20, "a"}));
  EXPECT_TRUE(texture::shortlist_before(7, "z", 6, "a"));
  EXPECT_TRUE(texture::shortlist_before(7, "a", 7, "b"));
  EXPECT_FALSE(texture::shortlist_before(7, "b", 7, "a"));
  EXPECT_DOUBLE_EQ(texture::decision_significance(5.0, 8), 5.0 - std::log10(8.0));
  EXPECT_DOUBLE_EQ(texture::decision_significance(5.0, 1), 5.0);
  EXPECT_DOUBLE_EQ(texture::decision_significance(5.0, 0), 5.0);
  texture::DecisionParams p;
  p.min_significance = 3.6;
  p.min_inliers = 5;
  EXPECT_TRUE(texture::accepted(5, 3.6, p));
  EXPECT_FALSE(texture::accepted(4, 9.0, p));
  EXPECT_FALSE(texture::accepted(50, std::nextafter(3.6, 0.0), p));
  // A search's own decision is this one: its candidates in this order, identified by it.
  std::mt19937 rng(11);
  TextureIndex index(small_blocks());
  std::vector<GalleryEntry> entries;
  for (int i = 0; i < 6; ++i) entries.push_back(test::random_index_entry("e" + std::to_string(i), rng, 200));
  index.build(entries);
  texture::SearchParams sp;
  sp.min_significance = 0;
  const texture::SearchResult r = index.search(query_from(entries[2], rng, 40), sp);
  ASSERT_FALSE(r.candidates.empty());
  for (size_t i = 0; i < r.candidates.size(); ++i) {
    const texture::Candidate& c = r.candidates[i];
    EXPECT_DOUBLE_EQ(c.significance, texture::decision_significance(c.geometry.significance, r.candidates.size()));
    if (i > 0) {
      const texture::Candidate& b = r.candidates[i - 1];
      EXPECT_FALSE(texture::verified_before({c.geometry.significance, c.geometry.inliers, c.score, c.id},
                                            {b.geometry.significance, b.geometry.inliers, b.score, b.id}));
    }
  }
  EXPECT_EQ(r.identified, texture::accepted(r.best.geometry.inliers, r.best.significance, sp));
}

}  // namespace
}  // namespace prism
