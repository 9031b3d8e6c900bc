// Texture identification over an index held in memory: 1:M search and 1:1 verification, with
// products added, updated and removed in place while searches run.
//
// Search: the 8-bit matcher (match/match.h) scores the query against every indexed image in the
// search's scope (ratio-test matches per image); the best `shortlist` images are re-matched for
// their correspondences and verified geometrically (verify.h); the candidate whose inliers are the
// most significant wins, and it is identified when that significance reaches `min_significance`
// (and it has `min_inliers`). Verification (1:1) is the same on the claimed image alone.
//
// Memory tiers (IndexOptions). Each image's descriptors take one slot of match::kSlotBytes
// (98,304 bytes). On the GPU path slots live in GPU memory up to the GPU
// budget and beyond it in pinned host memory up to the host budget; a search matches the GPU tier in place and streams
// the host tier through the GPU in batches on several CUDA streams, each batch's copy overlapping the other streams'
// matching (FAISS stages a host gallery the same way, through pinned buffers on a copy stream; reading mapped host
// memory in place is far slower). Placement is by age, as the reference system's FIFO: the newest images are in GPU
// memory; when an add finds the GPU tier full the oldest GPU-resident image moves to the host tier, and when a removal
// frees a GPU slot the newest host-resident image moves up. An add past both budgets throws IndexFull naming them. On
// the CPU path there is one tier, host memory, up to the host budget.
//
// Live updates: an id -> entry map and, in every tier, slots kept dense by swap-with-last, so add,
// update and remove are O(1) copies of one slot (plus O(log n) for the age order) and the index is
// never rebuilt. A write that returned is visible to every search that starts after it. Writers
// take the index exclusively; searches share it (on the GPU they also take turns on the streams).
//
// Scope: an entry may belong to one collection (a lot, a factory, a product line); a search given
// collections matches only their members, in time proportional to their count (the matcher reads
// the members' slots through an index list; host-tier members are gathered slot by slot).
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "texture/decision.h"
#include "texture/features.h"
#include "texture/verify.h"

