#include "texture/index/slot_store.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>

#include "common/gpu.h"
#include "common/host_memory.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::texture {

namespace {

using host_memory::size_text;
constexpr size_t kSlotBytes = match::kSlotBytes;

// The descriptors a slot holds, as bytes (at most a slot's).
std::pair<const uint8_t*, size_t> descriptor_bytes(const Features& f) {
  return {f.descriptors.data(), std::min(f.descriptors.size(), kSlotBytes)};
}

int slot_count(const Features& f) { return std::min(f.count(), match::kSlot); }

// Makes the next push_back unable to throw (geometric growth, as push_back's own).
template <class V>
void room_for_one(V& v) {
  if (v.size() == v.capacity()) v.reserve(std::max<size_t>(64, 2 * v.capacity()));
}

}  // namespace

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

std::vector<cv::Point2f> points_of(const Features& f, const std::vector<int>& order) {
  std::vector<cv::Point2f> p;
  p.reserve(f.keypoints.size());
  for (size_t r = 0; r < f.keypoints.size(); ++r) {
    const Keypoint& k = f.keypoints[order.empty() ? r : size_t(order[r])];
    p.emplace_back(k.x, k.y);
  }
  return p;
}

void check_descriptors(const Features& f, const std::string& what) {
  if (f.descriptors.size() != size_t(f.count()) * match::kDim)
    throw std::invalid_argument(what + " has " + std::to_string(f.count()) + " keypoints but " +
                                std::to_string(f.descriptors.size()) + " bytes of 8-bit descriptors (" +
                                std::to_string(match::kDim) + " a keypoint)");
}

namespace {
void check_digest_rows(int rows) {
  if (rows == 0 || !valid_host_digest_rows(rows))
    throw std::invalid_argument("texture digests: " + std::to_string(rows) +
                                " rows is not a divisor of 768 from 16 to 384");
}
}  // namespace

std::vector<uint8_t> image_digest(const Features& f, int rows, DigestOrder order) {
  check_digest_rows(rows);
  check_descriptors(f, "an image");
  // What SlotStore::write_slot writes, in SlotStore::row_order's order; the digest is its first rows.
  std::vector<uint8_t> slot(kSlotBytes);
  pack_slot(f, slot.data(), digest_order(f, order, rows));
  slot.resize(size_t(rows) * match::kDim);
  return slot;
}

std::vector<uint8_t> pack_digest_slots(const std::vector<std::vector<uint8_t>>& digests, int rows) {
  check_digest_rows(rows);
  DigestLayout layout;
  layout.rows = rows;
  layout.per = match::kSlot / rows;
  const size_t n = digests.size(), bytes = size_t(rows) * match::kDim;
  std::vector<uint8_t> slots(layout.slots_for(n) * kSlotBytes, uint8_t(255));
  for (size_t k = 0; k < n; ++k) {  // (one block of n host slots)
    if (digests[k].size() != bytes)
      throw std::invalid_argument("texture digests: digest " + std::to_string(k) + " has " +
                                  std::to_string(digests[k].size()) + " bytes, not " + std::to_string(bytes));
    std::copy(digests[k].begin(), digests[k].end(),
              slots.begin() + long(layout.slot_of(k, n) * kSlotBytes + layout.row_of(k, n) * match::kDim));
  }
  return slots;
}

// ---- Tier ----

void Tier::grow(bool cuda, bool with_counts) {
  auto b = std::make_unique<Block>();
  const size_t n = next_block_slots();
#if defined(PRISM_HAVE_CUDA)
  if (cuda && in_gpu) {
    b->device.resize(n * slot_bytes);
    b->data = b->device.data();
    if (norms) b->d_norms.resize(n * match::kSlot);
  } else if (cuda && pinned) {
    b->pinned.resize(n * slot_bytes);
    b->data = b->pinned.data();
  }
  if (cuda && with_counts) b->d_counts.resize(n);
#else
  (void)cuda;
  (void)with_counts;
#endif
  if (!b->data) {
    b->plain.resize(n * slot_bytes);
    b->data = b->plain.data();
  }
  blocks.push_back(std::move(b));
}

void Tier::clear() {
  blocks.clear();
  entry.clear();
  counts.clear();
  age.clear();
}

// ---- SlotStore ----

