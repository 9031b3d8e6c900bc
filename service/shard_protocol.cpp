#include "shard_protocol.h"

#include <algorithm>
#include <stdexcept>

namespace prism::service::shard {

std::string writes_key(int shard) { return "prism:shard:" + std::to_string(shard) + ":writes"; }
std::string reads_key(int shard) { return "prism:shard:" + std::to_string(shard) + ":reads"; }
std::string worker_key(int shard, const std::string& replica) {
  return "prism:worker:" + std::to_string(shard) + ":" + replica;
}
std::string failing_key(int shard, const std::string& replica) {
  return "prism:failing:" + std::to_string(shard) + ":" + replica;
}
std::string hung_key(int shard, const std::string& replica) {
  return "prism:hung:" + std::to_string(shard) + ":" + replica;
}
std::string unrecorded_key(int shard, const std::string& replica, const std::string& id) {
  return "prism:unrecorded:" + std::to_string(shard) + ":" + replica + ":" + id;
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

namespace {

// A count as prism:shards and prism:split hold it: 1..999999.
int parse_count(const Reply& r, const std::string& key, const std::string& url) {
  if (r.type != Reply::Type::kString || r.str.empty() || r.str.size() > 6 ||
      r.str.find_first_not_of("0123456789") != std::string::npos || std::stoi(r.str) < 1)
    throw MalformedLayout(key + " at " + url + " is '" + r.str + "', not a shard count (1..999999)");
  return std::stoi(r.str);
}

}  // namespace

Layout layout_from(const Reply& shards, const Reply& split, const std::string& url) {
  if (shards.error()) throw RedisError("Redis at " + url + " refused GET " + kShardsKey + ": " + shards.str);
  if (shards.nil())
    throw ShardCountUnset(kShardsKey + " is not set at " + url +
                          ": give the deployment's shard count with --shards N (to its first front or worker)");
  Layout l;
  l.shards = parse_count(shards, kShardsKey, url);
  if (split.error()) throw RedisError("Redis at " + url + " refused GET " + kSplitKey + ": " + split.str);
  if (!split.nil()) {
    l.split = parse_count(split, kSplitKey, url);
    if (l.split != 2 * l.shards)
      throw MalformedLayout(kSplitKey + " at " + url + " is " + std::to_string(l.split) + ", not twice " + kShardsKey +
                            " (" + std::to_string(l.shards) + ")");
  }
  return l;
}

Layout read_layout(Redis& redis) {
  const Reply r = redis.command({"MGET", kShardsKey, kSplitKey});
  if (r.error()) throw RedisError("Redis at " + redis.url() + " refused MGET " + kShardsKey + ": " + r.str);
  if (r.type != Reply::Type::kArray || r.elements.size() != 2)
    throw RedisError("Redis at " + redis.url() + " answered MGET " + kShardsKey + " with no pair");
  if (r.elements[0].nil()) {
    // MGET answers nil for a key of another type too (a list, say): that is no unset count, which a
    // worker would wait for and a front would ask to be given. GET tells them apart (WRONGTYPE).
    const Reply get = redis.command({"GET", kShardsKey});
    if (get.error() && get.error_code() == "WRONGTYPE")
      throw MalformedLayout(kShardsKey + " at " + redis.url() + " holds another type than a string (GET: " + get.str +
                            "), not a shard count (1..999999)");
  }
  return layout_from(r.elements[0], r.elements[1], redis.url());
}

int count_for_shard(const Layout& layout, int shard, const std::string& url) {
  if (shard < layout.shards) return layout.shards;
  if (shard < layout.split) return layout.split;
  throw std::runtime_error("shard " + std::to_string(shard) + " is not below the shard count " +
                           std::to_string(layout.shards) + " of " + kShardsKey + " at " + url +
                           (layout.split
                                ? " nor below the count " + std::to_string(layout.split) + " of the split in progress"
                                : std::string(" (and no split is in progress)")));
}

int agree_shard_count(Redis& redis, int shards) {
  if (shards > 0) {
    const Reply set = redis.command({"SET", kShardsKey, std::to_string(shards), "NX"});
    // LOADING (an AOF being read after a restart) and the like pass: RedisError is retried.
    if (set.error()) throw RedisError("Redis at " + redis.url() + " refused SET " + kShardsKey + ": " + set.str);
  }
  const Layout there = read_layout(redis);
  if (shards > 0 && there.shards != shards && there.split != shards) {
    std::string hint;
    if (there.shards > shards && there.shards % shards == 0)
      hint = " (the deployment was split since: give --shards " + std::to_string(there.shards) +
             ", or leave --shards out)";
    throw std::runtime_error("shard count mismatch: configured with " + std::to_string(shards) + " shards but " +
                             kShardsKey + " at " + redis.url() + " says " + std::to_string(there.shards) + hint);
  }
  return there.shards;
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
  const int64_t now_unix =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  constexpr int64_t kFar = int64_t(1) << 40;  // ms: 35 years, 1.1e18 ns (int64 holds 9.2e18)
  return Clock::now() + std::chrono::milliseconds(std::clamp(ms, now_unix - kFar, now_unix + kFar) - now_unix);
}

json params_json(const texture::SearchParams& p) {
  return {{"ratio", p.ratio},
          {"shortlist", p.shortlist},
          {"min_significance", p.min_significance},
          {"min_inliers", p.min_inliers},
          {"reprojection_px", p.verify.reprojection_px},
          {"max_iterations", p.verify.max_iterations},
          {"confidence", p.verify.confidence},
          {"collections", p.collections},
          {"digest_candidates", p.digest_candidates}};
}

texture::SearchParams params_from(const json& j) {
  texture::SearchParams p;
  p.ratio = number_field<float>(j, "ratio");
  p.shortlist = number_field<int>(j, "shortlist");
  p.min_significance = number_field<double>(j, "min_significance");
  p.min_inliers = number_field<int>(j, "min_inliers");
  p.verify.reprojection_px = number_field<double>(j, "reprojection_px");
  p.verify.max_iterations = number_field<int>(j, "max_iterations");
  p.verify.confidence = number_field<double>(j, "confidence");
  p.collections = j.at("collections").get<std::vector<std::string>>();
  p.digest_candidates = added_count_field<int>(j, "digest_candidates");
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
  p.enrolled_unix = number_field<int64_t>(j, "enrolled_unix");
  p.features = number_field<int>(j, "features");
  p.width = number_field<int>(j, "width");
  p.height = number_field<int>(j, "height");
  p.shard = number_field<int>(j, "shard");
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
  m.score = number_field<int>(j, "score");
  m.matches = number_field<int>(j, "matches");
  m.inliers = number_field<int>(j, "inliers");
  m.significance = number_field<double>(j, "significance");
  m.geometric_significance = number_field<double>(j, "geometric_significance");
  m.accepted = j.at("accepted").get<bool>();
  const std::vector<double> h = j.at("homography").get<std::vector<double>>();
  if (h.size() != 9)  // a malformed answer, as any other
    throw json::type_error::create(302, "a homography of " + std::to_string(h.size()) + " values", &j);
  for (int i = 0; i < 9; ++i) m.homography.val[i] = h[size_t(i)];
  return m;
}

json shard_search_json(const ShardSearch& s) {
  json list = json::array();
  if (s.scored)
    list = scored_json(s.shortlist);
  else
    for (const Match& m : s.shortlist) list.push_back(match_json(m));
  json j = {{"shard", s.shard},
            {"shortlist", list},
            {"searched", s.searched},
            {"digested", s.digested},
            {"gallery_size", s.gallery_size},
            {"match_ms", s.match_ms},
            {"verify_ms", s.verify_ms}};
  if (s.scored) j["scored"] = true;  // only then: a front from before the two-phase search never asks for it
  return j;
}

ShardSearch shard_search_from(const json& j) {
  ShardSearch s;
  s.shard = number_field<int>(j, "shard");
  s.scored = j.contains("scored") && j.at("scored").get<bool>();
  if (s.scored)
    s.shortlist = scored_from(j.at("shortlist"));
  else
    for (const json& m : j.at("shortlist")) s.shortlist.push_back(match_from(m));
  s.searched = number_field<size_t>(j, "searched");
  s.digested = added_count_field<size_t>(j, "digested");
  s.gallery_size = number_field<size_t>(j, "gallery_size");
  s.match_ms = number_field<double>(j, "match_ms");
  s.verify_ms = number_field<double>(j, "verify_ms");
  return s;
}

json scored_json(const std::vector<Match>& candidates) {
  json list = json::array();
  for (const Match& m : candidates) list.push_back({{"id", m.id}, {"score", m.score}});
  return list;
}

std::vector<Match> scored_from(const json& j) {
  std::vector<Match> out;
  for (const json& c : j.get_ref<const json::array_t&>()) {
    Match m;
    m.id = c.at("id").get<std::string>();
    m.score = number_field<int>(c, "score");
    out.push_back(std::move(m));
  }
  return out;
}

json shard_stats_json(const ShardStats& s) {
  const texture::IndexStats& i = s.index;
  return {{"shard", s.shard},
          {"worker", s.worker},
          {"writes_applied", s.writes_applied},
          {"copies_repaired", s.copies_repaired},
          {"images", i.images},
          {"gpu_images", i.gpu_images},
          {"host_images", i.host_images},
          {"gpu_capacity", i.gpu_capacity},
          {"host_capacity", i.host_capacity},
          {"gpu_bytes", i.gpu_bytes},
          {"host_bytes", i.host_bytes},
          {"digest_bytes", i.digest_bytes},
          {"gpu_budget", i.gpu_budget},
          {"host_budget", i.host_budget},
          {"collections", i.collections},
          {"device", i.device}};
}

ShardStats shard_stats_from(const json& j) {
  ShardStats s;
  s.shard = number_field<int>(j, "shard");
  s.worker = j.at("worker").get<std::string>();
  s.writes_applied = number_field<int64_t>(j, "writes_applied");
  s.copies_repaired = j.contains("copies_repaired") ? number_field<int64_t>(j, "copies_repaired") : 0;  // older workers
  texture::IndexStats& i = s.index;
  i.images = number_field<size_t>(j, "images");
  i.gpu_images = number_field<size_t>(j, "gpu_images");
  i.host_images = number_field<size_t>(j, "host_images");
  i.gpu_capacity = number_field<size_t>(j, "gpu_capacity");
  i.host_capacity = number_field<size_t>(j, "host_capacity");
  i.gpu_bytes = number_field<size_t>(j, "gpu_bytes");
  i.host_bytes = number_field<size_t>(j, "host_bytes");
  i.digest_bytes = added_count_field<size_t>(j, "digest_bytes");
  i.gpu_budget = number_field<int64_t>(j, "gpu_budget");
  i.host_budget = number_field<int64_t>(j, "host_budget");
  i.collections = number_field<size_t>(j, "collections");
  i.device = j.at("device").get<std::string>();
  return s;
}

json error_json(int status, const std::string& field, const std::string& message, const std::string& kind) {
  json j = {{"status", status}, {"field", field}, {"error", message}};
  if (!kind.empty()) j["kind"] = kind;
  return j;
}

void throw_error(const json& reply) {
  std::string message = reply.value("error", std::string());
  if (message.empty()) message = "a shard worker answered an error without a message";
  if (reply.value("kind", std::string()) == "gallery") throw texture::GalleryError(message);
  const int status = reply.contains("status") ? number_field<int>(reply, "status") : 500;
  if (status < 400 || status > 599)
    throw ServiceError(502, "", "a shard answered status " + std::to_string(status) + ": " + message);
  throw ServiceError(status, reply.value("field", std::string()), message);
}

namespace {

json params_of(const StreamEntry& e) {
  const std::string& p = e.field("params");
  return p.empty() ? json::object() : json::parse(p);
}

texture::GalleryEntry entry_of(const StreamEntry& e) {
  const std::string& bytes = e.field("entry");
  return texture::Gallery::decode(std::vector<uint8_t>(bytes.begin(), bytes.end()), "stream entry " + e.id);
}

}  // namespace

Request parse_request(const StreamEntry& e, bool write) {
  Request r;
  r.op = e.field("op");
  r.params = params_of(e);
  if (write) {
    if (r.op == "post" || r.op == "put") {
      r.entry = entry_of(e);
      if (!texture::valid_product_id(r.entry.id))
        throw ServiceError(400, "id", "invalid product id '" + r.entry.id + "'");
    } else if (r.op == "delete") {
      r.id = r.params.at("id").get<std::string>();
    } else if (r.op == "split" || r.op == "split-commit") {  // an online split's markers (reshard.h)
      (void)number_field<int>(r.params, "shards");
    } else {
      throw ServiceError(400, "op", "unknown write op '" + r.op + "'");
    }
    return r;
  }
  r.deadline = steady_from_unix_ms(std::stoll(e.field("deadline_ms")));
  if (r.op == "get") {
    r.id = r.params.at("id").get<std::string>();
  } else if (r.op == "verify" || r.op == "search") {
    r.entry = entry_of(e);
    r.search = params_from(r.params);
    if (r.op == "verify") r.id = r.params.at("id").get<std::string>();
    if (r.op == "search" && r.params.contains("phase")) {
      const std::string phase = r.params.at("phase").get<std::string>();
      if (phase == "score") {
        r.phase = SearchPhase::kScore;
      } else if (phase == "verify") {
        r.phase = SearchPhase::kVerify;
        r.candidates = scored_from(r.params.at("candidates"));
      } else {
        throw ServiceError(400, "phase", "unknown search phase '" + phase + "'");
      }
    }
  } else if (r.op != "stats") {
    throw ServiceError(400, "op", "unknown read op '" + r.op + "'");
  }
  return r;
}

json answer_from(const std::string& text, bool created_ok) {
  const json answer = json::parse(text);
  const int status = answer.contains("status") ? number_field<int>(answer, "status") : 500;
  if (status != 200 && !(created_ok && status == 201)) throw_error(answer);
  return answer;
}

WriteResult write_result_from(const json& a) {
  WriteResult r;
  const std::string outcome = a.at("outcome").get<std::string>();
  r.outcome = outcome == "created"   ? WriteOutcome::kCreated
              : outcome == "updated" ? WriteOutcome::kUpdated
                                     : WriteOutcome::kUnchanged;
  r.product = product_from(a.at("product"));
  return r;
}

VerifyAnswer verify_answer_from(const json& a) {
  VerifyAnswer v;
  v.match = match_from(a.at("match"));
  v.match_ms = number_field<double>(a, "match_ms");
  v.verify_ms = number_field<double>(a, "verify_ms");
  if (a.contains("queued_ms")) v.shard_queue_ms = number_field<double>(a, "queued_ms");  // absent from older workers
  return v;
}

std::vector<ReplicaStats> replica_groups(Redis& redis, int shard) {
  std::vector<ReplicaStats> out;
  const Reply groups = redis.command({"XINFO", "GROUPS", writes_key(shard)});
  if (groups.error() && groups.str.find("no such key") != std::string::npos) return out;  // no stream yet
  if (groups.type != Reply::Type::kArray)
    throw RedisError("Redis at " + redis.url() + " refused XINFO GROUPS " + writes_key(shard) + ": " + groups.str);
  const std::string prefix = replica_group("");
  for (const Reply& g : groups.elements) {
    std::map<std::string, const Reply*> field;
    for (size_t i = 0; i + 1 < g.elements.size(); i += 2) field[g.elements[i].str] = &g.elements[i + 1];
    const auto name = field.find("name");
    if (name == field.end() || name->second->str.rfind(prefix, 0) != 0) continue;
    ReplicaStats r;
    r.replica = name->second->str.substr(prefix.size());
    if (const auto f = field.find("last-delivered-id"); f != field.end()) r.delivered = f->second->str;
    if (const auto f = field.find("pending"); f != field.end()) r.pending = f->second->integer;
    if (const auto f = field.find("lag"); f != field.end() && f->second->type == Reply::Type::kInteger)
      r.lag = f->second->integer;
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const ReplicaStats& a, const ReplicaStats& b) { return a.replica < b.replica; });
  return out;
}

}  // namespace prism::service::shard
