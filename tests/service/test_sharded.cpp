// The sharded deployment (service/shard_worker.h, service/sharded_backend.h) against a real
// redis-server started by the test: answers equal to one gallery's, replicas, a worker and a replica
// killed with SIGKILL, a worker partitioned from Redis (tests/support/fault_proxy.h), Redis restarted,
// and bad configurations. Skips loudly without redis-server unless
// PRISM_REQUIRE_REDIS=1.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "common/gpu.h"
#include "fault_proxy.h"
#include "gallery_cases.h"
#include "local_backend.h"
#include "process.h"
#include "redis.h"
#include "redis_server.h"
#include "replica_repair.h"
#include "shard_fixture.h"
#include "shard_worker.h"
#include "sharded_backend.h"
#include "test_env.h"

namespace prism::service {
namespace {

using namespace test_support;
using namespace std::chrono_literals;
using texture::GalleryEntry;

TEST(RedisClient, ParsesUrlsAndNamesTheBadOnes) {
  const RedisUrl u = parse_redis_url("redis://db.example:6380/2");
  EXPECT_EQ(u.host, "db.example");
  EXPECT_EQ(u.port, 6380);
  EXPECT_EQ(u.db, 2);
  EXPECT_EQ(parse_redis_url("redis://127.0.0.1").port, 6379);
  // ACL users and passwords, percent-encoded, shown as *** in what messages show.
  const RedisUrl a = parse_redis_url("redis://prism-front:p%40ss/w:rd@10.0.0.5:6379/1");
  EXPECT_EQ(a.user, "prism-front");
  EXPECT_EQ(a.password, "p@ss/w:rd");
  EXPECT_EQ(a.host, "10.0.0.5");
  EXPECT_EQ(a.db, 1);
  EXPECT_EQ(a.text, "redis://prism-front:***@10.0.0.5:6379/1");
  const RedisUrl d = parse_redis_url("redis://:secret@h");
  EXPECT_EQ(d.user, "");
  EXPECT_EQ(d.password, "secret");
  EXPECT_EQ(parse_redis_url("redis://worker@h").user, "worker");  // the password from the environment
  for (const std::string bad :
       {"http://h:1", "redis://", "redis://h:0", "redis://h:70000", "redis://h:x", "redis://h:1/", "redis://h:1/db",
        "h:6379", "redis://@h", "redis://u:p@", "redis://u:%zz@h", "redis://u:%4@h"}) {
    try {
      parse_redis_url(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("'" + bad.substr(0, bad.find(':', 8))), std::string::npos) << e.what();
    }
  }
  // Passwords never appear in a refusal; TLS is refused saying why.
  for (const std::string bad :
       {"redis://u:topsecret@h:0", "redis://u:topsecret@", "redis://:topsecret@h/x", "rediss://u:topsecret@h"}) {
    try {
      parse_redis_url(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).find("topsecret"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(":***@"), std::string::npos) << e.what();
    }
  }
  try {
    parse_redis_url("rediss://h:6379");
    ADD_FAILURE() << "rediss:// accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("TLS (rediss://) is not supported"), std::string::npos) << e.what();
  }
}

TEST(RedisClient, CommandsAreBinarySafeAndSurviveARestart) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  Redis redis(server.url());
  const std::string bytes("a\0b\r\n\xff", 6);
  EXPECT_EQ(redis.command({"SET", "k", bytes}).str, "OK");
  EXPECT_EQ(redis.command({"GET", "k"}).str, bytes);
  EXPECT_TRUE(redis.command({"GET", "absent"}).nil());
  EXPECT_EQ(redis.command({"INCR", "n"}).integer, 1);
  EXPECT_EQ(redis.command({"XGROUP", "CREATE", "s", "g", "0"}).error_code(), "ERR");  // no MKSTREAM: an error reply
  server.restart();
  // The connection Redis closed is replaced (a reused connection is retried once); the AOF kept k.
  EXPECT_EQ(redis.command({"GET", "k"}).str, bytes);
  server.stop();
  try {
    redis.command({"GET", "k"});
    ADD_FAILURE() << "no error with Redis down";
  } catch (const RedisError& e) {
    EXPECT_NE(std::string(e.what()).find("Redis unreachable at " + server.url()), std::string::npos) << e.what();
  }
}

// Redis::pipeline (the worker's answer, its time to live and its XACK in one round trip): the
// replies in order, an error reply in its place, binary-safe, the same retry on a connection
// Redis closed as one command gets, and a clear error with Redis down.
TEST(RedisClient, PipelinedCommandsAnswerInOrderAndSurviveARestart) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  Redis redis(server.url());
  const std::string bytes("x\0y\r\n", 5);
  const std::vector<Reply> r = redis.pipeline({{"LPUSH", "list", bytes},
                                               {"EXPIRE", "list", "60"},
                                               {"XGROUP", "CREATE", "s", "g", "0"},  // an error reply, in its place
                                               {"LRANGE", "list", "0", "-1"},
                                               {"TTL", "list"}});
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].integer, 1);
  EXPECT_EQ(r[1].integer, 1);
  EXPECT_EQ(r[2].error_code(), "ERR");
  ASSERT_EQ(r[3].elements.size(), 1u);
  EXPECT_EQ(r[3].elements[0].str, bytes);
  EXPECT_GT(r[4].integer, 0);
  server.restart();
  const std::vector<Reply> again = redis.pipeline({{"LLEN", "list"}, {"INCR", "n"}});
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].integer, 1);  // the AOF kept the list
  EXPECT_EQ(again[1].integer, 1);
  server.stop();
  try {
    redis.pipeline({{"GET", "k"}, {"GET", "k"}});
    ADD_FAILURE() << "no error with Redis down";
  } catch (const RedisError& e) {
    EXPECT_NE(std::string(e.what()).find("Redis unreachable at " + server.url()), std::string::npos) << e.what();
  }
}

