// Online shard splits (service/reshard.h, `prism texture reshard`): 2 -> 4 shards under a writer
// and a searcher that never stop, against a real redis-server started by the test, with shard
// workers on threads of the test (shard 0 of two replicas, whose new shard gets two as well); and
// the refusals of a split asked wrongly. Skips loudly without redis-server unless
// PRISM_REQUIRE_REDIS=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gallery_cases.h"
#include "process.h"
#include "redis.h"
#include "redis_server.h"
#include "reshard.h"
#include "shard_fixture.h"
#include "shard_protocol.h"
#include "sharded_backend.h"
#include "test_env.h"

namespace prism::service {
namespace {

using namespace test_support;
using namespace std::chrono_literals;
using texture::GalleryEntry;

// The ids of the gallery in `dir` (read while its worker owns it, as `prism texture list` may).
std::set<std::string> ids_in(const std::filesystem::path& dir) {
  std::set<std::string> out;
  const texture::Gallery g = texture::Gallery::open(dir);  // held: entries() refers into it
  for (const GalleryEntry& e : g.entries()) out.insert(e.id);
  return out;
}

// What the writer was told (acknowledged) and what it started, for the bounds of a search's count.
struct WriterState {
  std::mutex mutex;
  std::map<std::string, std::string> live;  // id -> collection, as acknowledged
  std::set<std::string> deleted;            // acknowledged deletes
  std::atomic<int64_t> creates_started{0}, creates_acked{0}, deletes_started{0}, deletes_acked{0};
  std::atomic<int64_t> writes{0};
};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

template <typename F>
bool eventually(F&& ok, std::chrono::seconds limit) {
  const auto until = Clock::now() + limit;
  while (!ok()) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

TEST(Reshard, TwoShardsSplitIntoFourUnderWritesAndSearchesFindEveryProductOnce) {
  PRISM_NEED_REDIS();
  const auto started = Clock::now();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  auto options = [&](int shard, int shards, const std::string& name) {
    ShardWorkerOptions o =
        Worker::options(server.url(), shard, shards, name, tmp.path() / ("s" + std::to_string(shard) + name));
    o.repair_every_s = 0;  // the split, not the repair, is under test
    // A search read taken by a parent waits a moment before it is answered: a commit whose drop
    // lands in that moment is then common, not rare (the answer must say the new count).
    if (shard < 2)
      o.before_answer = [](const std::string& op) {
        if (op == "search") std::this_thread::sleep_for(15ms);
      };
    return o;
  };
  std::map<std::string, std::unique_ptr<Worker>> workers;
  workers["0a"] = std::make_unique<Worker>(options(0, 2, "a"));
  workers["0b"] = std::make_unique<Worker>(options(0, 2, "b"));
  workers["1a"] = std::make_unique<Worker>(options(1, 2, "a"));
  ShardedBackend front(front_options(server.url(), 2, 30s));
  ASSERT_EQ(health_when_live(front), "");
  // A front that only reads, started before the split: it routes reads by the count it last read.
  ShardedBackend reader(front_options(server.url(), 2, 30s));

  std::mt19937 rng(4646);
  // p000..p029 first (searched for throughout, updated but never deleted); then the writer's
  // w0000.. (some deleted again).
  const std::vector<GalleryEntry> base = products(30, rng);
  WriterState state;
  for (const GalleryEntry& e : base) {
    ASSERT_EQ(front.write(e, false, in(30s)).outcome, WriteOutcome::kCreated);
    state.live[e.id] = e.collection;
  }
  std::vector<GalleryEntry> fresh;
  for (int i = 0; i < 400; ++i) {
    char id[16];
    std::snprintf(id, sizeof id, "w%04d", i);
    GalleryEntry e = test::random_gallery_entry(id, rng, 30 + int(rng() % 30));
    e.features.descriptors_fp16.clear();
    e.enrolled_unix = 1700001000 + i;
    fresh.push_back(std::move(e));
  }

  std::atomic<bool> running{true};
  std::mutex errors_mutex;
  std::vector<std::string> errors;
  auto failed = [&](const std::string& what) {
    std::lock_guard lock(errors_mutex);
    if (errors.size() < 20) std::cerr << "failed: " << what << "\n";
    errors.push_back(what);
  };
  // Every write is acknowledged (none may fail during the split); one at a time, so at most one is
  // started and not yet acknowledged.
  std::thread writer([&] {
    std::mt19937 wrng(7);
    for (size_t i = 0; running && i < fresh.size(); ++i) {
      try {
        ++state.creates_started;
        if (front.write(fresh[i], false, in(30s)).outcome != WriteOutcome::kCreated) failed("enrol " + fresh[i].id);
        {
          std::lock_guard lock(state.mutex);
          state.live[fresh[i].id] = fresh[i].collection;
        }
        ++state.creates_acked;
        if (i % 4 == 3) {  // an update of a searched product: its collection changes, its features stay
          GalleryEntry u = base[wrng() % base.size()];
          u.collection = "c" + std::to_string(i);
          if (front.write(u, true, in(30s)).outcome != WriteOutcome::kUpdated) failed("update " + u.id);
          std::lock_guard lock(state.mutex);
          state.live[u.id] = u.collection;
        }
        if (i % 5 == 4) {  // a delete of one of the writer's earlier products
          const std::string& id = fresh[i - 2].id;
          ++state.deletes_started;
          if (!front.remove(id, in(30s))) failed("delete " + id);
          {
            std::lock_guard lock(state.mutex);
            state.live.erase(id);
            state.deleted.insert(id);
          }
          ++state.deletes_acked;
        }
        ++state.writes;
      } catch (const std::exception& e) {
        failed(std::string("write: ") + e.what());
      }
    }
  });
  // Searches for a base product: found once, first; no id twice; and the count of products searched
  // within what the writer had acknowledged when the search began and started when it ended (a
  // product counted on its parent and on its new shard would pass the upper bound, one counted on
  // neither fall below the lower).
  std::atomic<int64_t> searches{0};
  std::thread searcher([&] {
    std::mt19937 srng(9);
    while (running) {
      const GalleryEntry& target = base[srng() % base.size()];
      SearchQuery q;
      q.features = target.features;
      q.top_k = 5;
      q.deadline = in(30s);
      const int64_t acked_creates = state.creates_acked, acked_deletes = state.deletes_acked;
      try {
        const SearchAnswer a = front.search(q);
        const int64_t lower = int64_t(base.size()) + acked_creates - state.deletes_started;
        const int64_t upper = int64_t(base.size()) + state.creates_started - acked_deletes;
        std::set<std::string> seen;
        for (const Match& m : a.candidates)
          if (!seen.insert(m.id).second) failed("search: " + m.id + " twice");
        if (a.candidates.empty() || a.candidates[0].id != target.id)
          failed("search: " + target.id + " not first (" +
                 (a.candidates.empty() ? std::string("none") : a.candidates[0].id) + ")");
        if (int64_t(a.gallery_size) < lower || int64_t(a.gallery_size) > upper)
          failed("search over " + std::to_string(a.gallery_size) + " products, outside [" + std::to_string(lower) +
                 ", " + std::to_string(upper) + "]");
        if (!a.missing_shards.empty()) failed("search missed shards");
        ++searches;
      } catch (const std::exception& e) {
        failed(std::string("search: ") + e.what());
      }
    }
  });
  auto writes_grow = [&](int64_t by) {
    const int64_t from = state.writes;
    return eventually([&] { return state.writes >= from + by; }, 60s);
  };
  auto stop = [&] {
    running = false;
    writer.join();
    searcher.join();
  };

  ASSERT_TRUE(writes_grow(5)) << "no writes";
  Redis redis(server.url());
  const int64_t searches_before = searches;
  // 1. Begin: fronts send the writes of products that move to their new shard's stream too.
  EXPECT_EQ(reshard::begin(redis, 2), (shard::Layout{2, 4}));
  ASSERT_TRUE(writes_grow(5));
  // 2. Each new shard's galleries from a parent's (shard 2's two replicas from shard 0's two).
  const reshard::CopyResult c2a = reshard::copy(redis, 2, tmp.path() / "s0a", tmp.path() / "s2a", 60s);
  const reshard::CopyResult c2b = reshard::copy(redis, 2, tmp.path() / "s0b", tmp.path() / "s2b", 60s);
  const reshard::CopyResult c3a = reshard::copy(redis, 3, tmp.path() / "s1a", tmp.path() / "s3a", 60s);
  EXPECT_GT(c2a.copied, 0u);
  EXPECT_GT(c3a.copied, 0u);
  EXPECT_LT(c2a.copied, c2a.parent_products);
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "s2a" / "stream-applied"));  // replays its own stream
  ASSERT_TRUE(writes_grow(5));
  // 3. The new shards' workers, given the count they join.
  workers["2a"] = std::make_unique<Worker>(options(2, 4, "a"));
  workers["2b"] = std::make_unique<Worker>(options(2, 4, "b"));
  workers["3a"] = std::make_unique<Worker>(options(3, 4, "a"));
  ASSERT_TRUE(writes_grow(5));
  // 4. Commit: reads go to the 4 shards, the parents drop what moved.
  EXPECT_EQ(reshard::commit(redis, 60s), (shard::Layout{4, 0}));
  ASSERT_TRUE(writes_grow(10));
  const int64_t searches_during = searches - searches_before;
  stop();
  for (const auto& [name, w] : workers) EXPECT_EQ(w->error(), "") << name;
  EXPECT_TRUE(errors.empty()) << errors.size() << " failures, the first: " << errors.front();
  EXPECT_GT(searches_during, 0);
  std::cerr << state.writes << " writes and " << searches << " searches (" << searches_during
            << " during the split) in " << std::chrono::duration<double>(Clock::now() - started).count() << " s\n";

