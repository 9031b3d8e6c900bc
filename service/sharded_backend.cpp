#include "sharded_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>
#include <set>

#include "json_text.h"
#include "replica_repair.h"

namespace prism::service {

namespace {

using shard::json;
using std::chrono::milliseconds;

constexpr const char* kReadsMaxLen = "10000";  // reads are answered within their deadline: keep a few

std::string encode(const texture::GalleryEntry& e) {
  const std::vector<uint8_t> bytes = texture::Gallery::encode(e);
  return std::string(bytes.begin(), bytes.end());
}

std::string encode_query(const texture::Features& f) {
  texture::GalleryEntry q;
  q.id = "query";
  q.features = f;
  return encode(q);
}

long long whole_ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration_cast<milliseconds>(b - a).count();
}

// BLPOP's timeout: seconds, with milliseconds (0 would block forever).
std::string blpop_seconds(Clock::time_point deadline) {
  const double s = std::max<double>(0.01, double(whole_ms(Clock::now(), deadline)) / 1000.0);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

// A command a front needs to take its answers (Answers), refused by Redis: its Redis user's ACL
// (docs/SERVICE.md). The one wording of the start-up probe and of a request's failure.
std::string refused_answers_command(const std::string& url, const std::string& command, const Reply& r) {
  return "Redis at " + url + " refused " + command + ": " + r.str +
         " (a front takes its answers with BLMOVE, LINDEX and EXPIRE: its Redis user needs +blmove +lindex +expire, "
         "docs/SERVICE.md)";
}

// How long a request's taken answers stay in Redis after it ended.
constexpr int kTakenTtlS = 60;

// The answers to one request, on its reply key (workers LPUSH them there), each taken with BLMOVE
// into a list of the request's own, KEY:taken, rather than popped: a reply lost with its connection
// (cut once Redis had moved the answer: a partition that healed, a reset) is still there, and read
// by its index (LINDEX, which takes nothing) before the next wait. Popped, it was gone: BLPOP, sent
// again on a fresh connection, waited for it until the deadline. Redis::command never sends BLMOVE
// again itself; a wait whose connection is lost is tried once more here, after that read.
class Answers {
 public:
  Answers(const std::string& key, TakenExpiries& late) : key_(key), taken_key_(key + ":taken"), late_(late) {}
  // The next answer as BLPOP answers it ([KEY, answer]), or a nil reply when none came by `until`.
  Reply next(Redis& redis, Clock::time_point until) {
    for (int attempt = 0;; ++attempt) {
      try {
        if (cut_) {  // an answer the lost wait took (or a wait Redis still ran for the lost connection)
          const Reply r = redis.command({"LINDEX", taken_key_, std::to_string(taken_)});
          if (r.error()) refused(redis, "LINDEX", r);
          if (r.type == Reply::Type::kString) return seen(r.str);
        }
        moved_until_ = std::max(moved_until_, until);
        const Reply r = redis.command({"BLMOVE", key_, taken_key_, "LEFT", "RIGHT", blpop_seconds(until)},
                                      std::chrono::duration_cast<milliseconds>(until - Clock::now()));
        if (r.error()) refused(redis, "BLMOVE", r);  // (a NOPERM answered again at once: no wait)
        return r.type == Reply::Type::kString ? seen(r.str) : r;
      } catch (const RedisError&) {
        cut_ = true;
        if (attempt > 0 || Clock::now() >= until) {
          unreachable_ = true;
          throw;
        }
      }
    }
  }
  // Done with the request: its taken answers expire (best effort, as the workers' reply lists do).
  // Every KEY:taken that may exist gets its EXPIRE, whichever way the request ended: now when Redis
  // answers, else later (TakenExpiries); and after a lost connection once more when its last wait
  // can no longer move an answer in Redis.
  void forget(Redis& redis) noexcept {
    if (taken_ == 0 && !cut_) return;  // every wait answered on its connection, none an answer: no KEY:taken
    try {  // (out of memory in add: the list is left to a front's start, expire_orphaned_taken)
      if (cut_) late_.add(taken_key_, moved_until_ + kLateMoveMargin);
      if (unreachable_) return;  // Redis lost twice: not waited for here (cut_ is set, so it is due later)
      try {
        redis.command({"EXPIRE", taken_key_, std::to_string(kTakenTtlS)});
      } catch (...) {
        late_.add(taken_key_, Clock::now());
      }
    } catch (...) {
    }
  }

 private:
  // A lost wait's BLMOVE times out in Redis when its block time, counted from its arrival, ends.
  static constexpr std::chrono::seconds kLateMoveMargin{1};
  [[noreturn]] static void refused(Redis& redis, const std::string& command, const Reply& r) {
    throw ServiceError(503, "", refused_answers_command(redis.url(), command, r));
  }
  Reply seen(const std::string& answer) {
    ++taken_;
    Reply r;
    r.type = Reply::Type::kArray;
    r.elements.resize(2);
    r.elements[0].type = r.elements[1].type = Reply::Type::kString;
    r.elements[0].str = key_;
    r.elements[1].str = answer;
    return r;
  }
  std::string key_, taken_key_;
  TakenExpiries& late_;
  long long taken_ = 0;              // answers taken and returned: the next one is at this index of KEY:taken
  Clock::time_point moved_until_{};  // the latest block time of a BLMOVE sent
  bool cut_ = false;                 // a wait's connection was lost: an answer may be in KEY:taken unseen
  bool unreachable_ = false;         // lost twice: the request fails with Redis unreachable
};

// When the request is done, whichever way: answers.forget(), then the EXPIREs other requests left
// due (on this connection while it is open: a request that lost Redis does not wait for it again).
struct ForgetAnswers {
  Answers& answers;
  Redis& redis;
  TakenExpiries& late;
  ~ForgetAnswers() {
    answers.forget(redis);
    if (redis.connected() && !late.empty()) late.send_due(redis, kTakenTtlS);
  }
};

// Reads are hedged (Dean and Barroso, "The Tail at Scale", CACM 2013): a read still unanswered at
// half its time is sent once more. One consumer of the shard's `readers` group takes each read; a
// replica killed while holding one never answers it, and XAUTOCLAIM gives it back only after 30 s,
// so without the second copy a read in flight when a replica dies fails although another replica
// serves its shard. Both copies may be answered: the first answer counts, the other expires unread.
Clock::time_point hedge_time(Clock::time_point start, Clock::time_point deadline) {
  return start + (deadline - start) / 2;
}

std::string list_shards(const std::vector<int>& shards) {
  std::string s;
  for (size_t i = 0; i < shards.size(); ++i) s += (i ? ", " : "") + std::to_string(shards[i]);
  return s;
}

// How soon a request checks that its shard has a live worker (a shard answers well before), and
// how often while it waits; a shard without one is answered with 503 and this Retry-After.
constexpr std::chrono::milliseconds kLivenessFirstCheck{250}, kLivenessCheckEvery{1000};
constexpr int kDeadShardRetryAfterSeconds = 2;

ServiceError unreachable(const RedisError& e) { return ServiceError(503, "", e.what()); }

// The KEY:taken lists of a front that exited with EXPIREs still due (Redis out of reach then: its
// TakenExpiries went with it) would stay in Redis for good. A front starting gives each of them
// that has no time to live this one (EXPIRE ... NX, Redis 7.0): far longer than any live request's
// wait, whose own EXPIRE then replaces it.
constexpr int kOrphanedTakenTtlS = 600;
void expire_orphaned_taken(Redis& redis) {
  std::string cursor = "0";
  do {
    const Reply r = redis.command({"SCAN", cursor, "MATCH", "prism:reply:*:taken", "COUNT", "1000"});
    // Best effort, as every EXPIRE of these lists: an error (no +scan, or a Redis before 7.0 refusing
    // NX in the pipeline's replies) leaves them as they are.
    if (r.error() || r.type != Reply::Type::kArray || r.elements.size() != 2) return;
    cursor = r.elements[0].str;
    std::vector<std::vector<std::string>> expire;
    for (const Reply& key : r.elements[1].elements)
      expire.push_back({"EXPIRE", key.str, std::to_string(kOrphanedTakenTtlS), "NX"});
    if (!expire.empty()) redis.pipeline(expire);
  } while (cursor != "0");
}

}  // namespace

void TakenExpiries::add(const std::string& key, Clock::time_point not_before) {
  std::lock_guard lock(mutex_);
  if (keys_.size() >= kMax) keys_.pop_front();
  keys_.emplace_back(not_before, key);
  size_.store(keys_.size(), std::memory_order_relaxed);
}

bool TakenExpiries::empty() const { return size_.load(std::memory_order_relaxed) == 0; }

void TakenExpiries::send_due(Redis& redis, int ttl_s) noexcept {
  std::vector<std::pair<Clock::time_point, std::string>> due;
  try {
    std::lock_guard lock(mutex_);
    const Clock::time_point now = Clock::now();
    const auto later = std::stable_partition(keys_.begin(), keys_.end(), [&](const auto& k) { return k.first > now; });
    const auto from = keys_.end() - std::min(keys_.end() - later, kBatch);
    due.assign(std::make_move_iterator(from), std::make_move_iterator(keys_.end()));  // allocates before it moves
    keys_.erase(from, keys_.end());
    size_.store(keys_.size(), std::memory_order_relaxed);
  } catch (...) {  // out of memory: left for a later call
    return;
  }
  if (due.empty()) return;
  try {
    std::vector<std::vector<std::string>> expire;
    for (const auto& k : due) expire.push_back({"EXPIRE", k.second, std::to_string(ttl_s)});
    redis.pipeline(expire);  // an error reply (NOPERM) is the start-up probe's to report
  } catch (...) {
    try {
      for (auto& k : due) add(k.second, k.first);
    } catch (...) {  // out of memory: those keys leak (a front starting gives them a time to live)
    }
  }
}

ShardedBackend::ShardedBackend(const ShardedOptions& options)
    : options_(options),
      pool_(options.redis, options.idle_connections),
      sentinel_(bool(sentinel_status(options.redis))) {
  if (options_.shards < 0) throw std::invalid_argument("shards " + std::to_string(options_.shards) + " is negative");
  {
    RedisPool::Lease redis = pool_.acquire();
    shards_ = shard::agree_shard_count(*redis, options_.shards);
    normalisation_ = shard::agree_normalisation(*redis, options_.normalisation);
    // The commands that take answers (Answers), tried once on a key nobody uses: a Redis user without
    // them (the ACL of earlier versions gave +blpop) is refused here rather than at every request.
    const std::string probe = "prism:reply:probe";
    for (const std::vector<std::string>& c :
         std::vector<std::vector<std::string>>{{"LINDEX", probe, "0"},
                                               {"EXPIRE", probe, "1"},
                                               {"BLMOVE", probe, probe + ":taken", "LEFT", "RIGHT", "0.01"}}) {
      const Reply r = redis->command(c);
      if (r.error()) throw RedisError(refused_answers_command(redis->url(), c[0], r));
    }
    expire_orphaned_taken(*redis);
  }
  std::random_device rd;
  char id[64];
  std::snprintf(id, sizeof id, "%08x%08x-%d", rd(), rd(), int(getpid()));
  front_id_ = id;
}

texture::Normalisation ShardedBackend::normalisation() {
  std::lock_guard lock(normalisation_mutex_);
  if (!normalisation_) {
    try {
      RedisPool::Lease redis = pool_.acquire();
      normalisation_ = shard::agree_normalisation(*redis, std::nullopt);
    } catch (const RedisError& e) {
      throw unreachable(e);  // 503 naming Redis, as every other call
    }
  }
  // Extracting with "none" meanwhile would enrol unnormalised features into a CLAHE shard, or
  // search one with unnormalised queries: both silently worse, so nothing is extracted until known.
  if (!normalisation_)
    throw ServiceError(503, "",
                       "no shard worker has announced the gallery's contrast normalisation yet (" +
                           shard::kNormaliseKey + " is not set at " + pool_.url() +
                           "): enrolments, updates, verifies and searches wait for a worker to start",
                       kNormalisationRetryAfterSeconds);
  return *normalisation_;
}

Clock::time_point ShardedBackend::deadline_of(Clock::time_point deadline) const {
  return deadline == Clock::time_point::max() ? Clock::now() + options_.default_timeout : deadline;
}

std::string ShardedBackend::next_reply_key() { return "prism:reply:" + front_id_ + ":" + std::to_string(++seq_); }

shard::Layout ShardedBackend::layout(Redis& redis) {
  try {
    const shard::Layout l = shard::read_layout(redis);
    shards_ = l.shards;
    return l;
  } catch (const RedisError&) {
    throw;
  } catch (const std::runtime_error& e) {  // prism:shards lost or malformed: the deployment cannot route
    throw ServiceError(503, "", e.what(), kDeadShardRetryAfterSeconds);
  }
}

shard::Layout ShardedBackend::layout() {
  try {
    RedisPool::Lease redis = pool_.acquire();
    return layout(*redis);
  } catch (const RedisError& e) {
    throw unreachable(e);
  }
}

json ShardedBackend::call(int shard, bool write, const std::string& op, const std::string& entry, const json& params,
                          Clock::time_point given, const std::string& id) {
  const Clock::time_point start = Clock::now(), deadline = deadline_of(given);
  check_deadline(deadline, "it was sent to its shard");
  const std::string reply = next_reply_key();
  try {
    RedisPool::Lease redis = pool_.acquire();
    Answers taken(reply, taken_expiries_);
    const ForgetAnswers forget{taken, *redis, taken_expiries_};
    std::vector<std::string> xadd = {"XADD", shard::reads_key(shard), "MAXLEN", "~", kReadsMaxLen};
    xadd.insert(xadd.end(), {"*", "op", op, "reply", reply, "deadline_ms", std::to_string(shard::unix_ms(deadline)),
                             "entry", entry, "params", json_text(params)});
    const uint64_t followed = redis->failovers();  // through Sentinel: a failover meanwhile is seen
    // A write is routed by the layout as it is when its entries are added: WATCH prism:shards and
    // prism:split, read them, then add the entry (and, during a split, its copy for the product's
    // new shard, answered to nobody) in one MULTI/EXEC, which Redis refuses when a reshard changed
    // the layout since the WATCH; the write is then routed again. So every write entry of a parent
    // shard after its split marker has its copy in the new shard's stream, in the same order.
    auto send_write_watched = [&] {
      for (int attempt = 0;; ++attempt) {
        const std::vector<Reply> watched = redis->pipeline(
            {{"WATCH", shard::kShardsKey, shard::kSplitKey}, {"MGET", shard::kShardsKey, shard::kSplitKey}});
        if (watched[0].error() || watched[1].error())
          throw ServiceError(503, "",
                             "Redis at " + redis->url() + " refused WATCH or MGET of " + shard::kShardsKey + ": " +
                                 (watched[0].error() ? watched[0].str : watched[1].str));
        if (watched[1].type != Reply::Type::kArray || watched[1].elements.size() != 2)
          throw ServiceError(503, "",
                             "Redis at " + redis->url() + " answered MGET " + shard::kShardsKey + " with no pair");
        shard::Layout l;
        try {
          l = shard::layout_from(watched[1].elements[0], watched[1].elements[1], redis->url());
        } catch (const RedisError&) {
          throw;
        } catch (const std::runtime_error& e) {
          throw ServiceError(503, "", e.what(), kDeadShardRetryAfterSeconds);
        }
        shard = shard::shard_of(id, l.shards);
        const int also = l.split ? shard::shard_of(id, l.split) : shard;
        auto add = [&](int k, const std::string& to, int routed) {
          json p = params;
          p["shards"] = routed;  // the count it was routed by: the worker checks the product is its own
          return std::vector<std::string>{"XADD",
                                          shard::writes_key(k),
                                          "*",
                                          "op",
                                          op,
                                          "reply",
                                          to,
                                          "deadline_ms",
                                          std::to_string(shard::unix_ms(deadline)),
                                          "entry",
                                          entry,
                                          "params",
                                          json_text(p)};
        };
        std::vector<std::vector<std::string>> tx = {{"MULTI"}, add(shard, reply, l.shards)};
        if (also != shard) tx.push_back(add(also, "", l.split));
        tx.push_back({"EXEC"});
        const std::vector<Reply> done = redis->pipeline(tx, /*same_connection=*/true);
        const Reply& exec = done.back();
        if (exec.type == Reply::Type::kArray) {
          for (const Reply& added : exec.elements)
            if (added.error()) throw ServiceError(503, "", "Redis at " + redis->url() + " refused XADD: " + added.str);
          shards_ = l.shards;
          return;
        }
        if (!exec.nil() || attempt >= 20 || Clock::now() >= deadline)
          throw ServiceError(503, "",
                             "Redis at " + redis->url() + " refused the write's MULTI/EXEC" +
                                 (exec.nil() ? std::string(": the shard layout kept changing") : ": " + exec.str),
                             kDeadShardRetryAfterSeconds);
      }
    };
    auto send_write = [&] {
      // Until its EXEC, the connection WATCHes the layout: a throw before (a malformed layout, a
      // refused MGET) drops the connection, which the pool would otherwise hand to another request
      // with the WATCH still on (its EXEC refused for a change it never read). Fronts are not
      // given UNWATCH (the documented ACL), and a dropped connection watches nothing.
      try {
        send_write_watched();
      } catch (...) {
        redis->disconnect();
        throw;
      }
    };
    auto send = [&] {
      if (write) return send_write();
      const Reply added = redis->command(xadd);
      if (added.error()) throw ServiceError(503, "", "Redis at " + redis->url() + " refused XADD: " + added.str);
    };
    // Waits for the answer until `until`; a shard found without a live worker (checked after
    // kLivenessFirstCheck, then every kLivenessCheckEvery) is answered at once, not at the deadline.
    Clock::time_point check = start + kLivenessFirstCheck;
    auto answer_until = [&](Clock::time_point until) {
      for (;;) {
        Reply r = taken.next(*redis, std::min(until, check));
        if (r.type == Reply::Type::kArray || Clock::now() >= until) return r;
        if (Clock::now() >= check) {
          if (client_gone())
            throw ServiceError(
                499, "",
                "the client closed its connection: shard " + std::to_string(shard) + " is no longer waited for");
          // A write needs a running writer; a read a replica whose readers are not all stuck.
          if (!live_workers(/*for_reads=*/!write).count(shard))
            throw ServiceError(
                503, "",
                "shard " + std::to_string(shard) + " did not answer: it has no live worker (no prism:worker:" +
                    std::to_string(shard) + ":* at " + redis->url() +
                    (write ? std::string(")")
                           : ", or every one's readers hang: prism:hung:" + std::to_string(shard) + ":*)"),
                kDeadShardRetryAfterSeconds);
          check = Clock::now() + kLivenessCheckEvery;
        }
      }
    };
    send();
    // A write needs no hedge: every replica applies it through its own group, and any answers.
    Reply got = answer_until(write ? deadline : hedge_time(start, deadline));
    if (!write && got.type != Reply::Type::kArray && Clock::now() < deadline) {
      send();
      got = answer_until(deadline);
    }
    // A replica that failed to apply the write says so (`retrying`: it keeps trying): a sibling's
    // answer is waited for until the deadline, and the failure is the answer only if none comes.
    std::optional<std::string> failed;
    while (write && got.type == Reply::Type::kArray && got.elements.size() == 2 &&
           json::parse(got.elements[1].str).value("retrying", false) && Clock::now() < deadline) {
      failed = got.elements[1].str;
      got = taken.next(*redis, deadline);
    }
    if (got.type != Reply::Type::kArray || got.elements.size() != 2) {
      if (failed) return shard::answer_from(*failed, /*created_ok=*/true);
      throw ServiceError(503, "",
                         "shard " + std::to_string(shard) + " did not answer within " +
                             std::to_string(whole_ms(start, deadline)) + " ms");
    }
    if (write) replicated(*redis, followed, shard, deadline);
    return shard::answer_from(got.elements[1].str, /*created_ok=*/true);
  } catch (const RedisError& e) {
    throw unreachable(e);
  } catch (const json::exception& e) {
    throw ServiceError(502, "", "shard " + std::to_string(shard) + " sent a malformed answer: " + e.what());
  }
}

std::map<int, json> ShardedBackend::every_shard(const json& params, int shards) const {
  std::map<int, json> to;
  for (int k = 0; k < shards; ++k) to.emplace(k, params);
  return to;
}

namespace {

// Whether a shard answered under another shard count than the read was routed by (`shards` in its
// answer; absent from workers before online splits): a split committed meanwhile, so the read is
// routed again.
bool other_layout(const json& answer, int shards) {
  return answer.contains("shards") && answer.at("shards").is_number_integer() &&
         answer.at("shards").get<int>() != shards;
}

// How often a read routed by a layout that changed under it is routed again (within its deadline).
constexpr int kRerouteReads = 5;

ServiceError rerouted_too_often() {
  return ServiceError(503, "", "the deployment's shard layout kept changing during the read: retry it", 1);
}

}  // namespace

std::vector<json> ShardedBackend::scatter(const std::string& op, const std::string& entry,
                                          const std::map<int, json>& to, Clock::time_point deadline,
                                          std::vector<int>& missing) {
  const std::string reply = next_reply_key();
  const Clock::time_point hedge = hedge_time(Clock::now(), deadline);
  std::vector<json> answers;
  std::set<int> heard;
  check_deadline(deadline, "it was sent to the shards");
  try {
    RedisPool::Lease redis = pool_.acquire();
    Answers taken(reply, taken_expiries_);
    const ForgetAnswers forget{taken, *redis, taken_expiries_};
    const std::string deadline_ms = std::to_string(shard::unix_ms(deadline));
    std::map<int, std::string> params;
    for (const auto& [k, p] : to) params[k] = json_text(p);
    auto send = [&](int k) {
      const Reply added =
          redis->command({"XADD", shard::reads_key(k), "MAXLEN", "~", kReadsMaxLen, "*", "op", op, "reply", reply,
                          "deadline_ms", deadline_ms, "entry", entry, "params", params[k]});
      if (added.error()) throw ServiceError(503, "", "Redis at " + redis->url() + " refused XADD: " + added.str);
    };
    for (const auto& [k, p] : to) send(k);
    bool hedged = false;
    // Shards without a live worker (checked as in call()) are not waited for: missing at once.
    Clock::time_point check = Clock::now() + kLivenessFirstCheck;
    std::set<int> dead;
    while (heard.size() + dead.size() < to.size() && Clock::now() < deadline) {
      const Clock::time_point until = hedged ? deadline : hedge;
      const Reply got = taken.next(*redis, std::min(until, check));
      if ((got.type != Reply::Type::kArray || got.elements.size() != 2) && Clock::now() < until) {
        if (client_gone())
          throw ServiceError(499, "", "the client closed its connection: the shards are no longer waited for");
        const std::map<int, std::vector<std::string>> live = live_workers(/*for_reads=*/true);
        dead.clear();
        for (const auto& [k, p] : to)
          if (!heard.count(k) && !live.count(k)) dead.insert(k);
        check = Clock::now() + kLivenessCheckEvery;
        continue;
      }
      if (got.type != Reply::Type::kArray || got.elements.size() != 2) {
        if (hedged || Clock::now() >= deadline) break;
        hedged = true;  // the shards not heard from get their read once more (hedge_time)
        for (const auto& [k, p] : to)
          if (!heard.count(k)) send(k);
        continue;
      }
      json answer = shard::answer_from(got.elements[1].str, /*created_ok=*/false);
      const int k = shard::number_field<int>(op == "stats" ? answer.at("stats") : answer, "shard");
      if (!to.count(k) || !heard.insert(k).second) continue;  // a read answered twice (reclaimed)
      answers.push_back(std::move(answer));
    }
  } catch (const RedisError& e) {
    throw unreachable(e);
  } catch (const json::exception& e) {
    throw ServiceError(502, "", std::string("a shard sent a malformed answer: ") + e.what());
  }
  missing.clear();
  for (const auto& [k, p] : to)
    if (!heard.count(k)) missing.push_back(k);
  return answers;
}

// Reads a shard's answer with `read`: a malformed one is 502, like one that is not JSON (call()).
template <typename F>
auto from_answer(int shard, F&& read) {
  try {
    return read();
  } catch (const json::exception& e) {
    throw ServiceError(502, "", "shard " + std::to_string(shard) + " sent a malformed answer: " + e.what());
  }
}

WriteResult ShardedBackend::write(const texture::GalleryEntry& given, bool replace, Clock::time_point deadline) {
  texture::GalleryEntry entry = given;
  if (entry.enrolled_unix == 0) entry.enrolled_unix = int64_t(std::time(nullptr));  // the same on every replica
  const json a = call(-1, true, replace ? "put" : "post", encode(entry), json::object(), deadline, entry.id);
  return from_answer(shard::shard_of(entry.id, shards_), [&] { return shard::write_result_from(a); });
}

bool ShardedBackend::remove(const std::string& id, Clock::time_point deadline) {
  const json a = call(-1, true, "delete", "", {{"id", id}}, deadline, id);
  return from_answer(shard::shard_of(id, shards_), [&] { return a.at("removed").get<bool>(); });
}

bool ShardedBackend::routed_elsewhere(const std::string& id, int shards) {
  try {
    return shard::shard_of(id, layout().shards) != shard::shard_of(id, shards);
  } catch (const ServiceError&) {
    return false;  // the layout cannot be read either: the read's own failure is the answer
  }
}

json ShardedBackend::read_call(const std::string& id, const std::string& op, const std::string& entry,
                               const json& params, Clock::time_point given) {
  const Clock::time_point deadline = deadline_of(given);
  // Routed first by the count last read, without asking Redis (one round trip less per read): a
  // worker answers every read with its own count, and one whose count differs is read again by the
  // layout of the moment. That catches a stale count: a split's commit sets prism:shards and adds
  // its marker to every parent's writes stream in one script (reshard.cpp), and a parent applies
  // the writes before it answers a read added after them (read-your-writes), so it answers under
  // the new count, or 421 for a product that moved.
  int shards = shards_;
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0) shards = layout().shards;
    json a;
    try {
      a = call(shard::shard_of(id, shards), false, op, entry, params, deadline);
    } catch (const ServiceError& e) {
      // 421: its shard no longer holds it (a split committed meanwhile). A 503 under the count
      // last read (a shard without workers, say, in a deployment made again with fewer shards) is
      // tried again only when the layout of the moment routes it elsewhere; anything else is the
      // answer.
      if (e.status != 421 && (attempt > 0 || e.status != 503 || !routed_elsewhere(id, shards))) throw;
      a = {{"shards", -1}};
    }
    if (!other_layout(a, shards)) return a;
    if (attempt >= kRerouteReads || Clock::now() >= deadline) throw rerouted_too_often();
  }
}