// Whether `ok` held within 5 s (asked every 10 ms).
bool within_5s(const std::function<bool()>& ok) {
  for (int i = 0; i < 500; ++i) {
    if (ok()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return ok();
}

// How many entries of `stream` are pending in `group` (XPENDING's count), -1 when unknown.
long long pending_count(Redis& redis, const std::string& stream, const std::string& group) {
  const Reply r = redis.command({"XPENDING", stream, group});
  return r.type == Reply::Type::kArray && !r.elements.empty() ? r.elements[0].integer : -1;
}

// A consumer group's read whose reply a cut connection lost is not sent again by the retry on a
// closed connection: Redis ran it, so the entry it delivered is in the consumer's pending list, and
// a second XREADGROUP ... > would answer the entry after it instead (a shard worker would apply
// that write without the first). The caller gets a RedisError and reads its pending entries again.
TEST(RedisClient, AGroupReadWhoseReplyIsCutIsNotSentAgain) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  test::FaultProxy proxy(server.port());
  Redis direct(server.url());
  ASSERT_EQ(direct.command({"XGROUP", "CREATE", "s", "g", "0", "MKSTREAM"}).str, "OK");
  Redis redis("redis://127.0.0.1:" + std::to_string(proxy.port()));
  ASSERT_EQ(redis.command({"PING"}).str, "PONG");  // a connection in use (a fresh one is never retried)
  std::string outcome;
  std::thread reader([&] {
    try {
      const Reply r =
          redis.command({"XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "BLOCK", "5000", "STREAMS", "s", ">"}, 5000ms);
      outcome = "answered " + std::to_string(shard::read_group_entries(r).size()) + " entries";
      for (const shard::StreamEntry& e : shard::read_group_entries(r)) outcome += " " + e.field("n");
    } catch (const RedisError& e) {
      outcome = std::string("RedisError: ") + e.what();
    }
  });
  // Blocked in Redis, then partitioned: the first entry is delivered there, its reply held.
  ASSERT_TRUE(within_5s([&] {
    return direct.command({"INFO", "clients"}).str.find("blocked_clients:1") != std::string::npos;
  }));
  proxy.partition();
  const std::string first = direct.command({"XADD", "s", "*", "n", "1"}).str;
  EXPECT_TRUE(within_5s([&] { return pending_count(direct, "s", "g") == 1; }));
  direct.command({"XADD", "s", "*", "n", "2"});
  proxy.heal();  // the connection cut, as TCP times out one that lived through a partition
  reader.join();
  EXPECT_EQ(outcome.rfind("RedisError: Redis unreachable at redis://127.0.0.1:", 0), 0u) << outcome;
  // The entry the lost reply held is the consumer's pending one, read again with ID 0.
  const std::vector<shard::StreamEntry> again =
      shard::read_group_entries(redis.command({"XREADGROUP", "GROUP", "g", "c", "COUNT", "10", "STREAMS", "s", "0"}));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, first);
}

// A pop whose reply a cut connection lost is not sent again either: Redis popped the element (a
// shard's answer to a front), and a second BLPOP would wait for it in vain, until its timeout.
TEST(RedisClient, APopWhoseReplyIsCutIsNotSentAgain) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  test::FaultProxy proxy(server.port());
  Redis direct(server.url());
  Redis redis("redis://127.0.0.1:" + std::to_string(proxy.port()));
  ASSERT_EQ(redis.command({"PING"}).str, "PONG");  // a connection in use (a fresh one is never retried)
  std::string outcome;
  std::thread waiter([&] {
    try {
      const Reply r = redis.command({"BLPOP", "answer", "5"}, 5000ms);
      outcome = r.nil() ? "nil" : "answered " + (r.elements.size() == 2 ? r.elements[1].str : r.str);
    } catch (const RedisError& e) {
      outcome = std::string("RedisError: ") + e.what();
    }
  });
  // Blocked in Redis, then partitioned: the answer is popped there, its reply held.
  ASSERT_TRUE(within_5s([&] {
    return direct.command({"INFO", "clients"}).str.find("blocked_clients:1") != std::string::npos;
  }));
  proxy.partition();
  direct.command({"LPUSH", "answer", "42"});
  EXPECT_TRUE(within_5s([&] { return direct.command({"LLEN", "answer"}).integer == 0; }));
  const auto cut = std::chrono::steady_clock::now();
  proxy.heal();  // the connection cut, as TCP times out one that lived through a partition
  waiter.join();
  EXPECT_EQ(outcome.rfind("RedisError: Redis unreachable at redis://127.0.0.1:", 0), 0u) << outcome;
  EXPECT_LT(std::chrono::steady_clock::now() - cut, 2s) << "waited for an answer already taken";
}

// What a worker reads from its stream and the front from an answer, without Redis (the parsing of
// fuzz_service_inputs): numbers out of their type's range, absurd deadlines and statuses are refused
// or clamped, never converted with undefined behaviour (UBSan's float-cast-overflow, signed overflow).
TEST(ShardProtocol, OutOfRangeNumbersDeadlinesAndStatusesAreRefused) {
  using shard::json;
  const Clock::time_point now = Clock::now();
  EXPECT_GT(shard::steady_from_unix_ms(INT64_MAX), now + std::chrono::hours(24 * 365 * 30));
  EXPECT_LT(shard::steady_from_unix_ms(INT64_MIN), now - std::chrono::hours(24 * 365 * 30));
  json p = shard::params_json(texture::SearchParams{});
  p["shortlist"] = 20.0;
  EXPECT_EQ(shard::params_from(p).shortlist, 20);
  for (const json& bad : {json(1e30), json(3000000000u), json(-3000000000ll), json(2.5), json("20")}) {
    p["shortlist"] = bad;
    EXPECT_THROW(shard::params_from(p), json::type_error) << bad;
  }
  // digest_candidates, added later: absent (a front of the release before) reads as 0, an exact search.
  texture::SearchParams digest;
  digest.digest_candidates = 7;
  p = shard::params_json(digest);
  EXPECT_EQ(shard::params_from(p).digest_candidates, 7);
  p.erase("digest_candidates");
  EXPECT_EQ(shard::params_from(p).digest_candidates, 0);
  for (const json& bad : {json(-1), json(1e30), json(2.5), json("7")}) {
    p["digest_candidates"] = bad;
    EXPECT_THROW(shard::params_from(p), json::type_error) << bad;
  }
  ShardSearch part;
  part.searched = 12;
  part.digested = 288;
  json s = shard::shard_search_json(part);
  EXPECT_EQ(shard::shard_search_from(s).digested, 288u);
  s.erase("digested");
  EXPECT_EQ(shard::shard_search_from(s).digested, 0u);
  auto status_of = [](const std::string& answer) {
    try {
      shard::answer_from(answer, true);
    } catch (const ServiceError& e) {
      return e.status;
    } catch (const json::exception&) {
      return -1;  // malformed: the caller's 502
    }
    return 0;
  };
  EXPECT_EQ(status_of(R"({"status": 201, "outcome": "created"})"), 0);
  EXPECT_EQ(status_of(R"({"status": 404, "error": "no such product"})"), 404);
  EXPECT_EQ(status_of(R"({"status": 99, "error": "odd"})"), 502);
  EXPECT_EQ(status_of(R"({"status": 1e30})"), -1);
  EXPECT_EQ(status_of(R"([1])"), -1);
  json v = {{"match", shard::match_json(Match{})}, {"match_ms", 1}, {"verify_ms", 2}};
  v["match"]["homography"] = {1, 0, 0};
  EXPECT_THROW(shard::verify_answer_from(v), json::type_error);  // was std::invalid_argument, a 500

  shard::StreamEntry e;
  e.id = "1-1";
  e.fields = {{"op", "select"}, {"deadline_ms", "1"}};
  try {
    shard::parse_request(e, false);
    ADD_FAILURE() << "an unknown read op was taken";
  } catch (const ServiceError& x) {
    EXPECT_EQ(x.status, 400);
    EXPECT_EQ(x.field, "op");
  }
  e.fields = {{"op", "stats"}, {"deadline_ms", "99999999999999999999"}};
  EXPECT_THROW(shard::parse_request(e, false), std::out_of_range);
  e.fields = {{"op", "delete"}, {"params", R"({"id": 7})"}};
  EXPECT_THROW(shard::parse_request(e, true), json::type_error);
  e.fields = {{"op", "delete"}, {"params", R"({"id": "p7"})"}};
  EXPECT_EQ(shard::parse_request(e, true).id, "p7");
}

// The two phases of a sharded search on the wire: a scored part round-trips as ids and scores, a
// search read's phase and candidates are read, an unknown phase is refused naming it, and a read
// without one (a front of the release before) is the whole search.
TEST(ShardProtocol, SearchPhasesAndScoredPartsAreRead) {
  using shard::json;
  ShardSearch part;
  part.shard = 2;
  part.scored = true;
  part.searched = 40;
  part.shortlist = {Match{}, Match{}};
  part.shortlist[0].id = "p001", part.shortlist[0].score = 31;
  part.shortlist[1].id = "p017", part.shortlist[1].score = 9;
  const json j = shard::shard_search_json(part);
  EXPECT_EQ(j.at("shortlist"), json::parse(R"([{"id": "p001", "score": 31}, {"id": "p017", "score": 9}])"));
  const ShardSearch back = shard::shard_search_from(j);
  EXPECT_TRUE(back.scored);
  ASSERT_EQ(back.shortlist.size(), 2u);
  EXPECT_EQ(back.shortlist[1].id, "p017");
  EXPECT_EQ(back.shortlist[1].score, 9);
  EXPECT_EQ(back.searched, 40u);
  part.scored = false;  // verified: as every release answers, without `scored`
  EXPECT_FALSE(shard::shard_search_json(part).contains("scored"));
  EXPECT_FALSE(shard::shard_search_from(shard::shard_search_json(part)).scored);

  texture::GalleryEntry q;
  q.id = "query";
  std::mt19937 rng(5);
  q.features = test::random_gallery_entry("query", rng, 20).features;
  q.features.descriptors_fp16.clear();
  const std::vector<uint8_t> bytes = texture::Gallery::encode(q);
  auto read = [&](const json& params) {
    shard::StreamEntry e;
    e.id = "1-1";
    e.fields = {{"op", "search"},
                {"deadline_ms", "1"},
                {"entry", std::string(bytes.begin(), bytes.end())},
                {"params", params.dump()}};
    return shard::parse_request(e, false);
  };
  json p = shard::params_json(texture::SearchParams{});
  EXPECT_EQ(read(p).phase, shard::SearchPhase::kWhole);
  p["phase"] = "score";
  EXPECT_EQ(read(p).phase, shard::SearchPhase::kScore);
  p["phase"] = "verify";
  EXPECT_THROW(read(p), json::exception);  // without its candidates
  p["candidates"] = shard::scored_json(back.shortlist);
  const shard::Request r = read(p);
  EXPECT_EQ(r.phase, shard::SearchPhase::kVerify);
  ASSERT_EQ(r.candidates.size(), 2u);
  EXPECT_EQ(r.candidates[0].id, "p001");
  EXPECT_EQ(r.candidates[0].score, 31);
  p["candidates"] = json::object();
  EXPECT_THROW(read(p), json::exception);
  p["phase"] = "guess";
  try {
    read(p);
    ADD_FAILURE() << "an unknown search phase was taken";
  } catch (const ServiceError& x) {
    EXPECT_EQ(x.status, 400);
    EXPECT_EQ(x.field, "phase");
  }
}

// The two phases without Redis: three galleries scored, the global shortlist cut from their
// scores, each gallery verifying its candidates in it, merged: one gallery's answer exactly, with
// only the global shortlist verified.
TEST(ShardedSearch, TwoPhasesAnswerAsOneGalleryVerifyingTheGlobalShortlistOnly) {
  test::TempDir tmp;
  std::vector<std::unique_ptr<LocalBackend>> shards;
  for (int k = 0; k < 3; ++k) {
    LocalOptions o = local_options(tmp.path() / ("shard" + std::to_string(k)));
    o.shard = k;
    shards.push_back(std::make_unique<LocalBackend>(o));
  }
  LocalBackend one(local_options(tmp.path() / "one"));
  std::mt19937 rng(8);
  const std::vector<GalleryEntry> entries = products(45, rng);
  for (const GalleryEntry& e : entries) {
    shards[size_t(shard::shard_of(e.id, 3))]->write(e, false, Clock::time_point::max());
    one.write(e, false, Clock::time_point::max());
  }
  std::vector<texture::Features> queries;
  for (int i : {0, 13, 44}) queries.push_back(entries[size_t(i)].features);
  queries.push_back(test::random_gallery_entry("q", rng, 60).features);
  for (size_t i = 0; i < queries.size(); ++i)
    for (const int shortlist : {8, 4, 1}) {
      SCOPED_TRACE("query " + std::to_string(i) + ", shortlist " + std::to_string(shortlist));
      texture::SearchParams params;
      params.shortlist = shortlist;
      std::vector<ShardSearch> parts;
      for (auto& s : shards) parts.push_back(s->search_scores(queries[i], params));
      const std::map<int, std::vector<Match>> asked = shortlist_by_shard(parts, params);
      size_t verified = 0;
      for (ShardSearch& part : parts) {
        part.scored = false;
        if (!asked.count(part.shard)) {
          EXPECT_TRUE(part.shortlist.empty());
          continue;
        }
        part.shortlist = shards[size_t(part.shard)]->search_verify(queries[i], asked.at(part.shard), params).shortlist;
        verified += part.shortlist.size();
      }
      SearchQuery q;
      q.features = queries[i];
      q.params = params;
      q.top_k = 100;
      const SearchAnswer s = merge_search(parts, params, q.top_k, 3), l = one.search(q);
      EXPECT_LE(verified, size_t(shortlist));
      EXPECT_EQ(verified, l.candidates.size());
      EXPECT_EQ(s.identified, l.identified);
      EXPECT_EQ(s.searched, l.searched);
      EXPECT_EQ(s.gallery_size, l.gallery_size);
      ASSERT_EQ(s.candidates.size(), l.candidates.size());
      for (size_t c = 0; c < s.candidates.size(); ++c) expect_same_match(s.candidates[c], l.candidates[c]);
    }
}

TEST(ShardedBackend, ThreeShardsAnswerAsOneGallery) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  std::vector<std::unique_ptr<Worker>> workers;
  std::atomic<int> search_reads[3] = {0, 0, 0};  // the search reads each shard answered
  for (int k = 0; k < 3; ++k) {
    ShardWorkerOptions o =
        Worker::options(server.url(), k, 3, "w" + std::to_string(k), tmp.path() / ("shard" + std::to_string(k)));
    o.before_answer = [&search_reads, k](const std::string& op) { search_reads[k] += op == "search"; };
    workers.push_back(std::make_unique<Worker>(o));
  }
  ShardedBackend front(front_options(server.url(), 3));
  LocalBackend one(local_options(tmp.path() / "one"));
  EXPECT_EQ(front.shards(), 3);
  EXPECT_EQ(health_when_live(front), "");

  std::mt19937 rng(21);
  std::vector<GalleryEntry> entries = products(60, rng);
  const Clock::time_point never = Clock::time_point::max();
  for (const GalleryEntry& e : entries) {
    const WriteResult s = front.write(e, false, in(10s)), l = one.write(e, false, never);
    EXPECT_EQ(s.outcome, WriteOutcome::kCreated);
    EXPECT_EQ(s.outcome, l.outcome);
    expect_same_product(s.product, l.product);
    EXPECT_EQ(s.product.shard, shard::shard_of(e.id, 3));
  }
  // Every shard got some: the hash spreads them.
  for (auto& w : workers) EXPECT_GT(w->backend().size(), 5u);
  // Idempotent post, conflicting post, update, update of an absent id, deletes.
  EXPECT_EQ(front.write(entries[4], false, never).outcome, WriteOutcome::kUnchanged);
  GalleryEntry other = entries[5];
  other.id = entries[4].id;
  EXPECT_EQ(service_status([&] { front.write(other, false, never); }), 409);
  EXPECT_EQ(service_status([&] { one.write(other, false, never); }), 409);
  EXPECT_EQ(front.write(other, true, never).outcome, WriteOutcome::kUpdated);
  one.write(other, true, never);
  GalleryEntry absent = entries[6];
  absent.id = "nobody";
  EXPECT_EQ(service_status([&] { front.write(absent, true, never); }), 404);
  EXPECT_TRUE(front.remove(entries[7].id, never));
  EXPECT_TRUE(one.remove(entries[7].id, never));
  EXPECT_FALSE(front.remove(entries[7].id, never));
  EXPECT_FALSE(front.remove("nobody", never));
  // An entry the gallery refuses (too few features): the same GalleryError as in one process.
  GalleryEntry few = test::random_gallery_entry("few", rng, 3);
  few.features.descriptors_fp16.clear();
  std::string local_error, sharded_error;
  try {
    one.write(few, false, never);
  } catch (const texture::GalleryError& e) {
    local_error = e.what();
  }
  try {
    front.write(few, false, never);
  } catch (const texture::GalleryError& e) {
    sharded_error = e.what();
  }
  EXPECT_NE(local_error, "");
  EXPECT_EQ(sharded_error, local_error);

  for (const GalleryEntry& e : entries) {
    const std::optional<Product> s = front.get(e.id, never), l = one.get(e.id, never);
    ASSERT_EQ(bool(s), bool(l)) << e.id;
    if (s) expect_same_product(*s, *l);
  }
  EXPECT_FALSE(front.get("nobody", never));

  // Queries: a product's own features (identified), another's under a wrong claim, and noise.
  texture::SearchParams params;
  std::vector<texture::Features> queries;
  for (int i : {0, 11, 29, 40, 58}) queries.push_back(entries[size_t(i)].features);
  queries.push_back(test::random_gallery_entry("q", rng, 60).features);
  for (size_t i = 0; i < queries.size(); ++i) {
    for (const std::string& id : {entries[0].id, entries[11].id, entries[29].id}) {
      const VerifyAnswer s = front.verify(id, queries[i], params, never), l = one.verify(id, queries[i], params, never);
      expect_same_match(s.match, l.match);
      // where the sharded read's time went beyond the gallery's (latency_ms's shard parts)
      ASSERT_TRUE(s.shard_queue_ms && s.shard_transport_ms);
      EXPECT_GE(*s.shard_queue_ms, 0.0);
      EXPECT_GE(*s.shard_transport_ms, 0.0);
      EXPECT_FALSE(l.shard_queue_ms || l.shard_transport_ms);
    }
    for (const std::vector<std::string>& scope : {std::vector<std::string>{}, {"a"}, {"b", "a"}})
      for (const int shortlist : {8, 3, 1}) {
        SearchQuery q;
        q.features = queries[i];
        q.params.collections = scope;
        q.params.shortlist = shortlist;
        q.top_k = 5;
        int reads[3];
        for (int k = 0; k < 3; ++k) reads[k] = search_reads[k];
        const SearchAnswer s = front.search(q), l = one.search(q);
        SCOPED_TRACE("query " + std::to_string(i) + ", " + std::to_string(scope.size()) + " collections, shortlist " +
                     std::to_string(shortlist));
        // Two phases: every shard scores; only the shards holding some of the global shortlist (one
        // gallery's verified candidates) verify, and only those.
        SearchQuery all = q;
        all.top_k = 100;
        std::set<int> verifying;
        for (const Match& m : one.search(all).candidates) verifying.insert(shard::shard_of(m.id, 3));
        for (int k = 0; k < 3; ++k) EXPECT_EQ(search_reads[k] - reads[k], 1 + int(verifying.count(k))) << "shard " << k;
        EXPECT_EQ(s.identified, l.identified);
        EXPECT_EQ(s.searched, l.searched);
        EXPECT_EQ(s.gallery_size, l.gallery_size);
        EXPECT_EQ(s.shards, 3);
        EXPECT_EQ(s.shards_answered, 3);
        EXPECT_TRUE(s.missing_shards.empty());
        ASSERT_EQ(s.candidates.size(), l.candidates.size());
        for (size_t c = 0; c < s.candidates.size(); ++c) expect_same_match(s.candidates[c], l.candidates[c]);
        if (i < 5 && scope.empty()) {
          EXPECT_TRUE(s.identified);
          EXPECT_EQ(s.candidates.at(0).id, entries[size_t(std::vector<int>{0, 11, 29, 40, 58}[i])].id);
        }
      }
  }
  EXPECT_EQ(service_status([&] { front.verify("nobody", queries[0], params, never); }), 404);

  const ServiceStats st = front.stats(in(5s));
  EXPECT_EQ(st.shards_expected, 3);
  ASSERT_EQ(st.shards.size(), 3u);
  size_t images = 0;
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(st.shards[k].shard, int(k));
    EXPECT_EQ(st.shards[k].index.images, workers[k]->backend().size());
    images += st.shards[k].index.images;
  }
  EXPECT_EQ(images, one.size());
  for (auto& w : workers) EXPECT_EQ(w->error(), "");
}