  // Every product acknowledged is found, once, on its shard under 4; none deleted is.
  EXPECT_EQ(front.shards(), 4);
  for (const auto& [id, collection] : state.live) {
    const std::optional<Product> p = front.get(id, in(30s));
    ASSERT_TRUE(p) << id << " lost";
    EXPECT_EQ(p->collection, collection) << id;
    EXPECT_EQ(p->shard, shard::shard_of(id, 4)) << id;
  }
  for (const std::string& id : state.deleted) EXPECT_FALSE(front.get(id, in(30s))) << id << " back";
  // The reader still routes by 2: a product that moved is found through its parent's answer (421
  // or the count 4), which sends the read again by the layout of the moment.
  ASSERT_EQ(reader.shards(), 2);
  size_t moved = 0;
  for (const auto& [id, collection] : state.live) {
    moved += shard::shard_of(id, 4) != shard::shard_of(id, 2);
    const std::optional<Product> p = reader.get(id, in(30s));
    ASSERT_TRUE(p) << id << " not found by a front that read the count before the split";
    EXPECT_EQ(p->shard, shard::shard_of(id, 4)) << id;
  }
  EXPECT_GT(moved, 0u);
  EXPECT_EQ(reader.shards(), 4);
  SearchQuery q;
  q.features = base[0].features;
  q.deadline = in(30s);
  EXPECT_EQ(front.search(q).gallery_size, state.live.size());
  // On disk: each product in exactly one shard's galleries (replicas alike), its own under 4.
  const std::map<std::string, int> galleries = {{"s0a", 0}, {"s0b", 0}, {"s1a", 1}, {"s2a", 2}, {"s2b", 2}, {"s3a", 3}};
  auto held = [&] {
    std::map<std::string, std::set<std::string>> out;
    for (const auto& [dir, k] : galleries) out[dir] = ids_in(tmp.path() / dir);
    return out;
  };
  std::map<std::string, std::set<std::string>> on_disk;
  ASSERT_TRUE(eventually(
      [&] {
        on_disk = held();
        return on_disk["s0a"] == on_disk["s0b"] && on_disk["s2a"] == on_disk["s2b"];
      },
      30s))
      << "replicas differ";
  std::map<std::string, int> count;
  for (const auto& [dir, ids] : on_disk) {
    if (dir.back() == 'b') continue;
    for (const std::string& id : ids) {
      ++count[id];
      EXPECT_EQ(shard::shard_of(id, 4), galleries.at(dir)) << id << " in " << dir;
    }
  }
  for (const auto& [id, collection] : state.live) EXPECT_EQ(count[id], 1) << id;
  EXPECT_EQ(count.size(), state.live.size());