std::optional<Product> ShardedBackend::get(const std::string& id, Clock::time_point deadline) {
  const json a = read_call(id, "get", "", {{"id", id}}, deadline);
  return from_answer(shard::shard_of(id, shards_), [&]() -> std::optional<Product> {
    if (!a.at("found").get<bool>()) return std::nullopt;
    return shard::product_from(a.at("product"));
  });
}

VerifyAnswer ShardedBackend::verify(const std::string& id, const texture::Features& query,
                                    const texture::SearchParams& params, Clock::time_point deadline) {
  json p = shard::params_json(params);
  p["id"] = id;
  const Clock::time_point start = Clock::now();
  const json a = read_call(id, "verify", encode_query(query), p, deadline);
  const double round_trip = ms_between(start, Clock::now());
  VerifyAnswer v = from_answer(shard::shard_of(id, shards_), [&] { return shard::verify_answer_from(a); });
  v.shard_transport_ms = std::max(0.0, round_trip - v.match_ms - v.verify_ms - v.shard_queue_ms.value_or(0));
  return v;
}

namespace {

std::vector<ShardSearch> search_parts(const std::vector<json>& answers) {
  std::vector<ShardSearch> parts;
  try {
    for (const json& a : answers) parts.push_back(shard::shard_search_from(a));
  } catch (const json::exception& e) {
    throw ServiceError(502, "", std::string("a shard sent a malformed search answer: ") + e.what());
  }
  return parts;
}

}  // namespace

