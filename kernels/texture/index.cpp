#include "texture/index.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <numeric>
#include <shared_mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <opencv2/core/utility.hpp>

#include "common/gpu.h"
#include "common/stopwatch.h"
#include "match/match.h"
#include "texture/index/digest_stage.h"
#include "texture/index/resources.h"
#include "texture/index/search_plan.h"
#include "texture/index/slot_store.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

// Locking. Writers (add, update, remove, clear) take `mu` exclusively; searches (scores, search,
// verify) and the readers (size, find, in_gpu_memory, stats) share it. Writers first pass `gate` and
// hold it while they wait, so a stream of overlapping searches cannot starve them (glibc's rwlock
// prefers readers). On the GPU a search also takes a lane's `turn` (its stream and buffers,
// index/resources.h: lane 0 for a search that scores, any free one for a verification of named
// products) from its query's upload until its last matching, and gives it back before the geometric
// verification. The order is always mu, then a turn, and a thread holds one turn at a time. ids() is read without a
// lock: only while no other thread writes.
namespace prism::texture {

namespace {
using Clock = std::chrono::steady_clock;
}

struct TextureIndex::Impl {
  // What the index keeps of an entry besides its slot (the store's owner of the same position).
  struct Entry {
    std::string id;
    int collection = -1;
    int member = -1;                  // position in members[collection]
    std::vector<cv::Point2f> points;  // keypoint positions for verification, in the slot's row order
    cv::Size size;                    // the image's (Features::width/height)
  };

  explicit Impl(const IndexOptions& o, bool gpu)
      : resources(gpu, o.streams, o.host_batch, o.verify_lanes), store(o, gpu, resources) {}

  std::string description;
  SearchResources resources;  // declared before the store: its stream outlives the store's writes
  SlotStore store;
  std::vector<Entry> entries;  // dense, as the store's owners: removal moves the last entry into the hole
  std::unordered_map<std::string, int> by_id;
  std::unordered_map<std::string, int> collection_ids;
  std::vector<std::vector<int>> members;  // collection -> entry positions

  mutable std::shared_mutex mu;
  mutable std::mutex gate;
  std::shared_lock<std::shared_mutex> read_lock() const {
    std::lock_guard<std::mutex> g(gate);
    return std::shared_lock<std::shared_mutex>(mu);
  }
  std::unique_lock<std::shared_mutex> write_lock() {
    std::lock_guard<std::mutex> g(gate);
    return std::unique_lock<std::shared_mutex>(mu);
  }
  // A scoring search's turn on lane 0 (the GPU path; a no-op lock on the CPU path, whose searches share
  // nothing).
  std::unique_lock<std::mutex> work_turn() {
    std::unique_lock<std::mutex> turn(resources.turn, std::defer_lock);
    if (resources.gpu) turn.lock();
    return turn;
  }
  // A verification's lane: a free one (lane 0, the scoring searches', last), or when all are busy the
  // next in rotation, waited for. On the CPU path lane 0, no lock taken.
  Lane& verify_turn(std::unique_lock<std::mutex>& turn) {
    if (!resources.gpu) return resources;
    for (auto& lane : resources.more_lanes) {
      turn = std::unique_lock<std::mutex>(lane->turn, std::try_to_lock);
      if (turn.owns_lock()) return *lane;
    }
    turn = std::unique_lock<std::mutex>(resources.turn, std::try_to_lock);
    if (turn.owns_lock()) return resources;
    const size_t n = resources.more_lanes.size() + 1, l = next_lane++ % n;
    Lane& lane = l == 0 ? static_cast<Lane&>(resources) : *resources.more_lanes[l - 1];
    turn = std::unique_lock<std::mutex>(lane.turn);
    return lane;
  }
  std::atomic<size_t> next_lane{0};

