#include "http_api.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>

#include <httplib.h>
#include <malloc.h>
#include <strings.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/mat_cache.h"
#include "common/regular_file.h"
#include "http_listener.h"
#include "http_metrics.h"
#include "images.h"
#include "json_text.h"

namespace prism::service {

using json = nlohmann::json;

namespace {

bool valid_key_text(const std::string& k) {
  if (k.size() < 16 || k.size() > 256) return false;
  return std::all_of(k.begin(), k.end(),
                     // (strchr finds a NUL: the string's own terminator)
                     [](unsigned char c) { return std::isalnum(c) || (c && std::strchr("._~+/=-", c) != nullptr); });
}

// ---- request parsing ---------------------------------------------------------------------------------

[[noreturn]] void bad(const std::string& field, const std::string& message, int status = 400) {
  throw ServiceError(status, field, message);
}

int parse_int_field(const std::string& field, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || errno || x < lo || x > hi)
    bad(field, "'" + field + "' takes an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", not '" +
                   v.substr(0, 64) + "'");
  return int(x);
}

double parse_number_field(const std::string& field, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end || !(x >= lo && x <= hi))
    bad(field, "'" + field + "' takes a number in [" + json(lo).dump() + ", " + json(hi).dump() + "], not '" +
                   v.substr(0, 64) + "'");
  return x;
}

bool parse_bool_field(const std::string& field, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  bad(field, "'" + field + "' takes true or false, not '" + v.substr(0, 64) + "'");
}

// Standard base64 (RFC 4648 section 4), '=' padding optional; false on any other character.
bool base64_decode(const std::string& in, std::string& out) {
  static const std::array<int8_t, 256> value = [] {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) v[uint8_t(alphabet[i])] = int8_t(i);
    return v;
  }();
  out.clear();
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t end = in.size();
  while (end > 0 && in[end - 1] == '=' && in.size() - end < 2) --end;
  for (size_t i = 0; i < end; ++i) {
    const int v = value[uint8_t(in[i])];
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xff));
    }
  }
  return bits < 6;  // a lone 6-bit group is no byte
}

// What a request carries besides its path: the image (for the routes that take one) and the
// parameters, from the query string and from the body, which is one of: the raw image
// (Content-Type image/... or application/octet-stream); a multipart form (field `image`, the
// parameters as fields); a JSON object ({"image": base64, the parameters as members}). Unknown
// parameter names are refused: a typo must not silently change a search.
class Input {
 public:
  Input(const httplib::Request& req, const std::set<std::string>& allowed, bool takes_image) : allowed_(allowed) {
    if (takes_image) read_body(req);
    for (const auto& [k, v] : req.params) add(k, v);
  }
  const std::string* get(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? nullptr : &it->second;
  }
  const std::string& image() const { return *image_; }

 private:
  void read_body(const httplib::Request& req) {
    const std::string type = req.get_header_value("Content-Type");
    std::string media = type.substr(0, type.find(';'));
    std::transform(media.begin(), media.end(), media.begin(), [](unsigned char c) { return std::tolower(c); });
    if (req.is_multipart_form_data()) {
      if (!req.has_file("image")) bad("image", "the multipart body has no 'image' field");
      for (const auto& [k, f] : req.files)
        if (k == "image") {
          if (image_) bad("image", "'image' is given twice");
          image_ = &f.content;
        } else {
          add(k, f.content);
        }
    } else if (media == "application/json") {
      read_json(req.body);
    } else if (media.rfind("image/", 0) == 0 || media == "application/octet-stream") {
      image_ = &req.body;
    } else {
      bad("Content-Type",
          "send the image as the body (Content-Type image/... or application/octet-stream), as the field 'image' "
          "of a multipart/form-data body, or base64 in the member 'image' of a JSON object; not '" +
              type.substr(0, 64) + "'",
          415);
    }
  }

