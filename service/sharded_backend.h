// The front of a sharded deployment (`prism texture serve --redis URL`): a stateless Backend that
// forwards each operation to the shard workers (service/shard_worker.h, which describes the
// protocol) through Redis Streams. Writes, gets and verifies go to the product's shard; a search is
// scattered to every shard for their shortlists by score, and only the global shortlist of them is
// verified, by the shards holding it (two phases: ShardSearch in backend.h), and merged
// (merge_search), so that it answers what one gallery holding every shard's products would.
//
// The shard layout is read from Redis per request (prism:shards, and prism:split during an online
// split: service/reshard.h), so that fronts follow a split without a restart: writes are routed
// under WATCH in one MULTI/EXEC (during a split also to the product's new shard), reads are routed
// again when a shard answered under another count.
//
// Failures are answers, never crashes or hangs: Redis unreachable -> ServiceError 503 "Redis
// unreachable at URL"; a shard that does not answer by the deadline -> 503 naming it (a search with
// allow_partial answers with the shards that did, saying which are missing). A read (get, verify,
// search, stats) still unanswered at half its deadline is sent to its shard once more: a replica
// killed while holding a read never answers it, and the copy lets another replica answer in time.
// Through Sentinel a write is answered once a Redis replica also holds its stream entry (WAIT), or
// after half a second without one (counted in /metrics). A write that failed
// with 503 may still be applied later (it waits in its shard's stream): clients retry it, and a
// POST or PUT of the same entry is idempotent. Thread-safe: each call
// takes its own Redis connection from a pool (hiredis contexts are not thread-safe).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "redis.h"
#include "shard_protocol.h"

namespace prism::service {

struct ShardedOptions {
  std::string redis;  // redis://HOST:PORT[/DB], or sentinel://HOST:PORT,.../MASTER (redis.h)
  int shards = 0;     // N; 0: read prism:shards (which must then be set)
  // The deadline of a call given none (Clock::time_point::max()).
  std::chrono::milliseconds default_timeout{10000};
  size_t idle_connections = 16;  // kept open in the pool (serve: one per HTTP thread)
  // The contrast normalisation of the deployment (prism:normalise, shard_protocol.h): given, it is
  // agreed with Redis at start; unset, the workers' record is followed (none until one has said).
  std::optional<texture::Normalisation> normalisation;
};

// The lists KEY:taken into which a front moved its answers (sharded_backend.cpp, Answers) whose
// EXPIRE is still due: one that could not be sent when its request ended (Redis out of reach), or
// sent again once a BLMOVE of a lost connection can no longer run in Redis (a wait cut by a
// partition stays blocked there until its timeout, and may then move an answer into a list that an
// EXPIRE sent before it found missing). Sent by later requests and health checks; at most kMax kept.
class TakenExpiries {
 public:
  void add(const std::string& key, Clock::time_point not_before);
  // EXPIRE (`ttl_s`) of the keys due (up to kBatch), on `redis`; what Redis did not get stays. Never throws.
  void send_due(Redis& redis, int ttl_s) noexcept;
  bool empty() const;  // without the lock: every request asks

 private:
  static constexpr size_t kMax = 100000;  // Redis down for long: the oldest are dropped (and leak)
  // Sent at most this many at once: after an outage the first request to end does not carry them all.
  static constexpr ptrdiff_t kBatch = 1000;
  std::mutex mutex_;
  std::deque<std::pair<Clock::time_point, std::string>> keys_;
  std::atomic<size_t> size_{0};  // keys_.size()
};

class ShardedBackend : public Backend {
 public:
  // Agrees the shard count with Redis: std::invalid_argument for a bad URL, std::runtime_error for
  // a count that disagrees with prism:shards (naming both) or none at all, RedisError when Redis
  // cannot be reached.
  explicit ShardedBackend(const ShardedOptions& options);
  // prism:normalise once known (then kept: it never changes in a deployment); until a worker (or
  // a front given one) has set it, ServiceError 503 saying so, with a Retry-After of
  // kNormalisationRetryAfterSeconds: enrolments, updates, verifies and searches wait for it, while
  // gets, deletes and stats, which extract nothing, are served.
  texture::Normalisation normalisation() override;
  static constexpr int kNormalisationRetryAfterSeconds = 5;

