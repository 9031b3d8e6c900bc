// The tiered index on the GPU against the CPU path, bit for bit: every image in GPU memory, split
// between GPU memory and pinned host memory (streamed in small batches over two streams), and all
// in host memory; whole-index and scoped searches; live updates moving images between the tiers; the
// verification's re-matching of a shortlist that spans GPU-tier blocks (read in place) and the host
// tier (copied), per row and through search and verify; several queries scored together (search_many).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "match/match.h"
#include "prism_test.h"
#include "gallery_cases.h"
#include "search_cases.h"
#include "texture/index.h"
#include "texture/index/resources.h"
#include "texture/index/search_plan.h"
#include "texture/index/slot_store.h"

namespace prism {
namespace {

using texture::GalleryEntry;

texture::IndexOptions options(texture::Device d, int64_t gpu_slots, int64_t host_slots) {
  texture::IndexOptions o;
  o.device = d;
  o.gpu_budget = gpu_slots * int64_t(texture::image_bytes(true));
  o.host_budget = host_slots * int64_t(texture::image_bytes(false));
  o.block_slots = o.gpu_block_slots = 4;  // several blocks in either tier,
  o.gpu_run_slots = 3;                    // and GPU blocks in two runs while the host tier streams
  o.host_batch = 3;
  o.streams = 2;
  return o;
}

// Scores by id (positions differ between indexes whose tiers moved entries differently).
std::map<std::string, int> scores_by_id(texture::TextureIndex& index, const texture::Features& q,
                                        const texture::SearchParams& p) {
  const std::vector<int> s = index.scores(q, p);
  std::map<std::string, int> out;
  for (size_t i = 0; i < s.size(); ++i) out[index.ids()[i]] = s[i];
  return out;
}

TEST(TextureIndexGpu, TiersEqualTheCpuPathBitForBit) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  texture::TextureIndex cpu(options(texture::Device::kCpu, 0, 1000));
  texture::TextureIndex all_gpu(options(texture::Device::kCuda, 1000, 1000));
  texture::TextureIndex split(options(texture::Device::kCuda, 7, 1000));
  texture::TextureIndex all_host(options(texture::Device::kCuda, 0, 1000));
  std::vector<texture::TextureIndex*> gpus{&all_gpu, &split, &all_host};
  std::vector<GalleryEntry> entries;
  for (int i = 0; i < 30; ++i) {
    const int n = i == 0 ? 0 : i == 1 ? 1 : i == 2 ? match::kSlot : 5 + int(rng() % 200);
    entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, n, i % 3 ? "a" : "b"));
    cpu.add(entries.back());
    for (auto* g : gpus) g->add(entries.back());
  }
  EXPECT_EQ(split.stats().gpu_images, 7u);
  EXPECT_EQ(split.stats().host_images, 23u);
  EXPECT_EQ(all_host.stats().gpu_capacity, 0u);
  EXPECT_EQ(all_host.stats().gpu_images, 0u);
  auto compare = [&](const char* when) {
    for (int k = 0; k < 3; ++k) {
      const GalleryEntry& t = entries[3 + rng() % (entries.size() - 3)];
      texture::Features q = test::random_index_entry("q", rng, 100 + int(rng() % 600), "").features;
      std::copy_n(t.features.descriptors.begin(), std::min(t.features.descriptors.size(), size_t(40) * match::kDim),
                  q.descriptors.begin());
      for (const texture::SearchParams& p : {texture::SearchParams{}, [] {
                                               texture::SearchParams s;
                                               s.collections = {"b"};
                                               return s;
                                             }()}) {
        const auto want = scores_by_id(cpu, q, p);
        const texture::SearchResult rc = cpu.search(q, p);
        for (auto* g : gpus) {
          EXPECT_EQ(scores_by_id(*g, q, p), want) << when;
          const texture::SearchResult rg = g->search(q, p);
          EXPECT_EQ(rg.searched, rc.searched) << when;
          EXPECT_EQ(rg.best.id, rc.best.id) << when;
          EXPECT_EQ(rg.best.geometry.matches, rc.best.geometry.matches) << when;
        }
      }
    }
  };
  compare("after adds");
  // Removals from the GPU tier pull the newest host images up; adds push the oldest down.
  for (int i : {29, 28, 5, 17}) {
    EXPECT_TRUE(cpu.remove(entries[i].id));
    for (auto* g : gpus) EXPECT_TRUE(g->remove(entries[i].id));
  }
  for (int i = 30; i < 36; ++i) {
    entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, 50, "b"));
    cpu.add(entries.back());
    for (auto* g : gpus) g->add(entries.back());
  }
  GalleryEntry changed = test::random_index_entry("p4", rng, 300, "b");
  cpu.update(changed);
  for (auto* g : gpus) g->update(changed);
  EXPECT_EQ(split.stats().gpu_images, 7u);
  EXPECT_EQ(split.stats().host_images, 25u);
  entries.erase(entries.begin() + 17), entries.erase(entries.begin() + 5);  // keep only present ones for queries
  entries.erase(entries.begin() + 26, entries.begin() + 28);                // p28, p29
  compare("after live updates");
}