SlotStore::SlotStore(const IndexOptions& options, bool gpu, SearchResources& resources) : gpu_(gpu), options_(options) {
#if defined(PRISM_HAVE_CUDA)
  stream_ = resources.stream.get();
#else
  (void)resources;
#endif
  host_budget_ = options.host_budget >= 0 ? options.host_budget : host_memory::available() / 2;
  // The default: 2 GiB, or an eighth of a smaller machine's memory.
  host_reserve_ = options.host_reserve >= 0
                      ? options.host_reserve
                      : std::min<int64_t>(int64_t(2) << 30, host_memory::meminfo_bytes("MemTotal:") / 8);
  gpu_budget_ = std::max<int64_t>(0, options.gpu_budget);
#if defined(PRISM_HAVE_CUDA)
  if (gpu && options.gpu_budget < 0) {
    size_t free = 0, total = 0;
    PRISM_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    gpu_budget_ = std::max<int64_t>(0, int64_t(free) - (int64_t(2) << 30));
  }
#endif
  for (int t = 0; t < 2; ++t) {
    tiers_[t].block_slots = t == kGpuTier ? options.gpu_block_slots : options.block_slots;
    tiers_[t].slot_bytes = kSlotBytes;
    tiers_[t].in_gpu = t == kGpuTier;
    tiers_[t].pinned = t == kHostTier && gpu;
    tiers_[t].norms = t == kGpuTier && options.gpu_norms;  // as image_bytes says
  }
  Tier& host = tiers_[kHostTier];
  tiers_[kGpuTier].capacity = size_t(gpu_budget_) / tiers_[kGpuTier].footprint();
  host.capacity = size_t(host_budget_) / host.footprint();
  const int rows = options.host_digest_rows;
  if (rows == 0) return;
  if (!valid_host_digest_rows(rows))
    throw std::invalid_argument("texture index: host_digest_rows " + std::to_string(rows) +
                                " is not a divisor of 768 from 16 to 384");
  digest_.rows = rows;
  digest_.per = match::kSlot / rows;
  digest_.streamed = options.stream_host_digests;
  if (digest_.streamed) return;  // no memory of their own: nothing to budget
  const auto digest_bytes = [&](size_t n) { return digest_.slots_of(n, size_t(host.block_slots)) * kSlotBytes; };
  if (!gpu) {  // in host memory: the host tier's images and their digests share its budget
    host.capacity = size_t(host_budget_) / (host.footprint() + kSlotBytes / size_t(digest_.per));
    while (host.capacity > 0 && host.capacity * host.footprint() + digest_bytes(host.capacity) > size_t(host_budget_))
      --host.capacity;  // (a block's last digest slot may be part-used: a few images per block)
  } else {              // in GPU memory: taken from the GPU budget first
    const size_t need = digest_bytes(host.capacity);
    if (need > size_t(gpu_budget_))
      throw std::invalid_argument("texture index: the host tier's digests need " + size_text(int64_t(need)) +
                                  " of GPU memory (host budget " + size_text(host_budget_) + ": " +
                                  std::to_string(host.capacity) + " images, " + std::to_string(rows) +
                                  " rows each) and the gpu budget is " + size_text(gpu_budget_) +
                                  "; lower the host budget or host_digest_rows, or raise the gpu budget");
    tiers_[kGpuTier].capacity = (size_t(gpu_budget_) - need) / tiers_[kGpuTier].footprint();
  }
  digest_slots_.in_gpu = gpu;
  digest_slots_.block_slots = int(digest_.slots_for(size_t(host.block_slots)));
  digest_slots_.capacity = digest_.slots_of(host.capacity, size_t(host.block_slots));
}

std::vector<int> SlotStore::row_order(const Features& f) const {
  return digest_.rows > 0 ? digest_order(f, options_.digest_order, digest_.rows) : std::vector<int>{};
}

void SlotStore::refuse_if_broken() const {
  if (!broken_) return;
  std::string why = "unknown error";
  try {
    std::rethrow_exception(broken_);
  } catch (const std::exception& x) {
    why = x.what();
  } catch (...) {
  }
  throw IndexError("texture index: unusable since a write failed half-way (" + why + "); open the gallery again");
}

template <class F>
void SlotStore::or_break(F&& write) {
  try {
    write();
  } catch (...) {
    if (!broken_) broken_ = std::current_exception();
    throw;
  }
}

void SlotStore::clear() {
  owners_.clear();
  for (Tier& t : tiers_) t.clear();
  digest_slots_.clear();
  broken_ = nullptr;
}

// Where an image goes: the GPU tier while it has room; when only the host has room, the GPU tier if
// the image is newer than the GPU tier's oldest (which moves to the host tier), else the host.
int SlotStore::choose_tier(const Owner& o) const {
  const Tier& g = tiers_[kGpuTier];
  const Tier& h = tiers_[kHostTier];
  if (!g.full()) return kGpuTier;
  if (!h.full()) return g.capacity > 0 && age_key(o, 0) > *g.age.begin() ? kGpuTier : kHostTier;
  return -1;
}

