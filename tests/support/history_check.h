// The texture service's consistency contract (docs/SERVICE.md, "What an acknowledged write
// guarantees") checked on a recorded client history, as Jepsen's checkers check theirs: pure
// functions over the operations the clients invoked, each with its invoke and complete times and
// what it returned (tests/service/test_faults.cpp records them under faults; test_history_check.cpp
// feeds it hand-made histories that must fail).
//
// Every product is a register. Writes put a version in it (an enrolment or an update: a version
// > 0, its own image, never written twice) or empty it (a delete: kAbsent). A write's outcome is
// kOk (acknowledged: 2xx), kFail (refused, so not applied: a 4xx) or kUnknown (a timeout, a 5xx, a
// connection lost: it may be applied, then or later, as Knossos treats an :info operation: it
// never completes). Reads observe a register: a get says which version (the image's width) or
// absent; a verify of version v says "is v", "is another" or absent (404); a search for version
// v's image says "is v" when the product is among its accepted candidates, "is not v" when not and
// its shard answered, nothing when its shard is missing; a 404 of a delete or an update says
// absent, a 409 of an enrolment "is some version".
//
// The contract, per read r of a product:
//  - every write acknowledged before r was invoked is visible to r, or one acknowledged or possibly
//    applied after it (no read misses an acknowledged write or sees a deleted product after its
//    delete was acknowledged);
//  - what r sees was written by a write invoked before r completed and not refused (no read
//    returns an unacknowledged product: a refused or never-made write);
//  - a search reports its true coverage: `shards_answered` + the missing shards = all shards,
//    `searched_share` = shards_answered / shards, no candidate of a missing shard, no missing shard
//    without allow_partial, and the products of the shards it says answered are searched (their
//    observations are checked as every read's).
// Formally: r may see the value of any write w not refused, invoked before r completed, and not
// superseded, i.e. no acknowledged write w2 with w.complete < w2.invoke and w2.complete < r.invoke
// (an unknown write completes at +infinity; the empty register is a write at -infinity).
// `may_be_lost` marks an acknowledged write the documentation allows a Redis failover to lose
// (answered before a Redis replica held its entry, then a failover): checked as kUnknown, counted.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace prism::test::history {

constexpr int kAbsent = 0;

enum class Outcome { kOk, kFail, kUnknown };

struct Op {
  int client = 0;
  std::string what;                 // enrol, update, delete, get, verify, search
  std::string key;                  // the product id
  int value = kAbsent;              // a write's version (a delete: kAbsent); a verify's or search's query version
  double invoke = 0, complete = 0;  // seconds on one clock
  Outcome outcome = Outcome::kUnknown;
  std::string note;  // its answer, for the report

  // A get's, verify's or refused write's observation of `key`: its state is (equals) or is not
  // (!equals) `seen`. A search's is derived from its fields below.
  bool observed = false;
  bool equals = true;
  int seen = kAbsent;

  // A search (outcome kOk): what it answered.
  bool allow_partial = false;
  int shards = 0, shards_answered = 0;
  double searched_share = 0;
  std::vector<int> missing_shards;
  std::vector<std::string> accepted;    // the products among its accepted candidates
  std::vector<std::string> candidates;  // every candidate's product

  bool may_be_lost = false;  // see the header's comment
};

struct Result {
  size_t ops = 0, writes = 0, acknowledged = 0, refused = 0, unknown = 0, may_be_lost = 0;
  size_t reads = 0;         // reads answered
  size_t observations = 0;  // register observations checked (a search of a missing shard has none)
  size_t partial_searches = 0;
  std::vector<std::string> violations;  // each with the operations that make it one
};

// `shards`: the deployment's shard count; `shard_of`: a product's shard.
Result check(const std::vector<Op>& history, int shards, const std::function<int(const std::string&)>& shard_of);

// One line for an operation: "client 3 enrol p07 = v12 [1.204 s, 1.377 s] ok (201 ...)".
std::string describe(const Op& op);

}  // namespace prism::test::history
