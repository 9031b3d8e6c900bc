// What the front (service/sharded_backend.h) and the shard workers (service/shard_worker.h) both
// know: the Redis key names, the product -> shard hash, the shard-count agreement, stream entry
// fields and the JSON of the answers. The protocol itself is described in service/shard_worker.h.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "backend.h"
#include "redis.h"

namespace prism::service::shard {

using nlohmann::json;

inline const std::string kShardsKey = "prism:shards";
inline const std::string kNormaliseKey = "prism:normalise";
// An online split (service/reshard.h): while one runs, prism:split holds the count being split to
// (2N) and prism:split:marks, per parent shard K, the ID of the `split` entry that began it in
// K's writes stream. prism:shards keeps N (what reads are routed by) until the commit.
inline const std::string kSplitKey = "prism:split";
inline const std::string kSplitMarksKey = "prism:split:marks";
inline const std::string kReadersGroup = "readers";
std::string writes_key(int shard);
std::string reads_key(int shard);
std::string worker_key(int shard, const std::string& replica);
// Set (with the liveness key's expiry) while replica NAME of shard K cannot apply its next write:
// why, for the fronts' /healthz.
std::string failing_key(int shard, const std::string& replica);
// Set (with the liveness key's expiry) while every reader of replica NAME of shard K is stuck past
// its read's deadline: why. Fronts send it no reads meanwhile; its writer still applies writes, and
// it keeps its name (a second worker of that name stays refused).
std::string hung_key(int shard, const std::string& replica);
// The answer of write ID (its writes stream entry) as replica NAME of shard K first applied it,
// kept while the write is applied but not recorded (ShardWorker: its record failed), for the
// retry to answer the same, across a restart of the worker too.
std::string unrecorded_key(int shard, const std::string& replica, const std::string& id);
std::string replica_group(const std::string& replica);

// FNV-1a, 64 bits (Fowler, Noll, Vo): the product id -> shard map, the same on every host and build.
uint64_t fnv1a64(const std::string& s);
inline int shard_of(const std::string& id, int shards) { return int(fnv1a64(id) % uint64_t(shards)); }

// prism:shards is absent and this process was not given the count: nobody has set it yet (the
// deployment's first process is given --shards N), or Redis lost its data. Workers wait for it.
struct ShardCountUnset : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// prism:shards or prism:split holds what no front or reshard writes (not a count, a split that is not
// twice the count): the message names the key, its value and what it should be. A process starting
// refuses to (its layout unknown); a running one keeps the layout it serves under (ShardWorker).
struct MalformedLayout : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The deployment's shard count in prism:shards: with `shards` > 0 it is set when absent (SET NX)
// and must equal what is there, or the count of a split in progress (prism:split: a worker of a
// new shard is given the count it joins), else std::runtime_error naming both; with 0 it is read
// (ShardCountUnset when absent). Returns the count. RedisError when Redis is unreachable or not
// ready (an error reply such as LOADING).
int agree_shard_count(Redis& redis, int shards);

// The deployment's placement as Redis says now: `shards` (prism:shards: reads, and writes' answers,
// go to FNV-1a-64(id) mod shards) and, while a split runs, `split` = 2 * shards (prism:split:
// writes of a product whose shard differs under `split` are also added to that new shard's
// stream). `split` is 0 otherwise.
struct Layout {
  int shards = 0;
  int split = 0;
  bool operator==(const Layout& o) const { return shards == o.shards && split == o.split; }
  bool operator!=(const Layout& o) const { return !(*this == o); }
};
// Parses MGET prism:shards prism:split's two replies: MalformedLayout naming the key for a value
// that is not a count, or a split that is not twice the count; ShardCountUnset when prism:shards is
// absent.
Layout layout_from(const Reply& shards, const Reply& split, const std::string& url);
// MGET prism:shards prism:split (layout_from); RedisError when unreachable.
Layout read_layout(Redis& redis);
// The shard count under which shard K serves: `shards` for K below it, `split` for a new shard of
// a split in progress (K in [shards, split)); std::runtime_error naming K and the layout otherwise.
int count_for_shard(const Layout& layout, int shard, const std::string& url);

// The deployment's contrast normalisation in prism:normalise (texture/normalise.h names): every
// shard's gallery and every front's query extraction must use the same one. With `n` given it is
// set when absent (SET NX) and must equal what is there (std::runtime_error naming both); without,
// it is read. Returns it; nullopt when not set yet (no worker nor front has said). RedisError as
// agree_shard_count.
std::optional<texture::Normalisation> agree_normalisation(Redis& redis, const std::optional<texture::Normalisation>& n);

// A stream entry ID "MS-SEQ", ordered as Redis orders them.
struct StreamId {
  uint64_t ms = 0, seq = 0;
  static StreamId parse(const std::string& s);  // std::invalid_argument
  bool operator<(const StreamId& o) const { return ms != o.ms ? ms < o.ms : seq < o.seq; }
  bool operator<=(const StreamId& o) const { return !(o < *this); }
  bool operator==(const StreamId& o) const { return ms == o.ms && seq == o.seq; }
  bool operator!=(const StreamId& o) const { return !(*this == o); }
  std::string str() const { return std::to_string(ms) + "-" + std::to_string(seq); }
};

// One stream entry as XREADGROUP / XRANGE / XAUTOCLAIM return it: [id, [field, value, ...]].
struct StreamEntry {
  std::string id;
  std::map<std::string, std::string> fields;
  const std::string& field(const std::string& name) const;  // "" when absent
};
// The entries of a list of entries (XRANGE, XREVRANGE, XAUTOCLAIM's second element). Entries
// whose fields were trimmed away (a pending entry XTRIM removed) come back with no fields.
std::vector<StreamEntry> stream_entries(const Reply& reply);
// The entries of an XREADGROUP reply reading one stream (none when it timed out).
std::vector<StreamEntry> read_group_entries(const Reply& reply);

// Creates `group` on `stream` reading from its start (MKSTREAM); an existing group is kept.
void ensure_group(Redis& redis, const std::string& stream, const std::string& group);

// Shard K's replicas as Redis knows them: the `replica:NAME` consumer groups of its writes stream
// (XINFO GROUPS), by name, with replica, delivered, pending and lag set (live and failing are not:
// they are other keys). Empty when the stream does not exist yet. RedisError when unreachable.
std::vector<ReplicaStats> replica_groups(Redis& redis, int shard);

// A steady-clock deadline as unix milliseconds (what crosses hosts) and back; a time more than
// about 30 years from now is taken as that far (the steady clock's nanoseconds would overflow).
int64_t unix_ms(Clock::time_point deadline);
Clock::time_point steady_from_unix_ms(int64_t unix_ms);

// A number field of a shard's JSON as T: json::type_error (as get<T> gives for a wrong type) when
// it is not a number that T holds. nlohmann's own get<int> converts 1e30 with undefined behaviour
// and 3000000000 to a negative int.
template <typename T>
T number_field(const json& j, const char* key) {
  const json& v = j.at(key);
  bool fits = v.is_number();
  if constexpr (std::is_integral_v<T>) {
    constexpr double lo = double(std::numeric_limits<T>::min()), hi = double(std::numeric_limits<T>::max());
    constexpr uint64_t max = uint64_t(std::numeric_limits<T>::max());  // exact, where hi may round up
    if (v.is_number_unsigned())
      fits = v.get<uint64_t>() <= max;
    else if (v.is_number_integer())
      fits = std::is_signed_v<T> ? v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                                       (v.get<int64_t>() < 0 || uint64_t(v.get<int64_t>()) <= max)
                                 : v.get<int64_t>() >= 0 && uint64_t(v.get<int64_t>()) <= max;
    else if (v.is_number_float())  // a whole number well inside T (hi itself may round up past it)
      fits = std::trunc(v.get<double>()) == v.get<double>() && v.get<double>() >= lo && v.get<double>() < hi;
  } else {
    fits = fits && std::abs(v.get<double>()) <= double(std::numeric_limits<T>::max());
  }
  if (!fits) throw json::type_error::create(302, std::string("'") + key + "' is not a number in range", &v);
  return v.get<T>();
}

// A count added to the protocol after its first release (digest_candidates, digested,
// digest_bytes): absent reads as 0, so that fronts and workers of either side of the change can run
// together through a rolling upgrade (an older worker searches exactly); present, it is a number_field
// that is not negative.
template <typename T>
T added_count_field(const json& j, const char* key) {
  if (!j.contains(key)) return T(0);
  const T v = number_field<T>(j, key);
  if (v < T(0)) throw json::type_error::create(302, std::string("'") + key + "' is negative", &j.at(key));
  return v;
}

json params_json(const texture::SearchParams& p);
texture::SearchParams params_from(const json& j);  // json::exception on a malformed one
json product_json(const Product& p);
Product product_from(const json& j);
json match_json(const Match& m);
Match match_from(const json& j);
// A scored part (ShardSearch::scored) carries `scored: true` and a shortlist of {id, score} only;
// absent, `scored` reads as false (a verified part, as every worker before the two-phase search
// answers).
json shard_search_json(const ShardSearch& s);
ShardSearch shard_search_from(const json& j);
// The candidates of a second phase's request (`candidates`) and of a scored part's shortlist:
// [{id, score}, ...].
json scored_json(const std::vector<Match>& candidates);
std::vector<Match> scored_from(const json& j);

// The phases of a sharded search (ShardSearch in backend.h says why), as the `phase` of a search
// read's params: absent, the whole search (scores, shortlist, verification: shard_search); "score",
// the shortlist by score alone (shard_scores); "verify", the read's `candidates` verified
// (shard_verify). Added after the first release, as digest_candidates was: a worker from before it
// ignores `phase` and answers every search read whole, a verified shortlist that holds the
// candidates of either phase (with its gallery unchanged, a shard's part of the global shortlist
// is among its own shortlist). So the front takes a verified answer to its first phase as that
// shard's second, and keeps of a verified answer to its second the candidates it asked for: a
// rolling upgrade costs such shards their whole verification, never a search.
enum class SearchPhase { kWhole, kScore, kVerify };
json shard_stats_json(const ShardStats& s);
ShardStats shard_stats_from(const json& j);

// What a worker reads from a stream entry before its backend acts on it (ShardWorker::apply_write
// and answer_read), parsed here so that it is checked, and fuzzed, without Redis.
struct Request {
  std::string op;
  json params;                                            // `params`; {} when absent
  Clock::time_point deadline = Clock::time_point::max();  // reads: `deadline_ms`; writes have none
  texture::GalleryEntry entry;                            // post, put: the entry; verify, search: the query
  texture::SearchParams search;                           // verify, search
  std::string id;                                         // delete, get, verify
  SearchPhase phase = SearchPhase::kWhole;                // search: `phase`
  std::vector<Match> candidates;                          // search of phase "verify": `candidates`
};
// `write`: an entry of the writes stream (post, put, delete), else of the reads stream (get,
// verify, search, stats). Throws ServiceError 400 naming `op` (not an op of that stream), `phase`
// (a search phase this worker does not know) or `id` (a post or put of an invalid product id), texture::GalleryError
// naming the stream entry (an entry that does not decode), json::exception (params that are not JSON, lack a field or
// hold one out of range) and std::logic_error (a read's deadline_ms that is not a number).
Request parse_request(const StreamEntry& e, bool write);

// The front's reading of a shard's answer text (ShardedBackend::call and scatter): the answer
// object when its status is 200 (or 201 with `created_ok`); otherwise what the error answer
// describes is thrown (throw_error). json::exception when the text is no answer: the caller's 502.
json answer_from(const std::string& text, bool created_ok);
WriteResult write_result_from(const json& answer);    // post, put
VerifyAnswer verify_answer_from(const json& answer);  // verify

// A worker's answer to a failed request: the status, field and message of a ServiceError, or of a
// texture::GalleryError (kind "gallery", rethrown as one by the front, as LocalBackend throws it).
json error_json(int status, const std::string& field, const std::string& message, const std::string& kind = "");
// Throws what error_json describes; a status outside 400..599 (no error status) is a 502 saying so.
[[noreturn]] void throw_error(const json& reply);

}  // namespace prism::service::shard