TEST(ShardedBackend, ReplicasEachApplyEveryWrite) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  Worker a(server.url(), 0, 1, "a", tmp.path() / "a");
  Worker b(server.url(), 0, 1, "b", tmp.path() / "b");
  ShardedBackend front(front_options(server.url(), 1));
  std::mt19937 rng(7);
  const std::vector<GalleryEntry> entries = products(20, rng);
  for (const GalleryEntry& e : entries) front.write(e, false, in(10s));
  front.remove(entries[3].id, in(10s));
  // The first replica's answer acknowledged each write; the other applies it too.
  auto done = [&](Worker& w) { return w.backend().size() == 19 && !w.backend().contains(entries[3].id); };
  for (int i = 0; i < 200 && !(done(a) && done(b)); ++i) std::this_thread::sleep_for(50ms);
  for (const std::filesystem::path& dir : {tmp.path() / "a", tmp.path() / "b"}) {
    const texture::Gallery g = texture::Gallery::open(dir);
    EXPECT_EQ(g.entries().size(), 19u) << dir;
    EXPECT_EQ(g.find(entries[3].id), nullptr) << dir;
  }
  SearchQuery q;
  q.features = entries[9].features;
  const SearchAnswer s = front.search(q);
  EXPECT_TRUE(s.identified);
  EXPECT_EQ(s.candidates.at(0).id, entries[9].id);
  EXPECT_EQ(s.gallery_size, 19u);
  EXPECT_EQ(front.live_workers(), (std::map<int, std::vector<std::string>>{{0, {"a", "b"}}}));
  const ServiceStats st = front.stats(in(5s));
  ASSERT_EQ(st.shards.size(), 1u);
  EXPECT_TRUE(st.shards[0].worker.rfind("a ", 0) == 0 || st.shards[0].worker.rfind("b ", 0) == 0)
      << st.shards[0].worker;
}

// Two workers of one replica name were two consumers of one group and split the writes
// between their galleries (10 and 10 of 20). The second is refused naming the first, after waiting
// out the first's lease once; the first applies every write meanwhile.
TEST(ShardedBackend, ASecondWorkerOfOneReplicaNameIsRefused) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  Worker first(server.url(), 0, 1, "same", tmp.path() / "a");
  ShardedBackend front(front_options(server.url(), 1));
  ASSERT_EQ(health_when_live(front), "");
  std::mt19937 rng(8);
  const std::vector<GalleryEntry> entries = products(20, rng);
  ShardWorker twin(Worker::options(server.url(), 0, 1, "same", tmp.path() / "b"));
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (const GalleryEntry& e : entries) {
      front.write(e, false, in(10s));
      std::this_thread::sleep_for(100ms);
    }
  });
  try {
    twin.run(stop);
    ADD_FAILURE() << "a second worker named 'same' served";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("replica name 'same' of shard 0 is held by the worker "), std::string::npos)
        << e.what();
  }
  writer.join();
  EXPECT_EQ(first.backend().size(), entries.size());
  EXPECT_EQ(twin.backend().size(), 0u);
  for (const GalleryEntry& e : entries) EXPECT_TRUE(front.get(e.id, in(5s))) << e.id;
  EXPECT_EQ(first.error(), "");
}

// The entries of the gallery in `dir` (by id) as Gallery::encode bytes: equal when every field is.
std::vector<std::string> encoded_entries(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  const texture::Gallery g = texture::Gallery::open(dir);
  for (const texture::GalleryEntry& e : g.entries()) {
    const std::vector<uint8_t> bytes = texture::Gallery::encode(e);
    out.push_back(std::string(bytes.begin(), bytes.end()));
  }
  return out;
}

TEST(ShardedBackend, WritesDeliveredAgainAfterRedisLostSomeAreNotAppliedTwice) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  std::mt19937 rng(11);
  const std::vector<GalleryEntry> entries = products(8, rng);
  std::vector<std::string> before;
  {
    Worker worker(server.url(), 0, 1, "w", tmp.path() / "shard0");
    ShardedBackend front(front_options(server.url(), 1));
    for (const GalleryEntry& e : entries) front.write(e, false, in(10s));
    GalleryEntry changed = entries[2];
    changed.features = entries[5].features;
    front.write(changed, true, in(10s));
    EXPECT_TRUE(front.remove(entries[4].id, in(10s)));
    EXPECT_FALSE(front.remove(entries[4].id, in(10s)));
  }
  auto files = [&] { return encoded_entries(tmp.path() / "shard0"); };
  before = files();
  ASSERT_EQ(before.size(), 7u);
  // As after a Redis that lost its last writes (an AOF fsync'ed every second): the two deletes are
  // gone from the stream and the group is back at its start, so the whole rest is delivered again.
  Redis redis(server.url());
  const std::vector<shard::StreamEntry> stream =
      shard::stream_entries(redis.command({"XRANGE", shard::writes_key(0), "-", "+"}));
  ASSERT_EQ(stream.size(), 11u);  // 8 posts, 1 put, 2 deletes
  for (size_t i = 9; i < 11; ++i) {
    ASSERT_EQ(stream[i].field("op"), "delete");
    redis.command({"XDEL", shard::writes_key(0), stream[i].id});
  }
  EXPECT_EQ(redis.command({"XGROUP", "SETID", shard::writes_key(0), shard::replica_group("w"), "0"}).str, "OK");
  {
    Worker worker(server.url(), 0, 1, "w", tmp.path() / "shard0");
    ShardedBackend front(front_options(server.url(), 1));
    // A read waits until the writer has gone through the whole stream again (read-your-writes).
    // Every entry is at or below the ID the gallery recorded as applied: none is applied again,
    // so p004 stays deleted although its post came again and its delete did not.
    EXPECT_FALSE(front.get(entries[4].id, in(10s)));
    EXPECT_TRUE(front.get(entries[2].id, in(10s)));
    EXPECT_EQ(worker.backend().shard_stats().writes_applied, 0);
    // New writes are applied as usual.
    GalleryEntry fresh = test::random_gallery_entry("fresh", rng, 40);
    fresh.features.descriptors_fp16.clear();
    EXPECT_EQ(front.write(fresh, false, in(10s)).outcome, WriteOutcome::kCreated);
    EXPECT_EQ(worker.backend().shard_stats().writes_applied, 1);
    EXPECT_TRUE(front.remove("fresh", in(10s)));
  }
  EXPECT_EQ(files(), before);
}

// A worker partitioned from Redis while its writer waits in XREADGROUP ... BLOCK: a delete is
// delivered to it in Redis, the reply held and then lost when the partition heals (the connection
// cut), and an enrolment of the same product comes after it. The writer applies the delete first
// (its pending entries read again), then the enrolment: reads see the new product, not the old one
// (docs/SERVICE.md, "The contract under faults": a replica that went on with ">" refused the
// enrolment, the product still there, and answered the deleted version).
TEST(ShardedBackend, AWriteDeliveredToAPartitionedWorkerIsAppliedInOrder) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  test::FaultProxy proxy(server.port());
  Worker worker("redis://127.0.0.1:" + std::to_string(proxy.port()), 0, 1, "a", tmp.path() / "shard0");
  ShardedBackend front(front_options(server.url(), 1));
  ASSERT_EQ(health_when_live(front), "");
  Redis direct(server.url());
  std::mt19937 rng(46);
  std::vector<GalleryEntry> versions = products(12, rng);
  for (GalleryEntry& v : versions) v.id = "f1";
  int delivered = 0;
  for (size_t round = 0; round + 1 < versions.size() && delivered < 2; round += 2) {
    const GalleryEntry &old_version = versions[round], &new_version = versions[round + 1];
    ASSERT_EQ(front.write(old_version, /*put=*/round > 0, in(10s)).product.enrolled_unix, old_version.enrolled_unix);
    // The writer idle in XREADGROUP ... BLOCK 500 (its pending list empty), then cut off.
    std::this_thread::sleep_for(100ms);
    ASSERT_EQ(pending_count(direct, shard::writes_key(0), shard::replica_group("a")), 0);
    proxy.partition();
    // Neither is answered (the worker cannot), both are in the stream.
    EXPECT_THROW(front.remove("f1", in(300ms)), ServiceError);
    // Delivered to the writer's XREADGROUP in Redis (else its BLOCK had just ended: once more).
    const bool held = pending_count(direct, shard::writes_key(0), shard::replica_group("a")) == 1;
    EXPECT_THROW(front.write(new_version, /*put=*/false, in(300ms)), ServiceError);
    proxy.heal();
    delivered += held;
    const std::optional<Product> p = front.get("f1", in(10s));
    ASSERT_TRUE(p) << "round " << round / 2;
    EXPECT_EQ(p->enrolled_unix, new_version.enrolled_unix)
        << "round " << round / 2 << ": the old version read"
        << (held ? " (the delete was delivered during the partition, its reply lost)" : "");
  }
  EXPECT_GE(delivered, 1) << "no delete was delivered during a partition: the case was not run";
  EXPECT_EQ(worker.error(), "");
}

// The rule of which side wins (service/replica_repair.h): the higher position's state, absent and
// differing entries alike; at equal positions entries are kept and the greater hash is taken.
TEST(ReplicaRepair, PlansFollowTheHigherPositionAndKeepEntriesOnATie) {
  const repair::Entries mine = {{"a", 1}, {"b", 2}, {"c", 3}}, theirs = {{"b", 5}, {"c", 3}, {"d", 4}};
  std::vector<int> buckets;
  for (const std::string id : {"a", "b", "c", "d"}) buckets.push_back(repair::bucket_of(id));
  const shard::StreamId low{100, 0}, high{200, 0};
  const repair::Plan behind = repair::plan(mine, low, theirs, high, buckets);
  EXPECT_EQ(behind.copy, (std::vector<std::string>{"b", "d"}));
  EXPECT_EQ(behind.remove, (std::vector<std::string>{"a"}));
  EXPECT_EQ(behind.divergent, 3);
  const repair::Plan ahead = repair::plan(mine, high, theirs, low, buckets);
  EXPECT_TRUE(ahead.copy.empty());
  EXPECT_TRUE(ahead.remove.empty());
  EXPECT_EQ(ahead.divergent, 3);
  const repair::Plan tie = repair::plan(mine, low, theirs, low, buckets);
  EXPECT_EQ(tie.copy, (std::vector<std::string>{"b", "d"}));  // b: 5 > 2; d kept
  EXPECT_TRUE(tie.remove.empty());
  const repair::Plan other_side = repair::plan(theirs, low, mine, low, buckets);
  EXPECT_EQ(other_side.copy, (std::vector<std::string>{"a"}));  // b stays 5 there
  // Buckets that agree are not looked at; the bucket hashes tell equal galleries apart cheaply.
  EXPECT_TRUE(repair::plan(mine, low, theirs, high, {}).copy.empty());
  EXPECT_EQ(repair::bucket_hashes(mine), repair::bucket_hashes(repair::Entries(mine)));
  EXPECT_NE(repair::bucket_hashes(mine), repair::bucket_hashes(theirs));
  const int b = repair::bucket_of("b");
  EXPECT_EQ(repair::parse_bucket_text(repair::bucket_text(theirs, b)).at("b"), 5u);
}

// Replica repair (issue 46, part 3): a replica that was stopped while its sibling took enrolments,
// updates and deletes whose stream entries Redis then lost (as a failover can), and a brand-new
// empty replica, both converge on the sibling's entries through the digests alone (the stream has
// nothing left to give them); reads go on meanwhile and never see the stale or partial state.
TEST(ShardedBackend, ReplicasRepairEachOtherAndANewOneJoinsFromEmpty) {
  PRISM_NEED_REDIS();
  const auto started = Clock::now();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  auto options = [&](const std::string& name) {
    ShardWorkerOptions o = Worker::options(server.url(), 0, 1, name, tmp.path() / name);
    o.repair_every_s = 1;
    return o;
  };
  // The galleries' entries as stored (empty while one cannot be read: a write in progress).
  auto stored = [&](const std::string& name) {
    try {
      return encoded_entries(tmp.path() / name);
    } catch (const std::exception&) {
      return std::vector<std::string>{};
    }
  };
  auto converge = [&](const std::vector<std::string>& names, size_t size, std::chrono::seconds limit) {
    const auto until = Clock::now() + limit;
    for (; Clock::now() < until; std::this_thread::sleep_for(100ms)) {
      const std::vector<std::string> first = stored(names[0]);
      bool same = first.size() == size;
      for (size_t i = 1; same && i < names.size(); ++i) same = stored(names[i]) == first;
      if (same) return true;
    }
    return false;
  };
  std::mt19937 rng(46);
  const std::vector<GalleryEntry> entries = products(16, rng);
  auto a = std::make_unique<Worker>(options("a"));
  auto b = std::make_unique<Worker>(options("b"));
  ShardedBackend front(front_options(server.url(), 1));
  ASSERT_EQ(health_when_live(front), "");
  for (int i = 0; i < 10; ++i) front.write(entries[size_t(i)], false, in(10s));
  ASSERT_TRUE(converge({"a", "b"}, 10, 10s));
  b.reset();  // stopped
  for (int i = 10; i < 16; ++i) front.write(entries[size_t(i)], false, in(10s));
  GalleryEntry updated = entries[1];
  updated.features = entries[12].features;
  EXPECT_EQ(front.write(updated, true, in(10s)).outcome, WriteOutcome::kUpdated);
  GalleryEntry recollected = entries[4];
  recollected.collection = "moved";
  EXPECT_EQ(front.write(recollected, true, in(10s)).outcome, WriteOutcome::kUpdated);
  EXPECT_TRUE(front.remove(entries[5].id, in(10s)));
  EXPECT_TRUE(front.remove(entries[7].id, in(10s)));
  // As after a failover that lost those writes' stream entries: b will never be given them.
  Redis redis(server.url());
  EXPECT_EQ(redis.command({"XTRIM", shard::writes_key(0), "MAXLEN", "0"}).integer, 10 + 6 + 4);
  // Reads while b comes back and c joins: a product unchanged, the updated one (its new features),
  // a deleted one (absent), each read is right whichever replica answers it.
  std::atomic<bool> reading{true};
  std::atomic<int> reads{0};
  std::mutex wrong_mutex;
  std::vector<std::string> wrong;
  std::thread reader([&] {
    while (reading) {
      try {
        const std::optional<Product> same = front.get(entries[3].id, in(5s));
        const std::optional<Product> changed = front.get(entries[1].id, in(5s));
        const std::optional<Product> gone = front.get(entries[5].id, in(5s));
        std::string why = !same ? "p003 missing" : !changed ? "p001 missing" : gone ? "p005 back" : "";
        if (why.empty() && changed->features != updated.features.count()) why = "p001 stale";
        if (!why.empty()) {
          std::lock_guard lock(wrong_mutex);
          if (wrong.empty()) std::cerr << "wrong read: " << why << "\n";
          wrong.push_back(why);
        }
        reads += 3;
      } catch (const std::exception& e) {
        std::lock_guard lock(wrong_mutex);
        wrong.push_back(e.what());
      }
    }
  });
  const auto restarted = Clock::now();
  b = std::make_unique<Worker>(options("b"));
  auto c = std::make_unique<Worker>(options("c"));
  const bool converged = converge({"a", "b", "c"}, 14, 30s);
  const double took = std::chrono::duration<double>(Clock::now() - restarted).count();
  reading = false;
  reader.join();
  ASSERT_TRUE(converged) << "a " << stored("a").size() << ", b " << stored("b").size() << ", c " << stored("c").size();
  std::cerr << "replicas b and c converged on a in " << took << " s, " << reads << " reads meanwhile\n";
  EXPECT_GT(reads, 0);
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " wrong reads, first: " << wrong.front();
  for (const std::string name : {"a", "b", "c"}) {
    const texture::Gallery g = texture::Gallery::open(tmp.path() / name);
    EXPECT_EQ(g.find(entries[5].id), nullptr) << name;
    EXPECT_EQ(g.find(entries[7].id), nullptr) << name;
    ASSERT_NE(g.find(entries[1].id), nullptr) << name;
    EXPECT_EQ(g.find(entries[1].id)->features.keypoints.size(), updated.features.keypoints.size()) << name;
    ASSERT_NE(g.find(entries[4].id), nullptr) << name;
    EXPECT_EQ(g.find(entries[4].id)->collection, "moved") << name;
    EXPECT_NE(g.find(entries[15].id), nullptr) << name;
  }
  // /v1/stats' figures: b and c copied (and b dropped) what differed; after the next comparison
  // none differs.
  std::map<std::string, ReplicaStats> seen;
  for (int i = 0; i < 50; ++i, std::this_thread::sleep_for(100ms)) {
    seen.clear();
    const ServiceStats stats = front.stats(in(5s));
    for (const ReplicaStats& r : stats.shards.at(0).replicas) seen[r.replica] = r;
    if (seen.size() == 3 && seen["a"].divergent == 0 && seen["b"].divergent == 0 && seen["c"].divergent == 0) break;
  }
  ASSERT_EQ(seen.size(), 3u);
  for (const auto& [name, r] : seen) EXPECT_EQ(r.divergent, 0) << name;
  EXPECT_EQ(seen["a"].repaired, 0);
  // b: 6 enrolments and 2 updates copied, 2 deletes applied; c: 14 copied. More where a round
  // compared with a digest a moment behind its replica's writes and the next one corrected it.
  EXPECT_GE(seen["b"].repaired, 6 + 2 + 2);
  EXPECT_GE(seen["c"].repaired, 14);
  // The new replica now holds a's position: the stream's next write is applied everywhere as usual.
  GalleryEntry fresh = test::random_gallery_entry("fresh", rng, 40);
  fresh.features.descriptors_fp16.clear();
  fresh.enrolled_unix = 1700000100;
  EXPECT_EQ(front.write(fresh, false, in(10s)).outcome, WriteOutcome::kCreated);
  EXPECT_TRUE(converge({"a", "b", "c"}, 15, 10s));
  EXPECT_LT(Clock::now() - started, 60s);
}

