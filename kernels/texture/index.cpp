#include "texture/index.h"

#include <algorithm>
#include <exception>
#include <functional>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#include <new>
#include <numeric>
#include <set>
#include <shared_mutex>
#include <tuple>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "common/copy_rows.h"
#include "common/device_array.h"
#include "common/gpu.h"
#include "common/host_memory.h"
#include "common/stopwatch.h"
#include "match/match.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::texture {

namespace {

using Clock = std::chrono::steady_clock;
using host_memory::size_text;

constexpr size_t kSlotBytes = match::kSlotBytes;
enum TierId { kGpuTier = 0, kHostTier = 1 };

// The descriptors the index matches, as bytes (at most a slot's).
std::pair<const uint8_t*, size_t> descriptor_bytes(const Features& f) {
  return {f.descriptors.data(), std::min(f.descriptors.size(), kSlotBytes)};
}

// Query rows padded to a multiple of 16 with zero vectors (a zero row never passes the ratio test),
// written to `out` (a slot's bytes); returns the row count.
int pad_query(const Features& q, uint8_t* out) {
  const int rows = std::max(16, (std::min(q.count(), match::kSlot) + 15) / 16 * 16);
  const auto [d, used] = descriptor_bytes(q);
  std::copy_n(d, used, out);
  std::fill(out + used, out + size_t(rows) * match::kDim, uint8_t(0));
  return rows;
}

// One image's descriptors in a slot's layout. The matcher reads only a slot's first `count` rows. Past
// them an 8-bit slot holds 255s (|g|^2 = 8.3 M against RootSIFT's 0.26 M: never a nearest or
// second-nearest neighbour of a query row), and a one-row image's row is written twice (its nearest
// and second-nearest distances are then equal: it never passes a ratio test, as the matcher's one-row
// images never do), so that a slot's first rows are its digest as they are (TextureIndex::Impl::Digest,
// whose slots the matcher reads whole). The rows in `order` (a permutation of them: the index's row
// order), or as stored when it is empty.
void pack_slot(const Features& f, uint8_t* slot, const std::vector<int>& order) {
  const auto [d, used] = descriptor_bytes(f);
  const size_t row = match::kDim;
  if (order.empty())
    std::copy_n(d, used, slot);
  else
    for (size_t r = 0; r < used / row; ++r) std::copy_n(d + size_t(order[r]) * row, row, slot + r * row);
  const size_t end = used == match::kDim ? 2 * used : used;
  std::copy_n(slot, end - used, slot + used);
  std::fill(slot + end, slot + kSlotBytes, uint8_t(255));
}

int slot_count(const Features& f) { return std::min(f.count(), match::kSlot); }

// The keypoints' positions in the slot's row order (pack_slot's `order`).
std::vector<cv::Point2f> points_of(const Features& f, const std::vector<int>& order) {
  std::vector<cv::Point2f> p;
  p.reserve(f.keypoints.size());
  for (size_t r = 0; r < f.keypoints.size(); ++r) {
    const Keypoint& k = f.keypoints[order.empty() ? r : size_t(order[r])];
    p.emplace_back(k.x, k.y);
  }
  return p;
}

// The per-row outputs of a matcher call (null: not wanted).
struct RowOutputs {
  int32_t *best = nullptr, *second = nullptr;  // squared distances
  int* index = nullptr;
};

// Host buffers reused between calls: pinned on the GPU path (asynchronous copies), plain on the CPU.
template <class T>
class HostBuffer {
 public:
  T* get(size_t n, bool pinned) {  // at least n elements; the contents are not kept on growth
#if defined(PRISM_HAVE_CUDA)
    if (pinned) {
      pinned_.reserve(n);
      return pinned_.data();
    }
#endif
    if (n > plain_.size()) plain_.resize(n);
    return plain_.data();
  }

 private:
#if defined(PRISM_HAVE_CUDA)
  gpu::PinnedArray<T> pinned_;
#endif
  std::vector<T> plain_;
};

}  // namespace

// One tier's slots, allocated a block at a time and kept dense: slot s is in block s / block_slots.
struct Tier {
  struct Block {
#if defined(PRISM_HAVE_CUDA)
    gpu::DeviceArray<uint8_t> device;   // the GPU tier's slots
    gpu::PinnedArray<uint8_t> pinned;   // the host tier's slots on the GPU path
    gpu::DeviceArray<int> d_counts;     // both tiers on the GPU path: the matcher reads counts there
    gpu::DeviceArray<int32_t> d_norms;  // Tier::norms: |g|^2 of every row (MatchU8Problem::norms)
#endif
    std::vector<uint8_t> plain;  // the host tier's slots on the CPU path
    uint8_t* data = nullptr;
  };
  bool in_gpu = false, pinned = false;
  // The GPU tier of an 8-bit index keeps |g|^2 of its rows beside the slots (kSlot int32 a slot), so
  // that a search does not recompute them (MatchU8Problem::norms).
  bool norms = false;
  size_t slot_bytes = kSlotBytes;
  size_t capacity = 0;  // slots the budget allows
  int block_slots = 1024;
  std::vector<std::unique_ptr<Block>> blocks;
  std::vector<int> entry;   // slot -> entry position
  std::vector<int> counts;  // slot -> descriptors
  // (enrolment time, add order, slot): oldest first. Enrolment time first, so that the FIFO follows
  // the products' age whatever order a gallery is read in (for_each_entry reads by id).
  std::set<std::tuple<int64_t, uint64_t, int>> age;

  size_t used() const { return entry.size(); }
  size_t allocated() const { return std::min(capacity, blocks.size() * size_t(block_slots)); }
  bool full() const { return used() >= capacity; }
  uint8_t* slot_data(size_t s) const { return blocks[s / block_slots]->data + (s % block_slots) * slot_bytes; }
#if defined(PRISM_HAVE_CUDA)
  int* d_count(size_t s) const { return blocks[s / block_slots]->d_counts.data() + s % block_slots; }
  int32_t* d_norm(size_t s) const {
    return blocks[s / block_slots]->d_norms.data() + (s % block_slots) * size_t(match::kSlot);
  }
#endif
  // Memory a slot takes: its descriptors, and their |g|^2 where kept.
  size_t footprint() const { return slot_bytes + (norms ? match::kSlot * sizeof(int32_t) : 0); }
  size_t bytes() const { return allocated() * footprint(); }

  size_t next_block_slots() const {  // slots the next block takes (the last may be short)
    return std::min(size_t(block_slots), capacity - blocks.size() * size_t(block_slots));
  }
  void grow(bool cuda) {  // one more block
    auto b = std::make_unique<Block>();
    const size_t n = next_block_slots();
#if defined(PRISM_HAVE_CUDA)
    if (in_gpu) {
      b->device.resize(n * slot_bytes);
      b->data = b->device.data();
      if (norms) b->d_norms.resize(n * match::kSlot);
    } else if (pinned) {
      b->pinned.resize(n * slot_bytes);
      b->data = b->pinned.data();
    }
    if (cuda) b->d_counts.resize(n);
#else
    (void)cuda;
#endif
    if (!b->data) {
      b->plain.resize(n * slot_bytes);
      b->data = b->plain.data();
    }
    blocks.push_back(std::move(b));
  }
  void clear() {
    blocks.clear();
    entry.clear();
    counts.clear();
    age.clear();
  }
};

struct TextureIndex::Impl {
  bool gpu = false;
  static constexpr size_t slot_bytes = kSlotBytes;
  std::string description;
  IndexOptions options;
  int64_t gpu_budget = 0, host_budget = 0, host_reserve = 0;

  struct Entry {
    std::string id;
    int collection = -1;
    int member = -1;       // position in members[collection]
    int64_t enrolled = 0;  // IndexEntry::enrolled_unix
    uint64_t seq = 0;      // add order
    int tier = kHostTier;
    int slot = 0;
    std::vector<cv::Point2f> points;  // keypoint positions for verification; the descriptors live in a slot
    cv::Size size;                    // the image's (Features::width/height)
  };
  std::vector<Entry> entries;  // dense: removal moves the last entry into the hole
  std::unordered_map<std::string, int> by_id;
  std::unordered_map<std::string, int> collection_ids;
  std::vector<std::vector<int>> members;  // collection -> entry positions
  uint64_t next_seq = 0;
  Tier tiers[2];

