// A shard worker of the sharded deployment (`prism texture shard`): it owns one shard's gallery
// directory (a LocalBackend: the durable record) and answers the fronts (ShardedBackend,
// service/sharded_backend.h) through Redis Streams.
//
// The protocol (Redis 7.0: streams, consumer groups, XAUTOCLAIM):
// - `prism:shards` (string): the shard count N, set (SET NX) by the first front or worker given it;
//   a front or worker configured with another N refuses to start, naming both. A product belongs to
//   shard FNV-1a-64(id) mod N. An online split (service/reshard.h) doubles it: while `prism:split`
//   holds 2N, workers of the new shards N..2N-1 start (given 2N or no count), and the writes stream
//   carries two markers: `split` (no change; copies of the gallery are made once it is applied) and
//   `split-commit` (params `shards`: 2N), at which a parent drops the products no longer its own
//   and serves under 2N. Writes carry the count they were routed by (`shards` in their params), so
//   that the check that a product is this shard's is the same on every replica whenever it applies
//   them; read answers carry the count they were served under (`shards`), and a get or verify of a
//   product not this shard's under it is 421.
// - Per shard K, two streams: `prism:shard:K:writes` (post, put, delete) and `prism:shard:K:reads`
//   (get, verify, search, stats).
//   - writes: each replica NAME has its own consumer group `replica:NAME` (so every replica applies
//     every write), read by one consumer also named NAME. A group is created at the stream's start
//     (ID 0, MKSTREAM): a new replica replays the whole stream into its gallery. After a (re)start
//     or a lost connection the worker first re-reads its own pending entries (ID 0), then new ones
//     (`>`): an entry Redis delivered on a connection lost before the reply came is pending, and
//     applied before the entries after it (so Redis::command never resends an XREADGROUP on a
//     fresh connection: the resent `>` would skip it); every 10 s it XAUTOCLAIMs entries idle over
//     30 s from other consumers of its group.
//   - reads: one group `readers` shared by every replica of the shard (one replica answers each
//     read), consumers NAME/r0, NAME/r1, ... (one reader thread and one connection each).
// - Entry fields: `op` (post|put|delete|get|verify|search|stats), `reply` (the list key the answer
//   goes to: `prism:reply:FRONTID:SEQ`), `deadline_ms` (unix ms), `entry` (Gallery::encode bytes:
//   the GalleryEntry of a post/put; for verify/search the query's features with id "query"),
//   `params` (JSON: the SearchParams fields, `top_k`, `id` for get/verify/delete, `phase` and
//   `candidates` for search).
// - Answers: one JSON object LPUSHed to the reply key, which then EXPIREs in 60 s (the front takes
//   it with BLMOVE into KEY:taken, its own, expiring too: sharded_backend.cpp's Answers): `status` (200,
//   201, or an error's status with `field`, `error` and `kind` "gallery" for a GalleryError), then
//   per op `outcome` + `product` (post/put), `removed` (delete), `found` + `product` (get), `match`
//   + timings (verify), a ShardSearch (search), a ShardStats (stats); doubles round-trip exactly.
//   A GalleryError refusing the request itself (Gallery::check_entry) also carries `request: true`;
//   a write a replica failed to apply, `retrying: true` (below).
//   A search sends one read per shard with the same reply key; each answer carries its `shard`.
//   It runs in two phases (`phase` in its params; ShardSearch in service/backend.h says why, and
//   shard_protocol.h's SearchPhase how workers of an older release take part): "score" to every
//   shard, answered with its shortlist by score (`scored`), then "verify" with `candidates` to
//   each shard holding some of the global shortlist, answered with them verified.
// - Writes are applied on one thread, in stream order: XREADGROUP BLOCK, apply to the gallery
//   (durable before the answer), LPUSH the answer, EXPIRE, then XACK. Writes are applied whatever
//   their deadline (replicas must agree). A crash between apply and XACK re-applies the write after
//   the restart, which is harmless: a post of the same entry is kUnchanged, a put rewrites the same
//   entry, a delete of an absent id answers false (the front took the first answer already). The
//   ID of each write applied is recorded in the gallery (GALLERY/stream-applied, written atomically
//   after the write): an entry at or below it is acknowledged without being applied again, so a
//   Redis that lost its last second of writes and delivers older entries again cannot undo later
//   ones.
// - Reads are answered on reader threads. A read already past its deadline is XACKed unanswered.
//   Read-your-writes: before answering, the reader takes the writes stream's last ID T (XREVRANGE
//   + - COUNT 1) and waits (until the read's deadline) for this worker's writer to have applied
//   every write up to T; so a write acknowledged before a read was sent is visible to it on every
//   replica. The writer knows what it applied before a restart from its group's last-delivered-id
//   (XINFO GROUPS) once its pending entries are drained.
// - Liveness and the replica name: `prism:worker:K:NAME` = "HOST:PID/N" with a 10 s expiry, taken
//   when free and renewed every 3 s by its holder only (a script): a second worker of one name is
//   refused naming the first (after waiting out a lease of a worker that just stopped; at once for
//   a dead process of this host), since two consumers of one group would split the writes. A worker
//   whose every reader is still on a request 2 s past that request's deadline is hung: it keeps its
//   name but sets prism:hung:K:NAME (with the same expiry), and says so; fronts send it no reads
//   (a shard whose replicas all hang is answered at once, as a dead one) while its writer goes on
//   applying writes, until a reader is free again.
// - Redis lost or restarted: every thread reconnects with backoff (100 ms doubling to 2 s),
//   re-asserts prism:shards, recreates missing groups (MKSTREAM) and re-reads its pending entries;
//   one line is printed per state change.
// - Clocks: deadlines cross hosts as unix ms, so the hosts' clocks must agree (NTP) to well under
//   the request timeouts.
// - Replica repair (service/replica_repair.h for the digest and the rule on which side wins):
//   every --repair-every seconds (default 30; the first round at start: reads are answered once a
//   round on digests published after the start finds nothing to change, after 5 rounds, or once
//   a round fails) a
//   replica publishes its digest at `prism:digest:K:NAME` (a hash: position, at_ms, bucket hashes
//   `b:B`, bucket entries `e:B`, `divergent`, `repaired`; expiring after 3 rounds; what writes
//   change is published within 200 ms, and at_ms refreshed as often), compares it with each live
//   sibling's (its group on the writes stream, its digest under 5 s old), most advanced first,
//   and for what it must change asks the sibling: LPUSH to
//   `prism:repair:K:SIBLING` of {"ids": [...], "reply": KEY}; the sibling's answer thread HSETs KEY
//   (`@position` and ID -> Gallery::encode bytes for each id it holds) and RPUSHes KEY:done. The
//   entries are written through LocalBackend::write/remove (the same crash-safe writes as every
//   write), between two stream writes, while reads go on. A replica acts only once it has applied
//   every write in the stream (else it is still catching up, and the stream repairs it).
// - Not done: the writes stream is never trimmed (a new replica replays it from the start; trimming
//   needs every replica's progress); the reads stream is capped (XADD MAXLEN ~ 10000).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "local_backend.h"
#include "redis.h"
#include "shard_protocol.h"