  // The owners in the scope of `collections` (each named once; unknown ones have no members).
  std::vector<int> scope_of(const std::vector<std::string>& collections) const {
    std::vector<int> in_scope, seen;
    for (const std::string& name : collections) {
      auto it = collection_ids.find(name);
      if (it == collection_ids.end() || std::find(seen.begin(), seen.end(), it->second) != seen.end()) continue;
      seen.push_back(it->second);
      const auto& m = members[size_t(it->second)];
      in_scope.insert(in_scope.end(), m.begin(), m.end());
    }
    return in_scope;
  }
  void score(const Query& q, const SearchParams& params, std::vector<int>& s, std::vector<int>& entry_of,
             size_t* digested = nullptr) {
    if (params.collections.empty()) return texture::score(store, resources, q, params, nullptr, s, entry_of, digested);
    const std::vector<int> in_scope = scope_of(params.collections);
    texture::score(store, resources, q, params, &in_scope, s, entry_of, digested);
  }
  // A search's first half: scores the prepared query over the scope and ranks the shortlist
  // (r.candidates, unverified; r.searched, r.digested and r.match_ms from `t0`). Returns the best
  // score's candidate, whatever its score (index -1 when nothing was scored).
  Candidate shortlist(const Query& q, const SearchParams& params, SearchResult& r, Clock::time_point t0);
  // The ranking of shortlist: the scores `s` (s[i] for entry entry_of[i]) into r.candidates and
  // r.searched; returns the best score's candidate (index -1 when nothing was scored).
  Candidate rank(const int* s, const std::vector<int>& entry_of, const SearchParams& params, SearchResult& r);
  Candidate verify_candidates(const Features& query, const Query& q, std::vector<Candidate>& cands,
                              const SearchParams& params, SearchResult& result, Lane& lane,
                              std::unique_lock<std::mutex>& turn);

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

namespace {
// Makes the next push_back unable to throw (geometric growth, as push_back's own).
template <class V>
void room_for_one(V& v) {
  if (v.size() == v.capacity()) v.reserve(std::max<size_t>(64, 2 * v.capacity()));
}
}  // namespace

bool valid_host_digest_rows(int rows) {
  return rows == 0 || (rows >= 16 && rows <= match::kSlot / 2 && match::kSlot % rows == 0);
}

size_t image_bytes(bool gpu_tier, bool gpu_norms) {
  return match::kSlotBytes + (gpu_tier && gpu_norms ? match::kSlot * sizeof(int32_t) : 0);
}

TextureIndex::TextureIndex(Device device)
    : TextureIndex([&] {
        IndexOptions o;
        o.device = device;
        return o;
      }()) {}

namespace {
// Whether the index runs on the GPU (kCuda without a usable sm_80+ GPU throws), and the device's words.
bool choose_device(Device device, std::string& description) {
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
      description = "cuda:" + std::to_string(dev) + " (" + gpu::device_name(dev) + ")";
    }
  }
#endif
  if (device == Device::kCuda && !usable) throw gpu::CudaError("device=cuda but " + why);
  const bool on_gpu = usable && device != Device::kCpu;
  if (!on_gpu) description = device == Device::kCpu ? "cpu" : "cpu (" + why + ")";
  return on_gpu;
}
// The options as the store takes them: no GPU tier on the CPU path.
IndexOptions for_store(IndexOptions o, bool gpu) {
  if (o.streams < 1 || o.verify_lanes < 1 || o.host_batch < 1 || o.block_slots < 1 || o.gpu_block_slots < 1 ||
      o.gpu_run_slots < 1)
    throw std::invalid_argument("texture index: streams, verify lanes, host batch and block slots must be at least 1");
  if (!gpu) o.gpu_budget = 0;
  return o;
}
}  // namespace

TextureIndex::TextureIndex(const IndexOptions& options) {
  std::string description;
  const bool gpu = choose_device(options.device, description);
  impl_ = std::make_unique<Impl>(for_store(options, gpu), gpu);
  impl_->description = std::move(description);
}

TextureIndex::~TextureIndex() = default;

bool TextureIndex::on_gpu() const { return impl_->resources.gpu; }
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
  return it != impl_->by_id.end() && impl_->store.where(it->second).tier == kGpuTier;
}

