// The texture identification service's operations, behind one interface that two backends
// implement: LocalBackend (service/local_backend.h: one gallery and its index in this process, what
// `prism texture serve --gallery G` runs) and ShardedBackend (service/sharded_backend.h: the front
// of a sharded deployment, forwarding to shard workers through Redis Streams). The HTTP layer
// (service/http_api.h) knows only this interface, so both deployments answer the same API.
//
// Consistency (docs/SERVICE.md): a write that returned is durable in the owning shard's gallery
// directory and visible to every verify and search that starts after it returned.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "texture/gallery.h"
#include "texture/index.h"

namespace prism::service {

using Clock = std::chrono::steady_clock;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Whether the client of the HTTP request this thread serves has gone away (closed its connection).
// HttpApi sets the check for each request (ClientWatch); waits that would outlive their client ask
// it (the sharded front's, at each liveness check) and stop with 499. False outside a request.
bool client_gone();
class ClientWatch {
 public:
  explicit ClientWatch(std::function<bool()> gone);
  ~ClientWatch();
  ClientWatch(const ClientWatch&) = delete;
  ClientWatch& operator=(const ClientWatch&) = delete;

 private:
  std::function<bool()> gone_;
  const std::function<bool()>* outer_;
};

// ServiceError 503 naming `deadline_ms` when `deadline` has passed: checked before each step that
// could take long, so that a late request fails instead of occupying a thread or a shard.
void check_deadline(Clock::time_point deadline, const char* step);

// An error that the API reports to the client: an HTTP status, the request field it concerns
// (empty when none) and a sentence. Thrown by backends and by request parsing. `retry_after_s` > 0
// for a refusal that is expected to pass by itself (the API sends it as Retry-After).
struct ServiceError : std::runtime_error {
  ServiceError(int status, std::string field, const std::string& message, int retry_after_s = 0)
      : std::runtime_error(message), status(status), field(std::move(field)), retry_after_s(retry_after_s) {}
  int status;
  std::string field;
  int retry_after_s;
};

// What GET /v1/products/{id} returns (no descriptors).
struct Product {
  std::string id, collection, source;
  int64_t enrolled_unix = 0;
  int features = 0, width = 0, height = 0;
  int shard = 0;
};

enum class WriteOutcome {
  kCreated,    // a new product (201)
  kUnchanged,  // POST of the same id with the same features: idempotent (200)
  kUpdated,    // PUT replaced it (200)
};

struct WriteResult {
  WriteOutcome outcome = WriteOutcome::kCreated;
  Product product;
};

// One verified candidate of a search, or the answer of a verify.
struct Match {
  std::string id;
  int score = 0;    // ratio-test matches counted by the matcher
  int matches = 0;  // one-to-one ratio-test matches verified geometrically
  int inliers = 0;
  double significance = 0;  // the decision score (texture::Candidate::significance)
  // Before the shortlist's Bonferroni term: what a shard reports, so that a front merging several
  // shards' shortlists can apply the term of the merged shortlist.
  double geometric_significance = 0;
  bool accepted = false;
  cv::Matx33d homography = cv::Matx33d::eye();  // query -> gallery image
};

struct SearchQuery {
  texture::Features features;
  texture::SearchParams params;  // collections, threshold (min_significance), shortlist
  int top_k = 5;
  bool allow_partial = false;  // answer with the shards that replied in time instead of failing
  Clock::time_point deadline = Clock::time_point::max();
};

struct SearchAnswer {
  bool identified = false;
  std::vector<Match> candidates;  // at most top_k, most significant first
  size_t searched = 0;            // images matched exactly
  size_t digested = 0;            // host-tier images ranked by their digest only (digest_candidates)
  size_t gallery_size = 0;        // images the shards that answered hold
  int shards = 1, shards_answered = 1;
  std::vector<int> missing_shards;  // with allow_partial: the shards that did not answer in time
  // Sharded: match_ms the slowest shard's scoring; verify_ms the verification phase as the front
  // waited for it (its round trip included).
  double match_ms = 0, verify_ms = 0;
};

struct VerifyAnswer {
  Match match;
  double match_ms = 0, verify_ms = 0;
  // Sharded: the read's wait in its shard's stream before a worker's reader took it, and the rest
  // of the front's round trip (Redis, routing, the answer's way back): where a sharded verify's
  // time beyond the single gallery's goes. Absent for a local gallery.
  std::optional<double> shard_queue_ms, shard_transport_ms;
};

// Memory and size of one shard, for stats and metrics.
// One replica of a shard as Redis sees it: its consumer group on the shard's writes stream. A
// write is acknowledged there only once applied (or answered as every replica would answer it), so
// everything up to `delivered` is applied when `pending` is 0: replicas whose positions differ
// have not caught up with each other yet.
struct ReplicaStats {
  std::string replica;
  bool live = false;      // its liveness key exists (a worker of that name runs)
  std::string failing;    // why it cannot apply a write; empty when it can
  std::string delivered;  // the stream id of the last write given to it ("0-0": none yet)
  int64_t pending = 0;    // given to it and not yet applied
  int64_t lag = -1;       // writes of the stream not given to it yet (-1: Redis cannot tell)
  // Replica repair (service/replica_repair.h), as its worker last published it (-1: unknown, no
  // digest published): entries differing from its siblings at its last comparison, and entries it
  // copied from or dropped for them since it started.
  int64_t divergent = -1;
  int64_t repaired = -1;
};

struct ShardStats {
  int shard = 0;
  bool answered = true;  // false: no worker answered in time (index and worker are then empty)
  std::string worker;    // who answered (host:pid or "local")
  texture::IndexStats index;
  int64_t writes_applied = 0;
  // Damaged copies of entries (an entry file or its pack record) read from the other copy and
  // written again, since the worker started: each one is a disk error an operator should look at.
  int64_t copies_repaired = 0;
  std::vector<ReplicaStats> replicas;  // sharded deployments: every replica Redis knows of
};

struct ServiceStats {
  std::vector<ShardStats> shards;
  int shards_expected = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // POST (replace false): creates; the same id with the same features again is kUnchanged; the
  // same id with other features is 409. PUT (replace true): replaces, 404 when absent.
  // entry.id and entry.collection are valid (checked by the caller).
  virtual WriteResult write(const texture::GalleryEntry& entry, bool replace, Clock::time_point deadline) = 0;
  // False when absent.
  virtual bool remove(const std::string& id, Clock::time_point deadline) = 0;
  virtual std::optional<Product> get(const std::string& id, Clock::time_point deadline) = 0;
  // 1:1 against `id` (404 ServiceError when absent).
  virtual VerifyAnswer verify(const std::string& id, const texture::Features& query,
                              const texture::SearchParams& params, Clock::time_point deadline) = 0;
  virtual SearchAnswer search(const SearchQuery& query) = 0;
  virtual ServiceStats stats(Clock::time_point deadline) = 0;
  // Empty when the backend can serve; otherwise why not (GET /healthz answers 503 with it).
  virtual std::string health() = 0;
  // More of /metrics (Prometheus text, HELP and TYPE lines included): what only this backend
  // knows (a sharded front's Redis master). Empty by default.
  virtual std::string metrics() { return {}; }
  // The contrast normalisation its products were enrolled with (the gallery's record; for shards,
  // the deployment's prism:normalise), which HttpApi applies to every image it extracts: a query
  // extracted otherwise would silently match worse. ServiceError 503 (with retry_after_s) while it
  // is not known yet (a sharded front before any worker has announced it): an image extracted
  // with a guess would be enrolled or searched with the wrong features, silently.
  virtual texture::Normalisation normalisation() = 0;
};

// One shard's part of a search: its verified shortlist (texture::TextureIndex::search, every
// candidate with at least 4 ratio-test matches among its `shortlist` best scores), or in the first
// phase of a sharded search (`scored`) that shortlist unverified.
//
// Why two phases: verification (RANSAC on the host) is a search's costly part, and of N shards'
// shortlists of S only the S best scores of all survive the merge. So the front of a sharded
// search (ShardedBackend::search) first gathers every shard's shortlist by score (shard_scores),
// cuts the global shortlist from them (shortlist_by_shard) and then asks each shard to verify only
// its candidates in it (shard_verify): S verifications instead of N * S, for one more round trip.
// The answer is the one phase's exactly: a candidate's geometry does not depend on the others, and
// merge_search takes the same global shortlist either way.
struct ShardSearch {
  int shard = 0;
  bool scored = false;  // the shortlist is unverified: each Match has its id and score only
  std::vector<Match> shortlist;
  size_t searched = 0, digested = 0, gallery_size = 0;
  double match_ms = 0, verify_ms = 0;
};
ShardSearch shard_search(texture::TextureIndex& index, int shard, const texture::Features& query,
                         const texture::SearchParams& params);
// The same part of a search already run (TextureIndex::search or search_many) on `index`.
ShardSearch shard_search_of(const texture::SearchResult& r, texture::TextureIndex& index, int shard);
// The first phase: shard_search's shortlist, scored and not verified.
ShardSearch shard_scores(texture::TextureIndex& index, int shard, const texture::Features& query,
                         const texture::SearchParams& params);
// The second phase: `candidates` (id and score, as shard_scores gave them) verified, as shard_search
// verifies its own; those no longer indexed (removed since) are left out. Only the shortlist and
// the times are set (the counts are the first phase's).
ShardSearch shard_verify(texture::TextureIndex& index, int shard, const texture::Features& query,
                         const std::vector<Match>& candidates, const texture::SearchParams& params);

// The global shortlist of the shards' parts: their shortlists pooled in texture::shortlist_before's
// order (more matches first, ties by id) and cut to params.shortlist, as (part, candidate) positions.
std::vector<std::pair<size_t, size_t>> global_shortlist(const std::vector<ShardSearch>& parts,
                                                        const texture::SearchParams& params);

// The middle of a two-phase search: each part's shortlist cut to its candidates in the global
// shortlist, and the candidates each `scored` part's shard is to verify (shards with none are not
// asked). Parts verified already (a worker from before the two-phase search answers the first phase
// whole, shard_protocol.h) need nothing more.
std::map<int, std::vector<Match>> shortlist_by_shard(std::vector<ShardSearch>& parts,
                                                     const texture::SearchParams& params);

// The answer of a search from the shards' parts: the `shortlist` best scores of all shards (ties by
// id), each one's significance less log10 of their number, sorted by significance (then inliers,
// score, id), cut to top_k. With one shard this is exactly TextureIndex::search's answer; with
// several it equals the answer of one index holding every shard's images (ties in score apart).
// The parts are verified ones (shard_search's, or shard_verify's with the first phase's counts).
SearchAnswer merge_search(const std::vector<ShardSearch>& parts, const texture::SearchParams& params, int top_k,
                          int shards);

}  // namespace prism::service
