// What the front (service/sharded_backend.h) and the shard workers (service/shard_worker.h) both
// know: the Redis key names, the product -> shard hash, the shard-count agreement, stream entry
// fields and the JSON of the answers. The protocol itself is described in service/shard_worker.h.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend.h"
#include "redis.h"

namespace prism::service::shard {

using nlohmann::json;

inline const std::string kShardsKey = "prism:shards";
inline const std::string kNormaliseKey = "prism:normalise";
inline const std::string kReadersGroup = "readers";
std::string writes_key(int shard);
std::string reads_key(int shard);
std::string worker_key(int shard, const std::string& replica);
std::string replica_group(const std::string& replica);

// FNV-1a, 64 bits (Fowler, Noll, Vo): the product id -> shard map, the same on every host and build.
uint64_t fnv1a64(const std::string& s);
inline int shard_of(const std::string& id, int shards) { return int(fnv1a64(id) % uint64_t(shards)); }

// The deployment's shard count in prism:shards: with `shards` > 0 it is set when absent (SET NX)
// and must equal what is there (std::runtime_error naming both); with 0 it is read (runtime_error
// when absent). Returns the count. RedisError when Redis is unreachable or not ready (an error
// reply such as LOADING).
int agree_shard_count(Redis& redis, int shards);

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

// A steady-clock deadline as unix milliseconds (what crosses hosts) and back.
int64_t unix_ms(Clock::time_point deadline);
Clock::time_point steady_from_unix_ms(int64_t unix_ms);

json params_json(const texture::SearchParams& p);
texture::SearchParams params_from(const json& j);  // json::exception on a malformed one
json product_json(const Product& p);
Product product_from(const json& j);
json match_json(const Match& m);
Match match_from(const json& j);
json shard_search_json(const ShardSearch& s);
ShardSearch shard_search_from(const json& j);
json shard_stats_json(const ShardStats& s);
ShardStats shard_stats_from(const json& j);

// A worker's answer to a failed request: the status, field and message of a ServiceError, or of a
// texture::GalleryError (kind "gallery", rethrown as one by the front, as LocalBackend throws it).
json error_json(int status, const std::string& field, const std::string& message, const std::string& kind = "");
// Throws what error_json describes.
[[noreturn]] void throw_error(const json& reply);

}  // namespace prism::service::shard