  WriteResult write(const texture::GalleryEntry& entry, bool replace, Clock::time_point deadline) override;
  bool remove(const std::string& id, Clock::time_point deadline) override;
  std::optional<Product> get(const std::string& id, Clock::time_point deadline) override;
  VerifyAnswer verify(const std::string& id, const texture::Features& query, const texture::SearchParams& params,
                      Clock::time_point deadline) override;
  SearchAnswer search(const SearchQuery& query) override;
  // Every shard of the deployment: what its answering worker says of its index (answered false
  // for a shard none answered in time) and the write positions of all its replicas (Redis's own).
  ServiceStats stats(Clock::time_point deadline) override;
  // Why the deployment cannot serve: Redis unreachable, prism:shards missing or other, a shard
  // without a live worker, a replica failing a write, or the normalisation not announced yet.
  std::string health() override;
  // Through Sentinel: prism_redis_failovers_total and prism_redis_master_info (docs/SERVICE.md).
  std::string metrics() override;

  // The shard count reads are routed by, as last read from Redis (prism:shards: an online split
  // doubles it; service/reshard.h).
  int shards() const { return shards_; }
  // The workers whose liveness key (prism:worker:K:NAME: refreshed every 3 s, expiring after 10 s)
  // exists: shard -> replica names, sorted; `for_reads`: less those whose readers all hang
  // (prism:hung:K:NAME). ServiceError 503 when Redis is unreachable.
  std::map<int, std::vector<std::string>> live_workers(bool for_reads = false);
  // Shard K's replicas: their consumer groups on its writes stream, liveness and failing keys.
  // ServiceError 503 when Redis is unreachable.
  std::vector<ReplicaStats> replicas(int shard, const std::vector<std::string>& live);

 private:
  // One request to shard K's writes or reads stream; the first answer, or ServiceError.
  // A write (`write` true) is routed by the product `id` under the layout at the moment it is
  // added (`shard` is ignored): to FNV-1a-64(id) mod prism:shards, and during a split also, answered
  // to nobody, to its shard under prism:split when that differs (one MULTI/EXEC under WATCH).
  shard::json call(int shard, bool write, const std::string& op, const std::string& entry, const shard::json& params,
                   Clock::time_point deadline, const std::string& id = "");
  // A get or verify of product `id`, routed by the count last read (shards_, not asked of Redis);
  // again by the layout of the moment (up to a few times, within the deadline) when its shard
  // answered under another count (a split committed meanwhile).
  shard::json read_call(const std::string& id, const std::string& op, const std::string& entry,
                        const shard::json& params, Clock::time_point deadline);
  // Whether the layout of the moment routes product `id` to another shard than `shards` do (false
  // when the layout cannot be read).
  bool routed_elsewhere(const std::string& id, int shards);
  // One search routed over `shards` shards; nullopt when a shard answered under another count.
  std::optional<SearchAnswer> search_by(const SearchQuery& query, int shards);
  // prism:shards and prism:split now (and shards_ set to it): ServiceError 503 when Redis is
  // unreachable or the layout is missing or malformed.
  shard::Layout layout();
  shard::Layout layout(Redis& redis);
  // A read sent to each shard of `to` with its params, answers gathered until all came or the
  // deadline passed; `missing`: the shards of `to` not heard from.
  std::vector<shard::json> scatter(const std::string& op, const std::string& entry,
                                   const std::map<int, shard::json>& to, Clock::time_point deadline,
                                   std::vector<int>& missing);
  std::map<int, shard::json> every_shard(const shard::json& params, int shards) const;
  Clock::time_point deadline_of(Clock::time_point deadline) const;
  std::string next_reply_key();
  // Through Sentinel, after a write's answer: waits (WAIT 1, up to kWaitReplicaMs or the deadline)
  // for a Redis replica to hold the write's stream entry, so that a failover keeps it for the
  // shard's other replicas. ServiceError 503 (retry) when Redis was lost or failed over since
  // `followed` (the write is applied, its entry perhaps not on the new master); a write no replica
  // confirmed in time (none up) is answered anyway and counted (prism_redis_unreplicated_writes_total),
  // and the writes of the next kNoReplicaPauseMs are not waited for (a master left without
  // replicas would cost every write kWaitReplicaMs).
  void replicated(Redis& redis, uint64_t followed, int shard, Clock::time_point deadline);
  static constexpr long long kWaitReplicaMs = 500, kNoReplicaPauseMs = 5000;

  ShardedOptions options_;
  RedisPool pool_;
  std::atomic<int> shards_{1};
  std::string front_id_;
  std::atomic<uint64_t> seq_{0};
  std::mutex normalisation_mutex_;
  std::optional<texture::Normalisation> normalisation_;  // prism:normalise once read
  bool sentinel_ = false;                                // a sentinel:// URL
  std::atomic<uint64_t> unreplicated_{0};                // writes answered before a replica had them
  std::atomic<int64_t> no_replica_until_ms_{0};          // steady ms: WAIT found no replica lately
  TakenExpiries taken_expiries_;
};

}  // namespace prism::service