  // IndexOptions::host_digest_rows. Host slot s's digest, its slot's first `rows` rows (pack_slot), is the
  // rows [(l % per) * rows, + rows) of slot l / per of digest block s / B (l = s % B, B the host tier's
  // block slots): the digests follow the host slots' indices, so every write or move of a host slot
  // rewrites its digest in place. Places no image holds are 255s, which change no ratio test of the
  // images beside them (pack_slot). Streamed (IndexOptions::stream_host_digests), a search copies the
  // same rows into the same layout in the copy streams' staging instead (digest_match).
  struct Digest {
    int rows = 0, per = 0;
    bool streamed = false;  // IndexOptions::stream_host_digests: `slots` stays empty
    // The digest slots: in GPU memory on the GPU path, a block beside each host block (slots_for(B) slots
    // for a host block of B), grown with it. The matcher reads a digest slot whole, so every count is
    // kSlot: a search passes d_full_counts (CPU path: a vector of kSlot), and the Tier keeps no counts,
    // entry or age.
    Tier slots;
    size_t slots_for(size_t host_slots) const { return (host_slots + size_t(per) - 1) / size_t(per); }
    // The digest slots of the first n host slots (host blocks of B), and host slot s's digest slot.
    size_t slots_of(size_t n, size_t B) const { return n / B * slots_for(B) + slots_for(n % B); }
    size_t slot_of(size_t s, size_t B) const { return s / B * slots_for(B) + s % B / size_t(per); }
  } digest;

  // Writers exclusive, searches shared. Writers first pass `gate` and hold it while they wait, so a
  // stream of overlapping searches cannot starve them (glibc's rwlock prefers readers).
  mutable std::shared_mutex mu;
  mutable std::mutex gate;
  std::mutex work;  // GPU searches take turns on the streams and scratch buffers (matching only)
  std::shared_lock<std::shared_mutex> read_lock() const {
    std::lock_guard<std::mutex> g(gate);
    return std::shared_lock<std::shared_mutex>(mu);
  }
  std::unique_lock<std::shared_mutex> write_lock() {
    std::lock_guard<std::mutex> g(gate);
    return std::unique_lock<std::shared_mutex>(mu);
  }

  // Host staging of the GPU path (pinned), used under `work` (searches) or mu exclusively (writes).
  HostBuffer<uint8_t> query_buf, slot_staging;
  HostBuffer<int> scores_buf, list_buf, counts_staging, index_buf, digest_scores_buf;
  HostBuffer<int32_t> best_buf, second_buf, norms_staging;
#if defined(PRISM_HAVE_CUDA)
  gpu::Stream stream;  // declared first: destroyed after everything that works on it
  std::vector<gpu::Stream> copy_streams;
  std::vector<gpu::DeviceArray<uint8_t>> staging;  // per copy stream: host_batch slots
  // A streamed digest search's ring over `staging`: landed[k] after its copy into staging[k], freed[k]
  // after the matching that read it (digest_match); digests_matched after a digest search's last matching.
  std::vector<gpu::Event> landed, freed;
  gpu::Event digests_matched;
  int sms = 0;                        // the device's multiprocessors
  gpu::DeviceArray<uint8_t> d_query;  // kSlot rows
  gpu::DeviceArray<int> d_scores, d_slots, d_digest_scores;
  // kSlot, as many times as one matcher call takes digest slots (host_batch streamed, a block's kept): the
  // counts of every digest search (Digest)
  gpu::DeviceArray<int> d_full_counts;
  gpu::DeviceArray<uint8_t> d_verify;  // shortlist slots
  gpu::DeviceArray<int> d_verify_scores, d_index;
  gpu::DeviceArray<int32_t> d_best, d_second;
#endif

  // One matcher call; out_scores written, not added to, on either path.
  void match_host(const match::MatchU8Problem& p, float ratio, int* out_scores, const RowOutputs& o = {}) const {
    match::MatchParams mp;
    mp.ratio = ratio;
    match::match_u8_cpu(p, mp, {out_scores, o.best, o.second, o.index});
  }
#if defined(PRISM_HAVE_CUDA)
  void match_device(const match::MatchU8Problem& p, float ratio, int* out_scores, const RowOutputs& o,
                    cudaStream_t s) const {
    match::MatchParams mp;
    mp.ratio = ratio;
    match::match_u8_cuda(p, mp, {out_scores, o.best, o.second, o.index}, s);
  }
#endif
  // Throws unless `f` carries the descriptors this index stores (`what` names it).
  void check_descriptors(const Features& f, const std::string& what) const {
    if (f.descriptors.size() != size_t(f.count()) * match::kDim)
      throw std::invalid_argument(what + " has " + std::to_string(f.count()) + " keypoints but " +
                                  std::to_string(f.descriptors.size()) + " bytes of 8-bit descriptors (" +
                                  std::to_string(match::kDim) + " a keypoint)");
  }

  // A search's query, padded once (pad_query) and on the GPU path uploaded once, to d_query on
  // `stream`: the scoring, the digests and the verification all read it there. It lives in the
  // index's query_buf and d_query, so the search holds `work` from prepare_query until its last
  // matching (the verification's); on the CPU path in `plain`.
  struct Query {
    std::vector<uint8_t> plain;
    const uint8_t* host = nullptr;
    int rows = 0;      // padded to a multiple of 16
    int features = 0;  // the query's own (0: nothing to match)
  };
  void prepare_query(const Features& query, Query& q);
  // Searches (callers hold mu shared): the ratio-test scores of the entries in the search's scope,
  // scores[i] for entry entry_of[i]; then the shortlist re-matched and verified.
  void score(const Query& q, const SearchParams& params, std::vector<int>& scores, std::vector<int>& entry_of,
             size_t* digested = nullptr);
  // A digest search in two halves. digest_match: every digest slot's score against the query (padded,
  // `rows` rows; on the GPU path already in d_query), into `s` on the CPU path; on the GPU path enqueued,
  // with their copy back to digest_scores_buf: kept digests matched on a copy stream, beside the GPU
  // tier's matching on `stream`; streamed ones copied batch by batch on a copy stream and matched on
  // `stream` between the GPU tier's runs.
  // digest_pick: the host-tier slots of the `params.digest_candidates` digest slots that score highest,
  // ties to the lower slot, in slot order.
  // `progress(share)` after each batch enqueued: the caller enqueues as much of the GPU tier (as in an
  // exact search, a long queue of one kind would fill CUDA's launch queue and serialise the two).
  void digest_match(const uint8_t* query, int rows, float ratio, std::vector<int>& s,
                    const std::function<void(double)>& progress);
  std::vector<int> digest_pick(const SearchParams& params, std::vector<int>& s);
#if defined(PRISM_HAVE_CUDA)
  void ensure_copy_streams();  // options.streams high-priority streams, each with host_batch slots of staging
  // A streamed digest search's copies run on gather_blocks() blocks of 512 threads (16 kept 50 GB/s on the
  // H200; 8, 33: bench/experiments/host_gather.cu), at most a quarter of a small GPU; the matchers' grids
  // meanwhile leave them that many multiprocessors.
  static constexpr int kGatherBlocks = 16;
  int gather_blocks() const { return std::clamp(sms / 4, 1, kGatherBlocks); }
  int gather_grid_sms() const { return std::max(1, sms - gather_blocks()); }
#endif
  Candidate verify_candidates(const Features& query, const Query& q, std::vector<Candidate>& cands,
                              const SearchParams& params, SearchResult& result, std::unique_lock<std::mutex>& work);

  static std::tuple<int64_t, uint64_t, int> age_key(const Entry& e, int slot) { return {e.enrolled, e.seq, slot}; }

  // The row order of f's slot: IndexOptions::digest_order with digests, else as stored (empty). One order
  // for both tiers, whose slots move between them as they are.
  std::vector<int> row_order(const Features& f) const {
    return digest.rows > 0 ? digest_order(f, options.digest_order, digest.rows) : std::vector<int>{};
  }