// The GPU tier's |g|^2 (IndexOptions::gpu_norms) through the kernel that reads them: a GPU tier of at
// least two images per multiprocessor, matched in two runs of at least one image per multiprocessor
// (gpu_run_slots: the host tier streams too), and queries of more than 512 rows, which kAuto gives
// the wgmma kernel on an H100 or H200 (match_u8.cu, prefer_wgmma); the whole index and a collection
// of about two thirds of it. Removals (the last slot moves into the hole, the
// newest host image moves up), updates and adds (the oldest moves down) must keep every slot's norms
// beside it: scores equal to the CPU path's, with the norms kept and without.
TEST(TextureIndexGpu, TheGpuTiersNormsFollowLiveUpdates) {
  PRISM_NEED_GPU();
  if (!match::gpu_path_available(match::GpuPath::kWgmma))
    std::printf("note: this GPU has no wgmma kernel: the norms are kept but no kernel reads them\n");
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int gpu_slots = std::max(2 * sms, 300);
  texture::TextureIndex cpu(options(texture::Device::kCpu, 0, 4 * gpu_slots));
  texture::IndexOptions with = options(texture::Device::kCuda, gpu_slots, 4 * gpu_slots);
  with.gpu_block_slots = gpu_slots;    // the whole GPU tier in one block,
  with.gpu_run_slots = gpu_slots / 2;  // matched in two runs, the second from the block's middle
  texture::IndexOptions without = with;
  without.gpu_norms = false;
  without.gpu_budget = int64_t(gpu_slots) * int64_t(texture::image_bytes(true, false));
  texture::TextureIndex kept(with), computed(without);
  std::vector<texture::TextureIndex*> gpus{&kept, &computed};
  std::vector<GalleryEntry> entries;
  int next_id = 0;
  auto fresh = [&] {
    const int n = rng() % 4 == 0 ? match::kSlot : 2 + int(rng() % 700);
    return test::random_index_entry("p" + std::to_string(next_id++), rng, n, rng() % 3 ? "a" : "b");
  };
  for (int i = 0; i < gpu_slots + 40; ++i) {
    entries.push_back(fresh());
    cpu.add(entries.back());
    for (auto* g : gpus) g->add(entries.back());
  }
  EXPECT_EQ(kept.stats().gpu_images, size_t(gpu_slots));
  EXPECT_EQ(computed.stats().gpu_images, size_t(gpu_slots));
  EXPECT_EQ(kept.stats().gpu_bytes, size_t(gpu_slots) * texture::image_bytes(true));
  EXPECT_EQ(computed.stats().gpu_bytes, size_t(gpu_slots) * match::kSlotBytes);
  auto compare = [&](const char* when) {
    std::vector<const GalleryEntry*> in_a_members;  // the query copies one of them: it scores in both searches
    for (const GalleryEntry& e : entries)
      if (e.collection == "a") in_a_members.push_back(&e);
    ASSERT_FALSE(in_a_members.empty()) << when;
    for (int k = 0; k < 3; ++k) {
      const GalleryEntry& t = *in_a_members[rng() % in_a_members.size()];
      texture::Features q =
          test::random_index_entry("q", rng, 520 + int(rng() % 249), "").features;  // 528..768 rows padded
      // 60 rows of its digest (IndexOptions::digest_order)
      const std::vector<int> order = texture::digest_order(t.features, texture::IndexOptions{}.digest_order);
      for (size_t r = 0; r < std::min(order.size(), size_t(60)); ++r)
        std::copy_n(t.features.descriptors.begin() + size_t(order[r]) * match::kDim, match::kDim,
                    q.descriptors.begin() + r * match::kDim);
      texture::SearchParams in_a;
      in_a.collections = {"a"};
      for (const texture::SearchParams& p : {texture::SearchParams{}, in_a}) {
        const auto want = scores_by_id(cpu, q, p);
        int top = 0;
        for (const auto& [id, score] : want) top = std::max(top, score);
        EXPECT_GT(top, 0) << when;
        for (auto* g : gpus)
          EXPECT_EQ(scores_by_id(*g, q, p), want)
              << when << (g == &kept ? ", kept" : ", computed") << (p.collections.empty() ? "" : ", collection a");
      }
    }
  };
  compare("after adds");
  for (int i = 0; i < 20; ++i) {  // removals anywhere: swaps inside the GPU tier, host images moving up
    const size_t at = rng() % entries.size();
    EXPECT_TRUE(cpu.remove(entries[at].id));
    for (auto* g : gpus) EXPECT_TRUE(g->remove(entries[at].id));
    entries.erase(entries.begin() + long(at));
  }
  for (int i = 0; i < 20; ++i) {  // updates in place, in either tier
    GalleryEntry& e = entries[rng() % entries.size()];
    GalleryEntry changed = fresh();
    changed.id = e.id;
    e = changed;
    cpu.update(e);
    for (auto* g : gpus) g->update(e);
  }
  for (int i = 0; i < 30; ++i) {  // adds: the oldest GPU images move to the host tier
    entries.push_back(fresh());
    cpu.add(entries.back());
    for (auto* g : gpus) g->add(entries.back());
  }
  EXPECT_EQ(kept.stats().gpu_images, size_t(gpu_slots));
  compare("after removals, updates and adds");
}