IndexStats TextureIndex::stats() const {
  const Impl& m = *impl_;
  auto lock = m.read_lock();
  const SlotStore& st = m.store;
  IndexStats s;
  s.images = m.entries.size();
  s.gpu_images = st.tier(kGpuTier).used();
  s.host_images = st.tier(kHostTier).used();
  s.gpu_capacity = st.tier(kGpuTier).capacity;
  s.host_capacity = st.tier(kHostTier).capacity;
  s.gpu_bytes = st.tier(kGpuTier).bytes();
  s.host_bytes = st.tier(kHostTier).bytes();
  s.digest_bytes = st.digest_slots().bytes();
  s.gpu_budget = st.gpu_budget();
  s.host_budget = st.host_budget();
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
  m.store.clear();
}

void TextureIndex::add(const IndexEntry& entry) {
  Impl& m = *impl_;
  auto lock = m.write_lock();
  m.store.refuse_if_broken();
  if (m.by_id.count(entry.id)) throw IndexError("product '" + entry.id + "' is already in the index");
  check_descriptors(entry.features, "product '" + entry.id + "'");
  m.store.check_room(entry.enrolled_unix);
  const int e = int(m.entries.size());
  const std::vector<int> order = m.store.row_order(entry.features);
  Impl::Entry en;
  en.id = entry.id;
  en.points = points_of(entry.features, order);
  en.size = cv::Size(entry.features.width, entry.features.height);
  // Every allocation of the bookkeeping before the slot is placed, so that nothing after it can throw.
  // (A collection named by a failed add stays, empty.)
  const int c = m.collection_id(entry.collection, true);
  if (c >= 0) room_for_one(m.members[c]);
  room_for_one(ids_);
  m.entries.push_back(std::move(en));
  try {
    m.by_id.emplace(entry.id, e);
    m.store.place(entry.enrolled_unix, entry.features, order);  // owner e
  } catch (...) {                                               // the store changed nothing (or is broken)
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
  m.store.refuse_if_broken();
  auto it = m.by_id.find(entry.id);
  if (it == m.by_id.end()) throw IndexError("product '" + entry.id + "' is not in the index");
  check_descriptors(entry.features, "product '" + entry.id + "'");
  const std::vector<int> order = m.store.row_order(entry.features);
  // Every allocation before the write, so that nothing after it can throw.
  std::vector<cv::Point2f> points = points_of(entry.features, order);
  const int c = m.collection_id(entry.collection, true);
  if (c >= 0) room_for_one(m.members[c]);
  Impl::Entry& en = m.entries[it->second];
  m.store.rewrite(it->second, entry.features, order);  // (a failed write breaks the store)
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
  m.store.refuse_if_broken();
  auto it = m.by_id.find(id);
  if (it == m.by_id.end()) return false;
  const int e = it->second;
  m.store.remove(e);  // (a failed move breaks the store); its last owner becomes e, as below
  m.leave(e);
  m.by_id.erase(it);
  // The last entry moves into position e.
  const int last = int(m.entries.size()) - 1;
  if (e != last) {
    Impl::Entry& moved = m.entries[last];
    if (moved.collection >= 0) m.members[moved.collection][moved.member] = e;
    m.by_id[moved.id] = e;
    m.entries[e] = std::move(moved);
    ids_[e] = std::move(ids_[last]);
  }
  m.entries.pop_back();
  ids_.pop_back();
  return true;
}

// Re-matches each candidate (rematch), verifies it and sorts the candidates (decision.h). Returns the
// best. `turn` (the lane's, where `q` was prepared) is given back by rematch on the GPU.
Candidate TextureIndex::Impl::verify_candidates(const Features& query, const Query& q, std::vector<Candidate>& cands,
                                                const SearchParams& params, SearchResult& result, Lane& lane,
                                                std::unique_lock<std::mutex>& turn) {
  const auto t0 = Clock::now();
  if (cands.empty()) {
    result.verify_ms = ms_since(t0);
    return Candidate{};
  }
  const int k = int(cands.size());
  std::vector<int> owners(cands.size());
  for (int c = 0; c < k; ++c) owners[size_t(c)] = cands[size_t(c)].index;
  std::vector<int32_t> best, second;
  std::vector<int> index;
  rematch(store, lane, q, owners, params.ratio, best, second, index, turn);
  // The candidates' RANSACs on OpenCV's threads: each is independent and seeded alike
  // (findHomography's fixed RNG), so the answer does not depend on the threads.
  cv::parallel_for_(cv::Range(0, k), [&](const cv::Range& r) {
    for (int c = r.start; c < r.end; ++c) {
      const size_t o = size_t(c) * size_t(q.rows);
      const auto matches = ratio_matches(&best[o], &second[o], &index[o], query.count(), params.ratio);
      cands[c].geometry =
          verify_geometry(query, entries[cands[c].index].points, matches, params.verify, entries[cands[c].index].size);
      cands[c].gallery_size = entries[cands[c].index].size;
      cands[c].significance = decision_significance(cands[c].geometry.significance, size_t(k));
    }
  });
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
  m.store.refuse_if_broken();
  auto work = m.work_turn();
  Query q;
  prepare_query(m.resources, query, q);
  std::vector<int> s, entry_of;
  m.score(q, params, s, entry_of);
  std::vector<int> out(m.entries.size(), 0);
  for (size_t i = 0; i < entry_of.size(); ++i) out[entry_of[i]] = s[i];
  return out;
}

Candidate TextureIndex::Impl::shortlist(const Query& q, const SearchParams& params, SearchResult& r,
                                        Clock::time_point t0) {
  std::vector<int> s, entry_of;
  score(q, params, s, entry_of, &r.digested);
  r.match_ms = ms_since(t0);
  return rank(s.data(), entry_of, params, r);
}

Candidate TextureIndex::Impl::rank(const int* s, const std::vector<int>& entry_of, const SearchParams& params,
                                   SearchResult& r) {
  r.searched = entry_of.size();
  std::vector<int> order(entry_of.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = std::min(order.size(), size_t(std::max(1, params.shortlist)));
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
    return shortlist_before(s[a], entries[entry_of[a]].id, s[b], entries[entry_of[b]].id);
  });
  for (size_t i = 0; i < k; ++i) {
    const int e = entry_of[order[i]];
    if (s[order[i]] >= kMinVerifiedMatches) r.candidates.push_back({e, entries[e].id, s[order[i]], {}});
  }
  if (order.empty()) return Candidate{};
  const int e = entry_of[order[0]];
  return {e, entries[e].id, s[order[0]], {}};
}