SearchAnswer ShardedBackend::search(const SearchQuery& q) {
  // Routed by the layout of the moment; answered again when a shard answered under another (a split
  // committed meanwhile: a parent that dropped what moved would leave those products out).
  SearchQuery routed = q;
  routed.deadline = deadline_of(q.deadline);
  for (int attempt = 0;; ++attempt) {
    const shard::Layout l = layout();
    std::optional<SearchAnswer> a = search_by(routed, l.shards);
    if (a) return *a;
    if (attempt >= kRerouteReads || Clock::now() >= routed.deadline) throw rerouted_too_often();
  }
}

std::optional<SearchAnswer> ShardedBackend::search_by(const SearchQuery& q, int shards) {
  const Clock::time_point start = Clock::now(), deadline = deadline_of(q.deadline);
  bool moved = false;
  auto checked = [&](std::vector<json> answers) {
    for (const json& a : answers) moved = moved || other_layout(a, shards);
    return answers;
  };
  auto refuse_missing = [&](const std::vector<int>& missing) {
    if (missing.empty() || q.allow_partial) return;
    throw ServiceError(503, "",
                       std::string(missing.size() == 1 ? "shard " : "shards ") + list_shards(missing) +
                           " did not answer (no live worker, or none within " +
                           std::to_string(whole_ms(start, deadline)) + " ms; " + std::to_string(shards) +
                           " shards in all; allow partial results to search the others)",
                       kDeadShardRetryAfterSeconds);
  };
  json p = shard::params_json(q.params);
  p["top_k"] = q.top_k;
  const std::string query = encode_query(q.features);
  // Two phases (ShardSearch in backend.h says why): every shard's shortlist by score, then only the
  // global shortlist verified, each shard verifying its own candidates in it. With allow_partial
  // the first phase waits for the shards until three quarters of the time, so that what the others
  // found can still be verified; without, a shard missing then fails the search anyway.
  const Clock::time_point scored_by = q.allow_partial ? deadline - (deadline - start) / 4 : deadline;
  json score = p;
  score["phase"] = "score";
  std::vector<int> missing;
  std::vector<ShardSearch> parts =
      search_parts(checked(scatter("search", query, every_shard(score, shards), scored_by, missing)));
  if (moved) return std::nullopt;
  refuse_missing(missing);
  const std::map<int, std::vector<Match>> asked = shortlist_by_shard(parts, q.params);
  std::optional<double> verify_ms;
  if (!asked.empty()) {
    std::map<int, json> to;
    for (const auto& [k, candidates] : asked) {
      json v = p;
      v["phase"] = "verify";
      v["candidates"] = shard::scored_json(candidates);
      to.emplace(k, std::move(v));
    }
    const Clock::time_point verify_start = Clock::now();
    std::vector<int> late;
    const std::vector<ShardSearch> verified = search_parts(checked(scatter("search", query, to, deadline, late)));
    if (moved) return std::nullopt;
    verify_ms = ms_between(verify_start, Clock::now());
    refuse_missing(late);
    for (ShardSearch& part : parts) {
      if (!part.scored) continue;  // verified in the first phase already (a worker of an older release)
      part.scored = false;
      const auto v =
          std::find_if(verified.begin(), verified.end(), [&](const ShardSearch& x) { return x.shard == part.shard; });
      if (v == verified.end()) continue;  // asked for nothing (none of its candidates made the cut)
      // Only what was asked for: a worker of an older release answers with its whole shortlist.
      const std::vector<Match>& wanted = asked.at(part.shard);
      part.shortlist.clear();
      for (const Match& m : v->shortlist)
        if (std::any_of(wanted.begin(), wanted.end(), [&](const Match& w) { return w.id == m.id; }))
          part.shortlist.push_back(m);
      part.verify_ms = v->verify_ms;
    }
    // A shard that did not verify its candidates in time (allow_partial) is missing: its part goes.
    parts.erase(std::remove_if(
                    parts.begin(), parts.end(),
                    [&](const ShardSearch& x) { return std::find(late.begin(), late.end(), x.shard) != late.end(); }),
                parts.end());
    missing.insert(missing.end(), late.begin(), late.end());
    std::sort(missing.begin(), missing.end());
  }
  SearchAnswer answer = merge_search(parts, q.params, q.top_k, shards);
  if (verify_ms) answer.verify_ms = *verify_ms;
  answer.missing_shards = missing;
  return answer;
}