// Host-tier digests (IndexOptions::host_digest_rows) in GPU memory against the CPU path's in host
// memory: with every image in the host tier the slots, hence the digests, are laid out alike, so a
// digest search (the best 2 digest slots re-matched) and a search of every digest slot give the same
// scores bit for bit, through removals (swap-with-last), updates and adds. The host tier holds three
// digest slots per multiprocessor, so that a digest search of 768-row queries takes the wgmma kernel
// where there is one. With a GPU tier beside it, each host image queried with rows of its own digest is
// found by its digest alone. Streamed digests (IndexOptions::stream_host_digests: each search copies the
// host slots' first rows, in batches of 15 images that leave a block's last digest slot part-used) give
// the kept digests' scores, with and without a GPU tier beside them.
TEST(TextureIndexGpu, DigestSearchesEqualTheCpuPath) {
  PRISM_NEED_GPU();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int rows = 256, per = match::kSlot / rows;
  const int images = 3 * per * sms + 40, host_slots = images + 200;
  auto with_digest = [&](texture::Device d, int64_t gpu_slots) {
    texture::IndexOptions o = options(d, gpu_slots, host_slots);
    o.host_digest_rows = rows;
    o.block_slots = 64;
    // the digests' GPU memory beside the GPU tier's, exactly: a host block of 64 slots has 22 digest
    // slots, the last (part-used) block ceil(rest / 3)
    const int64_t digest_slots = host_slots / 64 * ((64 + per - 1) / per) + (host_slots % 64 + per - 1) / per;
    o.gpu_budget += digest_slots * int64_t(match::kSlotBytes);
    if (d == texture::Device::kCpu) o.host_budget = int64_t(host_slots) * 2 * int64_t(match::kSlotBytes);
    return o;
  };
  auto streamed = [&](int64_t gpu_slots) {
    texture::IndexOptions o = options(texture::Device::kCuda, gpu_slots, host_slots);
    o.host_digest_rows = rows;
    o.stream_host_digests = true;
    o.block_slots = 64;
    o.host_batch = 5;  // 15 images a streamed batch: 4 in a block of 64, and 4 left (2 digest slots)
    return o;
  };
  texture::TextureIndex cpu(with_digest(texture::Device::kCpu, 0));
  texture::TextureIndex all_host(with_digest(texture::Device::kCuda, 0));
  texture::TextureIndex split(with_digest(texture::Device::kCuda, 9));
  texture::TextureIndex streamed_host(streamed(0));
  texture::TextureIndex streamed_split(streamed(9));
  std::vector<texture::TextureIndex*> all{&cpu, &all_host, &split, &streamed_host, &streamed_split};
  std::vector<GalleryEntry> entries;
  int next = 0;
  auto fresh = [&] {
    const int n = rng() % 4 == 0 ? match::kSlot : 5 + int(rng() % 700);
    return test::random_index_entry("p" + std::to_string(next++), rng, n);
  };
  for (int i = 0; i < images; ++i) {
    entries.push_back(fresh());
    for (auto* x : all) x->add(entries.back());
  }
  EXPECT_EQ(all_host.stats().gpu_capacity, 0u);
  EXPECT_EQ(all_host.stats().gpu_images, 0u);
  EXPECT_EQ(split.stats().gpu_images, 9u);
  EXPECT_EQ(all_host.stats().digest_bytes, cpu.stats().digest_bytes);
  EXPECT_EQ(streamed_split.stats().gpu_images, 9u);
  EXPECT_EQ(streamed_split.stats().digest_bytes, 0u);
  auto compare = [&](const char* when) {
    SCOPED_TRACE(when);
    texture::SearchParams two, every;
    two.digest_candidates = 2;
    every.digest_candidates = 1 << 20;
    for (int k = 0; k < 3; ++k) {
      const GalleryEntry& t = entries[rng() % entries.size()];
      texture::Features q = test::random_index_entry("q", rng, 700 + int(rng() % 69)).features;
      // 60 rows of its digest (IndexOptions::digest_order)
      const std::vector<int> order = texture::digest_order(t.features, texture::IndexOptions{}.digest_order);
      for (size_t r = 0; r < std::min(order.size(), size_t(60)); ++r)
        std::copy_n(t.features.descriptors.begin() + size_t(order[r]) * match::kDim, match::kDim,
                    q.descriptors.begin() + r * match::kDim);
      const auto exact = scores_by_id(cpu, q, {});
      const auto want = scores_by_id(cpu, q, two);
      EXPECT_EQ(want.at(t.id), exact.at(t.id)) << t.id << " not found by its digest on the CPU path";
      EXPECT_EQ(scores_by_id(all_host, q, two), want);
      EXPECT_EQ(scores_by_id(all_host, q, every), exact);
      EXPECT_EQ(scores_by_id(split, q, every), exact);
      const auto split_two = scores_by_id(split, q, two);
      EXPECT_EQ(split_two.at(t.id), exact.at(t.id)) << t.id << " not found by its digest";
      EXPECT_EQ(scores_by_id(streamed_host, q, two), want) << "streamed digests";
      EXPECT_EQ(scores_by_id(streamed_split, q, two), split_two) << "streamed digests beside a GPU tier";
      EXPECT_EQ(scores_by_id(streamed_split, q, every), exact);
    }
  };
  compare("after adds");
  for (int i = 0; i < 25; ++i) {
    const size_t at = rng() % entries.size();
    for (auto* x : all) EXPECT_TRUE(x->remove(entries[at].id));
    entries.erase(entries.begin() + long(at));
  }
  for (int i = 0; i < 15; ++i) {
    GalleryEntry& e = entries[rng() % entries.size()];
    GalleryEntry changed = fresh();
    changed.id = e.id;
    e = changed;
    for (auto* x : all) x->update(e);
  }
  for (int i = 0; i < 20; ++i) {
    entries.push_back(fresh());
    for (auto* x : all) x->add(entries.back());
  }
  compare("after removals, updates and adds");
}