namespace prism::texture {

using Device = gpu::Device;

// The decision's thresholds (min_significance, min_inliers: decision.h) and how to search.
struct SearchParams : DecisionParams {
  float ratio = 0.8f;  // Lowe's ratio
  int shortlist = 8;   // images verified geometrically per search
  VerifyParams verify;
  // Search only the members of these collections (empty: the whole index). An unknown collection
  // has no members.
  std::vector<std::string> collections;
  // Approximate host tier (IndexOptions::host_digest_rows): a search of the whole index matches the
  // host tier's digests, and re-matches exactly only the images of the `digest_candidates` digest slots
  // that score highest (each holds 768 / host_digest_rows images); the other host-tier images score 0.
  // 0 (the default), a scoped search, or an index without digests: every image is matched exactly.
  int digest_candidates = 0;
  // The most a request may ask for (CLI flags, the REST parameter): more than any index's digest slots,
  // which asks for an exact search anyway.
  static constexpr int kMaxDigestCandidates = 100000000;
};

// Whether two searches ask the same (every field of SearchParams: a field added there belongs here
// too), so that they may share a search_many.
inline bool same_params(const SearchParams& a, const SearchParams& b) {
  return a.min_significance == b.min_significance && a.min_inliers == b.min_inliers && a.ratio == b.ratio &&
         a.shortlist == b.shortlist && a.verify.reprojection_px == b.verify.reprojection_px &&
         a.verify.max_iterations == b.verify.max_iterations && a.verify.confidence == b.verify.confidence &&
         a.collections == b.collections && a.digest_candidates == b.digest_candidates;
}

// Queries that search_many scores per matcher call. The kernels themselves take any number (their grids
// grow with the rows), but the gain is in the first few: on an H100 the wgmma kernel matches 5.35 M
// images/s per query at 2 queries a launch and 5.31 M at 8 (docs/benchmarks/matching.md), while the
// query and score buffers grow with the batch (8 x 96 KiB of query).
constexpr int kMaxBatchQueries = 8;

struct Candidate {
  int index = -1;  // the entry's position in ids() when the search ran
  std::string id;
  int score = 0;  // ratio-test matches counted by the matcher
  Verification geometry;
  // The enrolled image's size in its own pixels (Features::width/height; not shrunk), which
  // geometry.homography maps the query into: gallery_in_query (verify.h) needs it for the quad.
  cv::Size gallery_size{};  // (initialised: candidates written as {index, id, score, {}} stay warning-free)
  // The decision score: decision_significance (decision.h) of geometry.significance among the
  // candidates verified; equal to it for verify (1:1).
  double significance = 0;
};

// The decision for one verified candidate (decision.h's accepted).
inline bool accepted(const Candidate& c, const SearchParams& params) {
  return accepted(c.geometry.inliers, c.significance, params);
}

struct SearchResult {
  bool identified = false;            // best candidate passes min_significance and min_inliers
  Candidate best;                     // index -1 when nothing was searched
  std::vector<Candidate> candidates;  // the verified shortlist, most significant first
  size_t searched = 0;                // images matched exactly (the scope's size, less `digested`)
  size_t digested = 0;                // host-tier images ranked by their digest only (digest_candidates)
  double match_ms = 0, verify_ms = 0;
};

// The index's own errors: an id added twice or updated while absent, a verify of an id it does not
// hold, an index broken by a write that failed half-way. (Not the gallery's GalleryError: the index
// in memory knows nothing of how products are stored.)
struct IndexError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Thrown by add (and build) when neither tier has room: both budgets used, or the machine's memory
// (IndexOptions::host_reserve; a GPU budget larger than the GPU's free memory) is.
struct IndexFull : IndexError {
  using IndexError::IndexError;
};

// What the index keeps of a product, as a view of the caller's record (copied in by add and update).
struct IndexEntry {
  const std::string& id;
  const Features& features;
  const std::string& collection;  // empty: none
  int64_t enrolled_unix = 0;      // the age the FIFO placement follows (newest in GPU memory)
};

constexpr int64_t kDefaultBudget = -1;

// Bytes one image takes in a tier, what a budget is divided by: its descriptor slot (match::kSlotBytes)
// and, in the GPU tier with gpu_norms, its rows' |g|^2 beside it (kSlot int32, 3% more: a search then
// does not recompute them, MatchU8Problem::norms). The index stores 8-bit descriptors only: the
// product's format (half the memory of FP16, exact integer distances, GPU == CPU bit for bit).
size_t image_bytes(bool gpu_tier, bool gpu_norms = true);

struct IndexOptions {
  Device device = Device::kAuto;
  // Bytes per tier (image_bytes per image); kDefaultBudget picks: GPU, the device's free memory at
  // construction less 2 GiB (the search's own buffers, other users); host, half of the memory
  // available (MemAvailable).
  // 0 disables a tier (a GPU budget of 0 streams every image from host memory).
  int64_t gpu_budget = kDefaultBudget;
  int64_t host_budget = kDefaultBudget;
  // Host memory the index leaves to the rest of the machine. A tier grows a block at a time, and
  // only while the memory this process may still take (MemAvailable, or a nearer cgroup v2 limit)
  // stays above this after the block and the host-side records of its images (keypoint positions,
  // which GPU-tier images keep in host memory too): pinned memory cannot be swapped, so without this
  // a budget larger than the machine holds ends in the kernel's OOM killer rather than in IndexFull.
  // kDefaultBudget picks 2 GiB, or an eighth of a smaller machine's memory; 0 turns the check off.
  int64_t host_reserve = kDefaultBudget;
  int streams = 4;  // CUDA streams that stream the host tier
  // Verifications of named products (verify, verify_shortlist: a verify request, a sharded search's
  // global shortlist) that run on the GPU at once, each on its own stream with its own query and
  // scratch buffers (about 1 MB of GPU memory each for one candidate), so that concurrent requests
  // overlap their copies and matching rather than wait for each other (lane 0 is shared with the
  // searches that score the index). At least 1.
  int verify_lanes = 4;
  int host_batch = 256;    // host-tier images per copy (25 MB)
  int block_slots = 1024;  // the host tier's slots per allocation (96 MiB): tiers grow a block at a time
  // The GPU tier's (792 MiB at 8 bits; the last block of a budget is cut to it). Larger, because a
  // search matches a GPU-tier block in one launch, and each launch's first and last images leave
  // multiprocessors idle: at 1024 a launch gives each multiprocessor 8 images, at 8192 62.
  int gpu_block_slots = 8192;
  // GPU-tier images per launch in a search that also streams the host tier (whose batches must not wait
  // behind a whole GPU block for the multiprocessors).
  int gpu_run_slots = 1024;
  // The GPU tier keeps its rows' |g|^2 (image_bytes): on an H100 the wgmma kernel then matches 5.2 M
  // images/s rather than 4.5 M, for 3% fewer images in the same budget (a node at its memory limit may
  // prefer those).
  bool gpu_norms = true;
  // A digest of every host-tier image, for approximate searches of the whole index
  // (SearchParams::digest_candidates): its first `host_digest_rows` descriptors in digest_order (the
  // largest keypoints'), 768 / host_digest_rows images packed into one matcher slot, in GPU memory (taken out
  // of the GPU budget before the GPU tier's share; on the CPU path in host memory, in the host tier's
  // footprint). Such a search reads host memory only for the candidates, so it is no longer bound by
  // PCIe: a digest slot costs what a GPU-tier image costs. The rank of the genuine product's digest
  // slot on real re-captures is `prism-texture-eval --digest` (docs/TEXTUREID.md). 0: none; otherwise
  // a divisor of 768 from 16 to 384.
  int host_digest_rows = 0;
  // The digests are not kept: a digest search copies each host-tier slot's first host_digest_rows rows
  // (which are its digest as stored: they cross PCIe, host_digest_rows / 768 of the host tier's bytes)
  // into the layout of kept digests and matches them there, while the GPU tier is matched. No memory
  // beyond the tiers, for a node whose GPU memory the GPU tier fills (an H100 of 80 GB beside 128 GiB of
  // host memory holds 2 M images and nothing more); bound by PCIe rather than by the matcher. The same
  // scores, candidates and answers as kept digests.
  bool stream_host_digests = false;
  // Which rows make an image's digest (features.h): with digests, every slot of both tiers holds its
  // image's rows in this order, so that its first host_digest_rows rows are the digest (scores do not
  // depend on the order of a slot's rows; verification maps them back to their keypoints). The largest
  // keypoints first keep the genuine product's digest slot first for 99.5% of the real queries that the
  // exact score ranks first at 128 rows, where the strongest first keep 98.7% (docs/TEXTUREID.md).
  DigestOrder digest_order = DigestOrder::kLargest;
};

// IndexOptions::host_digest_rows that an index accepts: 0, or a divisor of 768 from 16 to 384.
bool valid_host_digest_rows(int rows);

// The host-tier digests as an index with IndexOptions::host_digest_rows = `rows` and digest_order =
// `order` holds them, for a measurement that ranks queries against digests without building a host
// tier (prism-texture-eval --digest). std::invalid_argument unless `rows` is a valid, non-zero
// host_digest_rows.
//   image_digest: an image's digest, the first `rows` rows of its slot as the index writes it (its rows
//   in `order`; past its rows 255s, and a one-row image's row twice), rows * 128 bytes.
//   pack_digest_slots: digests of `rows` rows each (image_digest's, or any) in the layout of one host
//   block's digest slots: digest k at rows [(k % per) * rows, + rows) of slot k / per (per = 768 / rows),
//   255s in the places no image holds; match::kSlotBytes a slot, each matched whole (768 rows).
std::vector<uint8_t> image_digest(const Features& f, int rows, DigestOrder order);
std::vector<uint8_t> pack_digest_slots(const std::vector<std::vector<uint8_t>>& digests, int rows);

// What lives where (IndexOptions: budgets as resolved).
struct IndexStats {
  size_t images = 0, gpu_images = 0, host_images = 0;
  size_t gpu_capacity = 0, host_capacity = 0;  // images the budgets allow
  size_t gpu_bytes = 0, host_bytes = 0;        // allocated for slots
  size_t digest_bytes = 0;                     // allocated for the host tier's digests (in GPU memory on the GPU path)
  int64_t gpu_budget = 0, host_budget = 0;
  size_t collections = 0;
  std::string device;
};

class TextureIndex {
 public:
  // kCuda throws when no usable (sm_80+) GPU is present; kAuto then uses the CPU.
  explicit TextureIndex(Device device = Device::kAuto);
  explicit TextureIndex(const IndexOptions& options);
  ~TextureIndex();
  TextureIndex(const TextureIndex&) = delete;
  TextureIndex& operator=(const TextureIndex&) = delete;

