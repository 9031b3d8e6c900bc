// The history checker of the fault test (tests/support/history_check.h) on hand-made histories:
// each violation of docs/SERVICE.md's contract it must find (a lost acknowledged write, a stale
// read, a deleted product that comes back, a product never acknowledged, a search that misreports
// its coverage), and the histories it must accept (concurrency, writes of unknown outcome, the
// documented loss of a write answered without a Redis replica).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "history_check.h"

namespace prism::test::history {
namespace {

Op write(const std::string& what, const std::string& key, int value, double invoke, double complete,
         Outcome outcome = Outcome::kOk) {
  Op op;
  op.what = what;
  op.key = key;
  op.value = value;
  op.invoke = invoke;
  op.complete = complete;
  op.outcome = outcome;
  return op;
}

Op get(const std::string& key, int seen, double invoke, double complete) {
  Op op = write("get", key, kAbsent, invoke, complete);
  op.observed = true;
  op.seen = seen;
  return op;
}

Op verify(const std::string& key, int value, bool is, double invoke, double complete) {
  Op op = write("verify", key, value, invoke, complete);
  op.observed = true;
  op.equals = is;
  op.seen = value;
  return op;
}

Op search(const std::string& key, int value, bool found, double invoke, double complete,
          std::vector<int> missing = {}) {
  Op op = write("search", key, value, invoke, complete);
  op.shards = 2;
  op.missing_shards = std::move(missing);
  op.allow_partial = !op.missing_shards.empty();
  op.shards_answered = 2 - int(op.missing_shards.size());
  op.searched_share = op.shards_answered / 2.0;
  if (found) op.accepted = op.candidates = {key};
  return op;
}

// Products "a*" live on shard 0, the others on shard 1.
int shard_of(const std::string& key) { return key[0] == 'a' ? 0 : 1; }

Result run(const std::vector<Op>& h) { return check(h, 2, shard_of); }

std::string all(const Result& r) {
  std::string s;
  for (const std::string& v : r.violations) s += v + "\n";
  return s;
}

TEST(HistoryCheck, AcceptsSequentialAndConcurrentHistories) {
  const Result r = run({
      write("enrol", "a1", 1, 0, 1), get("a1", 1, 2, 3), verify("a1", 1, true, 2, 3), search("a1", 1, true, 2, 3),
      write("update", "a1", 2, 4, 8),  // concurrent with the reads below: either version
      get("a1", 1, 5, 6), get("a1", 2, 5, 6), verify("a1", 2, false, 5, 6), search("a1", 2, true, 6, 7),
      get("a1", 2, 9, 10), write("delete", "a1", kAbsent, 11, 12), get("a1", kAbsent, 13, 14),
      search("a1", 2, false, 13, 14), get("b1", kAbsent, 0, 1),  // never written
  });
  EXPECT_TRUE(r.violations.empty()) << all(r);
  EXPECT_EQ(r.writes, 3u);
  EXPECT_EQ(r.acknowledged, 3u);
  EXPECT_EQ(r.reads, 11u);
  EXPECT_EQ(r.observations, 11u);
}

TEST(HistoryCheck, FindsALostAcknowledgedWrite) {
  const Result r = run({write("enrol", "a1", 1, 0, 1), get("a1", kAbsent, 2, 3)});
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_NE(r.violations[0].find("read saw absent of a1"), std::string::npos) << all(r);
  EXPECT_NE(r.violations[0].find("possible: v1"), std::string::npos) << all(r);
  // A verify that rejects the enrolled image, a search of an answered shard that misses it.
  EXPECT_EQ(run({write("enrol", "a1", 1, 0, 1), verify("a1", 1, false, 2, 3)}).violations.size(), 1u);
  EXPECT_EQ(run({write("enrol", "b1", 1, 0, 1), search("b1", 1, false, 2, 3)}).violations.size(), 1u);
}

TEST(HistoryCheck, FindsAStaleReadAndADeletedProductThatComesBack) {
  EXPECT_EQ(run({write("enrol", "a1", 1, 0, 1), write("update", "a1", 2, 2, 3), get("a1", 1, 4, 5)}).violations.size(),
            1u);
  EXPECT_EQ(
      run({write("enrol", "a1", 1, 0, 1), write("delete", "a1", kAbsent, 2, 3), get("a1", 1, 4, 5)}).violations.size(),
      1u);
  EXPECT_EQ(run({write("enrol", "a1", 1, 0, 1), write("delete", "a1", kAbsent, 2, 3), search("a1", 1, true, 4, 5)})
                .violations.size(),
            1u);
}

TEST(HistoryCheck, FindsAProductNeverAcknowledged) {
  // Refused (a 4xx): never applied.
  EXPECT_EQ(run({write("enrol", "a1", 1, 0, 1, Outcome::kFail), get("a1", 1, 2, 3)}).violations.size(), 1u);
  // Read before the write was invoked.
  EXPECT_EQ(run({get("a1", 1, 0, 1), write("enrol", "a1", 1, 2, 3)}).violations.size(), 1u);
  // Never written at all.
  EXPECT_EQ(run({get("a1", 7, 0, 1)}).violations.size(), 1u);
}

TEST(HistoryCheck, WritesOfUnknownOutcomeMayOrMayNotBeApplied) {
  for (const int seen : {kAbsent, 1}) {
    const Result r = run({write("enrol", "a1", 1, 0, 1, Outcome::kUnknown), get("a1", seen, 5, 6)});
    EXPECT_TRUE(r.violations.empty()) << all(r);
    EXPECT_EQ(r.unknown, 1u);
  }
  // A delete that timed out may be applied long after: the product may vanish, and come back never.
  for (const int seen : {kAbsent, 1}) {
    const Result r = run({write("enrol", "a1", 1, 0, 1), write("delete", "a1", kAbsent, 2, 3, Outcome::kUnknown),
                          get("a1", seen, 9, 10)});
    EXPECT_TRUE(r.violations.empty()) << all(r);
  }
  // An unknown write is never superseded: its entry may still be applied after v2's (a front
  // that had not added it yet when its client gave up).
  EXPECT_TRUE(
      run({write("enrol", "a1", 1, 0, 1, Outcome::kUnknown), write("update", "a1", 2, 2, 3), get("a1", 1, 4, 5)})
          .violations.empty());
  // Whereas an acknowledged v1 before v2 cannot.
  EXPECT_EQ(run({write("enrol", "a1", 1, 0, 1), write("update", "a1", 2, 2, 3), get("a1", 1, 4, 5)}).violations.size(),
            1u);
}

TEST(HistoryCheck, TheDocumentedLossIsAllowedAndCounted) {
  Op del = write("delete", "a1", kAbsent, 2, 3);
  del.may_be_lost = true;
  const Result r = run({write("enrol", "a1", 1, 0, 1), del, get("a1", 1, 4, 5)});
  EXPECT_TRUE(r.violations.empty()) << all(r);
  EXPECT_EQ(r.may_be_lost, 1u);
}

TEST(HistoryCheck, RefusedWritesObserveTheState) {
  // A delete answered 404 saw the product absent, after its enrolment was acknowledged.
  Op del = write("delete", "a1", kAbsent, 2, 3, Outcome::kFail);
  del.observed = true;
  del.seen = kAbsent;
  EXPECT_EQ(run({write("enrol", "a1", 1, 0, 1), del}).violations.size(), 1u);
  EXPECT_TRUE(run({del}).violations.empty());
}

TEST(HistoryCheck, FindsASearchThatMisreportsItsCoverage) {
  // Shard 0 missing: a0's product is not observed, so not finding it is no violation.
  EXPECT_TRUE(run({write("enrol", "a1", 1, 0, 1), search("a1", 1, false, 2, 3, {0})}).violations.empty());
  Op share = search("b1", 1, false, 2, 3, {0});
  share.searched_share = 1.0;
  EXPECT_EQ(run({share}).violations.size(), 1u);
  Op count = search("b1", 1, false, 2, 3, {0});
  count.shards_answered = 2;
  EXPECT_EQ(run({count}).violations.size(), 1u);
  Op candidate = search("b1", 1, false, 2, 3, {0});
  candidate.candidates = {"a7"};
  EXPECT_EQ(run({candidate}).violations.size(), 1u);
  Op not_partial = search("b1", 1, false, 2, 3, {0});
  not_partial.allow_partial = false;
  EXPECT_EQ(run({not_partial}).violations.size(), 1u);
  Op shards = search("b1", 1, false, 2, 3);
  shards.shards = 3;
  shards.shards_answered = 3;
  shards.searched_share = 1;
  EXPECT_EQ(run({shards}).violations.size(), 1u);
  // Says shard 1 answered, but its acknowledged b1 is not found: the coverage was not true.
  const Result r = run({write("enrol", "b1", 1, 0, 1), search("b1", 1, false, 2, 3, {0})});
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.partial_searches, 1u);
}

}  // namespace
}  // namespace prism::test::history