// The newest products by enrolment time are the GPU-resident ones, whatever order they are added in
// (a gallery is read by id), and stay so through removals.
TEST(TextureIndexGpu, TheNewestByEnrolmentTimeLiveInGpuMemory) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  texture::TextureIndex index(options(texture::Device::kCuda, 3, 100));
  texture::TextureIndex cpu(options(texture::Device::kCpu, 0, 100));
  std::map<std::string, GalleryEntry> held;
  const auto add = [&](int i) {
    GalleryEntry e = test::random_index_entry("p" + std::to_string(i), rng, 20, "");
    e.enrolled_unix = 1700000000 + i;  // the higher i, the newer
    index.add(e);
    cpu.add(e);
    held[e.id] = e;
  };
  std::vector<int> order{0, 1, 2, 3, 4, 5, 6, 7};
  std::shuffle(order.begin(), order.end(), rng);
  for (int i : order) add(i);
  auto gpu_ids = [&] {
    std::string s;
    for (int i = 0; i < 11; ++i)
      if (index.in_gpu_memory("p" + std::to_string(i))) s += "p" + std::to_string(i) + " ";
    return s;
  };
  EXPECT_EQ(gpu_ids(), "p5 p6 p7 ");
  EXPECT_TRUE(index.remove("p6"));  // p4, the newest in host memory, moves up
  EXPECT_TRUE(cpu.remove("p6"));
  held.erase("p6");
  EXPECT_EQ(gpu_ids(), "p4 p5 p7 ");
  EXPECT_EQ(index.stats().host_images, 4u);
  const auto scores_as_on_the_cpu = [&](const char* when) {
    for (const auto& [id, e] : held) {
      EXPECT_EQ(scores_by_id(index, e.features, {}), scores_by_id(cpu, e.features, {})) << when << ", " << id;
      EXPECT_EQ(index.search(e.features, {}).best.id, id) << when;
    }
  };
  add(8);  // takes the GPU slot of the oldest there, p4 (the last slot), which moves down
  EXPECT_EQ(gpu_ids(), "p5 p7 p8 ");
  EXPECT_EQ(index.stats().host_images, 5u);
  scores_as_on_the_cpu("p8 added");
  add(9);  // takes p5's slot, not the last one
  EXPECT_EQ(gpu_ids(), "p7 p8 p9 ");
  EXPECT_EQ(index.stats().host_images, 6u);
  scores_as_on_the_cpu("p9 added");
  EXPECT_TRUE(index.remove("p9"));  // the last slot (p8's) moves into p9's, p5 moves up
  EXPECT_TRUE(cpu.remove("p9"));
  held.erase("p9");
  EXPECT_EQ(gpu_ids(), "p5 p7 p8 ");
  scores_as_on_the_cpu("p9 removed");
  add(10);  // the oldest in GPU memory is p5 again
  EXPECT_EQ(gpu_ids(), "p7 p8 p10 ");
  EXPECT_EQ(index.stats().host_images, 6u);
  scores_as_on_the_cpu("p10 added");
}

// A GPU budget beyond the card's memory: the block cudaMalloc refuses ends the add in IndexFull
// naming GPU memory, and the index is left as it was.
TEST(TextureIndexGpu, AGpuBudgetBeyondTheCardIsRefusedNamingIt) {
  PRISM_NEED_GPU();
  std::mt19937 rng(9);
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  const int64_t slots = int64_t(total / texture::image_bytes(true)) + 1;  // one more than fits
  texture::IndexOptions o = options(texture::Device::kCuda, slots, 10);
  o.gpu_block_slots = int(slots);  // one block: the whole budget at once
  o.host_reserve = 0;              // the block's keypoint records in host memory are not what this test is about
  texture::TextureIndex index(o);
  try {
    index.add(test::random_index_entry("p0", rng, 20));
    FAIL() << "a GPU block beyond the card's memory must throw";
  } catch (const texture::IndexFull& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("GPU memory"), std::string::npos) << what;
    EXPECT_NE(what.find("gpu budget"), std::string::npos) << what;
  }
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.stats().gpu_bytes, 0u);
}