  // Redis empties after the split (a restart without its data): the count is set again by the
  // parents, which applied the commit (4), not by the shards the split made, which started under
  // 2 and cannot know it was committed; every product is found on its shard under 4 again.
  ASSERT_EQ(redis.command({"FLUSHALL"}).str, "OK");
  ASSERT_EQ(health_when_live(front), "");
  EXPECT_EQ(redis.command({"GET", shard::kShardsKey}).str, "4");
  for (const auto& [id, collection] : state.live) {
    const std::optional<Product> p = front.get(id, in(30s));
    ASSERT_TRUE(p) << id << " lost after Redis lost its data";
    EXPECT_EQ(p->shard, shard::shard_of(id, 4)) << id;
  }
  for (const auto& [name, w] : workers) EXPECT_EQ(w->error(), "") << name;
  EXPECT_LT(Clock::now() - started, 120s);
}

TEST(Reshard, SplitsAskedWronglyAreRefusedNamingWhatIsWrong) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  Redis redis(server.url());
  auto refusal = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_PRED2(has, refusal([&] { reshard::begin(redis, 2); }), "prism:shards is not set");
  ASSERT_EQ(shard::agree_shard_count(redis, 2), 2);
  EXPECT_PRED2(has, refusal([&] { reshard::begin(redis, 3); }), "has 2 shards (prism:shards), not 3");
  EXPECT_PRED2(has, refusal([&] { reshard::commit(redis, 0s); }), "no split is in progress");
  EXPECT_PRED2(has, refusal([&] { reshard::copy(redis, 2, tmp.path() / "x", tmp.path() / "y", 0s); }),
               "no split is in progress");
  EXPECT_EQ(reshard::status(redis), "2 shards, no split in progress");
  ASSERT_EQ(reshard::begin(redis, 2), (shard::Layout{2, 4}));
  EXPECT_PRED2(has, refusal([&] { reshard::begin(redis, 2); }), "a split to 4 shards is already in progress");
  EXPECT_PRED2(has, refusal([&] { reshard::copy(redis, 1, tmp.path() / "x", tmp.path() / "y", 0s); }),
               "shard 1 is not a new shard of the split from 2 to 4 shards (2..3)");
  EXPECT_PRED2(has, refusal([&] { reshard::copy(redis, 2, tmp.path() / "x", tmp.path() / "y", 0s); }),
               "is not a gallery");
  // A parent's gallery that never applied its split marker (no worker runs on it): refused in time.
  texture::Gallery::open(tmp.path() / "parent", /*create=*/true);
  EXPECT_PRED2(has, refusal([&] { reshard::copy(redis, 2, tmp.path() / "parent", tmp.path() / "y", 0s); }),
               "not yet shard 0's split marker");
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "y"));
  EXPECT_PRED2(has, refusal([&] { reshard::commit(redis, 0s); }), "not committed: shard 2 has no worker yet");
  EXPECT_PRED2(has, reshard::status(redis), "splitting 2 -> 4 shards");
  // A worker of a shard outside the layout, and a front of another count, are refused naming both.
  EXPECT_PRED2(has, refusal([&] { shard::count_for_shard(shard::read_layout(redis), 4, redis.url()); }),
               "nor below the count 4 of the split in progress");
  EXPECT_EQ(shard::agree_shard_count(redis, 4), 2);  // a new shard's worker given the split's count
  EXPECT_PRED2(has, refusal([&] { shard::agree_shard_count(redis, 3); }), "shard count mismatch");
  // The CLI: a refusal exits 1 with the message, a usage error 2.
  std::string out;
  const std::string prism = std::string(PRISM_EXE) + " texture reshard --redis " + server.url();
  EXPECT_EQ(test::run_command(prism + " begin --shards 2", out), 1) << out;
  EXPECT_PRED2(has, out, "already in progress");
  EXPECT_EQ(test::run_command(prism + " split", out), 2) << out;
  EXPECT_PRED2(has, out, "unknown step 'split'");
  EXPECT_EQ(test::run_command(prism + " status", out), 0) << out;
  EXPECT_PRED2(has, out, "shard 3: shard 3 has no worker yet");
  // Redis unreachable: named.
  Redis nowhere("redis://127.0.0.1:" + std::to_string(test::free_port()));
  EXPECT_PRED2(has, refusal([&] { reshard::begin(nowhere, 2); }), "Redis unreachable at redis://127.0.0.1:");
}

}  // namespace
}  // namespace prism::service