ServiceStats ShardedBackend::stats(Clock::time_point deadline) {
  std::vector<int> missing;
  const int shards = layout().shards;
  const std::vector<json> answers =
      scatter("stats", "", every_shard(json::object(), shards), deadline_of(deadline), missing);
  ServiceStats s;
  s.shards_expected = shards;
  try {
    for (const json& a : answers) s.shards.push_back(shard::shard_stats_from(a.at("stats")));
  } catch (const json::exception& e) {
    throw ServiceError(502, "", std::string("a shard sent malformed stats: ") + e.what());
  }
  for (const int k : missing) {
    ShardStats none;
    none.shard = k;
    none.answered = false;
    s.shards.push_back(none);
  }
  std::sort(s.shards.begin(), s.shards.end(),
            [](const ShardStats& a, const ShardStats& b) { return a.shard < b.shard; });
  const std::map<int, std::vector<std::string>> live = live_workers();
  for (ShardStats& sh : s.shards) {
    const auto names = live.find(sh.shard);
    sh.replicas = replicas(sh.shard, names == live.end() ? std::vector<std::string>{} : names->second);
  }
  return s;
}

std::vector<ReplicaStats> ShardedBackend::replicas(int k, const std::vector<std::string>& live) {
  try {
    RedisPool::Lease redis = pool_.acquire();
    std::vector<ReplicaStats> out = shard::replica_groups(*redis, k);
    for (ReplicaStats& r : out) {
      r.live = std::find(live.begin(), live.end(), r.replica) != live.end();
      const Reply why = redis->command({"GET", shard::failing_key(k, r.replica)});
      if (why.type == Reply::Type::kString) r.failing = why.str;
      const Reply repair = redis->command({"HMGET", repair::digest_key(k, r.replica), "divergent", "repaired"});
      if (repair.type == Reply::Type::kArray && repair.elements.size() == 2 &&
          repair.elements[0].type == Reply::Type::kString && repair.elements[1].type == Reply::Type::kString) {
        try {
          r.divergent = std::stoll(repair.elements[0].str);
          r.repaired = std::stoll(repair.elements[1].str);
        } catch (const std::logic_error&) {  // not numbers: unknown
        }
      }
    }
    return out;
  } catch (const RedisError& e) {
    throw unreachable(e);
  }
}