// The verification's re-matching on the GPU (GPU-tier slots read in place through a slot list, one
// launch per GPU block; host-tier slots copied into scratch) against the CPU path's, per row and bit
// for bit, in the shortlist's order: shortlists across three GPU blocks and the host tier in shuffled
// order, the GPU tier alone, the host tier alone, one image; after a removal moved slots.
TEST(TextureIndexGpu, RematchAcrossTiersEqualsTheCpuPathPerRow) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  texture::IndexOptions o;
  o.gpu_budget = 5 * int64_t(texture::image_bytes(true));  // GPU blocks of 2, 2 and 1
  o.host_budget = 30 * int64_t(match::kSlotBytes);
  o.host_reserve = 0;
  o.gpu_block_slots = 2;
  o.block_slots = 3;
  o.host_batch = 3;
  o.streams = 2;
  // The GPU side's rematch on lane 1: a stream of its own, not the slot store's (lane 0).
  texture::SearchResources gres(true, o.streams, o.host_batch, 2), cres(false, 1, 4, 1);
  ASSERT_EQ(gres.more_lanes.size(), 1u);
  texture::Lane& glane = *gres.more_lanes[0];
  texture::SlotStore gpu(o, true, gres), cpu(o, false, cres);
  std::vector<texture::Features> f;
  for (int i = 0; i < 16; ++i) {
    const int n = i == 3 ? 1 : i == 5 ? match::kSlot : i == 7 ? 0 : 2 + int(rng() % 300);
    f.push_back(test::random_index_entry("p", rng, n).features);
    gpu.place(i, f.back(), {});
    cpu.place(i, f.back(), {});
  }
  ASSERT_EQ(gpu.tier(texture::kGpuTier).used(), 5u);
  ASSERT_EQ(gpu.tier(texture::kGpuTier).blocks.size(), 3u);
  ASSERT_EQ(gpu.tier(texture::kHostTier).used(), 11u);
  // A query holding rows of every image (some of each pass the ratio test) and random ones.
  texture::Features query = test::random_index_entry("q", rng, 600).features;
  for (size_t i = 0; i < f.size(); ++i)
    std::copy_n(f[i].descriptors.begin(), std::min(f[i].descriptors.size(), size_t(30) * match::kDim),
                query.descriptors.begin() + long(i * 30 * match::kDim));
  const auto compare = [&](const std::vector<int>& owners, const std::string& what) {
    SCOPED_TRACE(what);
    std::mutex gwork, cwork;
    std::vector<int32_t> gb, gs, cb, cs;
    std::vector<int> gi, ci;
    texture::Query gq, cq;
    {
      std::unique_lock<std::mutex> turn(gwork);
      texture::prepare_query(glane, query, gq);
      texture::rematch(gpu, glane, gq, owners, 0.8f, gb, gs, gi, turn);
    }
    {
      std::unique_lock<std::mutex> turn(cwork);
      texture::prepare_query(cres, query, cq);
      texture::rematch(cpu, cres, cq, owners, 0.8f, cb, cs, ci, turn);
    }
    ASSERT_EQ(gq.rows, cq.rows);
    ASSERT_EQ(gb.size(), owners.size() * size_t(cq.rows));
    EXPECT_EQ(gb, cb);
    EXPECT_EQ(gs, cs);
    EXPECT_EQ(gi, ci);
    // Not vacuous: every listed image with two rows or more has rows whose nearest is its own copy.
    for (size_t c = 0; c < owners.size(); ++c) {
      if (f[size_t(owners[c])].count() < 2) continue;
      int exact = 0;
      for (int r = 0; r < cq.rows; ++r) exact += cb[c * size_t(cq.rows) + size_t(r)] == 0;
      EXPECT_GT(exact, 0) << "owner " << owners[c];
    }
  };
  const auto where = [&](int owner) { return gpu.where(owner); };
  const auto check = [&](const char* when) {
    std::vector<int> all(f.size()), gpu_only, host_only;
    for (size_t i = 0; i < f.size(); ++i) {
      all[i] = int(i);
      (where(int(i)).tier == texture::kGpuTier ? gpu_only : host_only).push_back(int(i));
    }
    std::shuffle(all.begin(), all.end(), rng);
    std::shuffle(gpu_only.begin(), gpu_only.end(), rng);
    std::set<size_t> blocks;
    for (int e : gpu_only) blocks.insert(size_t(where(e).slot) / 2);
    ASSERT_EQ(blocks.size(), 3u) << when;  // the GPU tier's three blocks
    ASSERT_FALSE(host_only.empty()) << when;
    compare(all, std::string(when) + ": every image, shuffled");
    std::vector<int> mixed(all.begin(), all.begin() + 8);  // a shortlist of 8
    compare(mixed, std::string(when) + ": 8 of them");
    compare(gpu_only, std::string(when) + ": the GPU tier alone");
    compare(host_only, std::string(when) + ": the host tier alone");
    compare({gpu_only.back()}, std::string(when) + ": one GPU-tier image");
    compare({host_only.front()}, std::string(when) + ": one host-tier image");
  };
  check("after placement");
  // A removal from the GPU tier: its last slot moves into the hole and the newest host image moves up;
  // the last owner takes the removed one's place.
  int removed = -1;
  for (size_t i = 0; i < f.size() && removed < 0; ++i)
    if (where(int(i)).tier == texture::kGpuTier && where(int(i)).slot == 0) removed = int(i);
  ASSERT_GE(removed, 0);
  gpu.remove(removed);
  cpu.remove(removed);
  f[size_t(removed)] = f.back();
  f.pop_back();
  check("after a removal");
}

