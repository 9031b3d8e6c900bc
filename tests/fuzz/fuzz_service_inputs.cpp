// Fuzz target: the texture service's inputs other than HTTP requests (fuzz_http has those): the API
// key file (service/http_api.h, load_api_keys), a shard worker's stream entry (shard_protocol.h,
// parse_request: op, deadline_ms, params JSON, entry) and the front's reading of a worker's answer
// (answer_from and the per-op readers), all without Redis.
// Also the listener's request head parser (http_listener.h) and the Redis URL parser (redis.h).
// Input: byte 0 % 5 chooses the parser, the rest is its input:
//   0: the key file's text.
//   1: byte 1 & 1: an entry of the writes stream (else the reads stream); then the fields op,
//      deadline_ms and params, each ended by a NUL, and the rest is `entry` (Gallery::encode bytes).
//   2: byte 1 % 6: the op answered (post, delete, get, verify, search, stats); the rest is the answer.
//   3: the bytes a connection received (small caps: 64-byte request line, 256-byte head, 4 fields).
//   4: a Redis URL.
// Checks: accepted keys are 16..256 characters of the key alphabet, unique, named, and written back
// as KEY ROLE NAME lines they load as the same keys; key file errors name the file and line. An
// accepted request has an op of its stream, a valid product id for post/put, and a read's deadline
// where deadline_ms put it (within 35 years of now; further is clamped); its search parameters
// round-trip through params_json. An accepted answer reads back the same through its _json writer;
// a refused one is a ServiceError of status 400..599 with a message, a GalleryError, or a
// json::exception (the front's 502). A parsed head lies within the bytes, within its caps, frames a
// body no larger than the limit and holds no Expect field; a refused cap is one the bytes exceed.
// A parsed Redis URL has a host and port 1..65535, and no message shows its password.
// Anything else escaping is a finding.
#include <cctype>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "http_api.h"
#include "http_listener.h"
#include "redis.h"
#include "shard_protocol.h"

namespace {

using namespace prism::service;
using shard::json;

const std::string kKeyAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~+/=-";

void keys(const uint8_t* data, size_t size) {
  const std::string file = prism::fuzz::write_input("keys.txt", data, size);
  std::vector<ApiKey> got;
  try {
    got = load_api_keys(file);
  } catch (const std::runtime_error& e) {
    FUZZ_CHECK(std::string(e.what()).rfind(file + ":", 0) == 0, e.what());
    return;
  }
  std::string again;
  for (size_t i = 0; i < got.size(); ++i) {
    const ApiKey& k = got[i];
    FUZZ_CHECK(k.key.size() >= 16 && k.key.size() <= 256 && k.key.find_first_not_of(kKeyAlphabet) == std::string::npos,
               k.key.c_str());
    FUZZ_CHECK(!k.name.empty(), "a key without a name");
    for (size_t j = 0; j < i; ++j) FUZZ_CHECK(got[j].key != k.key, "a key listed twice");
    again += k.key + (k.write ? " write " : " read ") + k.name + "\n";
  }
  const std::string file2 =
      prism::fuzz::write_input("keys-again.txt", reinterpret_cast<const uint8_t*>(again.data()), again.size());
  const std::vector<ApiKey> back = load_api_keys(file2);
  FUZZ_CHECK(back.size() == got.size(), "keys written back");
  for (size_t i = 0; i < got.size(); ++i)
    FUZZ_CHECK(back[i].key == got[i].key && back[i].name == got[i].name && back[i].write == got[i].write,
               "keys written back");
}

void request(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const bool write = data[0] & 1;
  shard::StreamEntry e;
  e.id = "1700000000000-0";
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  for (const char* field : {"op", "deadline_ms", "params"}) {
    const size_t nul = rest.find('\0');
    if (nul == std::string::npos) break;
    e.fields[field] = rest.substr(0, nul);
    rest.erase(0, nul + 1);
  }
  e.fields["entry"] = rest;
  shard::Request r;
  try {
    r = shard::parse_request(e, write);
  } catch (const ServiceError& x) {
    FUZZ_CHECK(x.status == 400 && (x.field == "op" || x.field == "id") && *x.what(), x.what());
    return;
  } catch (const prism::texture::GalleryError& x) {
    FUZZ_CHECK(std::string(x.what()).rfind("stream entry " + e.id + ": ", 0) == 0, x.what());
    return;
  } catch (const json::exception&) {
    return;
  } catch (const std::logic_error&) {  // std::stoll of deadline_ms
    FUZZ_CHECK(!write, "a write's deadline_ms was read");
    return;
  }
  if (write) {
    // An online split's markers (service/reshard.h) are writes too, read with their `shards`.
    FUZZ_CHECK(r.op == "post" || r.op == "put" || r.op == "delete" || r.op == "split" || r.op == "split-commit",
               r.op.c_str());
    if (r.op == "post" || r.op == "put") FUZZ_CHECK(prism::texture::valid_product_id(r.entry.id), r.entry.id.c_str());
    FUZZ_CHECK(r.deadline == Clock::time_point::max(), "a write with a deadline");
    return;
  }
  FUZZ_CHECK(r.op == "get" || r.op == "verify" || r.op == "search" || r.op == "stats", r.op.c_str());
  const int64_t ms = std::stoll(e.field("deadline_ms"));
  const int64_t now_unix =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  if (ms > now_unix - (int64_t(1) << 39) && ms < now_unix + (int64_t(1) << 39)) {
    const int64_t back = shard::unix_ms(r.deadline);
    FUZZ_CHECK(back > ms - 60000 && back < ms + 60000, "the deadline moved");
  }
  if (r.op == "verify" || r.op == "search")
    FUZZ_CHECK(prism::texture::same_params(shard::params_from(shard::params_json(r.search)), r.search),
               "search parameters");
}

void answer(const uint8_t* data, size_t size) {
  if (size == 0) return;
  static const char* const kOps[] = {"post", "delete", "get", "verify", "search", "stats"};
  const std::string op = kOps[data[0] % 6];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const json a = shard::answer_from(text, op != "search" && op != "stats");  // call() takes 201 too
    if (op == "post") {
      const WriteResult w = shard::write_result_from(a);
      const Product p = shard::product_from(shard::product_json(w.product));
      FUZZ_CHECK(shard::product_json(p) == shard::product_json(w.product), "product read back");
    } else if (op == "delete") {
      a.at("removed").get<bool>();
    } else if (op == "get") {
      if (a.at("found").get<bool>()) {
        const Product p = shard::product_from(a.at("product"));
        FUZZ_CHECK(shard::product_json(shard::product_from(shard::product_json(p))) == shard::product_json(p),
                   "product read back");
      }
    } else if (op == "verify") {
      const VerifyAnswer v = shard::verify_answer_from(a);
      const json m = shard::match_json(v.match);
      FUZZ_CHECK(shard::match_json(shard::match_from(m)) == m, "match read back");
    } else if (op == "search") {
      const json s = shard::shard_search_json(shard::shard_search_from(a));
      shard::number_field<int>(a, "shard");
      FUZZ_CHECK(shard::shard_search_json(shard::shard_search_from(s)) == s, "search part read back");
    } else {
      const json s = shard::shard_stats_json(shard::shard_stats_from(a.at("stats")));
      FUZZ_CHECK(shard::shard_stats_json(shard::shard_stats_from(s)) == s, "stats read back");
    }
  } catch (const ServiceError& x) {
    FUZZ_CHECK(x.status >= 400 && x.status <= 599 && *x.what(), x.what());
  } catch (const prism::texture::GalleryError&) {
  } catch (const json::exception&) {
  }
}

}  // namespace