namespace prism::service {

struct ShardWorkerOptions {
  std::string redis;    // redis://HOST:PORT[/DB], or sentinel://HOST:PORT,.../MASTER (redis.h)
  int shard = 0;        // K, in [0, shards)
  int shards = 0;       // N; 0: read prism:shards (which must then be set)
  std::string replica;  // NAME; empty: the host name (one replica per host and shard)
  int readers = 2;      // reader threads
  LocalOptions local;   // the gallery and its index (local.shard is set to `shard`)
  // One line per state change (connected, Redis lost, ...); default: stderr.
  std::function<void(const std::string&)> log;
  // Tests only (fault injection): called on the reader's thread before each read is answered,
  // with its op ("get", "verify", "search", "stats"). Empty in production.
  std::function<void(const std::string& op)> before_answer;
  // Tests only: every search is answered whole, its `phase` ignored, as a worker from before the
  // two-phase search answers (a rolling upgrade). False in production.
  bool whole_searches = false;
  // Anti-entropy with the shard's other replicas (service/replica_repair.h): every this many
  // seconds, and once at start (before any read is answered), compare gallery digests and copy or
  // drop what differs. 0: off.
  int repair_every_s = 30;
};

class ShardWorker {
 public:
  // Opens the gallery (texture::GalleryError) and checks the options (std::invalid_argument, naming
  // the option). Nothing is sent to Redis before run().
  explicit ShardWorker(ShardWorkerOptions options);
  ~ShardWorker();

  // Serves until `stop` is true (checked at least every half second). Redis being unreachable is
  // waited out; a shard count that disagrees with prism:shards, or a shard K >= N, throws
  // std::runtime_error naming both before anything is served.
  void run(const std::atomic<bool>& stop);

  LocalBackend& backend() { return *backend_; }
  const std::string& replica() const { return options_.replica; }

