// The texture index's units on their own, on the CPU: the slot store's placement by age and its
// moves (with a "GPU" tier in plain memory, so that the FIFO is followed without a GPU), against a
// model; its kept digests against index.h's image_digest and pack_digest_slots; the digest stage's
// choice of candidates; and the search plan's per-row re-matching against the matcher on the same
// slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "gallery_cases.h"
#include "match/match.h"
#include "texture/index.h"
#include "texture/index/digest_stage.h"
#include "texture/index/resources.h"
#include "texture/index/search_plan.h"
#include "texture/index/slot_store.h"

namespace prism {
namespace {

using texture::kGpuTier;
using texture::kHostTier;
using texture::SlotStore;

// A CPU store whose "GPU" tier (plain memory) holds `gpu` images and whose host tier holds `host`.
texture::IndexOptions two_tiers(int gpu, int host, int rows = 0) {
  texture::IndexOptions o;
  o.device = texture::Device::kCpu;
  o.gpu_budget = int64_t(gpu) * int64_t(texture::image_bytes(true));
  o.host_budget = int64_t(host) * int64_t(match::kSlotBytes);
  o.host_reserve = 0;
  o.gpu_block_slots = 2;  // several blocks even for a handful of images
  o.block_slots = 3;
  o.host_digest_rows = rows;
  return o;
}

std::vector<uint8_t> packed(const texture::Features& f, const std::vector<int>& order) {
  std::vector<uint8_t> slot(match::kSlotBytes);
  texture::pack_slot(f, slot.data(), order);
  return slot;
}

// What a model of the store holds: owner -> (features, enrolment time).
struct Model {
  std::vector<texture::Features> features;
  std::vector<int64_t> enrolled;
};

// Every owner's slot holds its own rows and count, every slot names its owner, and the GPU tier holds
// the newest images (every GPU-resident one newer than every host-resident one, and the GPU tier full
// while the host tier holds any).
void expect_consistent(const SlotStore& store, const Model& m, const std::string& after) {
  SCOPED_TRACE(after);
  ASSERT_EQ(store.size(), m.features.size());
  int64_t oldest_gpu = INT64_MAX, newest_host = INT64_MIN;
  for (size_t o = 0; o < m.features.size(); ++o) {
    const texture::Place p = store.where(int(o));
    const texture::Tier& t = store.tier(p.tier);
    ASSERT_LT(size_t(p.slot), t.used());
    EXPECT_EQ(t.entry[size_t(p.slot)], int(o));
    EXPECT_EQ(t.counts[size_t(p.slot)], std::min(m.features[o].count(), match::kSlot));
    const std::vector<uint8_t> want = packed(m.features[o], store.row_order(m.features[o]));
    EXPECT_TRUE(std::equal(want.begin(), want.end(), t.slot_data(size_t(p.slot)))) << "owner " << o;
    (p.tier == kGpuTier ? oldest_gpu : newest_host) =
        p.tier == kGpuTier ? std::min(oldest_gpu, m.enrolled[o]) : std::max(newest_host, m.enrolled[o]);
  }
  EXPECT_EQ(store.tier(kGpuTier).used() + store.tier(kHostTier).used(), m.features.size());
  if (store.tier(kHostTier).used() > 0) {
    EXPECT_TRUE(store.tier(kGpuTier).full());
    EXPECT_GT(oldest_gpu, newest_host);
  }
}

TEST(TextureSlotStore, TheNewestLiveInTheGpuTierThroughRandomWrites) {
  std::mt19937 rng(std::random_device{}());
  texture::SearchResources res(false, 1, 4, 1);
  SlotStore store(two_tiers(5, 40), false, res);
  ASSERT_EQ(store.tier(kGpuTier).capacity, 5u);
  ASSERT_EQ(store.tier(kHostTier).capacity, 40u);
  Model m;
  std::set<int64_t> times;  // distinct enrolment times: the order the FIFO follows is then the model's
  const auto fresh_time = [&] {
    int64_t t;
    do t = int64_t(rng() % 100000);
    while (!times.insert(t).second);
    return t;
  };
  for (int step = 0; step < 400; ++step) {
    const unsigned op = rng() % 10;
    if (m.features.size() < 40 && (op < 5 || m.features.empty())) {
      const texture::Features f = test::random_index_entry("p", rng, 1 + int(rng() % 200)).features;
      const int64_t t = fresh_time();
      store.place(t, f, store.row_order(f));
      m.features.push_back(f);
      m.enrolled.push_back(t);
    } else if (op < 7) {
      const int o = int(rng() % m.features.size());
      m.features[size_t(o)] = test::random_index_entry("p", rng, 1 + int(rng() % 200)).features;
      store.rewrite(o, m.features[size_t(o)], store.row_order(m.features[size_t(o)]));
    } else {
      const size_t o = rng() % m.features.size();
      store.remove(int(o));  // the last owner becomes o, as in the model
      m.features[o] = m.features.back();
      m.enrolled[o] = m.enrolled.back();
      m.features.pop_back();
      m.enrolled.pop_back();
    }
    expect_consistent(store, m, "step " + std::to_string(step));
    if (HasFatalFailure()) return;
  }
}

TEST(TextureSlotStore, APlaceWithNoRoomIsRefusedNamingTheBudgetsAndChangesNothing) {
  std::mt19937 rng(std::random_device{}());
  texture::SearchResources res(false, 1, 4, 1);
  SlotStore store(two_tiers(2, 3), false, res);
  Model m;
  for (int i = 0; i < 5; ++i) {
    m.features.push_back(test::random_index_entry("p", rng, 64).features);
    m.enrolled.push_back(100 + i);
    store.place(m.enrolled.back(), m.features.back(), {});
  }
  const texture::Features extra = test::random_index_entry("q", rng, 64).features;
  try {
    store.place(1000, extra, {});
    FAIL() << "a sixth image was placed in room for five";
  } catch (const texture::IndexFull& e) {
    EXPECT_NE(std::string(e.what()).find("gpu budget"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("host budget"), std::string::npos) << e.what();
  }
  EXPECT_THROW(store.check_room(1000), texture::IndexFull);
  expect_consistent(store, m, "after the refusal");
  // The oldest GPU-resident image leaves for the host tier when a newer one comes and the host has room.
  store.remove(0);  // (a host-resident one: 100, 101, 102 are the oldest)
  m.features[0] = m.features.back(), m.enrolled[0] = m.enrolled.back();
  m.features.pop_back(), m.enrolled.pop_back();
  m.features.push_back(extra);
  m.enrolled.push_back(1000);
  store.place(1000, extra, {});
  expect_consistent(store, m, "after a newer image");
  EXPECT_EQ(store.where(int(m.features.size()) - 1).tier, kGpuTier);
}

// index.h's image_digest and pack_digest_slots (what prism-texture-eval --digest packs with) give the
// digest slots the store keeps, byte for byte: images of fewer rows than a digest, one row, none and
// more than a slot holds; host blocks of 3 images in digest slots of 4; after a removal moved slots.
TEST(TextureSlotStore, ImageDigestsAndTheirPackingAreTheStoresOwn) {
  std::mt19937 rng(std::random_device{}());
  texture::SearchResources res(false, 1, 4, 1);
  const int rows = 192;  // 4 images a digest slot
  SlotStore store(two_tiers(0, 30, rows), false, res);
  std::vector<texture::Features> f;
  for (int i = 0; i < 11; ++i) {
    const int n = i == 1 ? 1 : i == 2 ? 0 : i == 3 ? 100 : i == 4 ? match::kSlot + 40 : 200 + int(rng() % 400);
    f.push_back(test::random_index_entry("p", rng, n).features);
    store.place(i, f.back(), store.row_order(f.back()));
  }
  const auto check = [&](const char* when) {
    SCOPED_TRACE(when);
    const texture::Tier& h = store.tier(kHostTier);
    const size_t B = size_t(h.block_slots);
    for (size_t b = 0; b * B < h.used(); ++b) {
      std::vector<std::vector<uint8_t>> digests;
      for (size_t s = b * B; s < std::min(h.used(), (b + 1) * B); ++s)
        digests.push_back(texture::image_digest(f[size_t(h.entry[s])], rows, texture::IndexOptions{}.digest_order));
      const std::vector<uint8_t> packed = texture::pack_digest_slots(digests, rows);
      ASSERT_EQ(packed.size(), match::kSlotBytes) << "block " << b;
      EXPECT_TRUE(std::equal(packed.begin(), packed.end(), store.digest_slots().blocks[b]->data)) << "block " << b;
    }
  };
  check("after placement");
  store.remove(1);  // the last owner takes its place, and its slot moves into slot 1
  f[1] = f.back();
  f.pop_back();
  check("after a removal");
  const std::vector<uint8_t> one = texture::image_digest(f[0], 16, texture::DigestOrder::kStrongest);
  EXPECT_EQ(one.size(), size_t(16) * match::kDim);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), f[0].descriptors.begin()));  // the stored order's first rows
  EXPECT_THROW(texture::image_digest(f[0], 100, texture::DigestOrder::kStrongest), std::invalid_argument);
  EXPECT_THROW(texture::pack_digest_slots({one}, 0), std::invalid_argument);
  EXPECT_THROW(texture::pack_digest_slots({one}, 32), std::invalid_argument);  // 16 rows, not 32
}