  void read_json(const std::string& body) {
    json doc;
    std::set<std::string> members;
    std::string duplicate;
    try {
      // Nothing deeper than an array member is kept: a body of nested brackets would otherwise
      // become a tree of several times its size in memory.
      // A member given twice is refused: which one counts would be the parser's
      // choice (nlohmann keeps the last, others the first), a way past a proxy that checks one.
      doc = json::parse(body, [&](int depth, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::key && depth == 1 && duplicate.empty() &&
            !members.insert(parsed.get<std::string>()).second)
          duplicate = parsed.get<std::string>();
        return depth <= 2;
      });
    } catch (const json::parse_error& e) {
      bad("body", std::string("malformed JSON: ") + e.what());
    }
    if (!duplicate.empty())
      bad(duplicate.substr(0, 64), "'" + duplicate.substr(0, 64) + "' is given twice in the JSON body");
    if (!doc.is_object()) bad("body", "the JSON body must be an object such as {\"image\": \"<base64>\"}");
    for (const auto& [k, v] : doc.items()) {
      if (k == "image") {
        if (!v.is_string() || !base64_decode(v.get_ref<const std::string&>(), decoded_))
          bad("image", "'image' must be the image's bytes in base64");
        image_ = &decoded_;
        continue;
      }
      std::string text;
      if (v.is_string())
        text = v.get<std::string>();
      else if (v.is_boolean())
        text = v.get<bool>() ? "true" : "false";
      else if (v.is_number_integer() || v.is_number_unsigned() || v.is_number_float())
        text = v.dump();
      else if (v.is_array() && k == "collections") {
        for (const json& c : v) {
          if (!c.is_string()) bad(k, "'collections' must be an array of strings");
          text += (text.empty() ? "" : ",") + c.get<std::string>();
        }
      } else {
        bad(k, "'" + k.substr(0, 64) + "' must be a string, a number or a boolean");
      }
      add(k, text);
    }
    if (!image_) bad("image", "the JSON body has no 'image' member");
  }

  void add(const std::string& k, const std::string& v) {
    if (!allowed_.count(k)) {
      std::string names;
      for (const std::string& a : allowed_) names += (names.empty() ? "" : ", ") + a;
      bad(k,
          "unknown parameter '" + k.substr(0, 64) + "'" + (names.empty() ? "" : " (this route takes: " + names + ")"));
    }
    if (!values_.emplace(k, v).second) bad(k, "'" + k + "' is given twice");
  }

  std::set<std::string> allowed_;
  std::map<std::string, std::string> values_;
  const std::string* image_ = nullptr;
  std::string decoded_;
};

json api_json(const Product& p) {
  return {{"id", p.id},
          {"collection", p.collection.empty() ? json(nullptr) : json(p.collection)},
          {"source", p.source},
          {"enrolled_unix", p.enrolled_unix},
          {"features", p.features},
          {"width", p.width},
          {"height", p.height},
          {"shard", p.shard}};
}

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json api_json(const Match& m) {
  json h = json::array();
  for (int i = 0; i < 9; ++i) h.push_back(number_or_null(m.homography.val[i]));
  // score: the deprecated spelling of ratio_matches (in prism.results/1 a score is how sure a result is).
  return {{"id", m.id},           {"accepted", m.accepted}, {"significance", number_or_null(m.significance)},
          {"inliers", m.inliers}, {"matches", m.matches},   {"ratio_matches", m.score},
          {"score", m.score},     {"homography", h}};
}

}  // namespace

std::vector<ApiKey> load_api_keys(const std::filesystem::path& file) {
  std::string text;
  try {  // a regular file only: a FIFO or /dev/zero would be read forever, a directory as no keys
    text = RegularFile(file).read_text();
  } catch (const FileError& e) {
    throw std::runtime_error(std::string(e.what()) + " (cannot read the API key file)");
  }
  std::istringstream in(text);
  std::vector<ApiKey> keys;
  std::set<std::string> seen;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string where = file.string() + ":" + std::to_string(n) + ": ";
    std::istringstream words(line);
    ApiKey k;
    std::string role, extra;
    if (!(words >> k.key) || k.key[0] == '#') continue;
    if (!valid_key_text(k.key))
      throw std::runtime_error(where + "a key is 16..256 characters of A-Z a-z 0-9 . _ ~ + / = -");
    if (!(words >> role) || (role != "read" && role != "write"))
      throw std::runtime_error(where + "the key's role (read or write) must follow it");
    words >> k.name;
    if (words >> extra) throw std::runtime_error(where + "expected KEY ROLE [NAME], found more");
    if (!seen.insert(k.key).second) throw std::runtime_error(where + "this key is listed twice");
    k.write = role == "write";
    if (k.name.empty()) k.name = "key" + std::to_string(n);
    keys.push_back(k);
  }
  if (keys.empty()) throw std::runtime_error(file.string() + ": no keys (lines of KEY ROLE [NAME])");
  return keys;
}