  // ---- slot moves (callers hold mu exclusively) ----
  void write_slot(Tier& t, size_t s, const Features& f, const std::vector<int>& order) {
    const int n = slot_count(f);
    t.counts[s] = n;
    if (!t.in_gpu && !gpu) {
      pack_slot(f, t.slot_data(s), order);
      return put_digest(t, s);
    }
    if (!t.in_gpu) pack_slot(f, t.slot_data(s), order);
#if defined(PRISM_HAVE_CUDA)
    uint8_t* staged = slot_staging.get(slot_bytes, true);
    int* count = counts_staging.get(1, true);
    *count = n;
    if (t.in_gpu) {
      pack_slot(f, staged, order);
      PRISM_CUDA_CHECK(cudaMemcpyAsync(t.slot_data(s), staged, slot_bytes, cudaMemcpyHostToDevice, stream));
      if (t.norms) upload_norms(t, s, staged);
    }
    PRISM_CUDA_CHECK(cudaMemcpyAsync(t.d_count(s), count, sizeof(int), cudaMemcpyHostToDevice, stream));
    put_digest(t, s);
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));  // the staging buffers are reused by the next write
#endif
  }
  // Host slot s's digest, its slot's first rows (host-addressable: plain or pinned; pack_slot writes them
  // as a digest), or 255s when `clear`; a no-op for the GPU tier, without digests or with streamed ones.
  // On the GPU path enqueued on `stream`: the caller synchronises before the host slot is written again.
  void put_digest(const Tier& t, size_t s, bool clear = false) {
    if (digest.rows == 0 || &t != &tiers[kHostTier]) return;
    const size_t B = size_t(t.block_slots);
    if (s / B >= digest.slots.blocks.size()) return;  // (streamed, or an add whose block was not allocated)
    uint8_t* const at =
        digest.slots.slot_data(digest.slot_of(s, B)) + s % B % size_t(digest.per) * digest.rows * match::kDim;
    const size_t bytes = size_t(digest.rows) * match::kDim;
    if (!gpu) {
      if (clear)
        std::fill_n(at, bytes, uint8_t(255));
      else
        std::copy_n(t.slot_data(s), bytes, at);
      return;
    }
#if defined(PRISM_HAVE_CUDA)
    if (clear)
      PRISM_CUDA_CHECK(cudaMemsetAsync(at, 255, bytes, stream));
    else
      PRISM_CUDA_CHECK(cudaMemcpyAsync(at, t.slot_data(s), bytes, cudaMemcpyHostToDevice, stream));
#endif
  }
  // The digest block beside a new host block (all 255s).
  void grow_digest() {
    Tier& d = digest.slots;
    const size_t n = d.next_block_slots();
    d.grow(false);  // (no counts: see Digest)
    try {
      if (!gpu) std::fill_n(d.blocks.back()->data, n * kSlotBytes, uint8_t(255));
#if defined(PRISM_HAVE_CUDA)
      else {
        PRISM_CUDA_CHECK(cudaMemsetAsync(d.blocks.back()->data, 255, n * kSlotBytes, stream));
        PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
      }
#endif
    } catch (...) {
      d.blocks.pop_back();
      throw;
    }
  }
#if defined(PRISM_HAVE_CUDA)
  // |g|^2 of a slot whose bytes are in host memory into tier t's slot s (asynchronous on `stream`;
  // the caller synchronises before the staging is reused).
  void upload_norms(Tier& t, size_t s, const uint8_t* host_slot) {
    int32_t* n = norms_staging.get(match::kSlot, true);
    match::u8_norms(host_slot, match::kSlot, n);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(t.d_norm(s), n, match::kSlot * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  }
#endif
  // Copies slot `from` of tier `a` into slot `to` of tier `b` (data and count).
  void copy_slot(Tier& a, size_t from, Tier& b, size_t to) {
    b.counts[to] = a.counts[from];
    if (!gpu) {
      std::memcpy(b.slot_data(to), a.slot_data(from), slot_bytes);
      return put_digest(b, to);
    }
#if defined(PRISM_HAVE_CUDA)
    PRISM_CUDA_CHECK(cudaMemcpyAsync(b.slot_data(to), a.slot_data(from), slot_bytes, cudaMemcpyDefault, stream));
    PRISM_CUDA_CHECK(cudaMemcpyAsync(b.d_count(to), a.d_count(from), sizeof(int), cudaMemcpyDeviceToDevice, stream));
    if (b.norms && a.norms)
      PRISM_CUDA_CHECK(cudaMemcpyAsync(b.d_norm(to), a.d_norm(from), match::kSlot * sizeof(int32_t),
                                       cudaMemcpyDeviceToDevice, stream));
    else if (b.norms)  // up from the host tier, whose pinned bytes the host reads
      upload_norms(b, to, a.slot_data(from));
    put_digest(b, to);
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
#endif
  }
  // One more block for tier t, or IndexFull naming the memory that is short: the host's (the block,
  // when the tier is in host memory, and its images' keypoint records must leave host_reserve
  // available; an allocation the host refuses) or the GPU's (a GPU budget beyond its free memory).
  void grow(int t_id) {
    Tier& t = tiers[t_id];
    const int64_t slots = int64_t(t.next_block_slots());
    const std::string placed = std::to_string(tiers[kGpuTier].used()) + " images in GPU memory and " +
                               std::to_string(tiers[kHostTier].used()) + " in host memory, and " +
                               std::to_string(slots) + " more in " + (t.in_gpu ? "GPU" : "host") + " memory";
    const int64_t available = host_reserve > 0 ? host_memory::available() : 0;  // 0: unknown, not checked
    if (available > 0) {
      const int64_t records = slots * match::kSlot * int64_t(sizeof(cv::Point2f));
      // (on the CPU path the host block's digests are host memory too)
      const int64_t digests = !gpu && !t.in_gpu && digest.rows > 0 && !digest.streamed
                                  ? int64_t(digest.slots_for(size_t(slots)) * kSlotBytes)
                                  : 0;
      const int64_t need = (t.in_gpu ? 0 : slots * int64_t(t.slot_bytes)) + digests + records;
      if (available - need < host_reserve)
        throw IndexFull("the texture index is full: host memory: " + placed + " need " + size_text(need) +
                        " of host memory while " + size_text(available) + " is available and the index leaves " +
                        size_text(host_reserve) + " to the rest of the machine (host budget " + size_text(host_budget) +
                        "); lower the host budget, remove products or add memory");
    }
    bool digesting = false;  // the failure, if any, is the digests' (GPU memory on the GPU path)
    try {
      t.grow(gpu);
      if (t_id == kHostTier && digest.rows > 0 && !digest.streamed) {
        try {
          digesting = true;
          grow_digest();
        } catch (...) {
          t.blocks.pop_back();
          throw;
        }
      }
    } catch (const std::bad_alloc&) {
      throw IndexFull("the texture index is full: host memory: " + placed + " could not be allocated (host budget " +
                      size_text(host_budget) + "); lower the host budget, remove products or add memory");
#if defined(PRISM_HAVE_CUDA)
    } catch (const gpu::CudaError& e) {
      // Only an allocation the device or the driver refused becomes IndexFull: a broken context
      // (cudaMemGetInfo fails too) is the error it is.
      size_t free = 0, total = 0;
      if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
        cudaGetLastError();
        throw;
      }
      if (t.in_gpu || digesting)
        throw IndexFull("the texture index is full: GPU memory: " + placed + (digesting ? " (their digests)" : "") +
                        " could not be allocated (" + size_text(int64_t(free)) + " free; gpu budget " +
                        size_text(gpu_budget) + "): " + e.what() + "; lower the gpu budget or free GPU memory");
      throw IndexFull("the texture index is full: host memory: " + placed + " could not be pinned (host budget " +
                      size_text(host_budget) + "): " + e.what() +
                      "; lower the host budget, remove products or add memory");
#endif
    }
  }
  // Each of the slot moves below either completes or leaves the bookkeeping as it was: the steps that
  // can throw (a block's allocation, a copy, a vector's growth) come before the changes, and the age
  // keys move as extracted nodes (no allocation). Only a failed copy may leave a slot's bytes behind;
  // a caller that cannot undo that marks the index broken (`broken`).

  // Makes the next push_back unable to throw (geometric growth, as push_back's own).
  template <class V>
  static void room_for_one(V& v) {
    if (v.size() == v.capacity()) v.reserve(std::max<size_t>(64, 2 * v.capacity()));
  }
  // A new last slot in `t` for entry `e` (allocating a block when needed); returns it.
  size_t append_slot(int t_id, int e) {
    Tier& t = tiers[t_id];
    if (t.used() == t.allocated()) grow(t_id);
    const size_t s = t.used();
    room_for_one(t.entry);
    room_for_one(t.counts);
    t.age.insert(age_key(entries[e], int(s)));
    t.entry.push_back(e);
    t.counts.push_back(0);
    entries[e].tier = t_id;
    entries[e].slot = int(s);
    return s;
  }
  // Removes slot s of tier t: the last slot moves into it.
  void drop_slot(int t_id, size_t s) {
    Tier& t = tiers[t_id];
    const size_t last = t.used() - 1;
    if (s != last) copy_slot(t, last, t, s);
    t.age.erase(age_key(entries[t.entry[s]], int(s)));
    if (s != last) {
      const int moved = t.entry[last];
      auto key = t.age.extract(age_key(entries[moved], int(last)));
      std::get<2>(key.value()) = int(s);
      t.age.insert(std::move(key));
      t.entry[s] = moved;
      entries[moved].slot = int(s);
    }
    t.entry.pop_back();
    t.counts.pop_back();
    put_digest(t, last, true);
  }
  // Copies entry e's slot into a new last slot of tier `to`, which becomes e's place; its old slot is
  // left to the caller (dropped, or taken by another entry). Returns the old slot.
  size_t copy_out(int e, int to) {
    Entry& en = entries[e];
    const size_t old_slot = en.slot;
    Tier& b = tiers[to];
    if (b.used() == b.allocated()) grow(to);
    const size_t s = b.used();
    room_for_one(b.entry);
    room_for_one(b.counts);
    const auto key = b.age.insert(age_key(en, int(s))).first;
    b.entry.push_back(e);
    b.counts.push_back(0);
    try {
      copy_slot(tiers[en.tier], old_slot, b, s);
    } catch (...) {
      b.age.erase(key);
      b.entry.pop_back();
      b.counts.pop_back();
      try {
        put_digest(b, s, true);  // (copy_slot may have queued the digest of the slot given back)
      } catch (...) {            // the first error is the one to report
      }
      throw;
    }
    en.tier = to;
    en.slot = int(s);
    return old_slot;
  }
  // Moves entry e's slot into tier `to`.
  void move_entry(int e, int to) {
    const int from = entries[e].tier;
    drop_slot(from, copy_out(e, to));  // (drop_slot keys the age by the slot it is given)
  }
  // The GPU tier is full and entry e is newer than its oldest image: that image moves to the host tier
  // and e takes its GPU slot, which the caller writes. One copy out, where move_entry would also move
  // the GPU tier's last slot into the hole it leaves.
  size_t take_oldest_gpu_slot(int e) {
    Tier& g = tiers[kGpuTier];
    auto key = g.age.extract(g.age.begin());
    const size_t s = size_t(std::get<2>(key.value()));
    try {
      copy_out(g.entry[s], kHostTier);
    } catch (...) {
      g.age.insert(std::move(key));
      throw;
    }
    g.entry[s] = e;
    g.counts[s] = 0;
    key.value() = age_key(entries[e], int(s));
    g.age.insert(std::move(key));
    entries[e].tier = kGpuTier;
    entries[e].slot = int(s);
    return s;
  }

  // The first error of a write that failed half-way and could not be undone (a failed GPU copy: the
  // context is then lost for good), after which the tiers may not say where every image is: every later
  // call refuses with it rather than read them. clear() starts afresh. (An exception_ptr: keeping it
  // cannot throw, as building a message inside the failure could.)
  std::exception_ptr broken;
  void refuse_if_broken() const {
    if (!broken) return;
    std::string why = "unknown error";
    try {
      std::rethrow_exception(broken);
    } catch (const std::exception& x) {
      why = x.what();
    } catch (...) {
    }
    throw IndexError("texture index: unusable since a write failed half-way (" + why + "); open the gallery again");
  }
  template <class F>
  void or_break(F&& write) {
    try {
      write();
    } catch (...) {
      if (!broken) broken = std::current_exception();
      throw;
    }
  }

  int collection_id(const std::string& name, bool create) {
    if (name.empty()) return -1;
    auto it = collection_ids.find(name);
    if (it != collection_ids.end()) return it->second;
    if (!create) return -2;
    const int c = int(members.size());
    collection_ids.emplace(name, c);
    members.emplace_back();
    return c;
  }
  void join(int e, int c) {
    entries[e].collection = c;
    if (c < 0) return;
    entries[e].member = int(members[c].size());
    members[c].push_back(e);
  }
  void leave(int e) {
    const int c = entries[e].collection;
    if (c < 0) return;
    auto& m = members[c];
    const int pos = entries[e].member;
    m[pos] = m.back();
    entries[m[pos]].member = pos;
    m.pop_back();
    entries[e].collection = -1;
  }
};