void SlotStore::check_room(int64_t enrolled_unix) const {
  Owner o;
  o.enrolled = enrolled_unix;
  o.seq = next_seq_;
  if (choose_tier(o) >= 0) return;
  throw IndexFull("the texture index is full: " + std::to_string(tiers_[kGpuTier].used()) +
                  " images in GPU memory (gpu budget " + size_text(gpu_budget_) + ") and " +
                  std::to_string(tiers_[kHostTier].used()) + " in host memory (host budget " + size_text(host_budget_) +
                  "); raise a budget or remove products");
}

void SlotStore::place(int64_t enrolled_unix, const Features& f, const std::vector<int>& order) {
  check_room(enrolled_unix);
  Owner o;
  o.enrolled = enrolled_unix;
  o.seq = next_seq_++;
  const int tier = choose_tier(o);
  const int e = int(owners_.size());
  owners_.push_back(o);
  bool placed = false;
  try {
    const size_t s = tier == kGpuTier && tiers_[kGpuTier].full() ? take_oldest_gpu_slot(e) : append_slot(tier, e);
    placed = true;
    write_slot(tiers_[tier], s, f, order);
  } catch (...) {  // an allocation or copy failed: leave no half entry behind
    if (placed) {
      try {
        drop_slot(tier, size_t(owners_[size_t(e)].slot));
      } catch (...) {  // the first error is the one to report
        broken_ = std::current_exception();
      }
    }
    owners_.pop_back();
    throw;
  }
}

void SlotStore::rewrite(int owner, const Features& f, const std::vector<int>& order) {
  const Owner& o = owners_[size_t(owner)];
  or_break([&] { write_slot(tiers_[o.tier], size_t(o.slot), f, order); });
}

void SlotStore::remove(int owner) {
  const int tier = owners_[size_t(owner)].tier;
  or_break([&] {
    drop_slot(tier, size_t(owners_[size_t(owner)].slot));
    // The newest host-resident image takes the freed GPU slot.
    Tier& h = tiers_[kHostTier];
    if (tier == kGpuTier && h.used() > 0) move_owner(h.entry[size_t(std::get<2>(*std::prev(h.age.end())))], kGpuTier);
  });
  // The last owner becomes `owner`.
  const size_t last = owners_.size() - 1;
  if (size_t(owner) != last) {
    const Owner& moved = owners_[last];
    tiers_[moved.tier].entry[size_t(moved.slot)] = owner;
    owners_[size_t(owner)] = moved;
  }
  owners_.pop_back();
}

// ---- slot writes and moves ----

void SlotStore::write_slot(Tier& t, size_t s, const Features& f, const std::vector<int>& order) {
  const int n = slot_count(f);
  t.counts[s] = n;
  if (!gpu_) {
    pack_slot(f, t.slot_data(s), order);
    return put_digest(t, s);
  }
  if (!t.in_gpu) pack_slot(f, t.slot_data(s), order);
#if defined(PRISM_HAVE_CUDA)
  uint8_t* staged = slot_staging_.get(kSlotBytes, true);
  int* count = counts_staging_.get(1, true);
  *count = n;
  if (t.in_gpu) {
    pack_slot(f, staged, order);
    PRISM_CUDA_CHECK(cudaMemcpyAsync(t.slot_data(s), staged, kSlotBytes, cudaMemcpyHostToDevice, stream_));
    if (t.norms) upload_norms(t, s, staged);
  }
  PRISM_CUDA_CHECK(cudaMemcpyAsync(t.d_count(s), count, sizeof(int), cudaMemcpyHostToDevice, stream_));
  put_digest(t, s);
  PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the staging buffers are reused by the next write
#endif
}

// Host slot s's digest, its slot's first rows (host-addressable: plain or pinned; pack_slot writes them
// as a digest), or 255s when `clear`; a no-op for the GPU tier, without digests or with streamed ones.
// On the GPU path enqueued on the stream: the caller synchronises before the host slot is written again.
void SlotStore::put_digest(const Tier& t, size_t s, bool clear) {
  if (digest_.rows == 0 || &t != &tiers_[kHostTier]) return;
  const size_t B = size_t(t.block_slots);
  if (s / B >= digest_slots_.blocks.size()) return;  // (streamed, or an add whose block was not allocated)
  uint8_t* const at = digest_slots_.slot_data(digest_.slot_of(s, B)) + digest_.row_of(s, B) * match::kDim;
  const size_t bytes = size_t(digest_.rows) * match::kDim;
  if (!gpu_) {
    if (clear)
      std::fill_n(at, bytes, uint8_t(255));
    else
      std::copy_n(t.slot_data(s), bytes, at);
    return;
  }
#if defined(PRISM_HAVE_CUDA)
  if (clear)
    PRISM_CUDA_CHECK(cudaMemsetAsync(at, 255, bytes, stream_));
  else
    PRISM_CUDA_CHECK(cudaMemcpyAsync(at, t.slot_data(s), bytes, cudaMemcpyHostToDevice, stream_));
#endif
}