namespace {

// The keys PREFIXK:NAME (SCAN MATCH PREFIX*): shard -> names, sorted.
std::map<int, std::vector<std::string>> scan_shard_keys(Redis& redis, const std::string& prefix) {
  std::map<int, std::vector<std::string>> out;
  std::string cursor = "0";
  do {
    const Reply r = redis.command({"SCAN", cursor, "MATCH", prefix + "*", "COUNT", "1000"});
    if (r.type != Reply::Type::kArray || r.elements.size() != 2) break;
    cursor = r.elements[0].str;
    for (const Reply& key : r.elements[1].elements) {
      const std::string rest = key.str.substr(prefix.size());
      const size_t colon = rest.find(':');
      if (colon == std::string::npos || colon == 0 || colon > 9 || rest.find_first_not_of("0123456789") < colon)
        continue;
      out[std::stoi(rest.substr(0, colon))].push_back(rest.substr(colon + 1));
    }
  } while (cursor != "0");
  for (auto& [k, names] : out) std::sort(names.begin(), names.end());
  return out;
}

}  // namespace

void ShardedBackend::replicated(Redis& redis, uint64_t followed, int shard, Clock::time_point deadline) {
  if (!sentinel_) return;
  const std::string k = std::to_string(shard);
  const int64_t now_ms = std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
  if (now_ms < no_replica_until_ms_) {  // none answered a moment ago: not waited for again yet
    ++unreplicated_;
    return;
  }
  const long long ms = std::max<long long>(1, std::min<long long>(kWaitReplicaMs, whole_ms(Clock::now(), deadline)));
  Reply n;
  try {
    n = redis.command({"WAIT", "1", std::to_string(ms)}, milliseconds(ms));
  } catch (const RedisError& e) {
    throw ServiceError(503, "",
                       "shard " + k + " applied the write, but Redis was lost before its entry reached a replica (" +
                           e.what() + "): retry it (writes are idempotent)",
                       kDeadShardRetryAfterSeconds);
  }
  if (redis.failovers() != followed)
    throw ServiceError(503, "",
                       "shard " + k +
                           " applied the write, but Redis failed over meanwhile and its entry may be lost with the old "
                           "master (the shard's other replicas would miss it): retry it (writes are idempotent)",
                       kDeadShardRetryAfterSeconds);
  if (n.type != Reply::Type::kInteger || n.integer < 1) {  // no replica (or WAIT refused): counted
    ++unreplicated_;
    no_replica_until_ms_ = now_ms + kNoReplicaPauseMs;
  }
}