// Ids of shard `k` of `shards`.
std::vector<std::string> ids_of_shard(int k, int shards, int n) {
  std::vector<std::string> ids;
  for (int i = 0; int(ids.size()) < n; ++i)
    if (shard::shard_of("k" + std::to_string(i), shards) == k) ids.push_back("k" + std::to_string(i));
  return ids;
}

// The command line of a `prism texture shard` worker on the CPU, for a test to kill.
std::vector<std::string> shard_argv(const std::string& url, int shard, int shards, const std::string& replica,
                                    const std::filesystem::path& gallery) {
  return {PRISM_EXE,
          "texture",
          "shard",
          "--redis",
          url,
          "--shard",
          std::to_string(shard),
          "--shards",
          std::to_string(shards),
          "--gallery",
          gallery.string(),
          "--replica",
          replica,
          "--device",
          "cpu",
          "--host-memory",
          "20M"};
}

TEST(ShardedBackend, AWorkerKilledMidStreamLosesNoAcknowledgedWrite) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  const std::vector<std::string> argv = shard_argv(server.url(), 0, 2, "w0", tmp.path() / "shard0");
  auto child = std::make_unique<test::ChildProcess>(argv, tmp.file("w0.log"));
  Worker w1(server.url(), 1, 2, "w1", tmp.path() / "shard1");
  ShardedBackend front(front_options(server.url(), 2));
  std::mt19937 rng(3);
  const std::vector<std::string> ids = ids_of_shard(0, 2, 400);
  std::vector<std::string> acknowledged;
  std::atomic<bool> stop{false};
  std::atomic<int> acks{0}, failures{0};
  std::thread writer([&] {
    for (size_t i = 0; i < ids.size() && !stop; ++i) {
      GalleryEntry e = test::random_gallery_entry(ids[i], rng, 20);
      e.features.descriptors_fp16.clear();
      try {
        front.write(e, false, in(1500ms));
        acknowledged.push_back(e.id);
        ++acks;
      } catch (const ServiceError& x) {
        EXPECT_EQ(x.status, 503) << x.what();
        ++failures;
      }
    }
  });
  auto wait_for = [&](const std::function<bool()>& done) {
    for (int i = 0; i < 600 && !done(); ++i) std::this_thread::sleep_for(50ms);
    return done();
  };
  EXPECT_TRUE(wait_for([&] { return acks >= 10; })) << tmp.file("w0.log");
  child->signal(SIGKILL);
  EXPECT_EQ(child->wait(10), 128 + SIGKILL);
  // Shard 0 has no worker: searches fail naming it, or say what share they searched.
  SearchQuery q;
  q.features = test::random_gallery_entry("q", rng, 40).features;
  q.deadline = in(1s);
  std::string message;
  EXPECT_EQ(service_status([&] { front.search(q); }, &message), 503);
  EXPECT_NE(message.find("shard 0 did not answer"), std::string::npos) << message;
  q.allow_partial = true;
  q.deadline = in(1s);
  const SearchAnswer partial = front.search(q);
  EXPECT_EQ(partial.shards, 2);
  EXPECT_EQ(partial.shards_answered, 1);
  EXPECT_EQ(partial.missing_shards, std::vector<int>{0});
  EXPECT_TRUE(wait_for([&] { return failures >= 1; }));
  const int before = acks;
  child = std::make_unique<test::ChildProcess>(argv, tmp.file("w0.log"));
  EXPECT_TRUE(wait_for([&] { return acks >= before + 10; })) << tmp.file("w0.log");
  stop = true;
  writer.join();
  child->signal(SIGTERM);
  EXPECT_EQ(child->wait(10), 0);
  const texture::Gallery g = texture::Gallery::open(tmp.path() / "shard0");
  for (const std::string& id : acknowledged) EXPECT_NE(g.find(id), nullptr) << id << " was acknowledged but lost";
  std::cerr << acknowledged.size() << " writes acknowledged, " << failures << " refused (503), " << g.entries().size()
            << " products in shard 0\n";
}

// A shard worker without a replica killed during a search load (several clients, no
// allow_partial). Until it is back, every search fails with 503 naming the shard, by its deadline
// (bounded here generously: a hang check, not a timing), and no answer claims a coverage it lacks;
// a search in flight at the kill either answered whole before it or fails the same way. After the
// restart, searches are whole again and every acknowledged product is found. (Writes during a kill:
// AWorkerKilledMidStreamLosesNoAcknowledgedWrite; with a replica:
// AReplicaKilledMidStreamLeavesSearchesWholeAndCatchesUp.)
TEST(ShardedBackend, AWorkerKilledDuringASearchLoadFailsSearchesClearlyUntilItReturns) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  const std::vector<std::string> argv = shard_argv(server.url(), 0, 2, "w0", tmp.path() / "shard0");
  auto child = std::make_unique<test::ChildProcess>(argv, tmp.file("w0.log"));
  Worker w1(server.url(), 1, 2, "w1", tmp.path() / "shard1");
  ShardedBackend front(front_options(server.url(), 2));
  auto wait_for = [&](const std::function<bool()>& done) {
    for (int i = 0; i < 600 && !done(); ++i) std::this_thread::sleep_for(50ms);
    return done();
  };
  const std::map<int, std::vector<std::string>> all_live = {{0, {"w0"}}, {1, {"w1"}}};
  ASSERT_TRUE(wait_for([&] { return front.live_workers() == all_live; })) << tmp.file("w0.log");
  std::mt19937 rng(24);
  std::vector<GalleryEntry> enrolled;
  for (int i = 0; i < 30; ++i) {
    GalleryEntry e = test::random_gallery_entry("s" + std::to_string(i), rng, 40);
    e.features.descriptors_fp16.clear();
    ASSERT_EQ(front.write(e, false, in(10s)).outcome, WriteOutcome::kCreated) << e.id;
    enrolled.push_back(std::move(e));
  }
  const size_t on_shard0 = size_t(std::count_if(enrolled.begin(), enrolled.end(),
                                                [](const GalleryEntry& e) { return shard::shard_of(e.id, 2) == 0; }));
  ASSERT_GT(on_shard0, 3u);

  // 0: worker up, 1: being killed, 2: dead, 3: restarting, 4: answered again since the restart.
  const auto deadline = 1500ms;
  std::atomic<int> phase{0};
  std::atomic<int> whole[5] = {0, 0, 0, 0, 0}, failed[5] = {0, 0, 0, 0, 0}, whole_while_dead{0}, failed_while_up{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c)
    clients.emplace_back([&, c] {
      for (size_t i = size_t(c); !stop && !::testing::Test::HasFailure(); i += 4) {
        const GalleryEntry& e = enrolled[i % enrolled.size()];
        const int started = phase;
        SearchQuery q;
        q.features = e.features;
        q.top_k = 3;
        q.deadline = in(deadline);
        const auto t0 = Clock::now();
        SCOPED_TRACE("search for " + e.id + " begun in phase " + std::to_string(started));
        try {
          const SearchAnswer s = front.search(q);
          EXPECT_EQ(s.shards, 2);
          EXPECT_EQ(s.shards_answered, 2);
          EXPECT_TRUE(s.missing_shards.empty());
          EXPECT_EQ(s.gallery_size, enrolled.size());
          EXPECT_TRUE(s.identified);
          EXPECT_EQ(s.candidates.empty() ? "" : s.candidates[0].id, e.id);
          const int ended = phase;
          if (started == 3 && ended == 3) phase = 4;
          if (started == 2 && ended == 2) ++whole_while_dead;  // a search that never met a live shard 0
          ++whole[started];
        } catch (const ServiceError& x) {
          EXPECT_EQ(x.status, 503) << x.what();
          EXPECT_NE(std::string(x.what()).find("shard 0 did not answer"), std::string::npos) << x.what();
          EXPECT_LT(Clock::now() - t0, deadline + 3s) << "a failing search must end by its deadline";
          if (started == 0 && phase == 0) ++failed_while_up;  // not one in flight at the kill
          ++failed[started];
        }
      }
    });
  EXPECT_TRUE(wait_for([&] { return whole[0] >= 8; }));
  phase = 1;
  child->signal(SIGKILL);
  EXPECT_EQ(child->wait(10), 128 + SIGKILL);
  phase = 2;
  EXPECT_TRUE(wait_for([&] { return failed[2] >= 8; })) << "searches while shard 0 is dead";
  phase = 3;
  child = std::make_unique<test::ChildProcess>(argv, tmp.file("w0.log"));
  EXPECT_TRUE(wait_for([&] { return whole[4] >= 8; })) << tmp.file("w0.log");
  stop = true;
  for (std::thread& t : clients) t.join();

  // (A search begun while it was dead may be answered whole by the restarted worker in time.)
  EXPECT_EQ(whole_while_dead, 0) << "a search begun and ended while shard 0 was dead claimed to be whole";
  EXPECT_EQ(failed_while_up, 0);
  EXPECT_EQ(failed[4], 0) << "searches failed after the restarted worker answered again";
  // Every acknowledged product, on the restarted worker's shard too, is there.
  for (const GalleryEntry& e : enrolled) EXPECT_TRUE(front.get(e.id, in(5s))) << e.id << " was acknowledged but lost";
  child->signal(SIGTERM);
  EXPECT_EQ(child->wait(10), 0) << tmp.file("w0.log");
  EXPECT_EQ(w1.error(), "");
  std::cerr << "whole searches: " << whole[0] + whole[1] << " begun before the kill, " << whole[2]
            << " begun while it was dead (answered after the restart), " << whole[3] << " + " << whole[4]
            << " after the restart; failed (503 naming shard 0): " << failed[0] + failed[1]
            << " in flight at the kill, " << failed[2] << " while dead, " << failed[3] << " while restarting\n";
}

// What XINFO GROUPS says of the consumer group `group` of `stream`.
struct GroupState {
  std::string last_delivered;  // the last entry delivered to the group
  int64_t entries_read = 0;    // entries delivered to it
  int64_t pending = 0;         // of those, the ones not acknowledged (XACK) yet
};

GroupState group_state(Redis& redis, const std::string& stream, const std::string& group) {
  GroupState s;
  const Reply r = redis.command({"XINFO", "GROUPS", stream});
  for (const Reply& g : r.elements) {
    std::map<std::string, const Reply*> fields;
    for (size_t i = 0; i + 1 < g.elements.size(); i += 2) fields[g.elements[i].str] = &g.elements[i + 1];
    if (!fields.count("name") || fields["name"]->str != group) continue;
    if (fields.count("last-delivered-id")) s.last_delivered = fields["last-delivered-id"]->str;
    if (fields.count("entries-read")) s.entries_read = fields["entries-read"]->integer;
    if (fields.count("pending")) s.pending = fields["pending"]->integer;
  }
  return s;
}