// The digest block beside a new host block (all 255s).
void SlotStore::grow_digest() {
  Tier& d = digest_slots_;
  const size_t n = d.next_block_slots();
  d.grow(gpu_, false);  // (no counts: see digest_slots_)
  try {
    if (!gpu_) std::fill_n(d.blocks.back()->data, n * kSlotBytes, uint8_t(255));
#if defined(PRISM_HAVE_CUDA)
    else {
      PRISM_CUDA_CHECK(cudaMemsetAsync(d.blocks.back()->data, 255, n * kSlotBytes, stream_));
      PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
#endif
  } catch (...) {
    d.blocks.pop_back();
    throw;
  }
}

#if defined(PRISM_HAVE_CUDA)
// |g|^2 of a slot whose bytes are in host memory into tier t's slot s (asynchronous on the stream;
// the caller synchronises before the staging is reused).
void SlotStore::upload_norms(Tier& t, size_t s, const uint8_t* host_slot) {
  int32_t* n = norms_staging_.get(match::kSlot, true);
  match::u8_norms(host_slot, match::kSlot, n);
  PRISM_CUDA_CHECK(cudaMemcpyAsync(t.d_norm(s), n, match::kSlot * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
}
#endif

// Copies slot `from` of tier `a` into slot `to` of tier `b` (data and count).
void SlotStore::copy_slot(Tier& a, size_t from, Tier& b, size_t to) {
  b.counts[to] = a.counts[from];
  if (!gpu_) {
    std::memcpy(b.slot_data(to), a.slot_data(from), kSlotBytes);
    return put_digest(b, to);
  }
#if defined(PRISM_HAVE_CUDA)
  PRISM_CUDA_CHECK(cudaMemcpyAsync(b.slot_data(to), a.slot_data(from), kSlotBytes, cudaMemcpyDefault, stream_));
  PRISM_CUDA_CHECK(cudaMemcpyAsync(b.d_count(to), a.d_count(from), sizeof(int), cudaMemcpyDeviceToDevice, stream_));
  if (b.norms && a.norms)
    PRISM_CUDA_CHECK(cudaMemcpyAsync(b.d_norm(to), a.d_norm(from), match::kSlot * sizeof(int32_t),
                                     cudaMemcpyDeviceToDevice, stream_));
  else if (b.norms)  // up from the host tier, whose pinned bytes the host reads
    upload_norms(b, to, a.slot_data(from));
  put_digest(b, to);
  PRISM_CUDA_CHECK(cudaStreamSynchronize(stream_));
#endif
}

// One more block for tier t, or IndexFull naming the memory that is short: the host's (the block,
// when the tier is in host memory, and its images' keypoint records must leave host_reserve
// available; an allocation the host refuses) or the GPU's (a GPU budget beyond its free memory).
void SlotStore::grow(int t_id) {
  Tier& t = tiers_[t_id];
  const int64_t slots = int64_t(t.next_block_slots());
  const bool device_memory = gpu_ && t.in_gpu;
  const std::string placed = std::to_string(tiers_[kGpuTier].used()) + " images in GPU memory and " +
                             std::to_string(tiers_[kHostTier].used()) + " in host memory, and " +
                             std::to_string(slots) + " more in " + (t.in_gpu ? "GPU" : "host") + " memory";
  const int64_t available = host_reserve_ > 0 ? host_memory::available() : 0;  // 0: unknown, not checked
  if (available > 0) {
    const int64_t records = slots * match::kSlot * int64_t(sizeof(cv::Point2f));
    // (on the CPU path the host block's digests are host memory too)
    const int64_t digests = !gpu_ && !t.in_gpu && digest_.rows > 0 && !digest_.streamed
                                ? int64_t(digest_.slots_for(size_t(slots)) * kSlotBytes)
                                : 0;
    const int64_t need = (device_memory ? 0 : slots * int64_t(t.slot_bytes)) + digests + records;
    if (available - need < host_reserve_)
      throw IndexFull("the texture index is full: host memory: " + placed + " need " + size_text(need) +
                      " of host memory while " + size_text(available) + " is available and the index leaves " +
                      size_text(host_reserve_) + " to the rest of the machine (host budget " + size_text(host_budget_) +
                      "); lower the host budget, remove products or add memory");
  }
  bool digesting = false;  // the failure, if any, is the digests' (GPU memory on the GPU path)
  try {
    t.grow(gpu_, gpu_);
    if (t_id == kHostTier && digest_.rows > 0 && !digest_.streamed) {
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
                    size_text(host_budget_) + "); lower the host budget, remove products or add memory");
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
                      size_text(gpu_budget_) + "): " + e.what() + "; lower the gpu budget or free GPU memory");
    throw IndexFull("the texture index is full: host memory: " + placed + " could not be pinned (host budget " +
                    size_text(host_budget_) + "): " + e.what() +
                    "; lower the host budget, remove products or add memory");
#endif
  }
}

// Each of the slot moves below either completes or leaves the bookkeeping as it was: the steps that
// can throw (a block's allocation, a copy, a vector's growth) come before the changes, and the age
// keys move as extracted nodes (no allocation). Only a failed copy may leave a slot's bytes behind;
// a caller that cannot undo that breaks the store (or_break).

// A new last slot in tier t_id for `owner` (allocating a block when needed); returns it.
size_t SlotStore::append_slot(int t_id, int owner) {
  Tier& t = tiers_[t_id];
  if (t.used() == t.allocated()) grow(t_id);
  const size_t s = t.used();
  room_for_one(t.entry);
  room_for_one(t.counts);
  t.age.insert(age_key(owners_[size_t(owner)], int(s)));
  t.entry.push_back(owner);
  t.counts.push_back(0);
  owners_[size_t(owner)].tier = t_id;
  owners_[size_t(owner)].slot = int(s);
  return s;
}

// Removes slot s of tier t_id: the last slot moves into it.
void SlotStore::drop_slot(int t_id, size_t s) {
  Tier& t = tiers_[t_id];
  const size_t last = t.used() - 1;
  if (s != last) copy_slot(t, last, t, s);
  t.age.erase(age_key(owners_[size_t(t.entry[s])], int(s)));
  if (s != last) {
    const int moved = t.entry[last];
    auto key = t.age.extract(age_key(owners_[size_t(moved)], int(last)));
    std::get<2>(key.value()) = int(s);
    t.age.insert(std::move(key));
    t.entry[s] = moved;
    owners_[size_t(moved)].slot = int(s);
  }
  t.entry.pop_back();
  t.counts.pop_back();
  put_digest(t, last, true);
}

// Copies owner's slot into a new last slot of tier `to`, which becomes its place; its old slot is left
// to the caller (dropped, or taken by another owner). Returns the old slot.
size_t SlotStore::copy_out(int owner, int to) {
  Owner& o = owners_[size_t(owner)];
  const size_t old_slot = size_t(o.slot);
  Tier& b = tiers_[to];
  if (b.used() == b.allocated()) grow(to);
  const size_t s = b.used();
  room_for_one(b.entry);
  room_for_one(b.counts);
  const auto key = b.age.insert(age_key(o, int(s))).first;
  b.entry.push_back(owner);
  b.counts.push_back(0);
  try {
    copy_slot(tiers_[o.tier], old_slot, b, s);
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
  o.tier = to;
  o.slot = int(s);
  return old_slot;
}

// Moves owner's slot into tier `to`.
void SlotStore::move_owner(int owner, int to) {
  const int from = owners_[size_t(owner)].tier;
  drop_slot(from, copy_out(owner, to));  // (drop_slot keys the age by the slot it is given)
}

// The GPU tier is full and `owner` is newer than its oldest image: that image moves to the host tier
// and `owner` takes its GPU slot, which the caller writes. One copy out, where move_owner would also
// move the GPU tier's last slot into the hole it leaves.
size_t SlotStore::take_oldest_gpu_slot(int owner) {
  Tier& g = tiers_[kGpuTier];
  auto key = g.age.extract(g.age.begin());
  const size_t s = size_t(std::get<2>(key.value()));
  try {
    copy_out(g.entry[s], kHostTier);
  } catch (...) {
    g.age.insert(std::move(key));
    throw;
  }
  g.entry[s] = owner;
  g.counts[s] = 0;
  key.value() = age_key(owners_[size_t(owner)], int(s));
  g.age.insert(std::move(key));
  owners_[size_t(owner)].tier = kGpuTier;
  owners_[size_t(owner)].slot = int(s);
  return s;
}

}  // namespace prism::texture