std::string ShardedBackend::metrics() {
  const std::optional<SentinelStatus> s = sentinel_status(options_.redis);
  if (!s) return {};
  auto label = [](const std::string& v) {  // Prometheus label value escapes
    std::string out;
    for (const char c : v) {
      if (c == '\\' || c == '"') out += '\\';
      out += c == '\n' ? std::string("\\n") : std::string(1, c);
    }
    return out;
  };
  const std::string master = "master=\"" + label(s->master) + "\"";
  std::string text =
      "# HELP prism_redis_failovers_total Redis master failovers this front has followed (through Sentinel).\n"
      "# TYPE prism_redis_failovers_total counter\n"
      "prism_redis_failovers_total{" +
      master + "} " + std::to_string(s->failovers) +
      "\n# HELP prism_redis_unreplicated_writes_total Writes answered although no Redis replica had "
      "confirmed their stream entry (WAIT 1) in time: a failover before it did could lose the entry.\n"
      "# TYPE prism_redis_unreplicated_writes_total counter\n"
      "prism_redis_unreplicated_writes_total{" +
      master + "} " + std::to_string(unreplicated_.load()) +
      "\n# HELP prism_redis_master_info The Redis master this front uses now, as the sentinels named it.\n"
      "# TYPE prism_redis_master_info gauge\n";
  if (!s->address.empty()) text += "prism_redis_master_info{" + master + ",address=\"" + label(s->address) + "\"} 1\n";
  return text;
}