// Search and verify whose shortlists span the GPU tier (two blocks) and the host tier: every verified
// candidate (its score, correspondences, inliers, significance and homography) equal to the CPU
// path's, the whole index and a collection; and 1:1 verification of GPU-tier and host-tier images.
TEST(TextureIndexGpu, VerificationAcrossTiersEqualsTheCpuPath) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  texture::TextureIndex cpu(options(texture::Device::kCpu, 0, 1000));
  texture::TextureIndex all_gpu(options(texture::Device::kCuda, 1000, 1000));
  texture::TextureIndex split(options(texture::Device::kCuda, 7, 1000));  // GPU blocks of 4 and 3
  texture::TextureIndex all_host(options(texture::Device::kCuda, 0, 1000));
  std::vector<texture::TextureIndex*> gpus{&all_gpu, &split, &all_host};
  std::vector<GalleryEntry> entries;
  for (int i = 0; i < 18; ++i) {
    entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, 40 + int(rng() % 300), i % 2 ? "a" : "b"));
    entries.back().enrolled_unix = 1700000000 + i;
    cpu.add(entries.back());
    for (auto* g : gpus) g->add(entries.back());
  }
  ASSERT_EQ(split.stats().gpu_images, 7u);
  // The query: rows of 14 images (12 to 30 each, so that their scores differ) among random rows.
  texture::Features query = test::random_index_entry("q", rng, 700).features;
  for (int i = 0; i < 14; ++i) {
    const texture::Features& g = entries[size_t(i) + 2].features;
    const size_t n = std::min(size_t(g.count()), size_t(12 + i));
    std::copy_n(g.descriptors.begin(), n * match::kDim, query.descriptors.begin() + long(size_t(i) * 40 * match::kDim));
  }
  const auto same = [](const texture::Candidate& a, const texture::Candidate& b, const std::string& what) {
    EXPECT_EQ(a.id, b.id) << what;
    EXPECT_EQ(a.score, b.score) << what << " " << a.id;
    EXPECT_EQ(a.geometry.matches, b.geometry.matches) << what << " " << a.id;
    EXPECT_EQ(a.geometry.inliers, b.geometry.inliers) << what << " " << a.id;
    EXPECT_EQ(a.geometry.significance, b.geometry.significance) << what << " " << a.id;
    EXPECT_EQ(a.significance, b.significance) << what << " " << a.id;
    EXPECT_TRUE(a.geometry.homography == b.geometry.homography) << what << " " << a.id;
  };
  for (int scoped = 0; scoped < 2; ++scoped) {
    texture::SearchParams p;
    p.shortlist = 16;
    if (scoped) p.collections = {"a", "b"};
    const texture::SearchResult want = cpu.search(query, p);
    ASSERT_GE(want.candidates.size(), 12u) << "the shortlist";
    size_t in_gpu = 0, in_host = 0;
    for (const texture::Candidate& c : want.candidates) (split.in_gpu_memory(c.id) ? in_gpu : in_host)++;
    EXPECT_GE(in_gpu, 3u) << "split's shortlist holds GPU-tier images";
    EXPECT_GE(in_host, 3u) << "split's shortlist holds host-tier images";
    for (auto* g : gpus) {
      const std::string what = g->device_description() + (scoped ? ", scoped" : ", whole") + " (" +
                               std::to_string(g->stats().gpu_images) + " in GPU memory)";
      const texture::SearchResult got = g->search(query, p);
      ASSERT_EQ(got.candidates.size(), want.candidates.size()) << what;
      for (size_t c = 0; c < want.candidates.size(); ++c) same(got.candidates[c], want.candidates[c], what);
      same(got.best, want.best, what + ", best");
      EXPECT_EQ(got.identified, want.identified) << what;
    }
  }
  for (const GalleryEntry& e : entries) {
    const texture::SearchResult want = cpu.verify(query, e.id, {});
    for (auto* g : gpus) same(g->verify(query, e.id, {}).best, want.best, "verify " + e.id);
  }
}