// The issue's "with a replica, searches keep full coverage meanwhile": shard 0 has two replicas (a
// and b, child processes), shard 1 one worker; a writer enrols products while a is killed with
// SIGKILL and later restarted, and a searcher searches all along without allow_partial.
TEST(ShardedBackend, AReplicaKilledMidStreamLeavesSearchesWholeAndCatchesUp) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  const std::vector<std::string> argv_a = shard_argv(server.url(), 0, 2, "a", tmp.path() / "a");
  auto a = std::make_unique<test::ChildProcess>(argv_a, tmp.file("a.log"));
  test::ChildProcess b(shard_argv(server.url(), 0, 2, "b", tmp.path() / "b"), tmp.file("b.log"));
  Worker w1(server.url(), 1, 2, "w1", tmp.path() / "shard1");
  ShardedBackend front(front_options(server.url(), 2));
  Redis redis(server.url());
  const std::string writes = shard::writes_key(0);
  auto wait_for = [&](const std::function<bool()>& done) {
    for (int i = 0; i < 600 && !done(); ++i) std::this_thread::sleep_for(50ms);
    return done();
  };
  const std::map<int, std::vector<std::string>> all_live = {{0, {"a", "b"}}, {1, {"w1"}}};
  ASSERT_TRUE(wait_for([&] { return front.live_workers() == all_live; }))
      << "logs: " << tmp.file("a.log") << ", " << tmp.file("b.log");

  // What the writer got acknowledged, in order; and which search found what when.
  std::mutex mutex;
  std::vector<GalleryEntry> acknowledged;
  std::atomic<int> acks{0}, acks0{0}, failures{0};
  // 0: both replicas up, 1: a being killed, 2: a dead, 3: a restarted.
  std::atomic<int> phase{0};
  std::atomic<int> searches[4] = {0, 0, 0, 0};
  std::atomic<bool> stop_writing{false}, stop_searching{false}, writer_done{false}, searcher_done{false};
  std::thread writer([&] {
    std::mt19937 rng(17);
    // At most 160 products per shard (the index holds 200); paced, so that searches go on
    // between writes and the phases below are reached well before that.
    for (int i = 0; !stop_writing && acks0 < 160 && acks - acks0 < 160; ++i) {
      std::this_thread::sleep_for(20ms);
      GalleryEntry e = test::random_gallery_entry("k" + std::to_string(i), rng, 40);
      e.features.descriptors_fp16.clear();
      try {
        const WriteResult w = front.write(e, false, in(10s));
        EXPECT_EQ(w.outcome, WriteOutcome::kCreated) << e.id;
        std::lock_guard lock(mutex);
        acknowledged.push_back(e);
        ++acks;
        if (shard::shard_of(e.id, 2) == 0) ++acks0;
      } catch (const ServiceError& x) {
        ADD_FAILURE() << "writing " << e.id << " in phase " << phase << ": " << x.what();
        ++failures;
        break;
      }
    }
    writer_done = true;
  });
  std::thread searcher([&] {
    while (!stop_searching) {
      // Read-your-writes: the newest product of shard 0 acknowledged before the search begins is
      // found, and so is every other (the gallery size counts them).
      size_t before = 0;
      std::optional<GalleryEntry> newest;
      {
        std::lock_guard lock(mutex);
        before = acknowledged.size();
        for (auto e = acknowledged.rbegin(); e != acknowledged.rend() && !newest; ++e)
          if (shard::shard_of(e->id, 2) == 0) newest = *e;
      }
      if (!newest) {
        std::this_thread::sleep_for(10ms);
        continue;
      }
      const int started = phase;
      SearchQuery q;
      q.features = newest->features;
      q.top_k = 3;
      q.deadline = in(4s);
      try {
        const SearchAnswer s = front.search(q);
        const size_t after = size_t(acks.load());
        SCOPED_TRACE("search for " + newest->id + " begun in phase " + std::to_string(started));
        EXPECT_EQ(s.shards, 2);
        EXPECT_EQ(s.shards_answered, 2);
        EXPECT_TRUE(s.missing_shards.empty());
        EXPECT_GE(s.gallery_size, before);
        EXPECT_LE(s.gallery_size, after + 1);  // the write in flight may be applied already
        EXPECT_TRUE(s.identified);
        EXPECT_EQ(s.candidates.empty() ? "" : s.candidates[0].id, newest->id);
        ++searches[started];
      } catch (const ServiceError& x) {
        ADD_FAILURE() << "search for " << newest->id << " begun in phase " << started << ": " << x.what();
      }
      if (::testing::Test::HasFailure()) break;
    }
    searcher_done = true;
  });

  // a has applied some writes (acknowledged them) before it is killed mid-stream.
  EXPECT_TRUE(wait_for([&] {
    const GroupState g = group_state(redis, writes, shard::replica_group("a"));
    return (g.entries_read - g.pending >= 10 && searches[0] >= 3) || writer_done || searcher_done;
  }));
  phase = 1;
  a->signal(SIGKILL);
  EXPECT_EQ(a->wait(10), 128 + SIGKILL);
  phase = 2;
  const size_t at_kill = texture::Gallery::open(tmp.path() / "a").entries().size();
  EXPECT_GE(at_kill, 10u);
  // While a is dead, b applies and answers every write of shard 0 and every read.
  const int acks0_at_kill = acks0;
  EXPECT_TRUE(
      wait_for([&] { return (acks0 >= acks0_at_kill + 20 && searches[2] >= 5) || writer_done || searcher_done; }));
  EXPECT_FALSE(writer_done) << "the writer ended before a was restarted";
  phase = 3;
  a = std::make_unique<test::ChildProcess>(argv_a, tmp.file("a.log"));
  const int acks0_at_restart = acks0;
  EXPECT_TRUE(wait_for([&] {
    return (front.live_workers() == all_live && acks0 >= acks0_at_restart + 20 && searches[3] >= 5) || writer_done ||
           searcher_done;
  })) << tmp.file("a.log");
  EXPECT_FALSE(writer_done) << "the writer ended before a caught up";
  stop_writing = true;
  writer.join();
  stop_searching = true;
  searcher.join();

  // a catches up: every write of the stream delivered to its group and acknowledged (applied).
  const std::string last = shard::stream_entries(redis.command({"XREVRANGE", writes, "+", "-", "COUNT", "1"})).at(0).id;
  for (const std::string replica : {"a", "b"}) {
    EXPECT_TRUE(wait_for([&] {
      const GroupState g = group_state(redis, writes, shard::replica_group(replica));
      return g.last_delivered == last && g.pending == 0;
    })) << replica;
  }
  a->signal(SIGTERM);
  b.signal(SIGTERM);
  EXPECT_EQ(a->wait(10), 0) << tmp.file("a.log");
  EXPECT_EQ(b.wait(10), 0) << tmp.file("b.log");

  // Both replicas hold exactly the acknowledged products of shard 0, with equal fields; shard 1
  // holds the others.
  std::vector<std::string> expected0;
  for (const GalleryEntry& e : acknowledged) {
    if (shard::shard_of(e.id, 2) == 0)
      expected0.push_back(e.id);
    else
      EXPECT_TRUE(w1.backend().contains(e.id)) << e.id;
  }
  std::sort(expected0.begin(), expected0.end());
  for (const std::string replica : {"a", "b"}) {
    std::vector<std::string> ids;
    const texture::Gallery g = texture::Gallery::open(tmp.path() / replica);
    for (const GalleryEntry& e : g.entries()) ids.push_back(e.id);
    EXPECT_EQ(ids, expected0) << "replica " << replica;
  }
  const std::vector<std::string> entries_a = encoded_entries(tmp.path() / "a"),
                                 entries_b = encoded_entries(tmp.path() / "b");
  EXPECT_TRUE(entries_a == entries_b) << "the replicas' entries differ";
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(w1.error(), "");
  std::cerr << acknowledged.size() << " writes acknowledged (" << expected0.size() << " in shard 0; replica a held "
            << at_kill << " when killed); searches with both replicas " << searches[0] << ", while a was dead "
            << searches[2] << ", after its restart " << searches[3] << "\n";
}

TEST(ShardedBackend, RedisRestartedDuringWritesIsRecoveredFrom) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  Worker worker(server.url(), 0, 1, "w", tmp.path() / "shard0");
  ShardedBackend front(front_options(server.url(), 1));
  std::mt19937 rng(5);
  std::vector<std::string> acknowledged;
  std::atomic<bool> stop{false};
  std::atomic<int> acks{0}, failures{0};
  std::thread writer([&] {
    for (int i = 0; i < 1000 && !stop; ++i) {
      GalleryEntry e = test::random_gallery_entry("r" + std::to_string(i), rng, 20);
      e.features.descriptors_fp16.clear();
      try {
        front.write(e, false, in(1500ms));
        acknowledged.push_back(e.id);
        ++acks;
      } catch (const ServiceError& x) {
        EXPECT_EQ(x.status, 503) << x.what();
        ++failures;
        std::this_thread::sleep_for(20ms);
      }
    }
  });
  auto wait_for = [&](const std::function<bool()>& done) {
    for (int i = 0; i < 600 && !done(); ++i) std::this_thread::sleep_for(50ms);
    return done();
  };
  EXPECT_TRUE(wait_for([&] { return acks >= 10; }));
  server.stop();
  EXPECT_TRUE(wait_for([&] { return failures >= 1; }));
  EXPECT_NE(front.health(), "");
  server.start();
  const int before = acks;
  EXPECT_TRUE(wait_for([&] { return acks >= before + 10; }));
  stop = true;
  writer.join();
  EXPECT_EQ(health_when_live(front), "");
  for (const std::string& id : acknowledged) {
    EXPECT_TRUE(worker.backend().contains(id)) << id;
    EXPECT_TRUE(front.get(id, in(5s))) << id;
  }
  EXPECT_EQ(worker.error(), "");
}

// `--device cuda:N` places the worker on GPU N's NUMA node before its index allocates (pinned
// host memory lands where its threads run) and says so in one line at start; without a GPU the
// line gives the reason there is no placement and the worker then refuses to run on no GPU.
TEST(ShardCli, OneGpuWorkerLogsItsNumaPlacement) {
  test::TempDir tmp;
  std::string out;
  // `timeout`: with a GPU the worker would wait for a Redis that is not there.
  const int status = test::run_command("timeout 20 " + std::string(PRISM_EXE) +
                                           " texture shard --redis redis://127.0.0.1:1 --shard 0 --shards 3"
                                           " --device cuda:0 --gallery " +
                                           tmp.file("g"),
                                       out);
  EXPECT_NE(out.find("prism texture shard: shard 0: "), std::string::npos) << out;
  if (!gpu::available()) {
    EXPECT_EQ(status, 2) << out;
    EXPECT_NE(out.find("no NUMA preference"), std::string::npos) << out;
  }
}

// Every shard and front of a deployment extracts alike: a worker's gallery normalisation becomes
// prism:normalise, which a front without one of its own follows (read once known; before, 503 with
// a Retry-After, never a guess); a worker whose gallery records another, or a front told another,
// is refused naming both.
TEST(ShardedBackend, NormalisationIsAgreedAcrossTheDeployment) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  const texture::Normalisation clahe = texture::parse_normalisation("clahe-4-8");
  ShardedBackend front(front_options(server.url(), 1));
  try {  // nobody has said yet
    front.normalisation();
    ADD_FAILURE() << "a normalisation before any worker announced one";
  } catch (const ServiceError& e) {
    EXPECT_EQ(e.status, 503);
    EXPECT_EQ(e.retry_after_s, ShardedBackend::kNormalisationRetryAfterSeconds);
    EXPECT_NE(std::string(e.what()).find("no shard worker has announced the gallery's contrast normalisation yet"),
              std::string::npos)
        << e.what();
  }
  ShardWorkerOptions wo = Worker::options(server.url(), 0, 1, "w", tmp.path() / "clahe");
  wo.local.normalisation = clahe;
  ShardWorker worker(wo);
  std::atomic<bool> stop{false};
  std::string worker_error;
  std::thread runner([&] {
    try {
      worker.run(stop);
    } catch (const std::exception& e) {
      worker_error = e.what();
    }
  });
  EXPECT_EQ(health_when_live(front), "");
  EXPECT_EQ(front.normalisation(), clahe);
  EXPECT_EQ(texture::Gallery::read_normalisation(tmp.path() / "clahe"), clahe);

  ShardWorkerOptions po = Worker::options(server.url(), 0, 1, "x", tmp.path() / "plain");
  po.local.normalisation = texture::Normalisation{};  // a new gallery of none
  ShardWorker plain(po);
  std::atomic<bool> no{false};
  try {
    plain.run(no);
    ADD_FAILURE() << "a worker with a gallery of no normalisation ran in a clahe-4-8 deployment";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("normalisation mismatch"), std::string::npos) << what;
    EXPECT_NE(what.find((tmp.path() / "plain").string()), std::string::npos) << what;
    EXPECT_NE(what.find("says clahe-4-8"), std::string::npos) << what;
  }
  ShardedOptions told = front_options(server.url(), 1);
  told.normalisation = texture::Normalisation{};
  try {
    ShardedBackend other(told);
    ADD_FAILURE() << "a front told none joined a clahe-4-8 deployment";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("uses none but prism:normalise"), std::string::npos) << e.what();
  }
  stop = true;
  runner.join();
  EXPECT_EQ(worker_error, "");
}