void head(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ListenerLimits l;
  l.max_request_line = 64;
  l.max_head_bytes = 256;
  l.max_header_fields = 4;
  l.max_body_bytes = 1000;
  const RequestHead h = parse_request_head(bytes, l);
  using S = RequestHead::Status;
  if (h.status == S::kComplete) {
    FUZZ_CHECK(h.head_bytes <= size, "the head ends beyond the bytes");
    FUZZ_CHECK(h.head.size() <= h.head_bytes + 1, "the rewritten head is longer than the one received");
    FUZZ_CHECK(h.body_bytes <= l.max_body_bytes, "a body over the limit is framed");
    FUZZ_CHECK(h.framed || h.body_bytes == 0, "an unframed request has a body length");
    std::string lower(h.head);
    for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
    FUZZ_CHECK(lower.find("\nexpect:") == std::string::npos, "Expect reaches the handlers");
  } else if (h.status != S::kIncomplete) {
    FUZZ_CHECK(size > l.max_request_line || size > l.max_head_bytes || h.status == S::kTooManyFields,
               "a cap refused bytes within it");
  }
}

void redis_url(const uint8_t* data, size_t size) {
  const std::string url(reinterpret_cast<const char*>(data), size);
  try {
    const RedisUrl u = parse_redis_url(url);
    FUZZ_CHECK(!u.host.empty() && u.port >= 1 && u.port <= 65535, "a URL without host or port accepted");
    if (!u.password.empty()) FUZZ_CHECK(u.text.find(":***@") != std::string::npos, "the password is shown");
  } catch (const std::invalid_argument& e) {
    FUZZ_CHECK(std::string(e.what()).rfind("Redis URL '", 0) == 0, e.what());
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  switch (data[0] % 5) {
    case 0: keys(data + 1, size - 1); break;
    case 1: request(data + 1, size - 1); break;
    case 2: answer(data + 1, size - 1); break;
    case 3: head(data + 1, size - 1); break;
    case 4: redis_url(data + 1, size - 1); break;
  }
  return 0;
}
