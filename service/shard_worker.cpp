#include "shard_worker.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <map>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/durable_file.h"
#include "json_text.h"
#include "log_line.h"
#include "replica_repair.h"

namespace prism::service {

namespace {

using shard::json;
using shard::StreamEntry;
using shard::StreamId;
using namespace std::chrono_literals;

constexpr int kBlockMs = 500;                   // XREADGROUP BLOCK: how soon a stop is noticed
constexpr int kReplyTtlS = 60;                  // reply lists expire
constexpr int kHeartbeatMs = 3000;              // prism:worker:K:NAME refreshed
constexpr int kHeartbeatTtlS = 10;              // ... and expiring
constexpr int64_t kHungAfterDeadlineMs = 2000;  // a reader this far past its read's deadline is stuck

int64_t steady_ms(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
constexpr int kClaimEveryMs = 10000;  // XAUTOCLAIM
constexpr const char* kClaimIdleMs = "30000";
constexpr const char* kAppliedFile = "stream-applied";  // in the gallery directory
// A write's first answer kept while it is unrecorded (shard::unrecorded_key): well past the
// longest deadline (120 s) a front waits for it, for a worker restarted in between.
constexpr int kUnrecordedTtlS = 600;

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
  return buf;
}

bool due(Clock::time_point& last, int every_ms) {
  const Clock::time_point now = Clock::now();
  if (now - last < std::chrono::milliseconds(every_ms)) return false;
  last = now;
  return true;
}

// The last-delivered-id of `group` on `stream` (XINFO GROUPS), 0-0 when unknown.
StreamId last_delivered(Redis& redis, const std::string& stream, const std::string& group) {
  const Reply r = redis.command({"XINFO", "GROUPS", stream});
  if (r.type != Reply::Type::kArray) return {};
  for (const Reply& g : r.elements) {
    std::string name, last;
    for (size_t i = 0; i + 1 < g.elements.size(); i += 2) {
      if (g.elements[i].str == "name") name = g.elements[i + 1].str;
      if (g.elements[i].str == "last-delivered-id") last = g.elements[i + 1].str;
    }
    if (name == group && !last.empty()) return StreamId::parse(last);
  }
  return {};
}

// The replica name's lease is its liveness key (two workers of one replica name would split the writes
// between their galleries): taken when free, renewed only by its
// holder, in one step. Returns the holder afterwards (ARGV[1] when it is ours).
constexpr const char* kLeaseScript =
    "local v = redis.call('GET', KEYS[1]) "
    "if v == false or v == ARGV[1] then redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) return ARGV[1] end "
    "return v";
// Drops the lease if `ARGV[1]` still holds it (a holder found dead).
constexpr const char* kDropScript =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

// Whether the lease value "HOST:PID/N" names a process of this host that is gone.
bool holder_gone(const std::string& holder) {
  const size_t colon = holder.rfind(':', holder.find('/'));
  if (colon == std::string::npos || holder.substr(0, colon) != host_name()) return false;
  char* end = nullptr;
  const long pid = std::strtol(holder.c_str() + colon + 1, &end, 10);
  return pid > 0 && (*end == '/' || *end == 0) && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}

// The answer pushed to the entry's reply key (with its time to live), then `after` (the entry's
// XACK, say), in one round trip.
void send_answer(Redis& redis, const StreamEntry& e, const json& answer, const std::vector<std::string>& after = {}) {
  std::vector<std::vector<std::string>> commands;
  const std::string& key = e.field("reply");
  if (key.rfind("prism:reply:", 0) == 0) {  // else no (valid) reply key: nobody waits
    commands.push_back({"LPUSH", key, json_text(answer)});
    commands.push_back({"EXPIRE", key, std::to_string(kReplyTtlS)});
  }
  if (!after.empty()) commands.push_back(after);
  if (!commands.empty()) redis.pipeline(commands);
}

}  // namespace

ShardWorker::ShardWorker(ShardWorkerOptions options) : options_(std::move(options)), who_() {
  Redis probe(options_.redis);  // std::invalid_argument naming the URL; connects not
  if (options_.shard < 0) throw std::invalid_argument("shard " + std::to_string(options_.shard) + " is negative");
  if (options_.shards < 0) throw std::invalid_argument("shards " + std::to_string(options_.shards) + " is negative");
  if (options_.shards > 0 && options_.shard >= options_.shards)
    throw std::invalid_argument("shard " + std::to_string(options_.shard) + " is not below the shard count " +
                                std::to_string(options_.shards));
  if (options_.readers < 1 || options_.readers > 64)
    throw std::invalid_argument("readers " + std::to_string(options_.readers) + " is not in 1..64");
  default_name_ = options_.replica.empty();
  if (default_name_) options_.replica = host_name();
  if (!texture::valid_product_id(options_.replica))
    throw std::invalid_argument("replica name '" + options_.replica +
                                "' is invalid (1..128 of A-Z a-z 0-9 . _ -, not starting with . or -)");
  reader_busy_until_ms_ = std::make_unique<std::atomic<int64_t>[]>(size_t(options_.readers));
  for (int i = 0; i < options_.readers; ++i) reader_busy_until_ms_[size_t(i)] = 0;
  who_ = host_name() + ":" + std::to_string(getpid());
  static std::atomic<int> workers{0};  // several workers of one process (tests) hold distinct leases
  lease_ = who_ + "/" + std::to_string(workers++);
  options_.local.shard = options_.shard;
  options_.local.owner = "prism texture shard " + std::to_string(options_.shard) + " replica " + options_.replica;
  adopt_normalisation_ = !options_.local.normalisation && !texture::Gallery::exists(options_.local.gallery);
  backend_ = std::make_unique<LocalBackend>(options_.local);
  const std::filesystem::path record = options_.local.gallery / kAppliedFile;
  std::error_code ec;
  if (std::filesystem::exists(record, ec)) {
    const std::vector<uint8_t> text = read_file(record);
    try {
      recorded_ = StreamId::parse(std::string(text.begin(), text.end()));
    } catch (const std::invalid_argument&) {
      throw texture::GalleryError(record.string() + ": not a stream ID; remove it to apply every write again");
    }
  }
}

void ShardWorker::record_applied(const StreamId& id) {
  const std::string text = id.str();
  // Not named .tmp-*: a process taking the gallery's writer lock (a reader repairing the pack, a
  // `prism texture reshard copy` reading it) removes those as a crashed writer's leftovers, and
  // this file is written outside that lock.
  write_atomically(options_.local.gallery / (std::string(kAppliedFile) + ".new"), options_.local.gallery / kAppliedFile,
                   std::vector<uint8_t>(text.begin(), text.end()));
  recorded_ = id;
}

ShardWorker::~ShardWorker() = default;

void ShardWorker::say(const std::string& line) {
  std::lock_guard lock(log_mutex_);
  const std::string full = "shard " + std::to_string(options_.shard) + " replica " + options_.replica + ": " + line;
  if (options_.log)
    options_.log(full);
  else
    log_line(full);
}

void ShardWorker::nap(int ms, const std::atomic<bool>& stop) {
  for (int slept = 0; slept < ms && !stop; slept += 50) std::this_thread::sleep_for(50ms);
}

void ShardWorker::hold_replica_name(Redis& redis, bool wait, const std::atomic<bool>& stop) {
  const std::string key = shard::worker_key(options_.shard, options_.replica);
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(kHeartbeatTtlS + 2);
  for (;;) {
    const Reply r = redis.command({"EVAL", kLeaseScript, "1", key, lease_, std::to_string(kHeartbeatTtlS)});
    if (r.error()) throw RedisError("Redis at " + redis.url() + " refused EVAL: " + r.str);
    if (r.str == lease_) return;
    if (holder_gone(r.str)) {  // restarted after a crash on this host: the old lease is void
      redis.command({"EVAL", kDropScript, "1", key, r.str});
      continue;
    }
    // Another worker of this name, or one that stopped without its lease expiring yet (its last
    // renewal is at most kHeartbeatTtlS old): waited out once, at the start.
    if (!wait || Clock::now() >= give_up || stop)
      throw std::runtime_error("replica name '" + options_.replica + "' of shard " + std::to_string(options_.shard) +
                               " is held by the worker " + r.str.substr(0, r.str.find('/')) + " (" + key +
                               "): two workers of one name would split the shard's writes between their "
                               "galleries; give each replica its own --replica NAME");
    nap(500, stop);
  }
}

void ShardWorker::refuse_default_name_among_replicas(Redis& redis) {
  if (!default_name_) return;
  std::string others;
  for (const ReplicaStats& r : shard::replica_groups(redis, options_.shard))
    if (r.replica != options_.replica) others += (others.empty() ? "" : ", ") + r.replica;
  if (others.empty()) return;
  redis.command({"EVAL", kDropScript, "1", shard::worker_key(options_.shard, options_.replica), lease_});
  throw std::runtime_error("shard " + std::to_string(options_.shard) + " has other replicas (" + others +
                           ": consumer groups of " + shard::writes_key(options_.shard) +
                           "), and this worker has no --replica: with several replicas each names itself "
                           "(the default, the host name '" +
                           options_.replica + "', would collide with a second replica on this host)");
}

void ShardWorker::prepare(Redis& redis) {
  if (!prepared_) {
    // At start: the count given must be the deployment's (or, for a new shard of a split in
    // progress, the count it is split to), and this worker serves under the layout's count for it.
    const int n = shard::agree_shard_count(redis, options_.shards);
    shards_ = shard::count_for_shard(shard::read_layout(redis), options_.shard, redis.url());
    // Agreed once, N is this worker's from now on: when Redis comes back empty (a restart without
    // its data, FLUSHALL) the worker sets it again instead of waiting for someone to.
    options_.shards = n;
  } else {
    // Later (a reconnection): what the layout says now; a split committed meanwhile is followed
    // when its marker is applied (apply_write), in stream order with the writes around it.
    try {
      try {
        shard::agree_shard_count(redis, 0);
      } catch (const shard::ShardCountUnset&) {
        // Redis came back empty: the count is set again by a parent, which serves under the count
        // of the last split it applied (commit_split), not by a shard a split made (its shard not
        // below the count it started under), which cannot know whether that split was committed.
        if (options_.shard >= options_.shards)
          throw std::runtime_error(shard::kShardsKey + " is not set at " + redis.url() + ": shard " +
                                   std::to_string(options_.shard) +
                                   ", made by a split, leaves it to the shards it was split from");
        shard::agree_shard_count(redis, options_.shards);
      }
      shard::count_for_shard(shard::read_layout(redis), options_.shard, redis.url());
      layout_malformed_.clear();
    } catch (const RedisError&) {
      throw;
    } catch (const std::runtime_error& e) {
      // A malformed layout (MalformedLayout: a prism:shards that is not a string among them), a
      // count without this shard: not a reason to stop
      // serving. This worker does not route by these keys (its count changes by the markers in its
      // stream), the writes in its stream were routed under a valid layout, and fronts route no
      // write or search while it is malformed (503). It keeps its count, says so once per value,
      // and reads the keys again at its next connection.
      if (layout_malformed_ != e.what())
        say(std::string(e.what()) + ": keeping the shard count " + std::to_string(shards_.load()) +
            " this worker serves under; read again at the next connection");
      layout_malformed_ = e.what();
    }
  }
  // A gallery this worker has just made with the default takes the deployment's normalisation
  // instead, while it is still empty: a new replica or shard joins an existing deployment without
  // being told it. Only the marker changes (under the gallery's writer lock); the folder stays.
  if (adopt_normalisation_) {
    adopt_normalisation_ = false;
    std::optional<texture::Normalisation> there;
    try {
      there = shard::agree_normalisation(redis, std::nullopt);
    } catch (const RedisError&) {
      adopt_normalisation_ = true;  // asked again on the next connection
      throw;
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("gallery " + options_.local.gallery.string() + ": " + e.what());
    }
    if (there && *there != backend_->normalisation() && backend_->size() == 0 &&
        texture::Gallery::renormalise_if_empty(options_.local.gallery, *there)) {
      options_.local.normalisation = *there;
      backend_.reset();  // its index's memory first: the new one takes the same budgets
      backend_ = std::make_unique<LocalBackend>(options_.local);
      say("new gallery " + options_.local.gallery.string() + " takes the deployment's normalisation " + there->name() +
          " (" + shard::kNormaliseKey + ")");
    }
  }
  // The gallery's record is the deployment's (fronts extract queries with it), or this worker may
  // not serve: its products would be searched with queries extracted otherwise.
  try {
    shard::agree_normalisation(redis, backend_->normalisation());
  } catch (const RedisError&) {
    throw;
  } catch (const std::runtime_error& e) {
    std::string how;
    if (backend_->size() == 0)  // made with --normalise, or a gallery left empty by an earlier run
      how = "; the gallery is empty: remove " + options_.local.gallery.string() +
            " and start again with --normalise set as the deployment's, or without --normalise";
    throw std::runtime_error("gallery " + options_.local.gallery.string() + ": " + e.what() + how);
  }
  if (!prepared_) refuse_default_name_among_replicas(redis);  // at start, before its group exists
  shard::ensure_group(redis, shard::writes_key(options_.shard), shard::replica_group(options_.replica));
  shard::ensure_group(redis, shard::reads_key(options_.shard), shard::kReadersGroup);
  prepared_ = true;
}

void ShardWorker::run(const std::atomic<bool>& stop) {
  // The first connection decides whether this worker may start at all (shard count agreed).
  {
    Redis redis(options_.redis);
    bool said = false, told = false;
    for (int backoff = 100; !stop;) {
      try {
        hold_replica_name(redis, /*wait=*/true, stop);
        prepare(redis);
        break;
      } catch (const RedisError& e) {
        if (!said) say(std::string(e.what()) + "; retrying");
        said = true;
        nap(backoff, stop);
        backoff = std::min(backoff * 2, 2000);
      } catch (const shard::ShardCountUnset& e) {
        // Started before the deployment's first front or worker given --shards: wait for it, as
        // for a Redis not up yet (systemd starts units in any order).
        if (!told) say(std::string(e.what()) + "; waiting for it to be set");
        told = true;
        nap(500, stop);
      }
    }
    if (stop) return;
  }
  say("serving " + std::to_string(backend_->size()) + " products from " + options_.local.gallery.string() + " (" +
      std::to_string(options_.readers) + " readers)");
  std::atomic<bool> halt = false;  // the readers stop after the writer, whichever way it ends
  std::vector<std::thread> readers;
  for (int i = 0; i < options_.readers; ++i) readers.emplace_back([this, i, &halt] { reader_loop(i, halt); });
  if (options_.repair_every_s > 0) {
    readers.emplace_back([this, &halt] { repair_loop(halt); });
    readers.emplace_back([this, &halt] { repair_answer_loop(halt); });
  } else {
    joined_ = true;
  }
  try {
    writer_loop(stop);
  } catch (...) {
    halt = true;
    for (std::thread& t : readers) t.join();
    throw;
  }
  halt = true;
  for (std::thread& t : readers) t.join();
  try {  // the name is free at once for a worker started next (else after the lease's expiry)
    Redis redis(options_.redis);
    redis.command({"EVAL", kDropScript, "1", shard::worker_key(options_.shard, options_.replica), lease_});
  } catch (const RedisError&) {
  }
  say("stopped");
}

std::string ShardWorker::hung_readers() const {
  const int64_t now = steady_ms(Clock::now());
  int64_t least_late = INT64_MAX;
  for (int i = 0; i < options_.readers; ++i) {
    const int64_t busy = reader_busy_until_ms_[size_t(i)];
    if (busy == 0 || now < busy + kHungAfterDeadlineMs) return {};
    least_late = std::min(least_late, now - busy);
  }
  return "every reader (" + std::to_string(options_.readers) + ") is still on a read " +
         std::to_string(least_late / 1000) + " s or more past its deadline";
}

void ShardWorker::mark_applied(const StreamId& id) {
  {
    std::lock_guard lock(applied_mutex_);
    if (applied_ < id) applied_ = id;
  }
  applied_cv_.notify_all();
}

StreamId ShardWorker::applied_id() {
  std::lock_guard lock(applied_mutex_);
  return applied_;
}

bool ShardWorker::wait_applied(const StreamId& last, Clock::time_point deadline, const std::atomic<bool>& halt) {
  std::unique_lock lock(applied_mutex_);
  // Woken at least every 100 ms to see `halt` (the writer stopped: nothing more will be applied).
  while (!(last <= applied_)) {
    if (halt || !failing_.empty() || Clock::now() >= deadline) return false;
    applied_cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
  return true;
}

void ShardWorker::writer_loop(const std::atomic<bool>& stop) {
  const std::string stream = shard::writes_key(options_.shard);
  const std::string group = shard::replica_group(options_.replica);
  Redis redis(options_.redis);
  bool ready = false, lost = false;
  std::string position = "0";  // "0": our pending entries; ">": new ones
  Clock::time_point last_beat{}, last_claim = Clock::now();
  int backoff = 100, retry_backoff = 100;
  uint64_t followed = 0;  // redis.failovers() at the last prepare
  while (!stop) {
    try {
      // A failover (through Sentinel) followed by any connection of this process: the new master
      // may lack the group or the pending entries' state (replication is asynchronous), so
      // everything is set up again there and the pending entries re-read.
      if (ready && redis.failovers() != followed) ready = false;
      if (!ready) {
        prepare(redis);
        followed = redis.failovers();
        ready = true;
        position = "0";
        backoff = 100;
        if (lost) say("writer reconnected to " + redis.url());
        lost = false;
      }
      if (due(last_beat, kHeartbeatMs)) {
        // Renewed only while some reader can answer: a worker whose readers all hang would cost
        // every request to its shard the whole deadline although its writer is well.
        // The name's lease is renewed either way: dropping it would let a second worker of this
        // name in, and two consumers of one group split the writes between their galleries.
        hold_replica_name(redis, /*wait=*/false, stop);
        const std::string stuck = hung_readers();
        const std::string key = shard::hung_key(options_.shard, options_.replica);
        if (stuck.empty()) {
          if (hung_) {
            say("a reader is free again: serving reads again");
            redis.command({"DEL", key});
          }
          hung_ = false;
        } else {
          if (!hung_) say(stuck + ": out of reads until one is free (" + key + ")");
          hung_ = true;
          redis.command({"SET", key, stuck, "EX", std::to_string(kHeartbeatTtlS)});
        }
      }
      if (due(last_claim, kClaimEveryMs)) {
        const Reply c =
            redis.command({"XAUTOCLAIM", stream, group, options_.replica, kClaimIdleMs, "0-0", "COUNT", "100"});
        if (c.type == Reply::Type::kArray && c.elements.size() >= 2 && !shard::stream_entries(c.elements[1]).empty()) {
          say("claimed writes idle over 30 s from another consumer of " + group);
          position = "0";
        }
      }
      const bool pending = position == "0";
      // Read before the pending list: every entry up to it was delivered by then, so when nothing
      // is pending afterwards every one of them was applied. Read after, it could pass an entry
      // that a delivery run by Redis in between (a lost connection's command arriving late) left
      // pending, unapplied.
      const StreamId delivered = pending ? last_delivered(redis, stream, group) : StreamId{};
      std::vector<std::string> cmd = {"XREADGROUP", "GROUP", group, options_.replica, "COUNT", "32"};
      if (!pending) cmd.insert(cmd.end(), {"BLOCK", std::to_string(kBlockMs)});
      cmd.insert(cmd.end(), {"STREAMS", stream, position});
      const Reply r = redis.command(cmd, std::chrono::milliseconds(pending ? 0 : kBlockMs));
      if (r.error()) {
        if (r.error_code() == "NOGROUP") {
          say("the group " + group + " vanished (Redis lost its data?): recreating it");
          ready = false;
          continue;
        }
        throw RedisError("Redis at " + redis.url() + " refused XREADGROUP: " + r.str);
      }
      const std::vector<StreamEntry> entries = shard::read_group_entries(r);
      if (pending && entries.empty()) {
        // Caught up with what this replica was given before: all of it is applied (durably, in the
        // gallery) even if that was before a restart. Both read from one master: a failover
        // followed in between sets up again first.
        if (redis.failovers() != followed) continue;
        mark_applied(delivered);
        position = ">";
        continue;
      }
      for (const StreamEntry& e : entries) {
        const StreamId id = StreamId::parse(e.id);
        // Repair neither writes the gallery nor moves the recorded position between the check,
        // the write and its record.
        std::unique_lock gallery(gallery_mutex_);
        if (!e.fields.empty() && recorded_ < id) {  // no fields: trimmed away; at or below: applied
          written_id_.clear();
          json answer = apply_write(e);
          const std::string kept = shard::unrecorded_key(options_.shard, options_.replica, e.id);
          bool drop_kept = false;  // the first answer kept in Redis, answered now: deleted once sent
          if (settled(answer)) {
            // Applied again after its record failed (here, or before a restart for an entry
            // delivered before: pending): its first answer, read before this application is
            // recorded, so that a Redis error here leaves it unrecorded, applied and answered later.
            const bool here = unrecorded_ && unrecorded_->first == id;
            const Reply first = here || pending ? redis.command({"GET", kept}) : Reply{};
            try {
              record_applied(id);
            } catch (const std::exception& x) {
              // Applied, but not recorded (its disk full meanwhile): neither acknowledged, as a
              // write that could not be applied, and applied again (writes are idempotent) once
              // its record can be written, rather than ending the worker. Its first answer is
              // kept for that retry, in memory and in Redis (NX: the first application's), for a
              // worker restarted in between: not in the gallery, whose disk refused the record.
              note_changed(written_id_);
              if (!here) unrecorded_.emplace(id, answer);
              const Reply set = redis.command(
                  {"SET", kept, json_text(unrecorded_->second), "NX", "EX", std::to_string(kUnrecordedTtlS)});
              if (set.error()) say("cannot keep the answer of write " + e.id + " (" + kept + "): " + set.str);
              answer = shard::error_json(507, "", std::string("cannot record the write as applied: ") + x.what());
            }
            if (settled(answer)) {
              // Answered as the first application was (a delete that removed the product answers
              // removed:true, not what the second found). Redis's is the first (NX); the one in
              // memory stands in where Redis did not keep it.
              if (here) answer = unrecorded_->second;
              if (first.type == Reply::Type::kString) {
                const json j = json::parse(first.str, nullptr, /*allow_exceptions=*/false);
                if (j.is_object()) answer = j;
              }
              drop_kept = here || first.type == Reply::Type::kString;
              unrecorded_.reset();
            }
          }
          if (!settled(answer)) {
            gallery.unlock();
            // Not applied (a full disk, an index smaller than a sibling's, memory): neither recorded
            // nor acknowledged, so it is applied later, in order, and nothing after it before.
            const std::string why = answer.value("error", std::string("no message"));
            if (failed_ != id) {
              say("cannot apply write " + e.id + " (" + e.field("op") + "): " + why +
                  "; retrying with backoff, out of reads until it is applied");
              answer["retrying"] = true;  // the front prefers a sibling's success
              send_answer(redis, e, answer);
              failed_ = id;
              retry_backoff = 100;
            }
            {
              std::lock_guard lock(applied_mutex_);
              failing_ = "cannot apply write " + e.id + ": " + why;
            }
            applied_cv_.notify_all();
            redis.command({"SET", shard::failing_key(options_.shard, options_.replica), why, "EX",
                           std::to_string(kHeartbeatTtlS)});
            nap(retry_backoff, stop);
            retry_backoff = std::min(retry_backoff * 2, 5000);
            position = "0";  // this entry is first among the pending ones
            break;
          }
          if (failed_ == id) {
            say("applied write " + e.id + " after retrying; serving reads again");
            failed_ = StreamId{};
            {
              std::lock_guard lock(applied_mutex_);
              failing_.clear();
            }
            redis.command({"DEL", shard::failing_key(options_.shard, options_.replica)});
          }
          note_changed(written_id_);
          gallery.unlock();
          send_answer(redis, e, answer);
          if (drop_kept) {
            try {
              redis.command({"DEL", kept});  // best effort: it expires anyway
            } catch (const RedisError&) {
            }
          }
        }
        if (gallery.owns_lock()) gallery.unlock();
        redis.command({"XACK", stream, group, e.id});
        mark_applied(id);
      }
    } catch (const RedisError& e) {
      if (!lost) say(std::string("writer: ") + e.what() + "; reconnecting");
      lost = true;
      ready = false;
      nap(backoff, stop);
      backoff = std::min(backoff * 2, 2000);
    }
  }
}

void ShardWorker::reader_loop(int reader, const std::atomic<bool>& stop) {
  const std::string stream = shard::reads_key(options_.shard);
  const std::string writes = shard::writes_key(options_.shard);
  const std::string consumer = options_.replica + "/r" + std::to_string(reader);
  Redis redis(options_.redis);
  bool ready = true, lost = false;
  std::string position = "0";
  Clock::time_point last_claim = Clock::now();
  int backoff = 100;
  uint64_t followed = redis.failovers();
  while (!stop) {
    try {
      if (ready && redis.failovers() != followed) ready = false;  // a failover: as in writer_loop
      if (!ready) {
        shard::ensure_group(redis, stream, shard::kReadersGroup);
        followed = redis.failovers();
        ready = true;
        position = "0";
        backoff = 100;
        if (lost) say("reader " + std::to_string(reader) + " reconnected to " + redis.url());
        lost = false;
      }
      if (reader == 0 && due(last_claim, kClaimEveryMs)) {
        const Reply c =
            redis.command({"XAUTOCLAIM", stream, shard::kReadersGroup, consumer, kClaimIdleMs, "0-0", "COUNT", "100"});
        if (c.type == Reply::Type::kArray && c.elements.size() >= 2 && !shard::stream_entries(c.elements[1]).empty())
          position = "0";
      }
      // Out of reads while a write cannot be applied, or before the first comparison with the
      // siblings (a replica that was down or is new): a sibling answers them (the hedge resends
      // what this one held).
      if (failing() || !joined_) {
        nap(100, stop);
        continue;
      }
      const bool pending = position == "0";
      std::vector<std::string> cmd = {"XREADGROUP", "GROUP", shard::kReadersGroup, consumer, "COUNT", "1"};
      if (!pending) cmd.insert(cmd.end(), {"BLOCK", std::to_string(kBlockMs)});
      cmd.insert(cmd.end(), {"STREAMS", stream, position});
      const Reply r = redis.command(cmd, std::chrono::milliseconds(pending ? 0 : kBlockMs));
      if (r.error()) {
        if (r.error_code() == "NOGROUP") {
          ready = false;
          continue;
        }
        throw RedisError("Redis at " + redis.url() + " refused XREADGROUP: " + r.str);
      }
      const std::vector<StreamEntry> entries = shard::read_group_entries(r);
      const int64_t taken_ms = shard::unix_ms(Clock::now());
      if (pending && entries.empty()) position = ">";
      for (const StreamEntry& e : entries) {
        int64_t deadline_ms = 0;
        try {
          deadline_ms = std::stoll(e.field("deadline_ms"));
        } catch (const std::logic_error&) {
          deadline_ms = 0;  // no valid deadline: not answered
        }
        const Clock::time_point deadline = shard::steady_from_unix_ms(deadline_ms);
        bool answer = !e.fields.empty() && Clock::now() < deadline;
        if (answer && e.field("op") != "stats") {
          // Read-your-writes: every write in the stream when this read is answered is applied first.
          // Asked only for the last entry after what is applied already: none in the steady state,
          // where the stream's last entry (an enrolment's features, ~100 KB) would otherwise be
          // copied to every read.
          const Reply tail = redis.command({"XREVRANGE", writes, "+", "(" + applied_id().str(), "COUNT", "1"});
          if (tail.error()) throw RedisError("Redis at " + redis.url() + " refused XREVRANGE: " + tail.str);
          const std::vector<StreamEntry> last = shard::stream_entries(tail);
          if (!last.empty()) answer = wait_applied(StreamId::parse(last[0].id), deadline, stop);
        }
        if (answer) {
          reader_busy_until_ms_[size_t(reader)] = std::max<int64_t>(1, steady_ms(deadline));
          struct Idle {  // however the answer ends
            std::atomic<int64_t>& busy;
            ~Idle() { busy = 0; }
          } idle{reader_busy_until_ms_[size_t(reader)]};
          if (options_.before_answer) options_.before_answer(e.field("op"));
          send_answer(redis, e, answer_read(e, taken_ms), {"XACK", stream, shard::kReadersGroup, e.id});
        } else {
          redis.command({"XACK", stream, shard::kReadersGroup, e.id});
        }
      }
    } catch (const RedisError& e) {
      if (!lost) say("reader " + std::to_string(reader) + ": " + e.what() + "; reconnecting");
      lost = true;
      ready = false;
      nap(backoff, stop);
      backoff = std::min(backoff * 2, 2000);
    } catch (const std::exception& e) {
      // Anything else (a malformed entry, memory) costs this read, not the worker: the read is
      // re-read from the pending list, and after 30 s idle another reader may claim it.
      say("reader " + std::to_string(reader) + ": " + e.what());
      position = "0";
      nap(backoff, stop);
      backoff = std::min(backoff * 2, 2000);
    }
  }
}

// What `work` answers, or its exception as an error answer (the front rethrows it as the same
// ServiceError or GalleryError a LocalBackend would have thrown).
template <typename F>
json answered(F&& work) {
  try {
    return work();
  } catch (const ServiceError& x) {
    return shard::error_json(x.status, x.field, x.what());
  } catch (const texture::GalleryError& x) {
    if (x.disk_full()) {  // this replica's disk: retried, and the front answers 507 as a LocalBackend would
      std::fprintf(stderr, "prism: error: %s\n", x.what());
      return shard::error_json(507, "",
                               "the server's gallery disk is full: nothing was stored; try again once space is freed");
    }
    return shard::error_json(422, "", x.what(), "gallery");
  } catch (const std::exception& x) {
    return shard::error_json(500, "", std::string("shard worker: ") + x.what());
  }
}

bool ShardWorker::failing() {
  std::lock_guard lock(applied_mutex_);
  return !failing_.empty();
}

// Whether every replica reaches this answer from the same state (a replica that could not apply a write must not
// acknowledge it): a success, or a
// refusal of the request itself. A 5xx or a GalleryError (the request was checked before, so
// that is the disk or the gallery) is this replica's failure, to be retried.
bool ShardWorker::settled(const json& answer) {
  const int status = answer.value("status", 500);
  return status < 500 && (answer.value("kind", std::string()) != "gallery" || answer.value("request", false));
}

json ShardWorker::apply_write(const StreamEntry& e) {
  return answered([&]() -> json {
    const shard::Request r = shard::parse_request(e, /*write=*/true);  // writes are applied whatever their deadline
    if (r.op == "split") return {{"status", 200}};  // a split began: copies of this shard may be made from here
    if (r.op == "split-commit") return commit_split(shard::number_field<int>(r.params, "shards"));
    written_id_ = r.op == "delete" ? r.id : r.entry.id;
    // What the gallery refuses of the request itself is the request's fault (settled: every
    // replica refuses it alike), so that any other GalleryError below is this replica's own.
    if (r.op == "delete") return {{"status", 200}, {"removed", backend_->remove(r.id, r.deadline)}};
    try {
      texture::Gallery::check_entry(r.entry);
    } catch (const texture::GalleryError& x) {
      json j = shard::error_json(422, "", x.what(), "gallery");
      j["request"] = true;
      return j;
    }
    // The count the front routed it by (a split's copy for a new shard: the split's count).
    const int routed = r.params.contains("shards") ? shard::number_field<int>(r.params, "shards") : shards_.load();
    if (routed < 1 || shard::shard_of(r.entry.id, routed) != options_.shard)  // a front of another deployment?
      return shard::error_json(421, "id", "product '" + r.entry.id + "' belongs to another shard");
    const WriteResult w = backend_->write(r.entry, r.op == "put", r.deadline);
    const char* outcome = w.outcome == WriteOutcome::kCreated   ? "created"
                          : w.outcome == WriteOutcome::kUpdated ? "updated"
                                                                : "unchanged";
    return {{"status", w.outcome == WriteOutcome::kCreated ? 201 : 200},
            {"outcome", outcome},
            {"product", shard::product_json(w.product)}};
  });
}

json ShardWorker::commit_split(int to) {
  // Idempotent (a marker delivered again, or applied by a worker that already follows `to`): every
  // product of this gallery that is not this shard's under `to` is dropped, whatever was done before.
  if (to < 1 || options_.shard >= to)
    return shard::error_json(
        400, "shards", "a split to " + std::to_string(to) + " shards has no shard " + std::to_string(options_.shard));
  if (to > shards_) {  // first: a read answered from here on says so (answer_read)
    shards_ = to;
    options_.shards = to;
  }
  std::vector<std::string> moved;
  backend_->for_each_entry([&](texture::GalleryEntry&& e) {
    if (shard::shard_of(e.id, to) != options_.shard) moved.push_back(e.id);
  });
  const Clock::time_point deadline = Clock::time_point::max();
  for (const std::string& id : moved) {
    backend_->remove(id, deadline);
    note_changed(id);
  }
  say("the split to " + std::to_string(to) + " shards is committed: dropped the " + std::to_string(moved.size()) +
      " products now served by another shard");
  return {{"status", 200}, {"dropped", moved.size()}};
}

json ShardWorker::answer_read(const StreamEntry& e, int64_t taken_ms) {
  // The count this read is answered under: read before, and again after the answer is made. A
  // split's commit sets the new count before its parent drops anything (commit_split), so an answer
  // made while products were being dropped sees the new count after it: a get or verify is then
  // 421 (the front routes it again), a search says the new count (the front searches again).
  const int before = shards_;
  json j = answered([&]() -> json {
    const shard::Request r = shard::parse_request(e, /*write=*/false);
    if (r.op == "stats") {
      ShardStats s = backend_->shard_stats();
      s.worker = options_.replica + " (" + who_ + ")";
      return {{"status", 200}, {"stats", shard::shard_stats_json(s)}};
    }
    // A product of another shard under this worker's count (a parent after its split's commit):
    // 421 with the count, and the front routes the read again by the layout of the moment.
    if ((r.op == "get" || r.op == "verify") && shard::shard_of(r.id, before) != options_.shard)
      return shard::error_json(
          421, "id", "product '" + r.id + "' belongs to another shard under " + std::to_string(before) + " shards");
    if (r.op == "get") {
      const std::optional<Product> p = backend_->get(r.id, r.deadline);
      json j = {{"status", 200}, {"found", bool(p)}};
      if (p) j["product"] = shard::product_json(*p);
      return j;
    }
    if (r.op == "search") {
      ShardSearch part;
      switch (options_.whole_searches ? shard::SearchPhase::kWhole : r.phase) {
        case shard::SearchPhase::kScore: part = backend_->search_scores(r.entry.features, r.search); break;
        case shard::SearchPhase::kVerify:
          part = backend_->search_verify(r.entry.features, r.candidates, r.search);
          break;
        case shard::SearchPhase::kWhole: part = backend_->search_part(r.entry.features, r.search); break;
      }
      json j = shard::shard_search_json(part);
      j["status"] = 200;
      return j;
    }
    const VerifyAnswer v = backend_->verify(r.id, r.entry.features, r.search, r.deadline);
    return {
        {"status", 200}, {"match", shard::match_json(v.match)}, {"match_ms", v.match_ms}, {"verify_ms", v.verify_ms}};
  });
  const std::string op = e.field("op");
  if (op != "get" && op != "verify" && op != "search") return j;
  const int after = shards_;
  if (after != before && op != "search")
    j = shard::error_json(421, "id", "the shard count changed to " + std::to_string(after) + " during the read");
  j["shards"] = after;  // a front that routed by another count reads again
  // How long the read waited in the stream before a reader took it: Redis stamped its ID with its
  // own clock in unix ms (a front's latency parts, VerifyAnswer); 0 when the clocks disagree.
  try {
    j["queued_ms"] = double(std::max<int64_t>(0, taken_ms - int64_t(shard::StreamId::parse(e.id).ms)));
  } catch (const std::invalid_argument&) {
  }
  return j;
}

namespace {

constexpr int kRepairAnswerWaitMs = 5000;  // a sibling's answer to a repair ask
constexpr size_t kRepairAskIds = 32;       // entries per ask (an entry is about 100 KB)
constexpr int64_t kDigestLiveMs = 5000;    // a digest not refreshed for this long is a stopped replica's

// The fields of a hash (HGETALL) as a map; empty when the key is absent.
std::map<std::string, std::string> hash_fields(const Reply& r) {
  std::map<std::string, std::string> out;
  if (r.type != Reply::Type::kArray) return out;
  for (size_t i = 0; i + 1 < r.elements.size(); i += 2) out[r.elements[i].str] = r.elements[i + 1].str;
  return out;
}

}  // namespace

void ShardWorker::repair_loop(const std::atomic<bool>& stop) {
  Redis redis(options_.redis);
  started_ms_ = shard::unix_ms(Clock::now());
  Clock::time_point next = Clock::now();
  bool lost = false;
  int rounds = 0;
  while (!stop) {
    if (Clock::now() < next) {
      nap(200, stop);
      try {
        publish_changes(redis);
      } catch (const std::exception&) {  // RedisError: the round below says so
      }
      continue;
    }
    next = Clock::now() + std::chrono::seconds(options_.repair_every_s);
    try {
      // Something changed: compare again soon (another sibling, or what changed meanwhile).
      // Reads are answered once a round finds nothing to change (a sibling's digest may lag its
      // writes by a moment, so the first copy may not be the last), or after 5 rounds whatever
      // they found (writes that never stop).
      bool stale = false;
      const bool changed = repair_round(redis, stale);
      if (changed || (stale && !joined_)) next = std::min(next, Clock::now() + (joined_ ? 1000ms : 300ms));
      if (!joined_ && ((!changed && !stale) || ++rounds >= 5)) {
        joined_ = true;
        say("repair: compared with its siblings; answering reads");
      }
      if (lost) say("repair: Redis is back");
      lost = false;
    } catch (const RedisError& e) {
      if (!lost) say(std::string("repair: ") + e.what() + "; retrying");
      lost = true;
      next = Clock::now() + 1s;
      joined_ = true;  // a round that cannot run (Redis, its ACL) holds no reads
    } catch (const std::exception& e) {
      say(std::string("repair: ") + e.what());
      next = std::min(next, Clock::now() + 5s);
      joined_ = true;
    }
  }
}

bool ShardWorker::repair_round(Redis& redis, bool& stale) {
  const int k = options_.shard;
  // This replica's digest and position, with no write between them.
  repair::Entries mine;
  StreamId position;
  int64_t state_ms = 0;
  {
    std::lock_guard gallery(gallery_mutex_);
    position = recorded_;
    state_ms = shard::unix_ms(Clock::now());
    backend_->for_each_entry([&](texture::GalleryEntry&& e) { mine[e.id] = repair::entry_hash(e); });
    for (repair::Entries& b : digest_) b.clear();
    for (const auto& [id, h] : mine) digest_[size_t(repair::bucket_of(id))][id] = h;
    digest_ready_ = true;
    dirty_.clear();
    published_ = position;
  }
  const std::array<uint64_t, repair::kBuckets> buckets = repair::bucket_hashes(mine);
  {
    const std::string key = repair::digest_key(k, options_.replica), tmp = key + ":new";
    std::vector<std::string> cmd = {"HSET",      tmp,
                                    "position",  position.str(),
                                    "count",     std::to_string(mine.size()),
                                    "at_ms",     std::to_string(state_ms),
                                    "divergent", std::to_string(divergent_.load()),
                                    "repaired",  std::to_string(repaired_.load())};
    for (int b = 0; b < repair::kBuckets; ++b) {
      if (buckets[size_t(b)] == 0) continue;
      cmd.insert(cmd.end(), {"b:" + std::to_string(b), repair::hex(buckets[size_t(b)]), "e:" + std::to_string(b),
                             repair::bucket_text(mine, b)});
    }
    redis.command({"DEL", tmp});
    const Reply set = redis.command(cmd);
    if (set.error()) throw RedisError("Redis at " + redis.url() + " refused HSET " + tmp + ": " + set.str);
    redis.command({"EXPIRE", tmp, std::to_string(3 * options_.repair_every_s + 10)});
    redis.command({"RENAME", tmp, key});
  }
  // Caught up with the stream? Else the stream repairs this replica first, and its position is not
  // yet comparable.
  bool caught_up = true;
  const std::vector<StreamEntry> tail =
      shard::stream_entries(redis.command({"XREVRANGE", shard::writes_key(k), "+", "-", "COUNT", "1"}));
  {
    std::lock_guard lock(applied_mutex_);
    if (!failing_.empty() || (!tail.empty() && applied_ < StreamId::parse(tail[0].id))) caught_up = false;
  }
  // The siblings: the other replicas' groups on the writes stream; those that published a digest
  // lately (a replica stopped for good stops counting once its digest expires).
  std::vector<std::string> siblings;
  for (const ReplicaStats& r : shard::replica_groups(redis, k))
    if (r.replica != options_.replica) siblings.push_back(r.replica);
  // The most advanced sibling first: a replica far behind (a new one) takes its state from it.
  struct Sibling {
    std::string name;
    std::map<std::string, std::string> digest;
    StreamId position;
  };
  std::vector<Sibling> digests;
  const int64_t now_ms = shard::unix_ms(Clock::now());
  stale = false;
  for (const std::string& sibling : siblings) {
    Sibling d{sibling, hash_fields(redis.command({"HGETALL", repair::digest_key(k, sibling)})), {}};
    const auto pos = d.digest.find("position"), at = d.digest.find("at_ms");
    if (pos == d.digest.end() || at == d.digest.end()) continue;  // expired meanwhile
    const int64_t at_ms = std::stoll(at->second);
    if (at_ms < now_ms - kDigestLiveMs) continue;  // a replica stopped: not compared
    if (at_ms < started_ms_) stale = true;         // from before this worker started: not enough to join
    d.position = StreamId::parse(pos->second);
    digests.push_back(std::move(d));
  }
  std::sort(digests.begin(), digests.end(), [](const Sibling& x, const Sibling& y) { return y.position < x.position; });
  int64_t divergent = 0;
  bool changed = false;
  for (const Sibling& d : digests) {
    const std::string& sibling = d.name;
    const std::map<std::string, std::string>& theirs_digest = d.digest;
    const StreamId& their_position = d.position;
    std::vector<int> differing;
    repair::Entries theirs;
    for (int b = 0; b < repair::kBuckets; ++b) {
      const auto h = theirs_digest.find("b:" + std::to_string(b));
      const std::string their_hash = h == theirs_digest.end() ? std::string() : h->second;
      const std::string my_hash = buckets[size_t(b)] == 0 ? std::string() : repair::hex(buckets[size_t(b)]);
      if (their_hash == my_hash) continue;
      differing.push_back(b);
      const auto e = theirs_digest.find("e:" + std::to_string(b));
      if (e != theirs_digest.end()) theirs.merge(repair::parse_bucket_text(e->second));
    }
    if (differing.empty()) {
      // The same entries as a sibling further on in the stream: this replica holds its state at its
      // position, and takes that position (so that a sibling further behind no longer looks ahead).
      if (caught_up && !changed && position < their_position) {
        std::lock_guard gallery(gallery_mutex_);
        if (recorded_ == position) {
          record_applied(their_position);
          position = their_position;
        }
      }
      continue;
    }
    const repair::Plan plan = repair::plan(mine, position, theirs, their_position, differing);
    divergent += plan.divergent;
    if (changed || !caught_up || (plan.copy.empty() && plan.remove.empty())) continue;
    // The sibling's entries to copy, asked for in chunks.
    std::vector<texture::GalleryEntry> copies;
    for (size_t i = 0; i < plan.copy.size(); i += kRepairAskIds) {
      const std::vector<std::string> ids(plan.copy.begin() + long(i),
                                         plan.copy.begin() + long(std::min(plan.copy.size(), i + kRepairAskIds)));
      const std::string reply = "prism:repair:reply:" + std::to_string(k) + ":" + options_.replica + ":" + lease_ +
                                ":" + std::to_string(asks_++);
      redis.command({"LPUSH", repair::ask_key(k, sibling), json_text(json{{"ids", ids}, {"reply", reply}})});
      redis.command({"EXPIRE", repair::ask_key(k, sibling), "60"});
      const Reply done = redis.command({"BLPOP", reply + ":done", std::to_string(kRepairAnswerWaitMs / 1000)},
                                       std::chrono::milliseconds(kRepairAnswerWaitMs));
      if (done.type != Reply::Type::kArray)
        throw std::runtime_error("replica " + sibling + " did not answer a repair ask");
      const std::map<std::string, std::string> got = hash_fields(redis.command({"HGETALL", reply}));
      redis.command({"DEL", reply});
      for (const std::string& id : ids) {
        const auto f = got.find(id);
        if (f == got.end()) continue;  // gone there meanwhile: the next round sees it
        copies.push_back(texture::Gallery::decode(std::vector<uint8_t>(f->second.begin(), f->second.end()),
                                                  "replica " + sibling + "'s entry " + id));
      }
    }
    // Applied between two stream writes, and only if none came since the plan was made.
    std::lock_guard gallery(gallery_mutex_);
    if (recorded_ < position || position < recorded_) {  // a write came: the next round (soon) plans again
      changed = true;
      break;
    }
    int64_t done = 0;
    const Clock::time_point deadline = Clock::now() + 30s;
    for (const texture::GalleryEntry& e : copies) {
      try {
        backend_->write(e, backend_->contains(e.id), deadline);
        note_changed(e.id);
        ++done;
      } catch (const std::exception& x) {
        say("repair: cannot copy " + e.id + " from replica " + sibling + ": " + x.what());
      }
    }
    for (const std::string& id : plan.remove) {
      try {
        if (backend_->remove(id, deadline)) ++done;
        note_changed(id);
      } catch (const std::exception& x) {
        say("repair: cannot drop " + id + " (deleted on replica " + sibling + "): " + x.what());
      }
    }
    repaired_ += done;
    changed = done > 0;
    // This replica now holds the sibling's state at its position (every differing entry taken):
    // it takes that position too, so that a sibling further behind no longer looks ahead of it
    // (and the stream's entries up to it, already in that state, are not applied again).
    if (position < their_position && copies.size() == plan.copy.size() &&
        done == int64_t(copies.size() + plan.remove.size())) {
      record_applied(their_position);
      changed = true;
    }
    say("repair: " + std::to_string(plan.divergent) + " entries differed from replica " + sibling + " (position " +
        their_position.str() + ", here " + position.str() + "): copied " + std::to_string(copies.size()) +
        ", dropped " + std::to_string(plan.remove.size()) + " (" + std::to_string(done) + " written)");
  }
  divergent_ = divergent;
  redis.command({"HSET", repair::digest_key(k, options_.replica), "divergent", std::to_string(divergent), "repaired",
                 std::to_string(repaired_.load())});
  return changed;
}

void ShardWorker::note_changed(const std::string& id) {
  if (!digest_ready_ || id.empty()) return;
  const int b = repair::bucket_of(id);
  try {
    if (backend_->contains(id))
      digest_[size_t(b)][id] = repair::entry_hash(backend_->entry(id));
    else
      digest_[size_t(b)].erase(id);
  } catch (const texture::GalleryError&) {  // unreadable: the next round's digest reads it again
    digest_[size_t(b)].erase(id);
  }
  dirty_.insert(b);
}

void ShardWorker::publish_changes(Redis& redis) {
  std::vector<std::string> set = {"HSET", repair::digest_key(options_.shard, options_.replica)}, drop;
  {
    std::lock_guard gallery(gallery_mutex_);
    if (!digest_ready_) return;
    // at_ms: when this state was the replica's (refreshed every 200 ms: a digest not refreshed for
    // 5 s is a stopped replica's, and a replica joins only on digests fresher than its start).
    set.insert(set.end(), {"at_ms", std::to_string(shard::unix_ms(Clock::now())), "position", recorded_.str()});
    for (const int b : dirty_) {
      const repair::Entries& bucket = digest_[size_t(b)];
      const std::string hf = "b:" + std::to_string(b), ef = "e:" + std::to_string(b);
      if (bucket.empty()) {
        drop.insert(drop.end(), {hf, ef});
        continue;
      }
      std::string text;
      for (const auto& [id, h] : bucket) text += id + " " + repair::hex(h) + "\n";
      set.insert(set.end(), {hf, repair::hex(shard::fnv1a64(text)), ef, text});
    }
    dirty_.clear();
    published_ = recorded_;
  }
  // Two commands: a reader between them sees the position a moment before the buckets, which only
  // makes this replica look behind once (the next round compares again).
  if (!drop.empty()) {
    // Empty buckets: their fields set empty, as absent ones read (HDEL is not among a worker's rights).
    for (const std::string& f : drop) set.insert(set.end(), {f, ""});
  }
  redis.command(set);
}

void ShardWorker::repair_answer_loop(const std::atomic<bool>& stop) {
  Redis redis(options_.redis);
  const std::string key = repair::ask_key(options_.shard, options_.replica);
  while (!stop) {
    try {
      const Reply r = redis.command({"BLPOP", key, "1"}, 1000ms);
      if (r.type != Reply::Type::kArray || r.elements.size() < 2) continue;
      const json ask = json::parse(r.elements[1].str);
      const std::string reply = ask.at("reply").get<std::string>();
      if (reply.rfind("prism:repair:reply:", 0) != 0) continue;
      std::vector<std::string> cmd = {"HSET", reply, "@position"};
      {
        std::lock_guard gallery(gallery_mutex_);
        cmd.push_back(recorded_.str());
      }
      for (const std::string& id : ask.at("ids").get<std::vector<std::string>>()) {
        try {
          const std::vector<uint8_t> bytes = texture::Gallery::encode(backend_->entry(id));
          cmd.insert(cmd.end(), {id, std::string(bytes.begin(), bytes.end())});
        } catch (const texture::GalleryError&) {  // not (or no longer) here
        }
      }
      redis.command(cmd);
      redis.command({"EXPIRE", reply, std::to_string(kReplyTtlS)});
      redis.command({"RPUSH", reply + ":done", "1"});
      redis.command({"EXPIRE", reply + ":done", std::to_string(kReplyTtlS)});
    } catch (const RedisError&) {
      nap(500, stop);
    } catch (const std::exception& e) {
      say(std::string("repair: a malformed ask: ") + e.what());
    }
  }
}

}  // namespace prism::service
