// The dynamic batcher's queue (common/dynamic_batcher.h), on the CPU with a recording run: a lone
// request is never held, announced requests leave together, the batch rule and max_batch split them,
// a withdrawn announcement frees the wait, and a run's error is every member's.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/dynamic_batcher.h"

namespace prism {
namespace {

using namespace std::chrono_literals;

// Requests are (key, value); a batch is of one key; a result is the value doubled. The batches' sizes
// and keys are recorded.
struct Recorder {
  std::mutex mu;
  std::vector<std::pair<std::string, size_t>> batches;
  bool fail = false;
};
using Request = std::pair<std::string, int>;
using Batcher = DynamicBatcher<Request, int>;

std::unique_ptr<Batcher> make(Recorder& rec, int max_batch, std::chrono::microseconds max_wait, int instances = 1) {
  DynamicBatcherOptions o;
  o.max_batch = max_batch;
  o.max_wait = max_wait;
  o.instances = instances;
  return std::make_unique<Batcher>(
      o, [](const Request& a, const Request& b) { return a.first == b.first; },
      [&rec](std::vector<Request>& batch) {
        std::lock_guard<std::mutex> g(rec.mu);
        if (rec.fail) throw std::runtime_error("the run failed");
        rec.batches.emplace_back(batch.front().first, batch.size());
        std::vector<int> out;
        for (const Request& r : batch) out.push_back(2 * r.second);
        return out;
      });
}

TEST(DynamicBatcher, ALoneRequestIsNeverHeld) {
  Recorder rec;
  auto b = make(rec, 8, std::chrono::microseconds(std::chrono::seconds(30)));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(b->submit({"a", 21}, false).get(), 42);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_EQ(b->stats().batches, 1u);
}

TEST(DynamicBatcher, AnnouncedRequestsLeaveTogetherByTheirRule) {
  Recorder rec;
  auto b = make(rec, 8, std::chrono::microseconds(std::chrono::seconds(30)));
  for (int i = 0; i < 5; ++i) b->announce();
  std::vector<std::future<int>> got;
  // Handed one by one: the first batch waits for every announced one (30 s at most), then takes its key's.
  for (int i = 0; i < 5; ++i) got.push_back(b->submit({i % 2 ? "b" : "a", i}, true));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[size_t(i)].get(), 2 * i);
  ASSERT_EQ(rec.batches.size(), 2u);
  EXPECT_EQ(rec.batches[0], (std::pair<std::string, size_t>("a", 3)));
  EXPECT_EQ(rec.batches[1], (std::pair<std::string, size_t>("b", 2)));
  const DynamicBatcherStats s = b->stats();
  EXPECT_EQ(s.batches, 2u);
  EXPECT_EQ(s.requests, 5u);
  EXPECT_EQ(s.largest, 3);
}

TEST(DynamicBatcher, MaxBatchSplitsAndAWithdrawalFreesTheWait) {
  Recorder rec;
  auto b = make(rec, 2, std::chrono::microseconds(std::chrono::seconds(30)));
  for (int i = 0; i < 6; ++i) b->announce();
  std::vector<std::future<int>> got;
  for (int i = 0; i < 5; ++i) got.push_back(b->submit({"a", i}, true));
  b->withdraw();  // the sixth never comes
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(got[size_t(i)].get(), 2 * i);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  for (const auto& [key, n] : rec.batches) EXPECT_LE(n, 2u);
  EXPECT_EQ(b->stats().requests, 5u);
}

TEST(DynamicBatcher, ARunsErrorIsEveryMembersAndBadOptionsAreRefused) {
  Recorder rec;
  rec.fail = true;
  auto b = make(rec, 4, std::chrono::microseconds(std::chrono::seconds(30)), 2);
  b->announce();
  b->announce();
  auto x = b->submit({"a", 1}, true);
  auto y = b->submit({"a", 2}, true);
  EXPECT_THROW(x.get(), std::runtime_error);
  EXPECT_THROW(y.get(), std::runtime_error);
  EXPECT_THROW(make(rec, 0, 0us), std::invalid_argument);
  EXPECT_THROW(make(rec, 1, 0us, 0), std::invalid_argument);
}

// Requests handed from many threads while the dispatchers are busy queue and leave together; each
// caller gets its own result.
TEST(DynamicBatcher, ConcurrentCallersGetTheirOwnResults) {
  Recorder rec;
  auto b = make(rec, 8, 0us, 2);
  std::vector<std::thread> threads;
  std::vector<int> wrong(16, 0);
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i)
        wrong[size_t(t)] += b->submit({t % 3 ? "a" : "b", t * 1000 + i}, false).get() != 2 * (t * 1000 + i);
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 16; ++t) EXPECT_EQ(wrong[size_t(t)], 0) << t;
  EXPECT_EQ(b->stats().requests, 800u);
}

}  // namespace
}  // namespace prism