// search_many on the GPU: up to kMaxQueries queries per matcher call, over a GPU tier matched in place
// and a host tier streamed in batches, whole and scoped; each result equal to search's on the same index
// and to the CPU path's, field by field. 19 queries: two full batches and a short one, of every length
// (none, one row, a full slot). `wide` holds its GPU tier in one block of at least two images per
// multiprocessor, in two runs, which with 8 queries of 768 rows (blocks of 768 rows, 8 per image)
// kAuto gives the wgmma kernel on an H100 or H200.
TEST(TextureIndexGpu, SearchManyEqualsSearchingOneByOne) {
  PRISM_NEED_GPU();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  const int gpu_slots = std::max(2 * sms, 300);
  texture::TextureIndex cpu(options(texture::Device::kCpu, 0, 2 * gpu_slots));
  texture::TextureIndex split(options(texture::Device::kCuda, 7, 2 * gpu_slots));  // GPU blocks of 4 and 3
  texture::IndexOptions wide_options = options(texture::Device::kCuda, gpu_slots, 2 * gpu_slots);
  wide_options.gpu_block_slots = gpu_slots;
  wide_options.gpu_run_slots = gpu_slots / 2;
  texture::TextureIndex wide(wide_options);
  std::vector<GalleryEntry> entries;
  for (int i = 0; i < gpu_slots + 30; ++i) {
    const int n = i == 0 ? 0 : i == 1 ? 1 : i % 5 == 2 ? match::kSlot : 5 + int(rng() % 700);
    entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, n, i % 3 ? "a" : "b"));
    entries.back().enrolled_unix = 1700000000 + i;
    cpu.add(entries.back());
    split.add(entries.back());
    wide.add(entries.back());
  }
  ASSERT_EQ(split.stats().gpu_images, 7u);
  ASSERT_EQ(wide.stats().host_images, 30u);
  std::vector<texture::Features> queries;
  for (int k = 0; k < 19; ++k) {
    const int rows = k == 0 ? 0 : k == 1 ? 1 : k < 10 ? match::kSlot : 20 + int(rng() % 700);
    texture::Features q = test::random_index_entry("q", rng, rows).features;
    const GalleryEntry& t = entries[rng() % entries.size()];
    const size_t shared = std::min({size_t(rows), size_t(t.features.count()), size_t(10 + rng() % 40)});
    std::copy_n(t.features.descriptors.begin(), shared * match::kDim, q.descriptors.begin());
    queries.push_back(std::move(q));
  }
  std::vector<const texture::Features*> ptrs;
  for (const auto& q : queries) ptrs.push_back(&q);
  texture::SearchParams whole, scoped;
  scoped.collections = {"b", "nope"};
  scoped.shortlist = 4;
  for (const texture::SearchParams& p : {whole, scoped}) {
    const std::string what = p.collections.empty() ? "whole" : "scoped";
    for (texture::TextureIndex* g : {&split, &wide}) {
      const std::vector<texture::SearchResult> many = g->search_many(ptrs, p);
      ASSERT_EQ(many.size(), queries.size());
      for (size_t i = 0; i < queries.size(); ++i) {
        const std::string which = what + ", query " + std::to_string(i) + " (" + std::to_string(queries[i].count()) +
                                  " rows), " + std::to_string(g->stats().gpu_images) + " in GPU memory";
        EXPECT_EQ(test::search_difference(many[i], g->search(queries[i], p)), "") << which;
        EXPECT_EQ(test::search_difference(many[i], cpu.search(queries[i], p)), "") << which << " against the CPU";
      }
    }
  }
}

// Searches and verifications from several threads at once (each takes the GPU for its matching only
// and verifies geometry while another matches) answer exactly as the same calls one at a time.
TEST(TextureIndexGpu, ConcurrentSearchesAnswerAsOneAtATime) {
  PRISM_NEED_GPU();
  std::mt19937 rng(std::random_device{}());
  texture::TextureIndex index(options(texture::Device::kCuda, 12, 1000));
  std::vector<GalleryEntry> entries;
  for (int i = 0; i < 24; ++i) {
    entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, 60 + int(rng() % 300), i % 2 ? "a" : "b"));
    index.add(entries.back());
  }
  struct Ask {
    texture::Features query;
    texture::SearchParams params;
    std::string verify_id;
  };
  std::vector<Ask> asks;
  for (int k = 0; k < 8; ++k) {
    const GalleryEntry& t = entries[rng() % entries.size()];
    Ask a{test::random_index_entry("q", rng, 200 + int(rng() % 400), "").features, {}, t.id};
    std::copy_n(t.features.descriptors.begin(), std::min(t.features.descriptors.size(), size_t(50) * match::kDim),
                a.query.descriptors.begin());
    if (k % 2) a.params.collections = {"a"};
    asks.push_back(std::move(a));
  }
  auto answer = [&](const Ask& a) {
    const texture::SearchResult s = index.search(a.query, a.params);
    const texture::SearchResult v = index.verify(a.query, a.verify_id, a.params);
    std::string out = s.best.id + " " + std::to_string(s.best.score) + " " + std::to_string(s.best.geometry.matches) +
                      " " + std::to_string(s.best.geometry.inliers) + " " + std::to_string(s.candidates.size());
    for (const auto& c : s.candidates) out += " " + c.id + ":" + std::to_string(c.score);
    return out + " | " + std::to_string(v.best.geometry.matches) + " " + std::to_string(v.best.geometry.inliers);
  };
  std::vector<std::string> serial;
  for (const Ask& a : asks) serial.push_back(answer(a));
  std::vector<std::vector<std::string>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (size_t k = 0; k < asks.size(); ++k) got[t].push_back(answer(asks[(k + t) % asks.size()]));
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 4; ++t) {
    ASSERT_EQ(got[t].size(), 3 * asks.size());
    for (size_t i = 0; i < got[t].size(); ++i) EXPECT_EQ(got[t][i], serial[(i % asks.size() + t) % asks.size()]) << t;
  }
}