bool valid_host_digest_rows(int rows) {
  return rows == 0 || (rows >= 16 && rows <= match::kSlot / 2 && match::kSlot % rows == 0);
}

size_t image_bytes(bool gpu_tier, bool gpu_norms) {
  return kSlotBytes + (gpu_tier && gpu_norms ? match::kSlot * sizeof(int32_t) : 0);
}

TextureIndex::TextureIndex(Device device)
    : TextureIndex([&] {
        IndexOptions o;
        o.device = device;
        return o;
      }()) {}

TextureIndex::TextureIndex(const IndexOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  if (options.streams < 1 || options.host_batch < 1 || options.block_slots < 1 || options.gpu_block_slots < 1 ||
      options.gpu_run_slots < 1)
    throw std::invalid_argument("texture index: streams, host batch and block slots must be at least 1");
  std::string why;
  bool usable = gpu::available(&why);
#if defined(PRISM_HAVE_CUDA)
  if (usable) {
    int dev = 0, major = 0;
    PRISM_CUDA_CHECK(cudaGetDevice(&dev));
    PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 8) {
      usable = false;
      why = "GPU " + gpu::device_name(dev) + " is older than sm_80";
    } else {
      m.description = "cuda:" + std::to_string(dev) + " (" + gpu::device_name(dev) + ")";
    }
  }
#endif
  if (options.device == Device::kCuda && !usable) throw gpu::CudaError("device=cuda but " + why);
  m.gpu = usable && options.device != Device::kCpu;
  if (!m.gpu) m.description = options.device == Device::kCpu ? "cpu" : "cpu (" + why + ")";

  m.host_budget = options.host_budget >= 0 ? options.host_budget : host_memory::available() / 2;
  // The default: 2 GiB, or an eighth of a smaller machine's memory.
  m.host_reserve = options.host_reserve >= 0
                       ? options.host_reserve
                       : std::min<int64_t>(int64_t(2) << 30, host_memory::meminfo_bytes("MemTotal:") / 8);
  m.gpu_budget = 0;
#if defined(PRISM_HAVE_CUDA)
  if (m.gpu) {
    size_t free = 0, total = 0;
    PRISM_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    m.gpu_budget =
        options.gpu_budget >= 0 ? options.gpu_budget : std::max<int64_t>(0, int64_t(free) - (int64_t(2) << 30));
    m.stream = gpu::Stream::create();
    m.d_query.resize(m.slot_bytes);
  }
#endif
  for (int t = 0; t < 2; ++t) {
    m.tiers[t].block_slots = t == kGpuTier ? options.gpu_block_slots : options.block_slots;
    m.tiers[t].slot_bytes = m.slot_bytes;
    m.tiers[t].in_gpu = t == kGpuTier;
    m.tiers[t].pinned = t == kHostTier && m.gpu;
    m.tiers[t].norms = t == kGpuTier && options.gpu_norms;  // as image_bytes says
  }
  Tier& host = m.tiers[kHostTier];
  m.tiers[kGpuTier].capacity = size_t(m.gpu_budget) / m.tiers[kGpuTier].footprint();
  host.capacity = size_t(m.host_budget) / host.footprint();
  if (const int rows = options.host_digest_rows; rows != 0) {
    if (!valid_host_digest_rows(rows))
      throw std::invalid_argument("texture index: host_digest_rows " + std::to_string(rows) +
                                  " is not a divisor of 768 from 16 to 384");
    m.digest.rows = rows;
    m.digest.per = match::kSlot / rows;
    m.digest.streamed = options.stream_host_digests;
    if (m.digest.streamed) return;  // no memory of their own: nothing to budget
    const auto digest_bytes = [&](size_t n) { return m.digest.slots_of(n, size_t(host.block_slots)) * kSlotBytes; };
    if (!m.gpu) {  // in host memory: the host tier's images and their digests share its budget
      host.capacity = size_t(m.host_budget) / (host.footprint() + kSlotBytes / size_t(m.digest.per));
      while (host.capacity > 0 &&
             host.capacity * host.footprint() + digest_bytes(host.capacity) > size_t(m.host_budget))
        --host.capacity;  // (a block's last digest slot may be part-used: a few images per block)
    } else {              // in GPU memory: taken from the GPU budget first
      const size_t need = digest_bytes(host.capacity);
      if (need > size_t(m.gpu_budget))
        throw std::invalid_argument("texture index: the host tier's digests need " + size_text(int64_t(need)) +
                                    " of GPU memory (host budget " + size_text(m.host_budget) + ": " +
                                    std::to_string(host.capacity) + " images, " + std::to_string(rows) +
                                    " rows each) and the gpu budget is " + size_text(m.gpu_budget) +
                                    "; lower the host budget or host_digest_rows, or raise the gpu budget");
      m.tiers[kGpuTier].capacity = (size_t(m.gpu_budget) - need) / m.tiers[kGpuTier].footprint();
    }
    Tier& d = m.digest.slots;
    d.in_gpu = m.gpu;
    d.block_slots = int(m.digest.slots_for(size_t(host.block_slots)));
    d.capacity = m.digest.slots_of(host.capacity, size_t(host.block_slots));
  }
}

TextureIndex::~TextureIndex() = default;

bool TextureIndex::on_gpu() const { return impl_->gpu; }
std::string TextureIndex::device_description() const { return impl_->description; }

size_t TextureIndex::size() const {
  auto lock = impl_->read_lock();
  return impl_->entries.size();
}

int TextureIndex::find(const std::string& id) const {
  auto lock = impl_->read_lock();
  auto it = impl_->by_id.find(id);
  return it == impl_->by_id.end() ? -1 : it->second;
}

bool TextureIndex::in_gpu_memory(const std::string& id) const {
  auto lock = impl_->read_lock();
  auto it = impl_->by_id.find(id);
  return it != impl_->by_id.end() && impl_->entries[it->second].tier == kGpuTier;
}

