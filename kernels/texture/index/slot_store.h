// Where each indexed image's descriptors live: the texture index's slot store. Two tiers of slots
// (GPU memory, then host memory: pinned on the GPU path), each grown a block at a time up to its
// budget and kept dense by swap-with-last; placement by age (the reference system's FIFO: the newest
// images in GPU memory, the oldest GPU-resident image moving to the host tier when a newer one
// arrives, the newest host-resident one moving up when a GPU slot frees); and the host tier's
// digests (IndexOptions::host_digest_rows), rewritten in place with every write or move of a host
// slot. Nothing here knows about queries: the search plan (search_plan.h) reads the tiers.
//
// An image is named by its owner: the index's entry position. Owners are dense like the index's
// entries: placing appends owner n, and removing owner e moves owner n-1 into e.
//
// Writes are not thread-safe (the index calls them under its exclusive lock) and synchronous: a
// write's copies have landed when it returns. On the GPU path they run on the stream given at
// construction (the search resources': searches and writes never overlap).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/device_array.h"
#include "match/match.h"
#include "texture/features.h"
#include "texture/index.h"
#include "texture/index/resources.h"

namespace prism::texture {

enum TierId { kGpuTier = 0, kHostTier = 1 };

// One tier's slots, allocated a block at a time and kept dense: slot s is in block s / block_slots.
struct Tier {
  struct Block {
#if defined(PRISM_HAVE_CUDA)
    gpu::DeviceArray<uint8_t> device;   // the GPU tier's slots
    gpu::PinnedArray<uint8_t> pinned;   // the host tier's slots on the GPU path
    gpu::DeviceArray<int> d_counts;     // both tiers on the GPU path: the matcher reads counts there
    gpu::DeviceArray<int32_t> d_norms;  // Tier::norms: |g|^2 of every row (MatchU8Problem::norms)
#endif
    std::vector<uint8_t> plain;  // the slots on the CPU path
    uint8_t* data = nullptr;
  };
  bool in_gpu = false, pinned = false;
  // The GPU tier of an 8-bit index keeps |g|^2 of its rows beside the slots (kSlot int32 a slot), so
  // that a search does not recompute them (MatchU8Problem::norms).
  bool norms = false;
  size_t slot_bytes = match::kSlotBytes;
  size_t capacity = 0;  // slots the budget allows
  int block_slots = 1024;
  std::vector<std::unique_ptr<Block>> blocks;
  std::vector<int> entry;   // slot -> owner
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
  // One more block: on the CUDA path in GPU memory (in_gpu) or pinned (pinned), with the counts in GPU
  // memory when with_counts; otherwise plain host memory.
  void grow(bool cuda, bool with_counts);
  void clear();
};

// Where the host tier's digests are (IndexOptions::host_digest_rows). Host slot s's digest, its
// slot's first `rows` rows (pack_slot), is the rows [(l % per) * rows, + rows) of digest slot l / per
// of digest block s / B (l = s % B, B the host tier's block slots): the digests follow the host
// slots' indices, so every write or move of a host slot rewrites its digest in place. Places no image
// holds are 255s, which change no ratio test of the images beside them (pack_slot). Streamed
// (IndexOptions::stream_host_digests), a search copies the same rows into the same layout in staging
// instead (digest_stage.h). index.h's image_digest and pack_digest_slots give the same digests and
// layout (one host block) to a caller outside the index.
struct DigestLayout {
  int rows = 0, per = 0;  // rows: 0 without digests
  bool streamed = false;
  size_t slots_for(size_t host_slots) const { return (host_slots + size_t(per) - 1) / size_t(per); }
  // The digest slots of the first n host slots (host blocks of B), and host slot s's digest slot.
  size_t slots_of(size_t n, size_t B) const { return n / B * slots_for(B) + slots_for(n % B); }
  size_t slot_of(size_t s, size_t B) const { return s / B * slots_for(B) + s % B / size_t(per); }
  // Host slot s's first row in its digest slot.
  size_t row_of(size_t s, size_t B) const { return s % B % size_t(per) * size_t(rows); }
};

// One image's descriptors in a slot's layout. The matcher reads only a slot's first `count` rows. Past
// them an 8-bit slot holds 255s (|g|^2 = 8.3 M against RootSIFT's 0.26 M: never a nearest or
// second-nearest neighbour of a query row), and a one-row image's row is written twice (its nearest
// and second-nearest distances are then equal: it never passes a ratio test, as the matcher's one-row
// images never do), so that a slot's first rows are its digest as they are (DigestLayout, whose slots
// the matcher reads whole). The rows in `order` (a permutation of them: the index's row order), or as
// stored when it is empty.
void pack_slot(const Features& f, uint8_t* slot, const std::vector<int>& order);
// The keypoints' positions in the slot's row order (pack_slot's `order`).
std::vector<cv::Point2f> points_of(const Features& f, const std::vector<int>& order);
// Throws std::invalid_argument unless `f` carries the 8-bit descriptors a slot stores (`what` names it).
void check_descriptors(const Features& f, const std::string& what);

struct Place {
  int tier = kHostTier;
  int slot = 0;
};

class SlotStore {
 public:
  // gpu: slots in GPU memory and pinned host memory, written on `stream`. Otherwise (the CPU path) every
  // slot is plain host memory, the GPU tier's too: the index passes a GPU budget of 0 there, and a test
  // may pass more to follow placement without a GPU.
  // Budgets as IndexOptions says (kDefaultBudget: probed); std::invalid_argument for digests that do
  // not fit the GPU budget or rows that are not valid_host_digest_rows.
  SlotStore(const IndexOptions& options, bool gpu, SearchResources& resources);
  SlotStore(const SlotStore&) = delete;
  SlotStore& operator=(const SlotStore&) = delete;