// Verifications of named products (verify, verify_shortlist) from more threads than the index has
// lanes, each thread on whichever lane is free (texture/index/resources.h), while searches score on
// lane 0: every answer equals the CPU path's for the same call, candidates in both tiers, and an index
// with a single lane answers the same.
TEST(TextureIndexGpu, ConcurrentVerificationsOnEveryLaneEqualTheCpuPath) {
  PRISM_NEED_GPU();
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  texture::TextureIndex cpu(options(texture::Device::kCpu, 0, 1000));
  texture::IndexOptions lanes3 = options(texture::Device::kCuda, 9, 1000), lanes1 = lanes3;
  lanes3.verify_lanes = 3;
  lanes1.verify_lanes = 1;
  texture::TextureIndex three(lanes3), one(lanes1);
  std::vector<GalleryEntry> entries;
  for (int i = 0; i < 20; ++i) {
    entries.push_back(test::random_index_entry("p" + std::to_string(i), rng, 50 + int(rng() % 300), ""));
    entries.back().enrolled_unix = 1700000000 + i;
    for (auto* index : {&cpu, &three, &one}) index->add(entries.back());
  }
  ASSERT_EQ(three.stats().gpu_images, 9u);
  // Queries holding rows of several products, so that each verification finds matches and inliers.
  std::vector<texture::Features> queries;
  for (int k = 0; k < 6; ++k) {
    texture::Features q = test::random_index_entry("q", rng, 300 + int(rng() % 400), "").features;
    for (int j = 0; j < 4; ++j) {
      const texture::Features& g = entries[rng() % entries.size()].features;
      const size_t n = std::min(size_t(g.count()), size_t(20 + 5 * j));
      std::copy_n(g.descriptors.begin(), n * match::kDim, q.descriptors.begin() + long(size_t(j) * 60 * match::kDim));
    }
    queries.push_back(std::move(q));
  }
  texture::SearchParams p;
  p.shortlist = 10;
  const auto text = [](const texture::SearchResult& r) {
    std::string out = r.best.id + (r.identified ? " identified" : " not");
    for (const texture::Candidate& c : r.candidates)
      out += " " + c.id + ":" + std::to_string(c.score) + "/" + std::to_string(c.geometry.matches) + "/" +
             std::to_string(c.geometry.inliers) + "/" + std::to_string(c.geometry.significance);
    return out;
  };
  // The calls: a verify of each product and a verify_shortlist of each query's CPU shortlist, per query.
  std::vector<std::vector<texture::Candidate>> shortlists;
  std::vector<std::string> want;  // per call, in order
  size_t in_gpu = 0, in_host = 0;
  for (const texture::Features& q : queries) {
    shortlists.push_back(cpu.search(q, p).candidates);
    for (const texture::Candidate& c : shortlists.back()) (three.in_gpu_memory(c.id) ? in_gpu : in_host)++;
    for (const GalleryEntry& e : entries) want.push_back(text(cpu.verify(q, e.id, p)));
    want.push_back(text(cpu.verify_shortlist(q, shortlists.back(), p)));
  }
  EXPECT_GE(in_gpu, 1u) << "the shortlists hold GPU-tier images";
  EXPECT_GE(in_host, 1u) << "the shortlists hold host-tier images";
  const size_t per_query = entries.size() + 1;
  const auto call = [&](texture::TextureIndex& index, size_t i) {
    const size_t k = i / per_query, e = i % per_query;
    return text(e < entries.size() ? index.verify(queries[k], entries[e].id, p)
                                   : index.verify_shortlist(queries[k], shortlists[k], p));
  };
  for (auto* index : {&three, &one}) {
    const int threads = 7;
    std::vector<std::vector<std::string>> got(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (size_t i = size_t(t); i < want.size(); i += size_t(threads)) got[size_t(t)].push_back(call(*index, i));
        for (int s = 0; s < 2; ++s) index->search(queries[size_t(t) % queries.size()], p);  // lane 0 meanwhile
      });
    for (std::thread& th : pool) th.join();
    for (int t = 0; t < threads; ++t)
      for (size_t j = 0; j < got[size_t(t)].size(); ++j)
        EXPECT_EQ(got[size_t(t)][j], want[size_t(t) + j * threads])
            << index->device_description() << ", call " << size_t(t) + j * threads << " (seed " << seed << ")";
  }
}

}  // namespace
}  // namespace prism