IndexStats TextureIndex::stats() const {
  const Impl& m = *impl_;
  auto lock = m.read_lock();
  IndexStats s;
  s.images = m.entries.size();
  s.gpu_images = m.tiers[kGpuTier].used();
  s.host_images = m.tiers[kHostTier].used();
  s.gpu_capacity = m.tiers[kGpuTier].capacity;
  s.host_capacity = m.tiers[kHostTier].capacity;
  s.gpu_bytes = m.tiers[kGpuTier].bytes();
  s.host_bytes = m.tiers[kHostTier].bytes();
  s.digest_bytes = m.digest.slots.bytes();
  s.gpu_budget = m.gpu_budget;
  s.host_budget = m.host_budget;
  s.collections = std::count_if(m.members.begin(), m.members.end(), [](const auto& v) { return !v.empty(); });
  s.device = m.description;
  return s;
}

void TextureIndex::clear() {
  Impl& m = *impl_;
  auto lock = m.write_lock();
  m.entries.clear();
  m.by_id.clear();
  m.collection_ids.clear();
  m.members.clear();
  ids_.clear();
  for (Tier& t : m.tiers) t.clear();
  m.digest.slots.clear();
  m.broken = nullptr;
}

void TextureIndex::add(const IndexEntry& entry) {
  Impl& m = *impl_;
  auto lock = m.write_lock();
  m.refuse_if_broken();
  if (m.by_id.count(entry.id)) throw IndexError("product '" + entry.id + "' is already in the index");
  m.check_descriptors(entry.features, "product '" + entry.id + "'");
  Tier& g = m.tiers[kGpuTier];
  Tier& h = m.tiers[kHostTier];
  // Where the image goes: the GPU tier while it has room; when only the host has room, the GPU tier
  // if the image is newer than the GPU tier's oldest (which moves to the host tier), else the host.
  Impl::Entry en;
  en.id = entry.id;
  en.enrolled = entry.enrolled_unix;
  en.seq = m.next_seq++;
  int tier = -1;
  if (!g.full())
    tier = kGpuTier;
  else if (!h.full())
    tier = g.capacity > 0 && Impl::age_key(en, 0) > *g.age.begin() ? kGpuTier : kHostTier;
  if (tier < 0)
    throw IndexFull("the texture index is full: " + std::to_string(g.used()) + " images in GPU memory (gpu budget " +
                    size_text(m.gpu_budget) + ") and " + std::to_string(h.used()) + " in host memory (host budget " +
                    size_text(m.host_budget) + "); raise a budget or remove products");

  const int e = int(m.entries.size());
  const std::vector<int> order = m.row_order(entry.features);
  en.points = points_of(entry.features, order);
  en.size = cv::Size(entry.features.width, entry.features.height);
  // Every allocation of the bookkeeping before the slot is placed, so that nothing after it can throw.
  // (A collection named by a failed add stays, empty.)
  const int c = m.collection_id(entry.collection, true);
  if (c >= 0) Impl::room_for_one(m.members[c]);
  Impl::room_for_one(ids_);
  m.entries.push_back(std::move(en));
  bool placed = false;
  try {
    m.by_id.emplace(entry.id, e);
    const size_t s = tier == kGpuTier && g.full() ? m.take_oldest_gpu_slot(e) : m.append_slot(tier, e);
    placed = true;
    m.write_slot(m.tiers[tier], s, entry.features, order);
  } catch (...) {  // an allocation or copy failed: leave no half entry behind
    if (placed) {
      try {
        m.drop_slot(tier, size_t(m.entries[e].slot));
      } catch (...) {  // the first error is the one to report
        m.broken = std::current_exception();
      }
    }
    m.by_id.erase(entry.id);
    m.entries.pop_back();
    throw;
  }
  m.join(e, c);
  ids_.push_back(entry.id);
}

void TextureIndex::update(const IndexEntry& entry) {
  Impl& m = *impl_;
  auto lock = m.write_lock();
  m.refuse_if_broken();
  auto it = m.by_id.find(entry.id);
  if (it == m.by_id.end()) throw IndexError("product '" + entry.id + "' is not in the index");
  m.check_descriptors(entry.features, "product '" + entry.id + "'");
  const std::vector<int> order = m.row_order(entry.features);
  // Every allocation before the write, so that nothing after it can throw.
  std::vector<cv::Point2f> points = points_of(entry.features, order);
  const int c = m.collection_id(entry.collection, true);
  if (c >= 0) Impl::room_for_one(m.members[c]);
  Impl::Entry& en = m.entries[it->second];
  // (a failed write leaves the slot part old, part new)
  m.or_break([&] { m.write_slot(m.tiers[en.tier], en.slot, entry.features, order); });
  en.points = std::move(points);
  en.size = cv::Size(entry.features.width, entry.features.height);
  if (c != en.collection) {
    m.leave(it->second);
    m.join(it->second, c);
  }
}

bool TextureIndex::remove(const std::string& id) {
  Impl& m = *impl_;
  auto lock = m.write_lock();
  m.refuse_if_broken();
  auto it = m.by_id.find(id);
  if (it == m.by_id.end()) return false;
  const int e = it->second;
  const int tier = m.entries[e].tier;
  m.or_break([&] {
    m.drop_slot(tier, m.entries[e].slot);
    // The newest host-resident image takes the freed GPU slot.
    Tier& h = m.tiers[kHostTier];
    if (tier == kGpuTier && h.used() > 0) m.move_entry(h.entry[std::get<2>(*std::prev(h.age.end()))], kGpuTier);
  });
  m.leave(e);
  m.by_id.erase(it);
  // The last entry moves into position e.
  const int last = int(m.entries.size()) - 1;
  if (e != last) {
    Impl::Entry& moved = m.entries[last];
    m.tiers[moved.tier].entry[moved.slot] = e;
    if (moved.collection >= 0) m.members[moved.collection][moved.member] = e;
    m.by_id[moved.id] = e;
    m.entries[e] = std::move(moved);
    ids_[e] = std::move(ids_[last]);
  }
  m.entries.pop_back();
  ids_.pop_back();
  return true;
}

namespace {

// One matcher call of a search: `images` images of one block of one tier, their scores at
// scores[pos ..]. Contiguous slots from `first`, or (scoped) the listed slots of the block.
struct Run {
  int tier = 0;
  size_t block = 0, first = 0;  // first: a slot index within the block
  int images = 0;
  size_t pos = 0;
  size_t list = 0;  // scoped: offset of this run's slots in the search's slot list
  bool scoped = false;
};

}  // namespace

#if defined(PRISM_HAVE_CUDA)
void TextureIndex::Impl::ensure_copy_streams() {
  if (!copy_streams.empty()) return;
  // Built aside and moved in whole: an allocation that throws (GPU memory) leaves none of them, and the
  // next search tries again rather than finding a short ring.
  int device = 0, n_sms = 0;
  PRISM_CUDA_CHECK(cudaGetDevice(&device));
  PRISM_CUDA_CHECK(cudaDeviceGetAttribute(&n_sms, cudaDevAttrMultiProcessorCount, device));
  std::vector<gpu::Stream> cs;
  std::vector<gpu::DeviceArray<uint8_t>> st;
  std::vector<gpu::Event> l, f;
  gpu::Event matched = gpu::Event::create();
  // High priority: their kernels (a streamed digest search's copies, the host tier's matching) are
  // scheduled ahead of the GPU tier's blocks as multiprocessors free up.
  for (int s = 0; s < options.streams; ++s) cs.push_back(gpu::Stream::create_high_priority());
  // A staging buffer per copy stream, and at least two: a streamed digest search's ring copies into one
  // while the other is matched.
  for (int k = 0; k < std::max(options.streams, 2); ++k) {
    st.emplace_back(size_t(options.host_batch) * slot_bytes);
    l.push_back(gpu::Event::create());
    f.push_back(gpu::Event::create());
  }
  sms = n_sms;
  staging = std::move(st);
  landed = std::move(l);
  freed = std::move(f);
  digests_matched = std::move(matched);
  copy_streams = std::move(cs);  // last: its being non-empty says all are there
}
#endif