  // Throws IndexFull, naming both budgets, when an image enrolled at `enrolled_unix` has no tier to go
  // to (changes nothing).
  void check_room(int64_t enrolled_unix) const;
  // Places owner size() (the next) and writes f's rows in `order` (row_order). IndexFull when no tier
  // has room or memory for a block is short; a failed place changes nothing unless its undo fails too
  // (the store is then broken).
  void place(int64_t enrolled_unix, const Features& f, const std::vector<int>& order);
  // Rewrites owner's slot in place (a failure may leave it part old, part new: the store is broken).
  void rewrite(int owner, const Features& f, const std::vector<int>& order);
  // Removes owner's slot (the newest host-resident image taking a freed GPU slot); the last owner then
  // becomes `owner`. A failed move breaks the store.
  void remove(int owner);
  void clear();  // also forgets a failure

  size_t size() const { return owners_.size(); }
  Place where(int owner) const { return {owners_[size_t(owner)].tier, owners_[size_t(owner)].slot}; }
  // The row order of f's slot: IndexOptions::digest_order with digests, else as stored (empty). One order
  // for both tiers, whose slots move between them as they are.
  std::vector<int> row_order(const Features& f) const;

  // The first error of a write that failed half-way and could not be undone (a failed GPU copy: the
  // context is then lost for good), after which the tiers may not say where every image is: every
  // later write or search refuses with it (IndexError) rather than read them, until clear().
  void refuse_if_broken() const;

  bool gpu() const { return gpu_; }
  const IndexOptions& options() const { return options_; }
  const Tier& tier(int t) const { return tiers_[t]; }
  const DigestLayout& digest() const { return digest_; }
  const Tier& digest_slots() const { return digest_slots_; }  // kept digests (empty when streamed)
  int64_t gpu_budget() const { return gpu_budget_; }
  int64_t host_budget() const { return host_budget_; }

 private:
  struct Owner {
    int tier = kHostTier, slot = 0;
    int64_t enrolled = 0;  // IndexEntry::enrolled_unix
    uint64_t seq = 0;      // add order
  };
  static std::tuple<int64_t, uint64_t, int> age_key(const Owner& o, int slot) { return {o.enrolled, o.seq, slot}; }
  int choose_tier(const Owner& o) const;  // -1: no room

  void write_slot(Tier& t, size_t s, const Features& f, const std::vector<int>& order);
  void put_digest(const Tier& t, size_t s, bool clear = false);
  void grow_digest();
#if defined(PRISM_HAVE_CUDA)
  void upload_norms(Tier& t, size_t s, const uint8_t* host_slot);
#endif
  void copy_slot(Tier& a, size_t from, Tier& b, size_t to);
  void grow(int t_id);
  size_t append_slot(int t_id, int owner);
  void drop_slot(int t_id, size_t s);
  size_t copy_out(int owner, int to);
  void move_owner(int owner, int to);
  size_t take_oldest_gpu_slot(int owner);
  template <class F>
  void or_break(F&& write);

  const bool gpu_;
  IndexOptions options_;
  int64_t gpu_budget_ = 0, host_budget_ = 0, host_reserve_ = 0;
  std::vector<Owner> owners_;
  uint64_t next_seq_ = 0;
  Tier tiers_[2];
  DigestLayout digest_;
  // The digest slots: in GPU memory on the GPU path, a block beside each host block (slots_for(B) slots
  // for a host block of B), grown with it. The matcher reads a digest slot whole, so every count is
  // kSlot: a search passes full counts, and this Tier keeps no counts, entry or age.
  Tier digest_slots_;
#if defined(PRISM_HAVE_CUDA)
  cudaStream_t stream_ = nullptr;
#endif
  // Staging of the GPU path's writes (pinned), reused by the next write.
  HostBuffer<uint8_t> slot_staging_;
  HostBuffer<int> counts_staging_;
  HostBuffer<int32_t> norms_staging_;
  std::exception_ptr broken_;  // an exception_ptr: keeping it cannot throw, as building a message could
};

}  // namespace prism::texture