// A new shard or replica started without --normalise joins the deployment as it is: its new gallery
// records prism:normalise's normalisation, not the default (clahe-4-8), and serves; an existing
// gallery of another normalisation is still refused.
TEST(ShardedBackend, ANewGalleryTakesTheDeploymentsNormalisation) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  ShardWorkerOptions first = Worker::options(server.url(), 0, 1, "a", tmp.path() / "a");
  first.local.normalisation = texture::Normalisation{};  // an older deployment: none
  ShardWorker a(first);
  std::atomic<bool> stop{false};
  std::string a_error, b_error;
  std::thread run_a([&] {
    try {
      a.run(stop);
    } catch (const std::exception& e) {
      a_error = e.what();
    }
  });
  ShardedBackend front(front_options(server.url(), 1));
  EXPECT_EQ(health_when_live(front), "");
  EXPECT_EQ(front.normalisation(), texture::Normalisation{});

  ShardWorkerOptions second = Worker::options(server.url(), 0, 1, "b", tmp.path() / "b");
  ASSERT_FALSE(second.local.normalisation.has_value());
  std::vector<std::string> said;
  std::mutex said_mutex;
  second.log = [&](const std::string& line) {
    std::lock_guard lock(said_mutex);
    said.push_back(line);
  };
  ShardWorker b(second);
  std::thread run_b([&] {
    try {
      b.run(stop);
    } catch (const std::exception& e) {
      b_error = e.what();
    }
  });
  // Bounded wait (not a timing assertion): b says "serving" once prepared, after the adoption.
  auto said_line = [&](const std::string& text) {
    std::lock_guard lock(said_mutex);
    return std::any_of(said.begin(), said.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  for (int i = 0; i < 3000 && !said_line("serving") && b_error.empty(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(said_line("takes the deployment's normalisation none"));
  EXPECT_EQ(texture::Gallery::read_normalisation(tmp.path() / "b"), texture::Normalisation{});
  stop = true;
  run_a.join();
  run_b.join();
  EXPECT_EQ(a_error, "");
  EXPECT_EQ(b_error, "");

  // A gallery that existed before (here empty, of clahe-4-8) is the operator's choice: refused,
  // naming both. On a thread with a bound, so that a regression that served it fails, not hangs.
  texture::Gallery::open(tmp.path() / "c", true, texture::Gallery::Load::kNoEntries,
                         texture::parse_normalisation("clahe-4-8"));
  ShardWorker c(Worker::options(server.url(), 0, 1, "c", tmp.path() / "c"));
  std::atomic<bool> c_stop{false}, c_done{false};
  std::string c_error;
  std::thread run_c([&] {
    try {
      c.run(c_stop);
    } catch (const std::exception& e) {
      c_error = e.what();
    }
    c_done = true;
  });
  for (int i = 0; i < 3000 && !c_done; ++i) std::this_thread::sleep_for(10ms);
  c_stop = true;
  run_c.join();
  EXPECT_NE(c_error.find("normalisation mismatch"), std::string::npos) << c_error;
  EXPECT_EQ(texture::Gallery::read_normalisation(tmp.path() / "c"), texture::parse_normalisation("clahe-4-8"));
}

// A replica that could not apply a write (here: its index holds 8 products,
// its sibling's 200) recorded and acknowledged it anyway, never retried, and GETs flipped between
// 200 and 404 with /healthz ok. Now every write is acknowledged from the replica that applied it,
// the failing one logs, retries in place, is reported by /healthz and answers no reads; restarted
// with room, it applies what it missed, in order.
TEST(ShardedBackend, AReplicaThatCannotApplyAWriteRetriesAndLeavesReads) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  std::mutex log_mutex;
  std::string log;
  ShardWorkerOptions small = Worker::options(server.url(), 0, 1, "b", tmp.path() / "b");
  small.local.index.host_budget = 8 * int64_t(match::kSlotBytes);
  small.log = [&](const std::string& line) {
    std::lock_guard lock(log_mutex);
    log += line + "\n";
  };
  auto b = std::make_unique<Worker>(small);
  Worker a(server.url(), 0, 1, "a", tmp.path() / "a");
  ShardedBackend front(front_options(server.url(), 1));
  ASSERT_EQ(health_when_live(front), "");
  std::mt19937 rng(9);
  const std::vector<GalleryEntry> entries = products(12, rng);
  for (const GalleryEntry& e : entries) {
    const WriteResult w = front.write(e, false, in(10s));  // a 507 from b first must not decide
    EXPECT_EQ(w.outcome, WriteOutcome::kCreated) << e.id;
  }
  std::string why;
  for (int i = 0; i < 100 && why.empty(); ++i, std::this_thread::sleep_for(50ms)) why = front.health();
  EXPECT_NE(why.find("shard 0 replica b cannot apply writes: "), std::string::npos) << why;
  // The replicas' write positions, as Redis has them, show b behind and why.
  auto replicas_of_shard_0 = [&] {
    const ServiceStats s = front.stats(in(10s));
    EXPECT_EQ(s.shards.size(), 1u);
    return s.shards.empty() ? std::vector<ReplicaStats>{} : s.shards[0].replicas;
  };
  std::vector<ReplicaStats> r = replicas_of_shard_0();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].replica, "a");
  EXPECT_EQ(r[1].replica, "b");
  EXPECT_TRUE(r[0].live && r[1].live);
  EXPECT_EQ(r[0].failing, "");
  EXPECT_NE(r[1].failing, "");
  EXPECT_EQ(r[0].pending, 0);
  EXPECT_GE(r[1].pending, 1);
  EXPECT_EQ(r[0].lag, 0);
  for (int round = 0; round < 3; ++round)
    for (const GalleryEntry& e : entries) EXPECT_TRUE(front.get(e.id, in(10s))) << e.id << " round " << round;
  EXPECT_EQ(a.backend().size(), entries.size());
  EXPECT_EQ(b->backend().size(), 8u);
  {
    std::lock_guard lock(log_mutex);
    EXPECT_NE(log.find("cannot apply write "), std::string::npos) << log;
  }
  EXPECT_EQ(b->error(), "");  // still running, retrying
  b.reset();
  small.local.index.host_budget = 200 * int64_t(match::kSlotBytes);
  b = std::make_unique<Worker>(small);
  for (int i = 0; i < 200 && b->backend().size() < entries.size(); ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(b->backend().size(), entries.size());
  EXPECT_EQ(encoded_entries(tmp.path() / "a"), encoded_entries(tmp.path() / "b"));
  EXPECT_EQ(health_when_live(front), "");
  r = replicas_of_shard_0();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].failing, "");
  EXPECT_EQ(r[1].pending, 0);
  EXPECT_EQ(r[1].delivered, r[0].delivered);
}

// A write applied to the gallery whose record (GALLERY/stream-applied) cannot be written, its disk
// full just then (here a directory in the way of the record's temporary file), is retried as a
// write that could not be applied, not the end of the worker (tests/service/test_faults.cpp met
// that with its full-disk fault): once the record can be written the write is applied again, as it
// is idempotent, and answered.
TEST(ShardedBackend, AWriteWhoseRecordCannotBeWrittenIsRetried) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  std::mutex log_mutex;
  std::string log;
  ShardWorkerOptions o = Worker::options(server.url(), 0, 1, "a", tmp.path() / "a");
  o.log = [&](const std::string& line) {
    std::lock_guard lock(log_mutex);
    log += line + "\n";
  };
  Worker worker(o);
  ShardedBackend front(front_options(server.url(), 1));
  ASSERT_EQ(health_when_live(front), "");
  std::mt19937 rng(47);
  const std::vector<GalleryEntry> entries = products(2, rng);
  EXPECT_EQ(front.write(entries[0], false, in(10s)).outcome, WriteOutcome::kCreated);
  const std::filesystem::path blocker = tmp.path() / "a" / "stream-applied.new";
  ASSERT_TRUE(std::filesystem::create_directory(blocker));
  std::thread unblock([&] {
    std::this_thread::sleep_for(1500ms);
    std::filesystem::remove(blocker);
  });
  std::optional<WriteResult> w;  // answered once recorded
  std::string failure;
  try {
    w = front.write(entries[1], false, in(10s));
  } catch (const std::exception& x) {
    failure = x.what();
  }
  unblock.join();
  ASSERT_TRUE(w) << failure << "; the worker: " << worker.error();
  EXPECT_EQ(w->outcome, WriteOutcome::kCreated);  // as its first application answered
  EXPECT_EQ(worker.error(), "");
  EXPECT_TRUE(front.get(entries[1].id, in(10s)));
  EXPECT_EQ(worker.backend().size(), 2u);
  const std::vector<shard::StreamEntry> last =
      shard::stream_entries(Redis(server.url()).command({"XREVRANGE", shard::writes_key(0), "+", "-", "COUNT", "1"}));
  ASSERT_EQ(last.size(), 1u);
  std::ifstream record(tmp.path() / "a" / "stream-applied");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(record), {}), last[0].id);
  std::lock_guard lock(log_mutex);
  EXPECT_NE(log.find("cannot record the write as applied: "), std::string::npos) << log;
  EXPECT_NE(log.find("after retrying; serving reads again"), std::string::npos) << log;
}

// A write applied whose record fails is applied again once the record can be written: it answers
// what its first application did, not what the second found. A delete that removed the product
// answered removed:false (the second application found nothing), an enrolment "unchanged".
TEST(ShardedBackend, AWriteRetriedAfterItsRecordFailedAnswersAsItsFirstApplication) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  Worker worker(Worker::options(server.url(), 0, 1, "a", tmp.path() / "a"));
  ShardedBackend front(front_options(server.url(), 1));
  ASSERT_EQ(health_when_live(front), "");
  std::mt19937 rng(53);
  const std::vector<GalleryEntry> entries = products(2, rng);
  ASSERT_EQ(front.write(entries[0], false, in(10s)).outcome, WriteOutcome::kCreated);
  const std::filesystem::path blocker = tmp.path() / "a" / "stream-applied.new";
  auto blocked_for_a_while = [&](const std::function<void()>& write) {
    ASSERT_TRUE(std::filesystem::create_directory(blocker));
    std::thread unblock([&] {
      std::this_thread::sleep_for(1500ms);
      std::filesystem::remove(blocker);
    });
    write();
    unblock.join();
  };
  bool removed = false;
  blocked_for_a_while([&] { removed = front.remove(entries[0].id, in(10s)); });
  EXPECT_TRUE(removed) << "the delete removed the product at its first application";
  EXPECT_FALSE(front.get(entries[0].id, in(10s)));
  std::optional<WriteOutcome> outcome;
  blocked_for_a_while([&] { outcome = front.write(entries[1], false, in(10s)).outcome; });
  EXPECT_EQ(outcome, WriteOutcome::kCreated);
  EXPECT_EQ(worker.error(), "");
  EXPECT_EQ(worker.backend().size(), 1u);
}