 private:
  void writer_loop(const std::atomic<bool>& stop);
  // Replica repair: a round every repair_every_s (the first at once), and the answers to siblings
  // asking this replica for entries.
  void repair_loop(const std::atomic<bool>& stop);
  // One comparison with every sibling's digest; true when entries were copied or dropped.
  // `stale`: some sibling's digest is older than this worker (not yet enough to answer reads on).
  bool repair_round(Redis& redis, bool& stale);
  void repair_answer_loop(const std::atomic<bool>& stop);
  // With gallery_mutex_ held, after `id` was written or removed: its digest entry anew.
  void note_changed(const std::string& id);
  // Publishes the buckets changed since the last digest (a digest lags its writes by 200 ms).
  void publish_changes(Redis& redis);
  void reader_loop(int reader, const std::atomic<bool>& stop);
  // Connects: prism:shards agreed, groups present. Throws RedisError, or std::runtime_error.
  void prepare(Redis& redis);
  // Takes or renews this replica name's lease (its liveness key, prism:worker:K:NAME), so that
  // two workers never serve under one name. With `wait`, a lease held by another worker is waited
  // for until it expires (a worker that just stopped); throws std::runtime_error naming the
  // holder when it is still held, or (without `wait`) when another worker took it.
  void hold_replica_name(Redis& redis, bool wait, const std::atomic<bool>& stop);
  // A worker without --replica (named after its host) may serve a shard of one replica only: where
  // the shard's writes stream has other replicas' groups, it refuses to start.
  void refuse_default_name_among_replicas(Redis& redis);
  shard::json apply_write(const shard::StreamEntry& e);
  // The `split-commit` marker of an online split to `to` shards (service/reshard.h): drops every
  // product that is not this shard's under `to` (what moved to the new shard) and serves under `to`.
  shard::json commit_split(int to);
  static bool settled(const shard::json& answer);
  bool failing();
  // taken_ms: when a reader took the read from its stream (unix ms), for its queued_ms.
  shard::json answer_read(const shard::StreamEntry& e, int64_t taken_ms);
  void mark_applied(const shard::StreamId& id);
  // Records `id` as the last write applied to the gallery, durably (GALLERY/stream-applied).
  void record_applied(const shard::StreamId& id);
  shard::StreamId applied_id();  // the last write applied (applied_, under its mutex)
  // Waits until every write up to `last` is applied, or until `deadline` or `halt` (false).
  bool wait_applied(const shard::StreamId& last, Clock::time_point deadline, const std::atomic<bool>& halt);
  void say(const std::string& line);
  // Sleeps `ms` unless `stop` comes first.
  static void nap(int ms, const std::atomic<bool>& stop);

  ShardWorkerOptions options_;
  std::unique_ptr<LocalBackend> backend_;
  // The gallery was new and no normalisation was asked for: until the deployment's is known (prepare),
  // it holds the default, and is made again with prism:normalise's if that differs.
  bool adopt_normalisation_ = false;
  std::string who_;             // HOST:PID
  std::string lease_;           // HOST:PID/N: the value of this worker's liveness key
  std::atomic<int> shards_{1};  // N as agreed with prism:shards
  // Per reader: the steady-clock ms of the deadline of the read it is answering (0: none).
  std::unique_ptr<std::atomic<int64_t>[]> reader_busy_until_ms_;
  // Why every reader is stuck past its read's deadline, or empty (the writer asks before renewing).
  std::string hung_readers() const;
  bool hung_ = false;             // the lease was dropped for that
  bool default_name_ = false;     // no replica name was given: the host name is used
  bool prepared_ = false;         // prepare() has succeeded once (the worker started)
  std::string layout_malformed_;  // what prepare() last said of a malformed layout (reconnections)
  std::mutex applied_mutex_;
  std::condition_variable applied_cv_;
  shard::StreamId applied_;
  std::string failing_;     // why the writer cannot apply its next write (empty: it can)
  shard::StreamId failed_;  // that write, retried
  // A write applied whose record failed, and what its application answered: its retry (which
  // finds it applied) answers that. Also kept in Redis (shard::unrecorded_key) for a retry by the
  // worker restarted.
  std::optional<std::pair<shard::StreamId, shard::json>> unrecorded_;
  // The last write applied to the gallery, as recorded there: a Redis that lost its last writes
  // (an AOF fsync'ed every second, a failover) delivers older ones again, which must not be
  // applied twice (a POST delivered again after its DELETE was lost would bring the product back).
  shard::StreamId recorded_;
  std::mutex log_mutex_;
  // Held by the writer from applying a write to recording it, and by replica repair while it reads
  // the gallery for a digest or applies a sibling's entries: the two never interleave.
  std::mutex gallery_mutex_;
  std::atomic<bool> joined_{false};     // the first repair round ran (reads are answered after it)
  std::atomic<int64_t> divergent_{-1};  // entries differing from siblings at the last comparison
  std::atomic<int64_t> repaired_{0};    // entries copied from or dropped for siblings since start
  std::atomic<uint64_t> asks_{0};       // this worker's requests to siblings (reply keys)
  // This replica's digest by bucket (under gallery_mutex_): read whole each round, kept up to date
  // by every write between rounds; the buckets changed since it was last published.
  std::array<std::map<std::string, uint64_t>, 256> digest_;
  bool digest_ready_ = false;
  std::set<int> dirty_;
  shard::StreamId published_;
  int64_t started_ms_ = 0;  // unix ms when the repair thread started
  std::string written_id_;  // the id of the write being applied (the writer's)
};

}  // namespace prism::service