  bool on_gpu() const;
  std::string device_description() const;  // "cuda:0 (NVIDIA H100 ...)" or "cpu (...why...)"

  // Live updates (IndexError when the id is present / absent; IndexFull when no tier has room). A
  // failed add changes nothing unless its undo fails too (a GPU copy); an update whose slot write
  // fails, or a remove whose slot moves fail, may be half done. After any of those the index is
  // broken: add, update, remove, scores, search and verify throw IndexError naming the first error,
  // until clear(); size, find, in_gpu_memory and stats still answer.
  void add(const IndexEntry& entry);
  void update(const IndexEntry& entry);  // descriptors, geometry and collection replaced in place
  bool remove(const std::string& id);    // false when absent
  void clear();
  // The same for any record with IndexEntry's fields (texture::GalleryEntry), so that callers pass
  // their own records and the index depends on none of their types.
  template <class Record>
  void add(const Record& r) {
    add(IndexEntry{r.id, r.features, r.collection, r.enrolled_unix});
  }
  template <class Record>
  void update(const Record& r) {
    update(IndexEntry{r.id, r.features, r.collection, r.enrolled_unix});
  }
  // Replaces the index's contents with `records`, added in order (the last ones are the newest).
  template <class Record>
  void build(const std::vector<Record>& records) {
    clear();
    for (const Record& r : records) add(r);
  }