void TextureIndex::Impl::digest_match(const uint8_t* query, int rows, float ratio, std::vector<int>& s,
                                      const std::function<void(double)>& progress) {
  const Tier& h = tiers[kHostTier];
  const size_t B = size_t(h.block_slots), used = h.used();
  const size_t total = digest.slots_of(used, B);
  const size_t bytes = size_t(digest.rows) * match::kDim;  // one image's digest
  match::MatchU8Problem p;
  p.rows = p.query_rows = rows;
  if (!gpu) {
    s.assign(total, 0);
    p.query = query;
    const std::vector<int> whole(digest.slots_for(B), match::kSlot);
    std::vector<uint8_t> packed;  // streamed: a block's digests, packed as kept ones are
    for (size_t b = 0, pos = 0; pos < total; ++b) {
      const size_t n = std::min(B, used - b * B);  // host images in block b
      p.images = int(digest.slots_for(n));
      if (digest.streamed) {
        packed.assign(size_t(p.images) * kSlotBytes, uint8_t(255));
        for (size_t l = 0; l < n; ++l) std::copy_n(h.slot_data(b * B + l), bytes, packed.data() + l * bytes);
        p.gallery = packed.data();
      } else {
        p.gallery = digest.slots.blocks[b]->data;
      }
      p.counts = whole.data();
      match_host(p, ratio, &s[pos]);
      pos += size_t(p.images);
    }
    return;
  }
#if defined(PRISM_HAVE_CUDA)
  ensure_copy_streams();
  d_digest_scores.reserve(total);
  // Streamed: batches of at most host_batch digest slots (the staging's size) within a block, each block's
  // from its start, so that image l of a block lands where a kept digest block holds it: l * bytes.
  const size_t per = size_t(digest.per), batch = digest.streamed ? size_t(options.host_batch) * per : B;
  std::vector<int> whole;  // kept alive until `stream` is synchronised below
  const size_t most = digest.streamed ? size_t(options.host_batch) : digest.slots_for(B);  // slots a call
  if (d_full_counts.size() < most) {
    whole.assign(most, match::kSlot);
    d_full_counts.resize(whole.size());
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_full_counts.data(), whole.data(), whole.size() * sizeof(int),
                                     cudaMemcpyHostToDevice, stream));
  }
  // Now: growing pinned memory would wait for all the device's work.
  int* host_scores = digest_scores_buf.get(total, true);
  // The copy streams read the query (and the counts) uploaded on `stream`.
  PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
  // Streamed, the rows are copied by gpu::copy_rows_async on one stream into the ring of staging
  // buffers, each copy waiting only for the matching that read its buffer last. The matching, the digest
  // batches' and the GPU tier's, goes on `stream`, every grid gather_blocks() multiprocessors short, so
  // that the copies always have room (copy_rows.h says why a kernel copies). The scores come back in
  // one copy on h2d after the last matching, not on `stream` behind the GPU tier's runs that `progress`
  // queued meanwhile.
  cudaStream_t h2d = copy_streams[0],
               ms = digest.streamed ? stream.get() : copy_streams[copy_streams.size() > 1 ? 1 : 0];
  if (digest.streamed) p.grid_sms = gather_grid_sms();
  const size_t ring = staging.size();
  p.query = d_query.data();
  p.counts = d_full_counts.data();
  size_t next = 0;
  for (size_t b = 0, pos = 0; pos < total; ++b) {
    const size_t n = std::min(B, used - b * B);
    for (size_t l = 0; l < n; l += batch, ++next) {
      const size_t images = std::min(batch, n - l), slots = digest.slots_for(images);
      if (digest.streamed) {
        const size_t k = next % ring;
        uint8_t* dst = staging[k].data();
        if (next >= ring) PRISM_CUDA_CHECK(cudaStreamWaitEvent(h2d, freed[k]));
        // (255s in the last slot's places no image holds)
        gpu::copy_rows_async(dst, bytes, h.slot_data(b * B + l), kSlotBytes, bytes, images, slots * per - images, 255,
                             gather_blocks(), h2d);
        PRISM_CUDA_CHECK(cudaEventRecord(landed[k], h2d));
        PRISM_CUDA_CHECK(cudaStreamWaitEvent(ms, landed[k]));
        p.gallery = dst;
      } else {
        p.gallery = digest.slots.blocks[b]->data;
      }
      p.images = int(slots);
      const size_t at = pos + l / per;
      match_device(p, ratio, d_digest_scores.data() + at, {}, ms);
      if (digest.streamed) PRISM_CUDA_CHECK(cudaEventRecord(freed[next % ring], ms));
      if (progress) progress(double(at + slots) / double(total));
    }
    pos += digest.slots_for(n);
  }
  PRISM_CUDA_CHECK(cudaEventRecord(digests_matched, ms));
  PRISM_CUDA_CHECK(cudaStreamWaitEvent(h2d, digests_matched));
  PRISM_CUDA_CHECK(
      cudaMemcpyAsync(host_scores, d_digest_scores.data(), total * sizeof(int), cudaMemcpyDeviceToHost, h2d));
#else
  (void)query;
  (void)progress;
#endif
}

