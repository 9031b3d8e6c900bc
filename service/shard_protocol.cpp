#include "shard_protocol.h"

#include <stdexcept>

namespace prism::service::shard {

std::string writes_key(int shard) { return "prism:shard:" + std::to_string(shard) + ":writes"; }
std::string reads_key(int shard) { return "prism:shard:" + std::to_string(shard) + ":reads"; }
std::string worker_key(int shard, const std::string& replica) {
  return "prism:worker:" + std::to_string(shard) + ":" + replica;
}
std::string replica_group(const std::string& replica) { return "replica:" + replica; }

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

int agree_shard_count(Redis& redis, int shards) {
  if (shards > 0) {
    const Reply set = redis.command({"SET", kShardsKey, std::to_string(shards), "NX"});
    // LOADING (an AOF being read after a restart) and the like pass: RedisError is retried.
    if (set.error()) throw RedisError("Redis at " + redis.url() + " refused SET " + kShardsKey + ": " + set.str);
  }
  const Reply got = redis.command({"GET", kShardsKey});
  if (got.error()) throw RedisError("Redis at " + redis.url() + " refused GET " + kShardsKey + ": " + got.str);
  if (got.nil()) throw std::runtime_error(kShardsKey + " is not set at " + redis.url() + ": give the shard count");
  if (got.type != Reply::Type::kString || got.str.empty() || got.str.size() > 6 ||
      got.str.find_first_not_of("0123456789") != std::string::npos || std::stoi(got.str) < 1)
    throw std::runtime_error(kShardsKey + " at " + redis.url() + " is '" + got.str + "', not a shard count");
  const int there = std::stoi(got.str);
  if (shards > 0 && there != shards)
    throw std::runtime_error("shard count mismatch: configured with " + std::to_string(shards) + " shards but " +
                             kShardsKey + " at " + redis.url() + " says " + std::to_string(there));
  return there;
}

std::optional<texture::Normalisation> agree_normalisation(Redis& redis,
                                                          const std::optional<texture::Normalisation>& n) {
  if (n) {
    const Reply set = redis.command({"SET", kNormaliseKey, n->name(), "NX"});
    if (set.error()) throw RedisError("Redis at " + redis.url() + " refused SET " + kNormaliseKey + ": " + set.str);
  }
  const Reply got = redis.command({"GET", kNormaliseKey});
  if (got.error()) throw RedisError("Redis at " + redis.url() + " refused GET " + kNormaliseKey + ": " + got.str);
  if (got.nil()) return std::nullopt;
  texture::Normalisation there;
  try {
    there = texture::parse_normalisation(got.type == Reply::Type::kString ? got.str : std::string("?"));
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(kNormaliseKey + " at " + redis.url() + " is not a normalisation: " + e.what());
  }
  if (n && *n != there)
    throw std::runtime_error("normalisation mismatch: this gallery or front uses " + n->name() + " but " +
                             kNormaliseKey + " at " + redis.url() + " says " + there.name() +
                             " (every shard and front of a deployment extracts alike)");
  return there;
}

StreamId StreamId::parse(const std::string& s) {
  const size_t dash = s.find('-');
  try {
    if (dash == std::string::npos || dash == 0 || dash + 1 == s.size()) throw std::invalid_argument(s);
    size_t used = 0;
    StreamId id;
    id.ms = std::stoull(s.substr(0, dash), &used);
    if (used != dash) throw std::invalid_argument(s);
    id.seq = std::stoull(s.substr(dash + 1), &used);
    if (used != s.size() - dash - 1) throw std::invalid_argument(s);
    return id;
  } catch (const std::logic_error&) {
    throw std::invalid_argument("not a stream entry ID: '" + s + "'");
  }
}

const std::string& StreamEntry::field(const std::string& name) const {
  static const std::string none;
  const auto it = fields.find(name);
  return it == fields.end() ? none : it->second;
}

std::vector<StreamEntry> stream_entries(const Reply& reply) {
  std::vector<StreamEntry> out;
  if (reply.type != Reply::Type::kArray) return out;
  for (const Reply& e : reply.elements) {
    if (e.type != Reply::Type::kArray || e.elements.empty() || e.elements[0].type != Reply::Type::kString) continue;
    StreamEntry se;
    se.id = e.elements[0].str;
    if (e.elements.size() > 1 && e.elements[1].type == Reply::Type::kArray) {
      const std::vector<Reply>& kv = e.elements[1].elements;
      for (size_t i = 0; i + 1 < kv.size(); i += 2) se.fields[kv[i].str] = kv[i + 1].str;
    }
    out.push_back(std::move(se));
  }
  return out;
}

std::vector<StreamEntry> read_group_entries(const Reply& reply) {
  // [[stream, [entries]]] for the one stream read; nil when BLOCK timed out.
  if (reply.type != Reply::Type::kArray || reply.elements.size() != 1 || reply.elements[0].elements.size() != 2)
    return {};
  return stream_entries(reply.elements[0].elements[1]);
}

void ensure_group(Redis& redis, const std::string& stream, const std::string& group) {
  const Reply r = redis.command({"XGROUP", "CREATE", stream, group, "0", "MKSTREAM"});
  if (r.error() && r.error_code() != "BUSYGROUP")
    throw RedisError("Redis at " + redis.url() + " refused XGROUP CREATE " + stream + " " + group + ": " + r.str);
}

int64_t unix_ms(Clock::time_point deadline) {
  const auto now_unix =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return now_unix + left;
}

Clock::time_point steady_from_unix_ms(int64_t ms) {
  const auto now_unix =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  return Clock::now() + std::chrono::milliseconds(ms - now_unix);
}

json params_json(const texture::SearchParams& p) {
  return {{"ratio", p.ratio},
          {"shortlist", p.shortlist},
          {"min_significance", p.min_significance},
          {"min_inliers", p.min_inliers},
          {"reprojection_px", p.verify.reprojection_px},
          {"max_iterations", p.verify.max_iterations},
          {"confidence", p.verify.confidence},
          {"collections", p.collections}};
}

texture::SearchParams params_from(const json& j) {
  texture::SearchParams p;
  p.ratio = j.at("ratio").get<float>();
  p.shortlist = j.at("shortlist").get<int>();
  p.min_significance = j.at("min_significance").get<double>();
  p.min_inliers = j.at("min_inliers").get<int>();
  p.verify.reprojection_px = j.at("reprojection_px").get<double>();
  p.verify.max_iterations = j.at("max_iterations").get<int>();
  p.verify.confidence = j.at("confidence").get<double>();
  p.collections = j.at("collections").get<std::vector<std::string>>();
  return p;
}

json product_json(const Product& p) {
  return {{"id", p.id},
          {"collection", p.collection},
          {"source", p.source},
          {"enrolled_unix", p.enrolled_unix},
          {"features", p.features},
          {"width", p.width},
          {"height", p.height},
          {"shard", p.shard}};
}

Product product_from(const json& j) {
  Product p;
  p.id = j.at("id").get<std::string>();
  p.collection = j.at("collection").get<std::string>();
  p.source = j.at("source").get<std::string>();
  p.enrolled_unix = j.at("enrolled_unix").get<int64_t>();
  p.features = j.at("features").get<int>();
  p.width = j.at("width").get<int>();
  p.height = j.at("height").get<int>();
  p.shard = j.at("shard").get<int>();
  return p;
}

json match_json(const Match& m) {
  std::vector<double> h(m.homography.val, m.homography.val + 9);
  return {{"id", m.id},
          {"score", m.score},
          {"matches", m.matches},
          {"inliers", m.inliers},
          {"significance", m.significance},
          {"geometric_significance", m.geometric_significance},
          {"accepted", m.accepted},
          {"homography", h}};
}

Match match_from(const json& j) {
  Match m;
  m.id = j.at("id").get<std::string>();
  m.score = j.at("score").get<int>();
  m.matches = j.at("matches").get<int>();
  m.inliers = j.at("inliers").get<int>();
  m.significance = j.at("significance").get<double>();
  m.geometric_significance = j.at("geometric_significance").get<double>();
  m.accepted = j.at("accepted").get<bool>();
  const std::vector<double> h = j.at("homography").get<std::vector<double>>();
  if (h.size() != 9) throw std::invalid_argument("a homography of " + std::to_string(h.size()) + " values");
  for (int i = 0; i < 9; ++i) m.homography.val[i] = h[size_t(i)];
  return m;
}

json shard_search_json(const ShardSearch& s) {
  json list = json::array();
  for (const Match& m : s.shortlist) list.push_back(match_json(m));
  return {{"shard", s.shard},       {"shortlist", list},
          {"searched", s.searched}, {"gallery_size", s.gallery_size},
          {"match_ms", s.match_ms}, {"verify_ms", s.verify_ms}};
}

ShardSearch shard_search_from(const json& j) {
  ShardSearch s;
  s.shard = j.at("shard").get<int>();
  for (const json& m : j.at("shortlist")) s.shortlist.push_back(match_from(m));
  s.searched = j.at("searched").get<size_t>();
  s.gallery_size = j.at("gallery_size").get<size_t>();
  s.match_ms = j.at("match_ms").get<double>();
  s.verify_ms = j.at("verify_ms").get<double>();
  return s;
}

json shard_stats_json(const ShardStats& s) {
  const texture::IndexStats& i = s.index;
  return {{"shard", s.shard},
          {"worker", s.worker},
          {"writes_applied", s.writes_applied},
          {"images", i.images},
          {"gpu_images", i.gpu_images},
          {"host_images", i.host_images},
          {"gpu_capacity", i.gpu_capacity},
          {"host_capacity", i.host_capacity},
          {"gpu_bytes", i.gpu_bytes},
          {"host_bytes", i.host_bytes},
          {"gpu_budget", i.gpu_budget},
          {"host_budget", i.host_budget},
          {"collections", i.collections},
          {"device", i.device}};
}

ShardStats shard_stats_from(const json& j) {
  ShardStats s;
  s.shard = j.at("shard").get<int>();
  s.worker = j.at("worker").get<std::string>();
  s.writes_applied = j.at("writes_applied").get<int64_t>();
  texture::IndexStats& i = s.index;
  i.images = j.at("images").get<size_t>();
  i.gpu_images = j.at("gpu_images").get<size_t>();
  i.host_images = j.at("host_images").get<size_t>();
  i.gpu_capacity = j.at("gpu_capacity").get<size_t>();
  i.host_capacity = j.at("host_capacity").get<size_t>();
  i.gpu_bytes = j.at("gpu_bytes").get<size_t>();
  i.host_bytes = j.at("host_bytes").get<size_t>();
  i.gpu_budget = j.at("gpu_budget").get<int64_t>();
  i.host_budget = j.at("host_budget").get<int64_t>();
  i.collections = j.at("collections").get<size_t>();
  i.device = j.at("device").get<std::string>();
  return s;
}

json error_json(int status, const std::string& field, const std::string& message, const std::string& kind) {
  json j = {{"status", status}, {"field", field}, {"error", message}};
  if (!kind.empty()) j["kind"] = kind;
  return j;
}

void throw_error(const json& reply) {
  const std::string message = reply.value("error", std::string("shard worker error"));
  if (reply.value("kind", std::string()) == "gallery") throw texture::GalleryError(message);
  throw ServiceError(reply.value("status", 500), reply.value("field", std::string()), message);
}

}  // namespace prism::service::shard