  size_t size() const;
  // The ids by entry position. Positions change when an entry is removed (the last takes its place):
  // read ids() only while no other thread writes.
  const std::vector<std::string>& ids() const { return ids_; }
  int find(const std::string& id) const;            // -1 when absent
  bool in_gpu_memory(const std::string& id) const;  // false when absent or in host memory
  IndexStats stats() const;

  // Ratio-test scores of `query` against every indexed image (by entry position; 0 outside the
  // search's collections).
  std::vector<int> scores(const Features& query, const SearchParams& params);
  SearchResult search(const Features& query, const SearchParams& params);
  // Several searches with the same parameters: result i is search(*queries[i], params)'s (the same
  // candidates, scores, geometry and decision; match_ms is the time of the scoring its query shared).
  // The scoring matches up to kMaxBatchQueries (8) queries in each matcher call (the matcher's batched queries), so
  // that concurrent searches read each indexed image, and on the GPU path stream the host tier, once per batch rather
  // than once per query. Verification stays per query. Approximate (digest) searches and queries without descriptors
  // are searched one at a time. A query that search would refuse (check_descriptors) makes the whole call throw.
  std::vector<SearchResult> search_many(const std::vector<const Features*>& queries, const SearchParams& params);
  // search() in two halves, for a caller that pools the shortlists of several indexes before it
  // verifies (the sharded service, service/backend.h: a shard verifies only its part of the global
  // shortlist, not a shortlist of its own). shortlist: the scores and the shortlist as search()
  // takes them, unverified (candidates without geometry, best the best score's; searched,
  // digested, match_ms). verify_shortlist: `candidates` (id and score, as shortlist gave them)
  // verified and ordered as search() verifies its own, the significance among those verified; ids
  // no longer indexed (removed since) are left out. search() equals verify_shortlist of
  // shortlist's candidates, with one upload of the query.
  SearchResult shortlist(const Features& query, const SearchParams& params);
  SearchResult verify_shortlist(const Features& query, const std::vector<Candidate>& candidates,
                                const SearchParams& params);
  // 1:1 against `id` (IndexError when it is not indexed).
  SearchResult verify(const Features& query, const std::string& id, const SearchParams& params);

 private:
  struct Impl;
  std::vector<std::string> ids_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::texture