// The digest stage keeps the host images of the best-scoring digest slots, ties to the lower slot, in
// slot order; a search of fewer digest slots than the host tier fills is the only one that uses them.
TEST(TextureDigestStage, TheBestDigestSlotsNameTheirHostImages) {
  std::mt19937 rng(std::random_device{}());
  texture::SearchResources res(false, 1, 4, 1);
  const int rows = 192;  // 4 images a digest slot
  SlotStore store(two_tiers(0, 30, rows), false, res);
  ASSERT_EQ(store.digest().per, 4);
  for (int i = 0; i < 22; ++i) {
    const texture::Features f = test::random_index_entry("p", rng, 200).features;
    store.place(i, f, store.row_order(f));
  }
  // Host blocks of 3 images: a block's digest slot holds its 3 images; blocks 0..7 (the last holds 1).
  const size_t total = store.digest().slots_of(22, 3);
  ASSERT_EQ(total, 8u);
  std::vector<int> s(total, 0);
  s[5] = 9, s[2] = 9, s[7] = 4, s[0] = 3;
  texture::SearchParams params;
  params.digest_candidates = 3;
  EXPECT_TRUE(texture::digest_search(store, params));
  const std::vector<int> chosen = texture::digest_pick(store, res, 3, s);
  EXPECT_EQ(chosen, (std::vector<int>{6, 7, 8, 15, 16, 17, 21}));
  params.digest_candidates = 8;  // every host image named: the exact plan
  EXPECT_FALSE(texture::digest_search(store, params));
}