// Whether the client of the request this thread handles closed its connection: the listener's
// socket for it is polled for POLLRDHUP without reading (nothing else reads it meanwhile).
static bool client_closed_connection() {
  const int fd = HttpListener::current_connection();
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

// A request header's whole value: httplib's get_header_value returns a C string, which ends at a
// NUL byte, so "KEY\0junk" read as KEY. A value holding a control byte is refused (400 naming it).
std::string whole_header(const httplib::Request& req, const char* name) {
  const auto it = req.headers.find(name);
  if (it == req.headers.end()) return {};
  for (const char ch : it->second)
    if ((unsigned char)ch < 0x20 && ch != '\t')
      throw ServiceError(400, name, std::string("the ") + name + " header holds a control character");
  return it->second;
}

struct HttpApi::Impl {
  Backend& backend;
  ApiOptions options;
  HttpMetrics metrics;
  HttpListener server;
  std::mutex gauges_mutex;
  Clock::time_point gauges_time{};
  std::string gauges;

  std::atomic<int> slow_running{0};
  std::atomic<uint64_t> gpu_decodes{0};  // JPEG uploads decoded on the GPU (extract_upload)
  DecodeBudget decode_budget;
  const std::string extraction = texture::extraction_device(options.features);
  texture::ExtractionBatcher batcher;

  Impl(Backend& b, ApiOptions o)
      : backend(b),
        options(std::move(o)),
        server(limits_of(options), error_text, [this](int status) { metrics.observe("connection", status, 0); }),
        decode_budget(options.decode_memory_bytes),
        batcher(options.features.device, options.batching) {}

  static ListenerLimits limits_of(const ApiOptions& o) {
    ListenerLimits l;
    l.max_body_bytes = o.max_body_bytes;
    l.threads = std::max(1, o.threads);
    l.read_timeout = o.read_timeout;
    l.head_timeout = o.head_timeout;
    l.request_timeout = o.request_timeout;
    l.idle_timeout = o.idle_timeout;
    l.max_connections = o.max_connections;
    l.max_queued = o.max_queued;
    l.max_buffered_bytes = o.max_buffered_bytes;
    return l;
  }

  // How many enrolments, updates, verifies and searches may run at once (ApiOptions).
  int slow_limit() const { return std::max(1, options.threads - std::max(0, options.reserved_threads)); }

  // Who is asking: nullptr when authentication is off.
  const ApiKey* authenticate(const httplib::Request& req, bool needs_write) const {
    if (options.keys.empty()) return nullptr;
    std::string key = whole_header(req, "X-API-Key");
    const std::string auth = whole_header(req, "Authorization");
    // The scheme is case-insensitive (RFC 9110, 11.1): "bearer KEY" is "Bearer KEY".
    if (key.empty() && auth.size() > 7 && strncasecmp(auth.c_str(), "bearer ", 7) == 0) {
      key = auth.substr(auth.find_first_not_of(' ', 7) == std::string::npos ? auth.size()
                                                                            : auth.find_first_not_of(' ', 7));
    }
    if (key.empty()) bad("Authorization", "an API key is required (Authorization: Bearer KEY or X-API-Key)", 401);
    for (const ApiKey& k : options.keys) {
      if (k.key != key) continue;
      if (needs_write && !k.write) bad("Authorization", "this key may verify and search but not enrol or delete", 403);
      return &k;
    }
    bad("Authorization", "unknown API key", 401);
  }

  Clock::time_point deadline_of(const Input& f, Clock::time_point start) const {
    std::chrono::milliseconds d = options.deadline;
    if (const std::string* v = f.get("deadline_ms"))
      d = std::chrono::milliseconds(
          parse_int_field("deadline_ms", *v, 1, int(std::min<int64_t>(options.max_deadline.count(), INT32_MAX))));
    return start + d;
  }

  std::string product_id(const httplib::Request& req) const {
    const std::string id = req.matches.size() > 1 ? std::string(req.matches[1]) : std::string();
    if (!texture::valid_product_id(id))
      bad("id", "'" + id.substr(0, 64) +
                    "' is not a product id (1..128 characters of A-Z a-z 0-9 . _ -, not starting "
                    "with . or -)");
    return id;
  }

  // `normalisation`: the backend's (Backend::normalisation), the gallery's, never the caller's
  // choice; asked for at the start of a request, so that one that cannot be served yet is refused
  // before any other work.
  // The image is admitted against the decode budget from its header (memory grows with the
  // pixels, not the bytes: service/images.h), then decoded (a large JPEG reduced in the DCT domain
  // towards max_side, its keypoints in the upload's pixels all the same: extract_upload) and
  // extracted by `deadline` (a decode still running then is abandoned: 503).
  // `latency` gains the request's decode (admission included) and extract (SIFT) parts, in ms.
  texture::Features features_of(const Input& in, const texture::Normalisation& normalisation, json& latency,
                                Clock::time_point deadline) {
    const auto t0 = Clock::now();
    const std::string& bytes = in.image();
    texture::FeatureParams params = options.features;
    params.normalisation = normalisation;
    const DecodeBudget::Lease lease =
        decode_budget.admit(image_cost(bytes, "image", options.max_image_pixels, params), deadline);
    UploadTimes times;
    texture::Features f =
        extract_upload(bytes, "image", options.max_image_pixels, params, batcher.reserve(), deadline, &times);
    latency["decode"] = ms_between(t0, Clock::now()) - times.extract_ms;
    latency["extract"] = times.extract_ms;
    if (times.decoded_on_gpu) gpu_decodes.fetch_add(1, std::memory_order_relaxed);
    return f;
  }

  texture::SearchParams search_params(const Input& f) const {
    texture::SearchParams p = options.search;
    // min_significance; `threshold` is its deprecated spelling (the API's first), still accepted.
    const std::string* given = f.get("min_significance");
    const std::string* old = f.get("threshold");
    if (given) p.min_significance = parse_number_field("min_significance", *given, 0, 1000);
    if (old) {
      const double t = parse_number_field("threshold", *old, 0, 1000);
      if (given && t != p.min_significance)
        bad("threshold", "'threshold' (deprecated) and 'min_significance' disagree; give min_significance alone");
      p.min_significance = t;
    }
    if (const std::string* v = f.get("collections")) {
      std::stringstream list(*v);
      for (std::string c; std::getline(list, c, ',');) {
        if (c.empty() || !texture::valid_collection(c))
          bad("collections", "'" + c.substr(0, 64) + "' is not a collection name (the characters of a product id)");
        p.collections.push_back(c);
      }
      if (p.collections.empty()) bad("collections", "'collections' names no collection");
    }
    return p;
  }

  // ---- routes ----------------------------------------------------------------------------------------

  json enrol(const httplib::Request& req, httplib::Response& res, bool replace) {
    const ApiKey* key = authenticate(req, true);
    const auto start = Clock::now();
    const Input f(req, {"collection", "deadline_ms"}, true);
    const std::string id = product_id(req);
    const texture::Normalisation normalisation = backend.normalisation();
    texture::GalleryEntry e;
    e.id = id;
    if (const std::string* c = f.get("collection")) {
      // Empty: none (PUT clears the product's collection with it).
      if (!texture::valid_collection(*c))
        bad("collection", "'" + c->substr(0, 64) + "' is not a collection name (the characters of a product id)");
      e.collection = *c;
    }
    if (replace) {
      // Absent: 404 before the extraction. Without `collection`, PUT keeps the product's own, as
      // `prism texture update` does.
      const std::optional<Product> p = backend.get(id, deadline_of(f, start));
      if (!p) bad("id", "product '" + id + "' is not enrolled", 404);
      if (!f.get("collection")) e.collection = p->collection;
    }
    json latency = latency_start();
    e.features = features_of(f, normalisation, latency, deadline_of(f, start));
    if (e.features.count() < texture::kMinFeatures)
      bad("image",
          "the image has " + std::to_string(e.features.count()) + " features, fewer than the " +
              std::to_string(texture::kMinFeatures) + " a product needs (a flat, blank or tiny image)",
          422);
    e.source = key ? "http:" + key->name : "http";
    const WriteResult w = backend.write(e, replace, deadline_of(f, start));
    res.status = w.outcome == WriteOutcome::kCreated ? 201 : 200;
    return {{"product", api_json(w.product)},
            {"outcome", w.outcome == WriteOutcome::kCreated     ? "created"
                        : w.outcome == WriteOutcome::kUnchanged ? "unchanged"
                                                                : "updated"},
            {"latency_ms", latency_end(latency, start)}};
  }

  json remove(const httplib::Request& req) {
    authenticate(req, true);
    const Input f(req, {"deadline_ms"}, false);
    const std::string id = product_id(req);
    if (!backend.remove(id, deadline_of(f, Clock::now()))) bad("id", "product '" + id + "' is not enrolled", 404);
    return {{"deleted", id}};
  }

  json get(const httplib::Request& req) {
    authenticate(req, false);
    const Input f(req, {"deadline_ms"}, false);
    const std::string id = product_id(req);
    const std::optional<Product> p = backend.get(id, deadline_of(f, Clock::now()));
    if (!p) bad("id", "product '" + id + "' is not enrolled", 404);
    return api_json(*p);
  }

  json verify(const httplib::Request& req) {
    authenticate(req, false);
    const auto start = Clock::now();
    const Input f(req, {"min_significance", "threshold", "deadline_ms"}, true);
    const std::string id = product_id(req);
    const texture::SearchParams params = search_params(f);
    const texture::Normalisation normalisation = backend.normalisation();
    json latency = latency_start();
    const texture::Features q = features_of(f, normalisation, latency, deadline_of(f, start));
    const VerifyAnswer a = backend.verify(id, q, params, deadline_of(f, start));
    json out = api_json(a.match);
    out["decision"] = a.match.accepted ? "accepted" : "rejected";
    out["min_significance"] = params.min_significance;
    out["threshold"] = params.min_significance;  // deprecated: min_significance
    out["query_features"] = q.count();
    latency["match"] = a.match_ms;
    latency["verify"] = a.verify_ms;
    if (a.shard_queue_ms) latency["shard_queue"] = *a.shard_queue_ms;
    if (a.shard_transport_ms) latency["shard_transport"] = *a.shard_transport_ms;
    out["latency_ms"] = latency_end(latency, start);
    return out;
  }

  json search(const httplib::Request& req) {
    authenticate(req, false);
    const auto start = Clock::now();
    const Input f(
        req,
        {"top_k", "collections", "min_significance", "threshold", "allow_partial", "digest_candidates", "deadline_ms"},
        true);
    SearchQuery q;
    q.params = search_params(f);
    // Approximate through the host tier's digests (0: exact); an index without digests searches exactly.
    if (const std::string* v = f.get("digest_candidates"))
      q.params.digest_candidates =
          parse_int_field("digest_candidates", *v, 0, texture::SearchParams::kMaxDigestCandidates);
    if (const std::string* v = f.get("top_k")) q.top_k = parse_int_field("top_k", *v, 1, options.max_top_k);
    if (const std::string* v = f.get("allow_partial")) q.allow_partial = parse_bool_field("allow_partial", *v);
    q.deadline = deadline_of(f, start);
    const texture::Normalisation normalisation = backend.normalisation();
    json latency = latency_start();
    q.features = features_of(f, normalisation, latency, q.deadline);
    const SearchAnswer a = backend.search(q);
    latency["match"] = a.match_ms;
    latency["verify"] = a.verify_ms;
    json cands = json::array();
    for (const Match& m : a.candidates) cands.push_back(api_json(m));
    return {{"identified", a.identified},
            {"id", a.identified ? json(a.candidates.front().id) : json(nullptr)},
            {"candidates", cands},
            {"min_significance", q.params.min_significance},
            {"threshold", q.params.min_significance},  // deprecated: min_significance
            {"query_features", q.features.count()},
            {"searched", a.searched},
            {"digested", a.digested},
            {"gallery_size", a.gallery_size},
            {"searched_share", a.shards > 0 ? double(a.shards_answered) / a.shards : 0.0},
            {"shards", a.shards},
            {"shards_answered", a.shards_answered},
            {"missing_shards", a.missing_shards},
            {"latency_ms", latency_end(latency, start)}};
  }

  // A request's latency_ms: its wait for a worker first (HttpListener::current_queue_seconds), its
  // stages as they run, the total from the handler's start last. handle() observes each part but
  // the total in /metrics (prism_http_request_stage_duration_seconds).
  static json latency_start() { return json{{"queue", HttpListener::current_queue_seconds() * 1e3}}; }
  static json latency_end(json& latency, Clock::time_point start) {
    latency["total"] = ms_between(start, Clock::now());
    return std::move(latency);
  }

  json stats(const httplib::Request& req) {
    authenticate(req, false);
    const Input f(req, {"deadline_ms"}, false);
    const ServiceStats s = backend.stats(deadline_of(f, Clock::now()));
    json shards = json::array();
    size_t images = 0;
    for (const ShardStats& sh : s.shards) {
      json replicas = json::array();
      for (const ReplicaStats& r : sh.replicas)
        replicas.push_back({{"replica", r.replica},
                            {"live", r.live},
                            {"failing", r.failing.empty() ? json(nullptr) : json(r.failing)},
                            {"delivered", r.delivered},
                            {"pending", r.pending},
                            {"lag", r.lag < 0 ? json(nullptr) : json(r.lag)},
                            {"divergent", r.divergent < 0 ? json(nullptr) : json(r.divergent)},
                            {"repaired", r.repaired < 0 ? json(nullptr) : json(r.repaired)}});
      if (!sh.answered) {
        shards.push_back({{"shard", sh.shard}, {"answered", false}, {"replicas", replicas}});
        continue;
      }
      images += sh.index.images;
      shards.push_back({{"shard", sh.shard},
                        {"answered", true},
                        {"replicas", replicas},
                        {"worker", sh.worker},
                        {"device", sh.index.device},
                        {"images", sh.index.images},
                        {"gpu_images", sh.index.gpu_images},
                        {"host_images", sh.index.host_images},
                        {"gpu_capacity", sh.index.gpu_capacity},
                        {"host_capacity", sh.index.host_capacity},
                        {"gpu_bytes", sh.index.gpu_bytes},
                        {"host_bytes", sh.index.host_bytes},
                        {"digest_bytes", sh.index.digest_bytes},
                        {"collections", sh.index.collections},
                        {"writes_applied", sh.writes_applied},
                        {"copies_repaired", sh.copies_repaired}});
    }
    const texture::ExtractionBatcher::Stats b = batcher.stats();
    return {{"images", images},
            {"extraction", extraction},
            {"extraction_batches",
             {{"batching", batcher.batching()},
              {"max_batch", batcher.options().max_batch},
              {"max_wait_us", batcher.options().max_wait.count()},
              {"batches", b.batches},
              {"images", b.images},
              {"largest", b.largest},
              {"jpeg_decoded_on_gpu", gpu_decodes.load(std::memory_order_relaxed)}}},
            {"shards_expected", s.shards_expected},
            {"shards", shards}};
  }

  std::string metrics_text() { return metrics.text() + batch_metrics() + gallery_metrics() + backend.metrics(); }

  // Uploads extracted on the GPU together (texture/extraction_batcher.h): images / batches is the
  // mean batch, what the batching saves.
  std::string batch_metrics() const {
    const texture::ExtractionBatcher::Stats b = batcher.stats();
    std::ostringstream o;
    o << "# HELP prism_extraction_batches_total SIFT batches run on the GPU for uploads.\n"
         "# TYPE prism_extraction_batches_total counter\n"
         "prism_extraction_batches_total "
      << b.batches
      << "\n# HELP prism_extraction_batched_images_total Uploads extracted in those batches.\n"
         "# TYPE prism_extraction_batched_images_total counter\n"
         "prism_extraction_batched_images_total "
      << b.images
      << "\n# HELP prism_uploads_decoded_on_gpu_total JPEG uploads decoded on the GPU (serve --batch 1 on a GPU).\n"
         "# TYPE prism_uploads_decoded_on_gpu_total counter\n"
         "prism_uploads_decoded_on_gpu_total "
      << gpu_decodes.load(std::memory_order_relaxed) << "\n";
    return o.str();
  }

  // Runs one route: the JSON answer, or the JSON error; counted in the metrics under `route`.
  void handle(const std::string& route, const httplib::Request& req, httplib::Response& res,
              const std::function<json(const httplib::Request&, httplib::Response&)>& body) {
    const auto start = Clock::now();
    const bool slow = route == "enrol" || route == "update" || route == "verify" || route == "search";
    struct Slot {  // one of the slow requests' threads, given back however the request ends
      std::atomic<int>* running = nullptr;
      ~Slot() {
        if (running) --*running;
      }
    } slot;
    const ClientWatch watch(client_closed_connection);  // waits on shards end with their client
    try {
      res.status = 200;
      if (slow) {
        slot.running = &slow_running;
        if (++slow_running > slow_limit())
          throw ServiceError(503, "",
                             "busy: " + std::to_string(slow_limit()) +
                                 " enrolments, updates, verifies and searches are running (the server keeps " +
                                 std::to_string(options.threads - slow_limit()) + " of its " +
                                 std::to_string(options.threads) + " threads for gets, deletes, stats and health)",
                             1);
      }
      const json out = body(req, res);
      res.set_content(json_text(out), "application/json");
      if (const auto parts = out.find("latency_ms"); parts != out.end() && parts->is_object())
        for (const auto& [stage, ms] : parts->items())
          if (stage != "total" && ms.is_number()) metrics.observe_stage(route, stage, ms.get<double>() / 1e3);
    } catch (const ServiceError& e) {
      error(res, e.status, e.field, e.what());
      if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
    } catch (const texture::GalleryError& e) {
      // The server's own storage: its paths and errors go to its log, not to the client
      // (a client must not learn the server's file layout).
      std::fprintf(stderr, "prism: error: %s %s: %s\n", req.method.c_str(), req.path.c_str(), e.what());
      if (e.disk_full()) {
        error(res, 507, "", "the server's gallery disk is full: nothing was stored; try again once space is freed");
        res.set_header("Retry-After", "60");
      } else {
        error(res, 500, "", "the server's gallery could not be read or written (its log names the file)");
      }
    } catch (const std::bad_alloc&) {
      error(res, 503, "", "out of memory while serving the request");
    } catch (const std::exception& e) {
      error(res, 500, "", e.what());
    }
    metrics.observe(route, res.status, std::chrono::duration<double>(Clock::now() - start).count());
    if (options.log_requests)
      std::fprintf(stderr, "%s %s -> %d (%.1f ms)\n", req.method.c_str(), req.path.c_str(), res.status,
                   ms_between(start, Clock::now()));
  }

  static std::string error_text(int status, const std::string& field, const std::string& message) {
    return error_json(status, field, message);
  }
  static void error(httplib::Response& res, int status, const std::string& field, const std::string& message) {
    res.status = status;
    if (status == 401) res.set_header("WWW-Authenticate", "Bearer");
    res.set_content(error_text(status, field, message), "application/json");
  }

  // Before any body is read. cpp-httplib 0.11 checks its payload limit against Content-Length
  // only: a chunked body has no limit, and it inflates gzip or brotli bodies, so 32 MB on the wire
  // could become gigabytes. Bodies must therefore say their length and come as they are.
  httplib::Server::HandlerResponse screen(const httplib::Request& req, httplib::Response& res) const {
    const std::string encoding = req.get_header_value("Content-Encoding");
    if (!encoding.empty() && encoding != "identity") {
      error(res, 415, "Content-Encoding",
            "send the body uncompressed (Content-Encoding '" + encoding.substr(0, 32) + "')");
      return httplib::Server::HandlerResponse::Handled;
    }
    // One Content-Length of digits alone (RFC 9112, 6.3): "-1" waited 5 s for a 413, and of two
    // differing ones the first was used, while a proxy in front may have used the other (a way to
    // smuggle a second request past it). The body is not read: the connection closes.
    const auto lengths = req.headers.equal_range("Content-Length");
    for (auto it = lengths.first; it != lengths.second; ++it) {
      const std::string& v = it->second;
      const bool digits = !v.empty() && v.size() <= 18 && v.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || v != lengths.first->second) {
        error(res, 400, "Content-Length",
              digits ? "the request has Content-Length headers that differ"
                     : "Content-Length '" + v.substr(0, 32) + "' is not a number of bytes");
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if ((req.method == "POST" || req.method == "PUT") &&
        (req.has_header("Transfer-Encoding") || !req.has_header("Content-Length"))) {
      error(res, 411, "Content-Length", "a body needs its Content-Length (chunked bodies are not taken)");
      return httplib::Server::HandlerResponse::Handled;
    }
    // curl's --data-binary sends application/x-www-form-urlencoded, whose bodies cpp-httplib caps
    // at 8 KB: a photo got 413 "larger than the server's limit". Refused here, before the body is
    // read, as the content type it is (a request without a key gets its 401 first).
    if ((req.method == "POST" || req.method == "PUT") &&
        req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0) {
      try {
        authenticate(req, false);
      } catch (const ServiceError& e) {
        error(res, e.status, e.field, e.what());
        res.set_header("Connection", "close");
        return httplib::Server::HandlerResponse::Handled;
      }
      error(res, 415, "Content-Type",
            "a form-encoded body is not an image: send it as the body with Content-Type image/jpeg (curl "
            "--data-binary @photo.jpg -H 'Content-Type: image/jpeg'), as the field 'image' of a "
            "multipart/form-data body (curl -F image=@photo.jpg), or base64 in the member 'image' of a JSON object");
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  // The gallery gauges of /metrics: the backend's stats at most every 2 s, fetched by one scrape at
  // a time with a 1 s deadline (a sharded backend asks every shard; anyone may scrape).
  std::string gallery_metrics() {
    std::lock_guard lock(gauges_mutex);
    if (Clock::now() - gauges_time < std::chrono::seconds(2)) return gauges;
    gauges_time = Clock::now();
    std::ostringstream o;
    o << "# HELP prism_gallery_images Images indexed, by shard and tier.\n# TYPE prism_gallery_images gauge\n";
    std::ostringstream bytes;
    bytes << "# HELP prism_gallery_bytes Descriptor memory allocated, by shard and tier (digest: the host tier's "
             "digests).\n"
             "# TYPE prism_gallery_bytes gauge\n";
    std::ostringstream repaired;
    // A counter (it only grows while the worker runs, and starts at 0 with it): /v1/stats' copies_repaired.
    repaired << "# HELP prism_gallery_damaged_copies_total Damaged copies of entries (entry file or pack record) "
                "found and read from the other copy since the shard's worker started; each is written again at "
                "once, or by the next reader that takes the gallery's lock.\n"
                "# TYPE prism_gallery_damaged_copies_total counter\n";
    std::ostringstream replicas;
    replicas << "# HELP prism_replica_pending_writes Writes given to a replica and not yet applied.\n"
                "# TYPE prism_replica_pending_writes gauge\n"
                "# HELP prism_replica_lag_writes Writes of its shard's stream not yet given to a replica.\n"
                "# TYPE prism_replica_lag_writes gauge\n"
                "# HELP prism_replica_failing 1 while a replica cannot apply a write (and serves no reads).\n"
                "# TYPE prism_replica_failing gauge\n"
                "# HELP prism_replica_divergent_entries Entries differing from the replica's siblings at its last "
                "repair comparison.\n"
                "# TYPE prism_replica_divergent_entries gauge\n"
                "# HELP prism_replica_repaired_entries_total Entries a replica copied from or dropped for its "
                "siblings since its worker started.\n"
                "# TYPE prism_replica_repaired_entries_total counter\n";
    try {
      const ServiceStats s = backend.stats(Clock::now() + std::chrono::seconds(1));
      for (const ShardStats& sh : s.shards) {
        for (const ReplicaStats& r : sh.replicas) {
          const std::string labels = "{shard=\"" + std::to_string(sh.shard) + "\",replica=\"" + r.replica + "\"}";
          replicas << "prism_replica_pending_writes" << labels << " " << r.pending << "\n";
          if (r.lag >= 0) replicas << "prism_replica_lag_writes" << labels << " " << r.lag << "\n";
          replicas << "prism_replica_failing" << labels << " " << !r.failing.empty() << "\n";
          if (r.divergent >= 0) replicas << "prism_replica_divergent_entries" << labels << " " << r.divergent << "\n";
          if (r.repaired >= 0)
            replicas << "prism_replica_repaired_entries_total" << labels << " " << r.repaired << "\n";
        }
        if (!sh.answered) continue;
        o << "prism_gallery_images{shard=\"" << sh.shard << "\",tier=\"gpu\"} " << sh.index.gpu_images << "\n";
        o << "prism_gallery_images{shard=\"" << sh.shard << "\",tier=\"host\"} " << sh.index.host_images << "\n";
        bytes << "prism_gallery_bytes{shard=\"" << sh.shard << "\",tier=\"gpu\"} " << sh.index.gpu_bytes << "\n";
        bytes << "prism_gallery_bytes{shard=\"" << sh.shard << "\",tier=\"host\"} " << sh.index.host_bytes << "\n";
        bytes << "prism_gallery_bytes{shard=\"" << sh.shard << "\",tier=\"digest\"} " << sh.index.digest_bytes << "\n";
        repaired << "prism_gallery_damaged_copies_total{shard=\"" << sh.shard << "\"} " << sh.copies_repaired << "\n";
      }
    } catch (const std::exception&) {
      // The request metrics are still worth scraping when a shard does not answer.
    }
    gauges = o.str() + bytes.str() + repaired.str() + replicas.str();
    return gauges;
  }

  void routes() {
    using R = const httplib::Request&;
    using W = httplib::Response&;
    server.set_pre_routing_handler([this](R q, W r) { return screen(q, r); });
    const std::string product = R"(/v1/products/([^/]*))";
    server.Post(product, [this](R q, W r) { handle("enrol", q, r, [this](R q, W r) { return enrol(q, r, false); }); });
    server.Put(product, [this](R q, W r) { handle("update", q, r, [this](R q, W r) { return enrol(q, r, true); }); });
    server.Delete(product, [this](R q, W r) { handle("delete", q, r, [this](R q, W) { return remove(q); }); });
    server.Get(product, [this](R q, W r) { handle("get", q, r, [this](R q, W) { return get(q); }); });
    server.Post(product + "/verify",
                [this](R q, W r) { handle("verify", q, r, [this](R q, W) { return verify(q); }); });
    server.Post("/v1/search", [this](R q, W r) { handle("search", q, r, [this](R q, W) { return search(q); }); });
    server.Get("/v1/stats", [this](R q, W r) { handle("stats", q, r, [this](R q, W) { return stats(q); }); });
    server.Get("/healthz", [this](R q, W r) {
      handle("healthz", q, r, [this](R, W) {
        const std::string why = backend.health();
        if (!why.empty()) throw ServiceError(503, "", why);
        return json{{"status", "ok"}};
      });
    });
    server.Get("/metrics", [this](R, W r) { r.set_content(metrics_text(), "text/plain; version=0.0.4"); });
    // What the router refuses (no route, a body over the limit): the same JSON errors.
    server.set_error_handler([](R q, W r) {
      if (!r.body.empty()) return;
      if (r.status == 404)
        error(r, 404, "path", "no route " + q.method + " " + q.path.substr(0, 128) + " (see docs/openapi.yaml)");
      else if (r.status == 413)
        error(r, 413, "body", "the body is larger than the server's limit");
      else
        error(r, r.status, "", "HTTP " + std::to_string(r.status));
    });
    server.set_exception_handler([](R, W r, std::exception_ptr) { error(r, 500, "", "internal error"); });
  }
};

const std::string& HttpApi::extraction_device() const { return impl_->extraction; }

HttpApi::HttpApi(Backend& backend, ApiOptions options) : impl_(std::make_unique<Impl>(backend, std::move(options))) {
  Impl& m = *impl_;
  // The decode budget bounds what images hold at once, but glibc keeps freed blocks in the arena of
  // the thread that freed them, and its mmap threshold rises to 32 MB after the first large free:
  // cv::SIFT's 16 MB pyramid levels then stayed resident in each worker thread's arena, and twelve
  // uploads one after the other left the server 1.1 GB larger (the flood test). A fixed 1 MiB
  // threshold maps every large buffer and returns it on free.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // But mapped afresh for every image, they cost a CPU extraction some 80 MB of zero-filled page
  // faults: cv::Mat's large blocks are kept for the next image instead, up to the decode budget.
  mat_cache::install(m.options.decode_memory_bytes);
  m.routes();
}

// The handlers use the Impl's members: serve() must have returned before they go.
HttpApi::~HttpApi() {
  stop();
  impl_->server.join();
}

int HttpApi::bind(const std::string& host, int port) { return impl_->server.bind(host, port); }

void HttpApi::serve() { impl_->server.serve(); }

void HttpApi::stop() { impl_->server.stop(); }

}  // namespace prism::service