std::vector<int> TextureIndex::Impl::digest_pick(const SearchParams& params, std::vector<int>& s) {
  const Tier& h = tiers[kHostTier];
  const size_t B = size_t(h.block_slots), used = h.used();
  const size_t per_block = digest.slots_for(B), total = digest.slots_of(used, B);
#if defined(PRISM_HAVE_CUDA)
  if (gpu) {
    // The scores' copy on copy_streams[0] came after every digest matching, so the staging is free for
    // the candidates' copies; the GPU tier's runs on `stream` go on meanwhile.
    for (auto& cs : copy_streams) PRISM_CUDA_CHECK(cudaStreamSynchronize(cs));
    const int* hs = digest_scores_buf.get(total, true);
    s.assign(hs, hs + total);
  }
#endif
  std::vector<int> order(total);
  std::iota(order.begin(), order.end(), 0);
  const size_t k = std::min(total, size_t(params.digest_candidates));
  const auto better = [&](int a, int b) { return s[a] != s[b] ? s[a] > s[b] : a < b; };  // a total order
  std::nth_element(order.begin(), order.begin() + long(k), order.end(), better);
  std::sort(order.begin(), order.begin() + long(k), better);
  std::vector<int> chosen;
  for (size_t i = 0; i < k; ++i) {
    const size_t b = size_t(order[i]) / per_block, d = size_t(order[i]) % per_block;
    for (size_t j = 0; j < size_t(digest.per); ++j) {
      const size_t l = d * size_t(digest.per) + j;
      if (l < B && b * B + l < used) chosen.push_back(int(b * B + l));
    }
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

void TextureIndex::Impl::prepare_query(const Features& query, Query& q) {
  check_descriptors(query, "the query");
  q.features = query.count();
  if (!gpu) {
    q.plain.resize(slot_bytes);
    q.rows = pad_query(query, q.plain.data());
    q.host = q.plain.data();
    return;
  }
#if defined(PRISM_HAVE_CUDA)
  uint8_t* pinned = query_buf.get(slot_bytes, true);
  q.rows = pad_query(query, pinned);
  q.host = pinned;
  PRISM_CUDA_CHECK(cudaMemcpyAsync(d_query.data(), pinned, q.rows * match::kDim, cudaMemcpyHostToDevice, stream));
#endif
}

void TextureIndex::Impl::score(const Query& query, const SearchParams& params, std::vector<int>& scores,
                               std::vector<int>& entry_of, size_t* digested) {
  scores.clear();
  entry_of.clear();
  if (digested) *digested = 0;
  if (entries.empty() || query.features == 0) return;
#if defined(PRISM_HAVE_CUDA)
  // A throw past here would leave copies and kernels in flight that read the slots and write the search's
  // buffers after the locks are given up: they are waited for first (their own errors ignored: the
  // exception in flight is the one to report).
  struct Drain {
    Impl& m;
    int before = std::uncaught_exceptions();
    ~Drain() {
      if (!m.gpu || std::uncaught_exceptions() == before) return;
      cudaStreamSynchronize(m.stream);
      for (auto& cs : m.copy_streams) cudaStreamSynchronize(cs);
      cudaGetLastError();
    }
  } drain{*this};
#endif
  const uint8_t* q = query.host;  // padded, and on the GPU path in d_query (prepare_query)
  const int rows = query.rows;
  // The plan: runs over whole blocks, or over each block's members of the scope (or of a digest search's
  // candidates).
  std::vector<Run> runs;
  std::vector<int> slot_list;  // listed runs' slots (within their block)
  const bool scoped = !params.collections.empty();
  const size_t batch = gpu ? size_t(options.host_batch) : SIZE_MAX;
  // Runs over listed entries, grouped by tier and block, in slot order (memory order).
  auto plan_listed = [&](std::vector<int>& listed) {
    std::sort(listed.begin(), listed.end(), [&](int a, int b) {
      const Entry &x = entries[a], &y = entries[b];
      return x.tier != y.tier ? x.tier < y.tier : x.slot < y.slot;
    });
    for (size_t i = 0; i < listed.size();) {
      const Entry& first = entries[listed[i]];
      const Tier& tier = tiers[first.tier];
      const size_t b = size_t(first.slot) / tier.block_slots;
      Run r;
      r.tier = first.tier, r.block = b, r.scoped = true;
      r.pos = entry_of.size();
      r.list = slot_list.size();
      const size_t cap = first.tier == kHostTier ? batch : SIZE_MAX;
      while (i < listed.size() && size_t(r.images) < cap) {
        const Entry& e = entries[listed[i]];
        if (e.tier != first.tier || size_t(e.slot) / tier.block_slots != b) break;
        slot_list.push_back(int(e.slot - b * tier.block_slots));
        entry_of.push_back(listed[i]);
        ++r.images;
        ++i;
      }
      runs.push_back(r);
    }
  };
  // (K digest slots that name every host image: the exact plan, which streams them without the digests)
  const bool digesting = !scoped && digest.rows > 0 && params.digest_candidates > 0 && tiers[kHostTier].used() > 0 &&
                         size_t(params.digest_candidates) * size_t(digest.per) < tiers[kHostTier].used();
  // Whether copy streams match host-tier batches while the GPU tier is matched (see `step`).
  const bool host_streams = digesting ? digest.streamed : tiers[kHostTier].used() > 0;
  if (!scoped) {
    for (int t = 0; t < (digesting ? 1 : 2); ++t) {
      const Tier& tier = tiers[t];
      const size_t bs = size_t(tier.block_slots);
      for (size_t b = 0; b * bs < tier.used(); ++b) {
        const size_t end = std::min(tier.used(), (b + 1) * bs);
        // The host tier streams in batches. While it does, the GPU tier's blocks go in runs of
        // gpu_run_slots: the matcher's persistent grid holds every multiprocessor for a whole launch,
        // and a streamed batch's matching, which its stream's next copy waits for, must not wait
        // behind 8,192 images (the search takes the host tier's time anyway).
        const size_t step = t == kHostTier        ? std::min(batch, bs)
                            : host_streams && gpu ? std::min(size_t(options.gpu_run_slots), bs)
                                                  : bs;
        for (size_t s = b * bs; s < end; s += step) {
          Run r;
          r.tier = t, r.block = b, r.first = s - b * bs;
          r.images = int(std::min(step, end - s));
          r.pos = entry_of.size();
          runs.push_back(r);
          entry_of.insert(entry_of.end(), tier.entry.begin() + s, tier.entry.begin() + s + r.images);
        }
      }
    }
  } else {
    std::vector<int> members_in_scope;
    std::vector<int> seen;
    for (const std::string& name : params.collections) {
      auto it = collection_ids.find(name);
      if (it == collection_ids.end() || std::find(seen.begin(), seen.end(), it->second) != seen.end()) continue;
      seen.push_back(it->second);
      const auto& m = members[it->second];
      members_in_scope.insert(members_in_scope.end(), m.begin(), m.end());
    }
    plan_listed(members_in_scope);
  }
#if defined(PRISM_HAVE_CUDA)
  // A GPU tier run's matching, on `stream`.
  const auto launch_gpu_run = [&](const Run& r) {
    const Tier::Block& blk = *tiers[kGpuTier].blocks[r.block];
    match::MatchU8Problem p;
    p.query = d_query.data();
    p.rows = p.query_rows = rows;
    p.images = r.images;
    p.gallery = blk.data + r.first * slot_bytes;
    p.counts = blk.d_counts.data() + r.first;
    p.slots = r.scoped ? d_slots.data() + r.list : nullptr;
    if (tiers[kGpuTier].norms) p.norms = blk.d_norms.data() + r.first * match::kSlot;
    if (digesting && digest.streamed) p.grid_sms = gather_grid_sms();  // beside the digests' copies
    match_device(p, params.ratio, d_scores.data() + r.pos, {}, stream);
  };
#endif
  [[maybe_unused]] size_t early = 0;  // runs already enqueued: a digest search's GPU tier, with its digests
  if (digesting) {
    std::function<void(double)> progress;
#if defined(PRISM_HAVE_CUDA)
    if (gpu) {
      // Grown now if at all: freeing device or pinned memory would wait for the GPU tier's matching.
      const size_t most = std::min(tiers[kHostTier].used(), size_t(params.digest_candidates) * size_t(digest.per));
      d_scores.reserve(entry_of.size() + most);
      d_slots.reserve(2 * most);
      list_buf.get(2 * most, true);
      progress = [&](double share) {
        while (early < runs.size() && double(early + 1) <= share * double(runs.size())) launch_gpu_run(runs[early++]);
      };
    }
#endif
    std::vector<int> digest_scores;
    digest_match(q, rows, params.ratio, digest_scores, progress);
#if defined(PRISM_HAVE_CUDA)
    if (gpu)
      while (early < runs.size()) launch_gpu_run(runs[early++]);
#endif
    std::vector<int> chosen;  // the host-tier candidates (entry positions)
    for (int slot : digest_pick(params, digest_scores)) chosen.push_back(tiers[kHostTier].entry[size_t(slot)]);
    if (digested) *digested = tiers[kHostTier].used() - chosen.size();
    plan_listed(chosen);
  }
  const size_t total = entry_of.size();
  scores.assign(total, 0);
  if (total == 0) {
#if defined(PRISM_HAVE_CUDA)
    if (gpu) PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));  // the query's copy reads query_buf
#endif
    return;
  }

  if (!gpu) {
    for (const Run& r : runs) {
      const Tier& tier = tiers[r.tier];
      const size_t base = r.block * tier.block_slots;
      match::MatchU8Problem p;
      p.query = q;
      p.rows = p.query_rows = rows;
      p.gallery = tier.blocks[r.block]->data + r.first * slot_bytes;
      p.counts = tier.counts.data() + base + r.first;
      p.images = r.images;
      p.slots = r.scoped ? slot_list.data() + r.list : nullptr;
      match_host(p, params.ratio, &scores[r.pos]);
    }
    return;
  }
#if defined(PRISM_HAVE_CUDA)
  d_scores.reserve(total);
  // Scoped runs: the slot lists, and for host-tier runs (gathered into staging) their counts.
  std::vector<int> gathered_counts_pos(runs.size(), -1);
  size_t gathered = 0;
  for (size_t k = 0; k < runs.size(); ++k)
    if (runs[k].scoped && runs[k].tier == kHostTier) gathered_counts_pos[k] = int(gathered), gathered += runs[k].images;
  const size_t list_n = slot_list.size() + gathered;
  if (list_n > 0) {
    int* h = list_buf.get(list_n, true);
    std::copy(slot_list.begin(), slot_list.end(), h);
    for (size_t k = 0; k < runs.size(); ++k) {
      if (gathered_counts_pos[k] < 0) continue;
      const Tier& tier = tiers[kHostTier];
      const size_t base = runs[k].block * tier.block_slots;
      for (int i = 0; i < runs[k].images; ++i)
        h[slot_list.size() + gathered_counts_pos[k] + i] = tier.counts[base + slot_list[runs[k].list + i]];
    }
    d_slots.reserve(list_n);
    if (early > 0) {  // a digest search's candidates: not behind the GPU tier's matching on `stream`
      PRISM_CUDA_CHECK(
          cudaMemcpyAsync(d_slots.data(), h, list_n * sizeof(int), cudaMemcpyHostToDevice, copy_streams[0]));
      PRISM_CUDA_CHECK(cudaStreamSynchronize(copy_streams[0]));
    } else
      PRISM_CUDA_CHECK(cudaMemcpyAsync(d_slots.data(), h, list_n * sizeof(int), cudaMemcpyHostToDevice, stream));
  }
  const bool streaming = std::any_of(runs.begin(), runs.end(), [](const Run& r) { return r.tier == kHostTier; });
  if (streaming) {
    ensure_copy_streams();
    // The copy streams read the query and the lists uploaded on `stream` (a digest search's, already there).
    if (early == 0) PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  // Enqueue order: each tier's runs spread evenly over the search, by the share of their tier's images
  // done, so that the host tier's copies start at once and the GPU tier's blocks fill the time they
  // take. In plan order (the GPU tier first), a large GPU tier filled CUDA's launch queue, and this
  // thread waited there while PCIe idled (BENCHMARKS.md, "Texture index at scale").
  std::vector<size_t> order(runs.size());
  {
    size_t in_tier[2] = {0, 0}, done[2] = {0, 0};
    for (const Run& r : runs) in_tier[r.tier] += size_t(r.images);
    std::vector<double> share(runs.size());
    for (size_t k = 0; k < runs.size(); ++k) {
      done[runs[k].tier] += size_t(runs[k].images);
      share[k] = double(done[runs[k].tier]) / double(in_tier[runs[k].tier]);
    }
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return share[a] != share[b] ? share[a] < share[b] : runs[a].tier > runs[b].tier;  // a tie: the copy first
    });
  }
  int next = 0;  // round robin over the copy streams
  for (size_t k : order) {
    if (k < early) continue;
    const Run& r = runs[k];
    if (r.tier == kGpuTier) {
      launch_gpu_run(r);
      continue;
    }
    const Tier::Block& blk = *tiers[kHostTier].blocks[r.block];
    match::MatchU8Problem p;
    p.query = d_query.data();
    p.rows = p.query_rows = rows;
    p.images = r.images;
    int* out = d_scores.data() + r.pos;
    const int s = next++ % options.streams;
    cudaStream_t cs = copy_streams[s];
    uint8_t* dst = staging[s].data();
    if (!r.scoped) {
      PRISM_CUDA_CHECK(cudaMemcpyAsync(dst, blk.data + r.first * slot_bytes, size_t(r.images) * slot_bytes,
                                       cudaMemcpyHostToDevice, cs));
      p.counts = blk.d_counts.data() + r.first;
    } else {
      // One copy per range of consecutive slots (a digest slot's candidates are: a block's `per` images).
      const int* listed = slot_list.data() + r.list;
      for (int i = 0, j; i < r.images; i = j) {
        for (j = i + 1; j < r.images && listed[j] == listed[j - 1] + 1;) ++j;
        PRISM_CUDA_CHECK(cudaMemcpyAsync(dst + size_t(i) * slot_bytes, blk.data + size_t(listed[i]) * slot_bytes,
                                         size_t(j - i) * slot_bytes, cudaMemcpyHostToDevice, cs));
      }
      p.counts = d_slots.data() + slot_list.size() + gathered_counts_pos[k];
    }
    p.gallery = dst;
    match_device(p, params.ratio, out, {}, cs);
  }
  if (streaming)
    for (auto& cs : copy_streams) PRISM_CUDA_CHECK(cudaStreamSynchronize(cs));
  int* h_scores = scores_buf.get(total, true);
  PRISM_CUDA_CHECK(cudaMemcpyAsync(h_scores, d_scores.data(), total * sizeof(int), cudaMemcpyDeviceToHost, stream));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::copy_n(h_scores, total, scores.begin());