// A write applied whose record failed, its worker killed (kill -9) before the retry: the worker
// restarted applied it again and answered what that second application found (a delete that had
// removed the product, removed:false), its first answer lost with the killed process. The first
// answer is now kept in Redis (prism:unrecorded:K:NAME:ID) until a retry answers it, then dropped.
TEST(ShardedBackend, AWriteWhoseWorkerIsKilledBeforeItsRetryAnswersAsItsFirstApplication) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  const std::vector<std::string> argv = shard_argv(server.url(), 0, 1, "a", tmp.path() / "a");
  auto child = std::make_unique<test::ChildProcess>(argv, tmp.file("a.log"));
  ShardedBackend front(front_options(server.url(), 1));
  ASSERT_EQ(health_when_live(front), "") << child->ended();
  std::mt19937 rng(67);
  const std::vector<GalleryEntry> entries = products(1, rng);
  ASSERT_EQ(front.write(entries[0], false, in(10s)).outcome, WriteOutcome::kCreated);
  const std::filesystem::path blocker = tmp.path() / "a" / "stream-applied.new";
  ASSERT_TRUE(std::filesystem::create_directory(blocker));  // the record of the next write fails
  bool removed = false;
  std::string failure;
  std::thread client([&] {
    try {
      removed = front.remove(entries[0].id, in(30s));
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  Redis direct(server.url());
  auto kept = [&] { return direct.command({"KEYS", "prism:unrecorded:0:a:*"}).elements.size(); };
  // Applied, its record refused: the replica says it cannot apply the write, its answer kept.
  ASSERT_TRUE(within_5s([&] { return direct.command({"EXISTS", shard::failing_key(0, "a")}).integer == 1; }));
  EXPECT_EQ(kept(), 1u);
  child->signal(SIGKILL);
  EXPECT_EQ(child->wait(10), 128 + SIGKILL);
  std::filesystem::remove(blocker);
  child = std::make_unique<test::ChildProcess>(argv, tmp.file("a2.log"));
  client.join();
  EXPECT_EQ(failure, "");
  EXPECT_TRUE(removed) << "the delete removed the product at its first application";
  EXPECT_FALSE(front.get(entries[0].id, in(10s)));
  EXPECT_EQ(kept(), 0u);
  child->signal(SIGTERM);
  EXPECT_EQ(child->wait(10), 0);
}

// A front's wait for its answer whose connection is cut once Redis handed it the answer (a
// partition that heals, a reset) still answers: the answer waits in the request's own list, read
// again on a fresh connection. Popped (BLPOP), it was lost with the reply: sent again, the pop
// waited for it in vain, and the request failed (503) although its shard had answered. The test
// plays the shard's worker: a liveness key, and the answer pushed while the front waits.
TEST(ShardedBackend, AnAnswerWhoseReplyIsCutIsNotLost) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  test::FaultProxy proxy(server.port());
  Redis direct(server.url());
  ShardedBackend front(front_options("redis://127.0.0.1:" + std::to_string(proxy.port()), 1));
  ASSERT_EQ(direct.command({"SET", "prism:worker:0:a", "test", "EX", "60"}).str, "OK");
  std::string outcome;
  std::thread client([&] {
    try {
      outcome = front.get("p1", in(10s)) ? "found" : "not found";
    } catch (const std::exception& e) {
      outcome = e.what();
    }
  });
  // The read in the shard's stream, the front waiting (past its first liveness check, 250 ms).
  std::string reply;
  ASSERT_TRUE(within_5s([&] {
    const std::vector<shard::StreamEntry> reads =
        shard::stream_entries(direct.command({"XRANGE", shard::reads_key(0), "-", "+"}));
    if (!reads.empty()) reply = reads[0].field("reply");
    return !reply.empty();
  }));
  std::this_thread::sleep_for(400ms);
  ASSERT_TRUE(within_5s([&] {
    return direct.command({"INFO", "clients"}).str.find("blocked_clients:1") != std::string::npos;
  }));
  proxy.partition();
  direct.command({"LPUSH", reply, R"({"status":200,"found":false,"shard":0})"});
  EXPECT_TRUE(within_5s([&] { return direct.command({"LLEN", reply}).integer == 0; }));  // handed to the front
  proxy.heal();                                                                          // the connection cut
  client.join();
  EXPECT_EQ(outcome, "not found");
  const long long ttl = direct.command({"TTL", reply + ":taken"}).integer;  // the taken answers expire
  EXPECT_TRUE(ttl > 0 && ttl <= 60) << ttl;
}

// A front that gives up on a wait whose connection was cut once Redis had moved the answer into
// KEY:taken (a partition until the deadline) left that list without an expiry: a leak in Redis per
// such request. Its EXPIRE is now sent later, once Redis answers again (here the front's next health
// check), and no prism:reply key is left without one.
TEST(ShardedBackend, AnAnswerTakenOnACutConnectionThatTheFrontGaveUpOnExpires) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  test::FaultProxy proxy(server.port());
  Redis direct(server.url());
  ShardedBackend front(front_options("redis://127.0.0.1:" + std::to_string(proxy.port()), 1));
  ASSERT_EQ(direct.command({"SET", "prism:worker:0:a", "test", "EX", "60"}).str, "OK");
  int status = 0;
  std::thread client([&] { status = service_status([&] { front.get("p1", in(3s)); }); });
  std::string reply;
  ASSERT_TRUE(within_5s([&] {
    const std::vector<shard::StreamEntry> reads =
        shard::stream_entries(direct.command({"XRANGE", shard::reads_key(0), "-", "+"}));
    if (!reads.empty()) reply = reads[0].field("reply");
    return !reply.empty();
  }));
  std::this_thread::sleep_for(400ms);  // past its first liveness check: the wait below lasts until the next
  ASSERT_TRUE(within_5s([&] {
    return direct.command({"INFO", "clients"}).str.find("blocked_clients:1") != std::string::npos;
  }));
  proxy.partition();
  direct.command({"LPUSH", reply, R"({"status":200,"found":false,"shard":0})"});
  direct.command({"EXPIRE", reply, "60"});                                               // as a worker does
  EXPECT_TRUE(within_5s([&] { return direct.command({"LLEN", reply}).integer == 0; }));  // moved, the reply held
  client.join();  // the front gave up (Redis unreachable) while partitioned
  EXPECT_EQ(status, 503);
  EXPECT_EQ(direct.command({"LLEN", reply + ":taken"}).integer, 1);
  proxy.heal();
  std::this_thread::sleep_for(1500ms);  // past the lost wait's block time in Redis
  front.health();
  std::vector<std::string> leaked;
  std::string cursor = "0";
  do {
    const Reply r = direct.command({"SCAN", cursor, "MATCH", "prism:reply:*", "COUNT", "1000"});
    ASSERT_EQ(r.elements.size(), 2u);
    cursor = r.elements[0].str;
    for (const Reply& key : r.elements[1].elements)
      if (direct.command({"TTL", key.str}).integer < 0) leaked.push_back(key.str);
  } while (cursor != "0");
  EXPECT_EQ(leaked, std::vector<std::string>{});
  const long long ttl = direct.command({"TTL", reply + ":taken"}).integer;
  EXPECT_TRUE(ttl > 0 && ttl <= 60) << ttl;
}

// A front that exits while Redis is out of reach cannot send the EXPIREs it still owes (above): its
// KEY:taken lists stayed for good. A front starting gives each such list without a time to live one
// (600 s); a list that has one keeps it.
TEST(ShardedBackend, TakenListsLeftByAFrontThatExitedExpireWhenAFrontStarts) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  Redis direct(server.url());
  for (int i = 0; i < 2500; ++i)  // more than one SCAN reply's worth
    direct.command({"RPUSH", "prism:reply:gone-" + std::to_string(i) + ":7:taken", "answer"});
  direct.command({"RPUSH", "prism:reply:live:1:taken", "answer"});
  direct.command({"EXPIRE", "prism:reply:live:1:taken", "30"});
  ShardedBackend front(front_options(server.url(), 1));
  int without = 0;
  for (int i = 0; i < 2500; ++i) {
    const long long ttl = direct.command({"TTL", "prism:reply:gone-" + std::to_string(i) + ":7:taken"}).integer;
    without += ttl > 0 && ttl <= 600 ? 0 : 1;
  }
  EXPECT_EQ(without, 0) << "taken lists left without a time to live (of 2,500)";
  const long long kept = direct.command({"TTL", "prism:reply:live:1:taken"}).integer;
  EXPECT_TRUE(kept > 0 && kept <= 30) << kept;
}

// A write refused between its WATCH of the layout and its EXEC (here a malformed prism:split) left
// the WATCH on its pooled connection: the next write there had its EXEC refused for a change it
// never read (the layout fixed meanwhile), and was routed once more. The connection is now dropped.
TEST(ShardedBackend, AWriteRefusedBeforeItsExecLeavesNoWatchOnItsConnection) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  Worker worker(Worker::options(server.url(), 0, 1, "a", tmp.path() / "a"));
  ShardedBackend front(front_options(server.url(), 1));
  ASSERT_EQ(health_when_live(front), "");
  std::mt19937 rng(59);
  const std::vector<GalleryEntry> entries = products(3, rng);
  // First a write applied: the worker's writer is past its start, where it reads the layout too.
  ASSERT_EQ(front.write(entries[0], false, in(10s)).outcome, WriteOutcome::kCreated);
  Redis direct(server.url());
  ASSERT_EQ(direct.command({"SET", shard::kSplitKey, "3"}).str, "OK");  // not twice prism:shards
  EXPECT_THROW(front.write(entries[1], false, in(10s)), ServiceError);
  direct.command({"DEL", shard::kSplitKey});
  ASSERT_EQ(direct.command({"CONFIG", "RESETSTAT"}).str, "OK");
  EXPECT_EQ(front.write(entries[2], false, in(10s)).outcome, WriteOutcome::kCreated);
  const std::string stats = direct.command({"INFO", "commandstats"}).str;
  const size_t at = stats.find("cmdstat_exec:calls=");
  ASSERT_NE(at, std::string::npos) << stats;
  EXPECT_EQ(std::atoi(stats.c_str() + at + std::string("cmdstat_exec:calls=").size()), 1)
      << "the write's EXEC was refused once: " << stats.substr(at, 80);
}

// A malformed prism:split read by a worker as it reconnected ended the worker (the parse's
// exception left its writer). It now keeps serving under its shard count and says why, naming the
// key; fronts route nothing meanwhile (503 naming it), and a worker or a front starting then
// refuses to, with exit status 2 and the message.
TEST(ShardedBackend, AMalformedSplitKeepsARunningWorkerAndRefusesAStartingOne) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  std::mutex log_mutex;
  std::string log;
  ShardWorkerOptions o = Worker::options(server.url(), 0, 1, "a", tmp.path() / "a");
  o.log = [&](const std::string& line) {
    std::lock_guard lock(log_mutex);
    log += line + "\n";
  };
  Worker worker(o);
  ShardedBackend front(front_options(server.url(), 1));
  ASSERT_EQ(health_when_live(front), "");
  std::mt19937 rng(61);
  const std::vector<GalleryEntry> entries = products(2, rng);
  ASSERT_EQ(front.write(entries[0], false, in(10s)).outcome, WriteOutcome::kCreated);
  Redis direct(server.url());
  ASSERT_EQ(direct.command({"SET", shard::kSplitKey, "x"}).str, "OK");
  // Every other connection cut: the worker's writer reconnects and reads the layout again.
  ASSERT_EQ(direct.command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}).type, Reply::Type::kInteger);
  const std::string said = "prism:split at " + server.url() + " is 'x', not a shard count";
  EXPECT_TRUE(within_5s([&] {
    std::lock_guard lock(log_mutex);
    return log.find(said) != std::string::npos;
  })) << log;
  EXPECT_EQ(worker.error(), "");
  std::string message;
  EXPECT_EQ(service_status([&] { front.write(entries[1], false, in(10s)); }, &message), 503);
  EXPECT_NE(message.find(said), std::string::npos) << message;
  EXPECT_NE(front.health().find(said), std::string::npos) << front.health();
  // A get is routed by the count the front last read (1), not by the keys: the worker answers it.
  const std::optional<Product> got = front.get(entries[0].id, in(10s));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->id, entries[0].id);
  std::string out;
  EXPECT_EQ(test::run_command(std::string(PRISM_EXE) + " texture shard --redis " + server.url() +
                                  " --shard 0 --replica b --device cpu --host-memory 20M --gallery " + tmp.file("b"),
                              out),
            2);
  EXPECT_NE(out.find("prism texture shard: error: " + said), std::string::npos) << out;
  EXPECT_EQ(test::run_command(
                std::string(PRISM_EXE) + " texture serve --redis " + server.url() + " --listen 127.0.0.1:0", out),
            2);
  EXPECT_NE(out.find("prism texture serve: error: " + said), std::string::npos) << out;
  // Repaired, the deployment serves again: the worker was there all along.
  direct.command({"DEL", shard::kSplitKey});
  EXPECT_EQ(front.write(entries[1], false, in(10s)).outcome, WriteOutcome::kCreated);
  EXPECT_EQ(worker.error(), "");
  EXPECT_EQ(worker.backend().size(), 2u);
}

// prism:shards holding a list (or any type but a string) read as unset: MGET answers nil for it, so
// a worker waited for a count that a front then asked to be given with --shards, which cannot set it
// (SET NX). Both now refuse to start, naming the key and its type's error.
TEST(ShardedBackend, AShardCountOfAnotherTypeIsNamedNotTakenForUnset) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  Redis direct(server.url());
  ASSERT_EQ(direct.command({"RPUSH", shard::kShardsKey, "2"}).integer, 1);
  const std::string said = "prism:shards at " + server.url() + " holds another type than a string (GET: WRONGTYPE";
  std::string out;
  EXPECT_EQ(test::run_command("timeout 60 " + std::string(PRISM_EXE) + " texture serve --redis " + server.url() +
                                  " --shards 2 --listen 127.0.0.1:0 2>&1",
                              out),
            2);
  EXPECT_NE(out.find("prism texture serve: error: " + said), std::string::npos) << out;
  EXPECT_EQ(
      test::run_command("timeout 60 " + std::string(PRISM_EXE) + " texture shard --redis " + server.url() +
                            " --shards 2 --shard 0 --device cpu --host-memory 20M --gallery " + tmp.file("a") + " 2>&1",
                        out),
      2);
  EXPECT_NE(out.find("prism texture shard: error: " + said), std::string::npos) << out;
  try {
    ShardedBackend front(front_options(server.url(), 2));
    ADD_FAILURE() << "a front started on a list for prism:shards";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(said), std::string::npos) << e.what();
  }
}

// A shard without a live worker cost every request its whole deadline (a minute with
// deadline_ms=60000), allow_partial or not. Now it is answered at once: 503 with Retry-After, or
// the partial answer saying which shard is missing; the live shard answers as ever.
TEST(ShardedBackend, AShardWithoutALiveWorkerIsAnsweredAtOnce) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  Worker only(server.url(), 0, 2, "a", tmp.path() / "s0");
  ShardedBackend front(front_options(server.url(), 2, 60s));
  std::mt19937 rng(10);
  const GalleryEntry alive = test::random_gallery_entry(ids_of_shard(0, 2, 1)[0], rng, 40);
  const GalleryEntry orphan = test::random_gallery_entry(ids_of_shard(1, 2, 1)[0], rng, 40);
  front.write(alive, false, in(60s));
  const Clock::time_point t0 = Clock::now();
  try {
    front.get(orphan.id, in(60s));
    ADD_FAILURE() << "a get on a shard without a worker succeeded";
  } catch (const ServiceError& e) {
    EXPECT_EQ(e.status, 503);
    EXPECT_EQ(e.retry_after_s, 2);
    EXPECT_NE(std::string(e.what()).find("shard 1 did not answer: it has no live worker"), std::string::npos)
        << e.what();
  }
  std::string message;
  EXPECT_EQ(service_status([&] { front.write(orphan, false, in(60s)); }, &message), 503);
  EXPECT_NE(message.find("shard 1 did not answer: it has no live worker"), std::string::npos) << message;
  SearchQuery q;
  q.features = alive.features;
  q.deadline = in(60s);
  EXPECT_EQ(service_status([&] { front.search(q); }, &message), 503);
  EXPECT_NE(message.find("shard 1 did not answer (no live worker"), std::string::npos) << message;
  q.allow_partial = true;
  q.deadline = in(60s);
  const SearchAnswer partial = front.search(q);
  EXPECT_EQ(partial.missing_shards, std::vector<int>{1});
  EXPECT_EQ(partial.shards_answered, 1);
  EXPECT_TRUE(partial.identified);
  // Not a speed figure: the four calls above end long before any one of their 60 s deadlines.
  EXPECT_LT(Clock::now() - t0, 30s);
  EXPECT_TRUE(front.get(alive.id, in(60s)));
  // Stats list every shard of the deployment: the dead one too, said to be unanswered.
  const ServiceStats stats = front.stats(in(60s));
  ASSERT_EQ(stats.shards.size(), 2u);
  EXPECT_TRUE(stats.shards[0].answered);
  EXPECT_EQ(stats.shards[0].index.images, 1u);
  ASSERT_EQ(stats.shards[0].replicas.size(), 1u);
  EXPECT_EQ(stats.shards[0].replicas[0].replica, "a");
  EXPECT_TRUE(stats.shards[0].replicas[0].live);
  EXPECT_EQ(stats.shards[1].shard, 1);
  EXPECT_FALSE(stats.shards[1].answered);
  EXPECT_TRUE(stats.shards[1].replicas.empty());
}