// The verification's re-matching: per-row top-2 of the query against each listed owner's slot, as the
// matcher gives them on the same slot alone.
TEST(TextureSearchPlan, RematchGivesTheMatchersRowsForEachOwner) {
  std::mt19937 rng(std::random_device{}());
  texture::SearchResources res(false, 1, 4, 1);
  SlotStore store(two_tiers(2, 10), false, res);
  std::vector<texture::Features> f;
  for (int i = 0; i < 6; ++i) {
    f.push_back(test::random_index_entry("p", rng, 1 + int(rng() % 300)).features);
    store.place(i, f.back(), {});
  }
  const texture::Features query = test::random_index_entry("q", rng, 1 + int(rng() % 300)).features;
  texture::Query q;
  texture::prepare_query(res, query, q);
  EXPECT_EQ(q.rows % 16, 0);
  const std::vector<int> owners = {4, 0, 5};
  std::vector<int32_t> best, second;
  std::vector<int> index;
  std::mutex work;
  std::unique_lock<std::mutex> turn(work);
  texture::rematch(store, res, q, owners, 0.8f, best, second, index, turn);
  ASSERT_EQ(best.size(), owners.size() * size_t(q.rows));
  for (size_t c = 0; c < owners.size(); ++c) {
    const std::vector<uint8_t> slot = packed(f[size_t(owners[c])], {});
    const int count = f[size_t(owners[c])].count();
    std::vector<int32_t> b(size_t(q.rows)), s2(size_t(q.rows));
    std::vector<int> ix(size_t(q.rows));
    int score = 0;
    match::MatchU8Problem p;
    p.query = q.host;
    p.rows = p.query_rows = q.rows;
    p.gallery = slot.data();
    p.counts = &count;
    p.images = 1;
    match::MatchParams mp;
    mp.ratio = 0.8f;
    match::match_u8_cpu(p, mp, {&score, b.data(), s2.data(), ix.data()});
    const size_t o = c * size_t(q.rows);
    EXPECT_TRUE(std::equal(b.begin(), b.end(), best.begin() + long(o))) << "owner " << owners[c];
    EXPECT_TRUE(std::equal(s2.begin(), s2.end(), second.begin() + long(o))) << "owner " << owners[c];
    EXPECT_TRUE(std::equal(ix.begin(), ix.end(), index.begin() + long(o))) << "owner " << owners[c];
  }
}

}  // namespace
}  // namespace prism