std::map<int, std::vector<std::string>> ShardedBackend::live_workers(bool for_reads) {
  try {
    RedisPool::Lease redis = pool_.acquire();
    std::map<int, std::vector<std::string>> live = scan_shard_keys(*redis, "prism:worker:");
    if (!for_reads) return live;
    for (const auto& entry : scan_shard_keys(*redis, "prism:hung:")) {
      const std::vector<std::string>& hung = entry.second;  // a plain name: lambdas may not capture bindings
      const auto it = live.find(entry.first);
      if (it == live.end()) continue;
      std::vector<std::string>& names = it->second;
      names.erase(std::remove_if(names.begin(), names.end(),
                                 [&](const std::string& n) { return std::count(hung.begin(), hung.end(), n) > 0; }),
                  names.end());
      if (names.empty()) live.erase(it);
    }
    return live;
  } catch (const RedisError& e) {
    throw unreachable(e);
  }
}

std::string ShardedBackend::health() {
  try {
    RedisPool::Lease redis = pool_.acquire();
    shards_ = shard::read_layout(*redis).shards;   // the front follows the layout (an online split changes it)
    taken_expiries_.send_due(*redis, kTakenTtlS);  // also when no request comes
  } catch (const shard::ShardCountUnset&) {
    return shard::kShardsKey + " is not set at " + pool_.url() + " (Redis lost its data?)";
  } catch (const std::exception& e) {  // RedisError, or a malformed layout (MalformedLayout)
    return e.what();
  }
  // Every shard needs a live worker (its liveness key), or its products can be neither written nor
  // found.
  try {
    const std::map<int, std::vector<std::string>> live = live_workers(), reading = live_workers(/*for_reads=*/true);
    std::vector<int> dead, hung;
    for (int k = 0; k < shards_.load(); ++k)
      if (!live.count(k))
        dead.push_back(k);
      else if (!reading.count(k))
        hung.push_back(k);
    if (!dead.empty())
      return std::string(dead.size() == 1 ? "shard " : "shards ") + list_shards(dead) + " ha" +
             (dead.size() == 1 ? "s" : "ve") + " no live worker";
    if (!hung.empty())
      return std::string(hung.size() == 1 ? "shard " : "shards ") + list_shards(hung) +
             ": every replica's readers hang past their deadlines (prism:hung:K:NAME), so no read is answered";
    // A replica that cannot apply a write serves no reads and diverges from its siblings until it
    // can: unhealthy, naming it and why.
    RedisPool::Lease redis = pool_.acquire();
    for (const auto& [k, names] : live)
      for (const std::string& name : names) {
        const Reply why = redis->command({"GET", shard::failing_key(k, name)});
        if (why.type == Reply::Type::kString)
          return "shard " + std::to_string(k) + " replica " + name + " cannot apply writes: " + why.str;
      }
  } catch (const RedisError& e) {
    return e.what();
  } catch (const ServiceError& e) {
    return e.what();
  }
  // Workers hold their liveness key a moment before they announce the normalisation: until it is
  // known nothing can be enrolled or searched, so the front is not ready either.
  try {
    normalisation();
  } catch (const std::exception& e) {  // ServiceError 503, or prism:normalise holding no name
    return e.what();
  }
  return {};
}

}  // namespace prism::service