// A rolling upgrade: workers of the release before the two-phase search answer every search read
// whole (ShardWorkerOptions::whole_searches). Shard 1's only worker is one, and shard 2 has one
// beside an upgraded replica (either may take either phase): every answer is still one gallery's.
TEST(ShardedBackend, WorkersOfTheReleaseBeforeTwoPhasesAnswerAlike) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  std::vector<std::unique_ptr<Worker>> workers;
  for (const auto& [k, name, old] : std::vector<std::tuple<int, std::string, bool>>{
           {0, "new0", false}, {1, "old1", true}, {2, "new2", false}, {2, "old2", true}}) {
    ShardWorkerOptions o = Worker::options(server.url(), k, 3, name, tmp.path() / name);
    o.whole_searches = old;
    workers.push_back(std::make_unique<Worker>(o));
  }
  ShardedBackend front(front_options(server.url(), 3));
  LocalBackend one(local_options(tmp.path() / "one"));
  ASSERT_EQ(health_when_live(front), "");
  std::mt19937 rng(31);
  const std::vector<GalleryEntry> entries = products(45, rng);
  for (const GalleryEntry& e : entries) {
    front.write(e, false, in(10s));
    one.write(e, false, Clock::time_point::max());
  }
  std::vector<texture::Features> queries;
  for (int i : {1, 20, 33, 42}) queries.push_back(entries[size_t(i)].features);
  queries.push_back(test::random_gallery_entry("q", rng, 60).features);
  for (size_t i = 0; i < queries.size(); ++i)
    for (const int shortlist : {8, 2}) {
      for (int repeat = 0; repeat < 3; ++repeat) {  // shard 2's reads go to either replica
        SCOPED_TRACE("query " + std::to_string(i) + ", shortlist " + std::to_string(shortlist));
        SearchQuery q;
        q.features = queries[i];
        q.params.shortlist = shortlist;
        q.top_k = 5;
        q.deadline = in(10s);
        const SearchAnswer s = front.search(q), l = one.search(q);
        EXPECT_EQ(s.identified, l.identified);
        EXPECT_EQ(s.searched, l.searched);
        EXPECT_EQ(s.gallery_size, l.gallery_size);
        EXPECT_EQ(s.shards_answered, 3);
        ASSERT_EQ(s.candidates.size(), l.candidates.size());
        for (size_t c = 0; c < s.candidates.size(); ++c) expect_same_match(s.candidates[c], l.candidates[c]);
      }
    }
  for (auto& w : workers) EXPECT_EQ(w->error(), "");
}

// A shard that scores in time but does not verify its candidates by the deadline: with
// allow_partial it is missing (its candidates dropped, its images not counted), without the search
// fails naming it; either by the deadline.
TEST(ShardedBackend, AShardLateToVerifyIsMissing) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  std::atomic<int> reads{0};  // shard 1's search reads: odd ones score, even ones verify
  std::atomic<bool> slept{false};
  ShardWorkerOptions slow = Worker::options(server.url(), 1, 2, "slow", tmp.path() / "s1");
  slow.readers = 1;
  slow.before_answer = [&](const std::string& op) {
    if (op != "search" || ++reads % 2 != 0) return;
    std::this_thread::sleep_for(2500ms);  // past the 2 s deadlines below
    slept = true;
  };
  Worker w0(server.url(), 0, 2, "w0", tmp.path() / "s0");
  Worker w1(slow);
  ShardedBackend front(front_options(server.url(), 2));
  ASSERT_EQ(health_when_live(front), "");
  std::mt19937 rng(14);
  std::vector<GalleryEntry> entries;
  for (const int k : {0, 1})
    for (const std::string& id : ids_of_shard(k, 2, 6)) {
      GalleryEntry e = test::random_gallery_entry(id, rng, 40);
      e.features.descriptors_fp16.clear();
      front.write(e, false, in(10s));
      entries.push_back(std::move(e));
    }
  // Shard 1's own product: it holds the best candidate, so the search asks it to verify.
  SearchQuery q;
  q.features = entries[6].features;
  q.allow_partial = true;
  q.deadline = in(2s);
  Clock::time_point t0 = Clock::now();
  const SearchAnswer partial = front.search(q);
  EXPECT_LT(Clock::now() - t0, 2s + 3s) << "not a speed figure: the search ends by its deadline";
  EXPECT_EQ(reads, 2);
  EXPECT_EQ(partial.missing_shards, std::vector<int>{1});
  EXPECT_EQ(partial.shards_answered, 1);
  EXPECT_EQ(partial.gallery_size, 6u);
  for (const Match& m : partial.candidates) EXPECT_EQ(shard::shard_of(m.id, 2), 0) << m.id;
  for (int i = 0; i < 100 && !slept; ++i) std::this_thread::sleep_for(50ms);
  q.allow_partial = false;
  q.deadline = in(2s);
  t0 = Clock::now();
  std::string message;
  EXPECT_EQ(service_status([&] { front.search(q); }, &message), 503);
  EXPECT_LT(Clock::now() - t0, 2s + 3s);
  EXPECT_EQ(reads, 4);
  EXPECT_NE(message.find("shard 1 did not answer"), std::string::npos) << message;
  EXPECT_EQ(w0.error(), "");
  EXPECT_EQ(w1.error(), "");
}

// The default replica name is the host's, so two replicas of a shard on one host
// collide. A worker without --replica serves a shard of one replica only: alone it starts (and
// starts again), beside another replica's group it is refused, naming the others.
TEST(ShardedBackend, AWorkerWithoutAReplicaNameIsRefusedBesideOtherReplicas) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  {
    Worker alone(Worker::options(server.url(), 0, 1, "", tmp.path() / "alone"));
    ShardedBackend front(front_options(server.url(), 1));
    ASSERT_EQ(health_when_live(front), "");
    EXPECT_EQ(alone.error(), "");
  }
  {
    Worker again(Worker::options(server.url(), 0, 1, "", tmp.path() / "alone"));  // its own group only
    ShardedBackend front(front_options(server.url(), 1));
    ASSERT_EQ(health_when_live(front), "");
    EXPECT_EQ(again.error(), "");
  }
  Worker named(server.url(), 0, 1, "b", tmp.path() / "b");
  ShardWorker unnamed(Worker::options(server.url(), 0, 1, "", tmp.path() / "c"));
  std::atomic<bool> stop{false};
  try {
    unnamed.run(stop);
    ADD_FAILURE() << "a worker without --replica started beside replica b";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("shard 0 has other replicas ("), std::string::npos) << what;
    EXPECT_NE(what.find("b: consumer groups of prism:shard:0:writes"), std::string::npos) << what;
    EXPECT_NE(what.find("no --replica"), std::string::npos) << what;
  }
}

// A worker whose readers hang (here every search blocks) still renewed its liveness
// key, so every read of its shard cost the whole deadline. With every reader 2 s past its read's
// deadline it sets prism:hung:K:NAME: reads of its shard are answered at once, as for a dead
// one, until a reader is free again. It keeps its name meanwhile (a second worker of that name
// is still refused: two consumers of one group would split the writes), and its writer still
// applies writes.
TEST(ShardedBackend, AWorkerWhoseReadersHangIsAnsweredAsDead) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  test::RedisServer server(tmp.path() / "redis");
  std::mutex m;
  std::condition_variable cv;
  bool released = false;
  ShardWorkerOptions wo = Worker::options(server.url(), 0, 1, "a", tmp.path() / "a");
  wo.readers = 1;
  wo.before_answer = [&](const std::string& op) {
    if (op != "search") return;
    std::unique_lock lock(m);
    cv.wait_for(lock, 120s, [&] { return released; });
  };
  Worker worker(wo);
  ShardedBackend front(front_options(server.url(), 1));
  ASSERT_EQ(health_when_live(front), "");
  std::mt19937 rng(12);
  const GalleryEntry e = test::random_gallery_entry("hung-1", rng, 40);
  front.write(e, false, in(30s));
  SearchQuery q;
  q.features = e.features;
  q.deadline = in(1s);
  EXPECT_EQ(service_status([&] { front.search(q); }), 503);  // the hung search's own deadline
  // Bounded wait (not a timing assertion): marked once the reader is 2 s past that deadline.
  for (int i = 0; i < 300 && front.live_workers(/*for_reads=*/true).count(0); ++i) std::this_thread::sleep_for(100ms);
  EXPECT_EQ(front.live_workers(/*for_reads=*/true).count(0), 0u);
  EXPECT_EQ(front.live_workers().count(0), 1u);  // the name is still held
  EXPECT_NE(front.health().find("shard 0: every replica's readers hang"), std::string::npos) << front.health();
  std::string message;
  EXPECT_EQ(service_status([&] { front.get(e.id, in(60s)); }, &message), 503);
  EXPECT_NE(message.find("shard 0 did not answer: it has no live worker"), std::string::npos) << message;
  EXPECT_NE(message.find("prism:hung:0:*"), std::string::npos) << message;
  const GalleryEntry later = test::random_gallery_entry("hung-2", rng, 40);
  EXPECT_EQ(front.write(later, false, in(30s)).outcome, WriteOutcome::kCreated);  // the writer is well
  ShardWorker same_name(Worker::options(server.url(), 0, 1, "a", tmp.path() / "a2"));
  std::atomic<bool> no{false};
  try {
    same_name.run(no);
    ADD_FAILURE() << "a second worker named a started while the first was hung";
  } catch (const std::runtime_error& x) {
    EXPECT_NE(std::string(x.what()).find("replica name 'a' of shard 0 is held by"), std::string::npos) << x.what();
  }
  {
    std::lock_guard lock(m);
    released = true;
  }
  cv.notify_all();
  EXPECT_EQ(health_when_live(front), "");
  EXPECT_TRUE(front.get(e.id, in(30s)));
  EXPECT_TRUE(front.get(later.id, in(30s)));
  q.deadline = in(30s);
  EXPECT_TRUE(front.search(q).identified);
  EXPECT_EQ(worker.error(), "");
}

TEST(ShardedBackend, BadConfigurationsAreRefusedClearly) {
  PRISM_NEED_REDIS();
  test::TempDir tmp;
  // Not a redis:// URL.
  try {
    ShardedBackend front(front_options("http://127.0.0.1:1", 1));
    ADD_FAILURE() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'http://127.0.0.1:1'"), std::string::npos) << e.what();
  }
  // Nobody listening.
  const std::string nowhere = "redis://127.0.0.1:" + std::to_string(test::free_port());
  try {
    ShardedBackend front(front_options(nowhere, 1));
    ADD_FAILURE() << "accepted";
  } catch (const RedisError& e) {
    EXPECT_NE(std::string(e.what()).find("Redis unreachable at " + nowhere), std::string::npos) << e.what();
  }
  test::RedisServer server(tmp.path() / "redis");
  Worker worker(server.url(), 0, 3, "w", tmp.path() / "shard0");
  ShardedBackend front(front_options(server.url(), 3, 800ms));
  // A shard count other than the deployment's: refused, naming both.
  try {
    ShardedBackend other(front_options(server.url(), 2));
    ADD_FAILURE() << "accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("configured with 2 shards"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("says 3"), std::string::npos) << e.what();
  }
  ShardWorker mismatched(Worker::options(server.url(), 0, 4, "x", tmp.path() / "x"));
  std::atomic<bool> stop{false};
  try {
    mismatched.run(stop);
    ADD_FAILURE() << "a worker of 4 shards ran in a deployment of 3";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("configured with 4 shards"), std::string::npos) << e.what();
  }
  std::string out;
  EXPECT_EQ(test::run_command(std::string(PRISM_EXE) + " texture shard --redis " + server.url() +
                                  " --shard 0 --shards 5 --gallery " + tmp.file("cli"),
                              out),
            2);
  EXPECT_NE(out.find("configured with 5 shards"), std::string::npos) << out;
  EXPECT_EQ(
      test::run_command(
          std::string(PRISM_EXE) + " texture shard --redis localhost:6379 --shard 0 --gallery " + tmp.file("cli"), out),
      2);
  EXPECT_NE(out.find("'localhost:6379'"), std::string::npos) << out;

  // Shards without a worker: a write to one fails with 503 naming it, within the deadline.
  std::mt19937 rng(1);
  const std::string id = ids_of_shard(2, 3, 1)[0];
  GalleryEntry e = test::random_gallery_entry(id, rng, 20);
  std::string message;
  EXPECT_EQ(service_status([&] { front.write(e, false, Clock::time_point::max()); }, &message), 503);
  EXPECT_NE(message.find("shard 2 did not answer: it has no live worker"), std::string::npos) << message;
  EXPECT_NE(front.health().find("have no live worker"), std::string::npos) << front.health();
  // Redis gone: every call is a 503 saying so, and health says why.
  server.kill();
  for (const std::function<void()>& call : std::vector<std::function<void()>>{
           [&] { front.write(e, false, in(5s)); }, [&] { front.get(id, in(5s)); }, [&] { front.remove(id, in(5s)); },
           [&] {
             SearchQuery q;
             q.features = e.features;
             front.search(q);
           },
           [&] { front.stats(in(5s)); }}) {
    EXPECT_EQ(service_status(call, &message), 503);
    EXPECT_NE(message.find("Redis unreachable at " + server.url()), std::string::npos) << message;
  }
  EXPECT_NE(front.health().find("Redis unreachable at " + server.url()), std::string::npos) << front.health();
}

}  // namespace
}  // namespace prism::service