SearchResult TextureIndex::search(const Features& query, const SearchParams& params) {
  Impl& m = *impl_;
  auto lock = m.read_lock();
  m.store.refuse_if_broken();
  auto work = m.work_turn();
  SearchResult r;
  const auto t0 = Clock::now();
  Query q;
  prepare_query(m.resources, query, q);
  const Candidate top = m.shortlist(q, params, r, t0);
  // `work` stays held: the verification's matching reads the query where the scoring left it.
  r.best = m.verify_candidates(query, q, r.candidates, params, r, m.resources, work);
  if (r.best.index < 0) r.best = top;
  r.identified = r.best.index >= 0 && accepted(r.best, params);
  return r;
}

std::vector<SearchResult> TextureIndex::search_many(const std::vector<const Features*>& queries,
                                                    const SearchParams& params) {
  Impl& m = *impl_;
  std::vector<SearchResult> results(queries.size());
  // One at a time: the digest stage matches one query (its candidates are the query's own), and a query
  // without descriptors matches nothing (search's answer, which a batch's zero scores are not).
  std::vector<size_t> batched, alone;
  {
    auto lock = m.read_lock();
    m.store.refuse_if_broken();
    const bool digesting = params.collections.empty() && digest_search(m.store, params);
    for (size_t i = 0; i < queries.size(); ++i) {
      check_descriptors(*queries[i], "the query");
      (digesting || queries[i]->count() == 0 ? alone : batched).push_back(i);
    }
    // The whole call under one shared lock: the positions in entry_of hold for every batch.
    for (size_t first = 0; first < batched.size(); first += size_t(kMaxQueries)) {
      const size_t nq = std::min(batched.size() - first, size_t(kMaxQueries));
      std::vector<const Features*> batch(nq);
      for (size_t j = 0; j < nq; ++j) batch[j] = queries[batched[first + j]];
      std::vector<int> s, entry_of;
      double match_ms = 0;
      {
        auto work = m.work_turn();
        const auto t0 = Clock::now();
        Query q;
        prepare_queries(m.resources, batch, q);
        m.score(q, params, s, entry_of);
        match_ms = ms_since(t0);
      }  // (the scoring waited for its results: d_query is free for the verifications' single queries)
      // Each query's shortlist verified as search verifies its own, with the query uploaded alone (only
      // for a shortlist: an upload that no matching waits for would race the next one's).
      for (size_t j = 0; j < nq; ++j) {
        SearchResult& r = results[batched[first + j]];
        r.match_ms = match_ms;
        const Candidate top = m.rank(s.data() + j * entry_of.size(), entry_of, params, r);
        auto work = m.work_turn();  // given back by the rematch on the GPU
        Query one;
        if (!r.candidates.empty()) prepare_query(m.resources, *batch[j], one);
        r.best = m.verify_candidates(*batch[j], one, r.candidates, params, r, m.resources, work);
        if (r.best.index < 0) r.best = top;
        r.identified = r.best.index >= 0 && accepted(r.best, params);
      }
    }
  }
  for (size_t i : alone) results[i] = search(*queries[i], params);
  return results;
}