#endif
}

// Re-matches each candidate for its per-row top-2 against the prepared query, verifies it and sorts
// the candidates (decision.h). Returns the best. On the GPU `work` (a turn on the stream and the
// scratch buffers, d_query with the query) is held on entry and given back after the matching,
// before the geometric verification, so that another search matches on the GPU meanwhile.
Candidate TextureIndex::Impl::verify_candidates(const Features& query, const Query& q, std::vector<Candidate>& cands,
                                                const SearchParams& params, SearchResult& result,
                                                std::unique_lock<std::mutex>& work) {
  const auto t0 = Clock::now();
  if (cands.empty()) {
    result.verify_ms = ms_since(t0);
    return Candidate{};
  }
  const int k = int(cands.size());
  const int rows = q.rows;
  const size_t n = size_t(k) * rows;
  std::vector<int32_t> best(n), second(n);
  std::vector<int> index(n);
  // The per-row outputs of candidate c in these vectors (or in device arrays of the same shape).
  auto rows_of = [&](int32_t* b, int32_t* s, int* i, size_t o) { return RowOutputs{b + o, s + o, i + o}; };
  match::MatchU8Problem p;
  p.rows = p.query_rows = rows;
  if (!gpu) {
    int score = 0;
    p.query = q.host;
    p.images = 1;
    for (int c = 0; c < k; ++c) {
      const Entry& e = entries[cands[c].index];
      p.gallery = tiers[e.tier].slot_data(e.slot);
      p.counts = &tiers[e.tier].counts[e.slot];
      match_host(p, params.ratio, &score, rows_of(best.data(), second.data(), index.data(), size_t(c) * rows));
    }
  } else {
#if defined(PRISM_HAVE_CUDA)
    // `work` is held since prepare_query: d_query holds this search's query.
    d_verify.reserve(size_t(k) * slot_bytes);
    d_verify_scores.reserve(k);
    d_best.reserve(n), d_second.reserve(n);
    d_index.reserve(n);
    int* counts = list_buf.get(k, true);
    for (int c = 0; c < k; ++c) {
      const Entry& e = entries[cands[c].index];
      counts[c] = tiers[e.tier].counts[e.slot];
      PRISM_CUDA_CHECK(cudaMemcpyAsync(d_verify.data() + size_t(c) * slot_bytes, tiers[e.tier].slot_data(e.slot),
                                       slot_bytes, cudaMemcpyDefault, stream));
    }
    d_slots.reserve(k);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(d_slots.data(), counts, k * sizeof(int), cudaMemcpyHostToDevice, stream));
    p.query = d_query.data();
    p.gallery = d_verify.data();
    p.counts = d_slots.data();
    p.images = k;
    match_device(p, params.ratio, d_verify_scores.data(), rows_of(d_best.data(), d_second.data(), d_index.data(), 0),
                 stream);
    // Back to the host vectors.
    int32_t* hb = best_buf.get(n, true);
    int32_t* hs = second_buf.get(n, true);
    int* hi = index_buf.get(n, true);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(hb, d_best.data(), n * 4, cudaMemcpyDeviceToHost, stream));
    PRISM_CUDA_CHECK(cudaMemcpyAsync(hs, d_second.data(), n * 4, cudaMemcpyDeviceToHost, stream));
    PRISM_CUDA_CHECK(cudaMemcpyAsync(hi, d_index.data(), n * 4, cudaMemcpyDeviceToHost, stream));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::copy_n(hb, n, best.begin());
    std::copy_n(hs, n, second.begin());
    std::copy_n(hi, n, index.begin());
    work.unlock();
#endif
  }
  for (int c = 0; c < k; ++c) {
    const size_t o = size_t(c) * rows;
    const auto matches = ratio_matches(&best[o], &second[o], &index[o], query.count(), params.ratio);
    cands[c].geometry = verify_geometry(query, entries[cands[c].index].points, matches, params.verify);
    cands[c].gallery_size = entries[cands[c].index].size;
    cands[c].significance = decision_significance(cands[c].geometry.significance, size_t(k));
  }
  const auto key = [](const Candidate& c) {
    return VerifiedKey{c.geometry.significance, c.geometry.inliers, c.score, c.id};
  };
  std::sort(cands.begin(), cands.end(),
            [&](const Candidate& a, const Candidate& b) { return verified_before(key(a), key(b)); });
  result.verify_ms = ms_since(t0);
  return cands.front();
}

std::vector<int> TextureIndex::scores(const Features& query, const SearchParams& params) {
  Impl& m = *impl_;
  auto lock = m.read_lock();
  m.refuse_if_broken();
  std::unique_lock work(m.work, std::defer_lock);
  if (m.gpu) work.lock();
  Impl::Query q;
  m.prepare_query(query, q);
  std::vector<int> s, entry_of;
  m.score(q, params, s, entry_of);
  std::vector<int> out(m.entries.size(), 0);
  for (size_t i = 0; i < entry_of.size(); ++i) out[entry_of[i]] = s[i];
  return out;
}

SearchResult TextureIndex::search(const Features& query, const SearchParams& params) {
  Impl& m = *impl_;
  auto lock = m.read_lock();
  m.refuse_if_broken();
  std::unique_lock work(m.work, std::defer_lock);
  if (m.gpu) work.lock();
  SearchResult r;
  const auto t0 = Clock::now();
  Impl::Query q;
  m.prepare_query(query, q);
  std::vector<int> s, entry_of;
  m.score(q, params, s, entry_of, &r.digested);
  // `work` stays held: the verification's matching reads the query where the scoring left it.
  r.searched = s.size();
  r.match_ms = ms_since(t0);
  std::vector<int> order(s.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = std::min(order.size(), size_t(std::max(1, params.shortlist)));
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return shortlist_before(s[a], m.entries[entry_of[a]].id, s[b], m.entries[entry_of[b]].id);
  });
  for (size_t i = 0; i < k; ++i) {
    const int e = entry_of[order[i]];
    if (s[order[i]] >= kMinVerifiedMatches) r.candidates.push_back({e, m.entries[e].id, s[order[i]], {}});
  }
  r.best = m.verify_candidates(query, q, r.candidates, params, r, work);
  if (r.best.index < 0 && !order.empty()) {
    const int e = entry_of[order[0]];
    r.best = {e, m.entries[e].id, s[order[0]], {}};
  }
  r.identified = r.best.index >= 0 && accepted(r.best, params);
  return r;
}

SearchResult TextureIndex::verify(const Features& query, const std::string& id, const SearchParams& params) {
  Impl& m = *impl_;
  auto lock = m.read_lock();
  m.refuse_if_broken();
  auto it = m.by_id.find(id);
  if (it == m.by_id.end()) throw IndexError("product '" + id + "' is not enrolled");
  std::unique_lock work(m.work, std::defer_lock);  // given back by verify_candidates after its matching
  if (m.gpu) work.lock();
  Impl::Query q;
  m.prepare_query(query, q);
  SearchResult r;
  r.searched = 1;
  r.candidates.push_back({it->second, id, 0, {}});
  r.best = m.verify_candidates(query, q, r.candidates, params, r, work);
  r.best.score = r.candidates.front().score = r.best.geometry.matches;
  r.identified = accepted(r.best, params);
  return r;
}

}  // namespace prism::texture