SearchResult TextureIndex::shortlist(const Features& query, const SearchParams& params) {
  Impl& m = *impl_;
  auto lock = m.read_lock();
  m.store.refuse_if_broken();
  auto work = m.work_turn();
  SearchResult r;
  const auto t0 = Clock::now();
  Query q;
  prepare_query(m.resources, query, q);
  r.best = m.shortlist(q, params, r, t0);
  return r;
}

SearchResult TextureIndex::verify_shortlist(const Features& query, const std::vector<Candidate>& candidates,
                                            const SearchParams& params) {
  Impl& m = *impl_;
  auto lock = m.read_lock();
  m.store.refuse_if_broken();
  SearchResult r;
  for (const Candidate& c : candidates) {
    const auto it = m.by_id.find(c.id);
    if (it != m.by_id.end()) r.candidates.push_back({it->second, c.id, c.score, {}});  // absent: removed since
  }
  if (r.candidates.empty()) return r;
  std::unique_lock<std::mutex> turn;  // given back by verify_candidates after its matching
  Lane& lane = m.verify_turn(turn);
  Query q;
  prepare_query(lane, query, q);
  r.best = m.verify_candidates(query, q, r.candidates, params, r, lane, turn);
  r.identified = accepted(r.best, params);
  return r;
}

SearchResult TextureIndex::verify(const Features& query, const std::string& id, const SearchParams& params) {
  Impl& m = *impl_;
  auto lock = m.read_lock();
  m.store.refuse_if_broken();
  auto it = m.by_id.find(id);
  if (it == m.by_id.end()) throw IndexError("product '" + id + "' is not enrolled");
  std::unique_lock<std::mutex> turn;  // given back by verify_candidates after its matching
  Lane& lane = m.verify_turn(turn);
  Query q;
  prepare_query(lane, query, q);
  SearchResult r;
  r.searched = 1;
  r.candidates.push_back({it->second, id, 0, {}});
  r.best = m.verify_candidates(query, q, r.candidates, params, r, lane, turn);
  r.best.score = r.candidates.front().score = r.best.geometry.matches;
  r.identified = accepted(r.best, params);
  return r;
}

}  // namespace prism::texture
