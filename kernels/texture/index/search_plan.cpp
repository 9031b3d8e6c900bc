#include "texture/index/search_plan.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <exception>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>

#include "texture/index/digest_stage.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::texture {

namespace {

constexpr size_t kSlotBytes = match::kSlotBytes;

// A query's rows padded to a multiple of 16 (at most a slot's).
int padded_rows(const Features& q) { return std::max(16, (std::min(q.count(), match::kSlot) + 15) / 16 * 16); }
// The query's rows, then zero vectors up to `rows` (a zero row never passes the ratio test), into `out`.
void pad_query(const Features& q, int rows, uint8_t* out) {
  const size_t used = std::min(q.descriptors.size(), size_t(rows) * match::kDim);
  std::copy_n(q.descriptors.data(), used, out);
  std::fill(out + used, out + size_t(rows) * match::kDim, uint8_t(0));
}

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

void prepare_query(Lane& lane, const Features& query, Query& q) { prepare_queries(lane, {&query}, q); }

void prepare_queries(Lane& lane, const std::vector<const Features*>& queries, Query& q) {
  if (queries.empty() || queries.size() > size_t(kMaxQueries))
    throw std::invalid_argument("texture index: 1 to " + std::to_string(kMaxQueries) + " queries per batch");
  int rows = 16, features = 0;
  for (const Features* f : queries) {
    check_descriptors(*f, "the query");
    rows = std::max(rows, padded_rows(*f));
    features = std::max(features, f->count());
  }
  q.rows = rows;
  q.features = features;
  q.queries = int(queries.size());
  const size_t per = size_t(rows) * match::kDim, bytes = per * queries.size();
  uint8_t* dst = nullptr;
  if (!lane.gpu) {
    q.plain.resize(bytes);
    dst = q.plain.data();
  } else {
#if defined(PRISM_HAVE_CUDA)
    dst = lane.query_buf.get(bytes, true);
    lane.d_query.reserve(bytes);  // (a slot's from the start: grown for a batch of long queries)
#endif
  }
  for (size_t j = 0; j < queries.size(); ++j) pad_query(*queries[j], rows, dst + j * per);
  q.host = dst;
#if defined(PRISM_HAVE_CUDA)
  if (lane.gpu) PRISM_CUDA_CHECK(cudaMemcpyAsync(lane.d_query.data(), dst, bytes, cudaMemcpyHostToDevice, lane.stream));
#endif
}

void score(const SlotStore& store, SearchResources& res, const Query& query, const SearchParams& params,
           const std::vector<int>* scope, std::vector<int>& scores, std::vector<int>& owner_of, size_t* digested) {
  scores.clear();
  owner_of.clear();
  if (digested) *digested = 0;
  if (store.size() == 0 || query.features == 0) return;
#if defined(PRISM_HAVE_CUDA)
  // A throw past here would leave copies and kernels in flight that read the slots and write the search's
  // buffers after the locks are given up: they are waited for first (their own errors ignored: the
  // exception in flight is the one to report).
  struct Drain {
    SearchResources& r;
    int before = std::uncaught_exceptions();
    ~Drain() {
      if (!r.gpu || std::uncaught_exceptions() == before) return;
      cudaStreamSynchronize(r.stream);
      for (auto& cs : r.copy_streams) cudaStreamSynchronize(cs);
      cudaGetLastError();
    }
  } drain{res};
#endif
  const uint8_t* q = query.host;  // padded, and on the GPU path in res.d_query (prepare_query)
  const int rows = query.rows;    // per query
  const int nq = query.queries;
  // Each matcher call writes its run's scores query-major ([nq][r.images], at r.pos * nq of a
  // run-major buffer): put back as scores[j * total + pos] (the same layout when nq is 1).
  const auto unpack = [&](const std::vector<Run>& rs, const int* run_major, size_t total) {
    for (const Run& r : rs)
      for (int j = 0; j < nq; ++j)
        std::copy_n(run_major + r.pos * size_t(nq) + size_t(j) * size_t(r.images), r.images,
                    scores.begin() + long(size_t(j) * total + r.pos));
  };
  // The plan: runs over whole blocks, or over each block's members of the scope (or of a digest search's
  // candidates).
  std::vector<Run> runs;
  std::vector<int> slot_list;  // listed runs' slots (within their block)
  const bool scoped = scope != nullptr;
  const bool gpu = store.gpu();
  const size_t batch = gpu ? size_t(res.host_batch) : SIZE_MAX;
  // Runs over listed entries, grouped by tier and block, in slot order (memory order).
  auto plan_listed = [&](std::vector<int>& listed) {
    std::sort(listed.begin(), listed.end(), [&](int a, int b) {
      const Place x = store.where(a), y = store.where(b);
      return x.tier != y.tier ? x.tier < y.tier : x.slot < y.slot;
    });
    for (size_t i = 0; i < listed.size();) {
      const Place first = store.where(listed[i]);
      const Tier& tier = store.tier(first.tier);
      const size_t b = size_t(first.slot) / tier.block_slots;
      Run r;
      r.tier = first.tier, r.block = b, r.scoped = true;
      r.pos = owner_of.size();
      r.list = slot_list.size();
      const size_t cap = first.tier == kHostTier ? batch : SIZE_MAX;
      while (i < listed.size() && size_t(r.images) < cap) {
        const Place e = store.where(listed[i]);
        if (e.tier != first.tier || size_t(e.slot) / tier.block_slots != b) break;
        slot_list.push_back(int(e.slot - b * tier.block_slots));
        owner_of.push_back(listed[i]);
        ++r.images;
        ++i;
      }
      runs.push_back(r);
    }
  };
  // (K digest slots that name every host image: the exact plan, which streams them without the digests)
  const DigestLayout& digest = store.digest();
  const bool digesting = !scoped && digest_search(store, params);
  if (digesting && nq != 1) throw std::logic_error("texture index: a digest search takes one query at a time");
  // Whether copy streams match host-tier batches while the GPU tier is matched (see `step`).
  const bool host_streams = digesting ? digest.streamed : store.tier(kHostTier).used() > 0;
  if (!scoped) {
    for (int t = 0; t < (digesting ? 1 : 2); ++t) {
      const Tier& tier = store.tier(t);
      const size_t bs = size_t(tier.block_slots);
      for (size_t b = 0; b * bs < tier.used(); ++b) {
        const size_t end = std::min(tier.used(), (b + 1) * bs);
        // The host tier streams in batches. While it does, the GPU tier's blocks go in runs of
        // gpu_run_slots: the matcher's persistent grid holds every multiprocessor for a whole launch,
        // and a streamed batch's matching, which its stream's next copy waits for, must not wait
        // behind 8,192 images (the search takes the host tier's time anyway).
        const size_t step = t == kHostTier        ? std::min(batch, bs)
                            : host_streams && gpu ? std::min(size_t(store.options().gpu_run_slots), bs)
                                                  : bs;
        for (size_t s = b * bs; s < end; s += step) {
          Run r;
          r.tier = t, r.block = b, r.first = s - b * bs;
          r.images = int(std::min(step, end - s));
          r.pos = owner_of.size();
          runs.push_back(r);
          owner_of.insert(owner_of.end(), tier.entry.begin() + s, tier.entry.begin() + s + r.images);
        }
      }
    }
  } else {
    std::vector<int> listed = *scope;
    plan_listed(listed);
  }
#if defined(PRISM_HAVE_CUDA)
  // A GPU tier run's matching, on `stream`.
  const auto launch_gpu_run = [&](const Run& r) {
    const Tier::Block& blk = *store.tier(kGpuTier).blocks[r.block];
    match::MatchU8Problem p;
    p.query = res.d_query.data();
    p.rows = nq * rows;
    p.query_rows = rows;
    p.images = r.images;
    p.gallery = blk.data + r.first * kSlotBytes;
    p.counts = blk.d_counts.data() + r.first;
    p.slots = r.scoped ? res.d_slots.data() + r.list : nullptr;
    if (store.tier(kGpuTier).norms) p.norms = blk.d_norms.data() + r.first * match::kSlot;
    if (digesting && digest.streamed) p.grid_sms = res.gather_grid_sms();  // beside the digests' copies
    match_on_device(p, params.ratio, res.d_scores.data() + r.pos * size_t(nq), {}, res.stream);
  };
#endif
  [[maybe_unused]] size_t early = 0;  // runs already enqueued: a digest search's GPU tier, with its digests
  if (digesting) {
    std::function<void(double)> progress;
#if defined(PRISM_HAVE_CUDA)
    if (gpu) {
      // Grown now if at all: freeing device or pinned memory would wait for the GPU tier's matching.
      const size_t most = std::min(store.tier(kHostTier).used(), size_t(params.digest_candidates) * size_t(digest.per));
      res.d_scores.reserve(owner_of.size() + most);
      res.d_slots.reserve(2 * most);
      res.list_buf.get(2 * most, true);
      progress = [&](double share) {
        while (early < runs.size() && double(early + 1) <= share * double(runs.size())) launch_gpu_run(runs[early++]);
      };
    }
#endif
    std::vector<int> digest_scores;
    digest_match(store, res, q, rows, params.ratio, digest_scores, progress);
#if defined(PRISM_HAVE_CUDA)
    if (gpu)
      while (early < runs.size()) launch_gpu_run(runs[early++]);
#endif
    std::vector<int> chosen;  // the host-tier candidates (entry positions)
    for (int slot : digest_pick(store, res, params.digest_candidates, digest_scores))
      chosen.push_back(store.tier(kHostTier).entry[size_t(slot)]);
    if (digested) *digested = store.tier(kHostTier).used() - chosen.size();
    plan_listed(chosen);
  }
  const size_t total = owner_of.size();
  scores.assign(total * size_t(nq), 0);
  if (total == 0) {
#if defined(PRISM_HAVE_CUDA)
    if (gpu) PRISM_CUDA_CHECK(cudaStreamSynchronize(res.stream));  // the query's copy reads query_buf
#endif
    return;
  }

  if (!gpu) {
    std::vector<int> run_major(nq == 1 ? 0 : scores.size());
    for (const Run& r : runs) {
      const Tier& tier = store.tier(r.tier);
      const size_t base = r.block * tier.block_slots;
      match::MatchU8Problem p;
      p.query = q;
      p.rows = nq * rows;
      p.query_rows = rows;
      p.gallery = tier.blocks[r.block]->data + r.first * kSlotBytes;
      p.counts = tier.counts.data() + base + r.first;
      p.images = r.images;
      p.slots = r.scoped ? slot_list.data() + r.list : nullptr;
      match_on_host(p, params.ratio, nq == 1 ? &scores[r.pos] : &run_major[r.pos * size_t(nq)]);
    }
    if (nq != 1) unpack(runs, run_major.data(), total);
    return;
  }
#if defined(PRISM_HAVE_CUDA)
  res.d_scores.reserve(total * size_t(nq));
  // Scoped runs: the slot lists, and for host-tier runs (gathered into staging) their counts.
  std::vector<int> gathered_counts_pos(runs.size(), -1);
  size_t gathered = 0;
  for (size_t k = 0; k < runs.size(); ++k)
    if (runs[k].scoped && runs[k].tier == kHostTier) gathered_counts_pos[k] = int(gathered), gathered += runs[k].images;
  const size_t list_n = slot_list.size() + gathered;
  if (list_n > 0) {
    int* h = res.list_buf.get(list_n, true);
    std::copy(slot_list.begin(), slot_list.end(), h);
    for (size_t k = 0; k < runs.size(); ++k) {
      if (gathered_counts_pos[k] < 0) continue;
      const Tier& tier = store.tier(kHostTier);
      const size_t base = runs[k].block * tier.block_slots;
      for (int i = 0; i < runs[k].images; ++i)
        h[slot_list.size() + gathered_counts_pos[k] + i] = tier.counts[base + slot_list[runs[k].list + i]];
    }
    res.d_slots.reserve(list_n);
    if (early > 0) {  // a digest search's candidates: not behind the GPU tier's matching on `stream`
      PRISM_CUDA_CHECK(
          cudaMemcpyAsync(res.d_slots.data(), h, list_n * sizeof(int), cudaMemcpyHostToDevice, res.copy_streams[0]));
      PRISM_CUDA_CHECK(cudaStreamSynchronize(res.copy_streams[0]));
    } else
      PRISM_CUDA_CHECK(
          cudaMemcpyAsync(res.d_slots.data(), h, list_n * sizeof(int), cudaMemcpyHostToDevice, res.stream));
  }
  const bool streaming = std::any_of(runs.begin(), runs.end(), [](const Run& r) { return r.tier == kHostTier; });
  if (streaming) {
    res.ensure_copy_streams();
    // The copy streams read the query and the lists uploaded on `stream` (a digest search's, already there).
    if (early == 0) PRISM_CUDA_CHECK(cudaStreamSynchronize(res.stream));
  }
  // Enqueue order: each tier's runs spread evenly over the search, by the share of their tier's images
  // done, so that the host tier's copies start at once and the GPU tier's blocks fill the time they
  // take. In plan order (the GPU tier first), a large GPU tier filled CUDA's launch queue, and this
  // thread waited there while PCIe idled (docs/benchmarks/texture-index.md,
  // "2,000,000 images on one node").
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
    const Tier::Block& blk = *store.tier(kHostTier).blocks[r.block];
    match::MatchU8Problem p;
    p.query = res.d_query.data();
    p.rows = nq * rows;
    p.query_rows = rows;
    p.images = r.images;
    int* out = res.d_scores.data() + r.pos * size_t(nq);
    const int s = next++ % res.streams;
    cudaStream_t cs = res.copy_streams[s];
    uint8_t* dst = res.staging[s].data();
    if (!r.scoped) {
      PRISM_CUDA_CHECK(cudaMemcpyAsync(dst, blk.data + r.first * kSlotBytes, size_t(r.images) * kSlotBytes,
                                       cudaMemcpyHostToDevice, cs));
      p.counts = blk.d_counts.data() + r.first;
    } else {
      // One copy per range of consecutive slots (a digest slot's candidates are: a block's `per` images).
      const int* listed = slot_list.data() + r.list;
      for (int i = 0, j; i < r.images; i = j) {
        for (j = i + 1; j < r.images && listed[j] == listed[j - 1] + 1;) ++j;
        PRISM_CUDA_CHECK(cudaMemcpyAsync(dst + size_t(i) * kSlotBytes, blk.data + size_t(listed[i]) * kSlotBytes,
                                         size_t(j - i) * kSlotBytes, cudaMemcpyHostToDevice, cs));
      }
      p.counts = res.d_slots.data() + slot_list.size() + gathered_counts_pos[k];
    }
    p.gallery = dst;
    match_on_device(p, params.ratio, out, {}, cs);
  }
  if (streaming)
    for (auto& cs : res.copy_streams) PRISM_CUDA_CHECK(cudaStreamSynchronize(cs));
  const size_t n_scores = total * size_t(nq);
  int* h_scores = res.scores_buf.get(n_scores, true);
  PRISM_CUDA_CHECK(
      cudaMemcpyAsync(h_scores, res.d_scores.data(), n_scores * sizeof(int), cudaMemcpyDeviceToHost, res.stream));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(res.stream));
  if (nq == 1)
    std::copy_n(h_scores, total, scores.begin());
  else
    unpack(runs, h_scores, total);
#endif
}

void rematch(const SlotStore& store, Lane& lane, const Query& q, const std::vector<int>& owners, float ratio,
             std::vector<int32_t>& best, std::vector<int32_t>& second, std::vector<int>& index,
             std::unique_lock<std::mutex>& turn) {
  const int k = int(owners.size());
  const int rows = q.rows;
  const size_t n = size_t(k) * rows;
  best.assign(n, 0), second.assign(n, 0), index.assign(n, 0);
  match::MatchU8Problem p;
  p.rows = p.query_rows = rows;
  if (!lane.gpu) {
    int score = 0;
    p.query = q.host;
    p.images = 1;
    for (int c = 0; c < k; ++c) {
      const Place at = store.where(owners[c]);
      const Tier& t = store.tier(at.tier);
      p.gallery = t.slot_data(size_t(at.slot));
      p.counts = &t.counts[size_t(at.slot)];
      const size_t o = size_t(c) * rows;
      match_on_host(p, ratio, &score, {best.data() + o, second.data() + o, index.data() + o});
    }
    return;
  }
#if defined(PRISM_HAVE_CUDA)
  // `turn` is held since prepare_query: d_query holds this search's query.
  // The shortlist grouped by where its slots live: each GPU-tier block's candidates matched in place
  // through a slot list (the block's counts are in GPU memory beside it), the host tier's copied into
  // the d_verify scratch (pinned memory: one copy each) and matched there with their counts. Each
  // group's outputs land at its place in `grouped` order and are put back in the shortlist's order.
  std::vector<int> grouped(owners.size());  // shortlist positions, GPU-tier blocks first, then the host tier
  std::iota(grouped.begin(), grouped.end(), 0);
  const auto group_of = [&](int c) {
    const Place at = store.where(owners[size_t(c)]);
    return at.tier == kGpuTier ? size_t(at.slot) / size_t(store.tier(kGpuTier).block_slots) : SIZE_MAX;
  };
  std::stable_sort(grouped.begin(), grouped.end(), [&](int a, int b) { return group_of(a) < group_of(b); });
  struct Launch {
    size_t first = 0;  // in `grouped`
    int images = 0;
    size_t block = SIZE_MAX;  // the GPU tier's block; SIZE_MAX: the host tier's, in d_verify
  };
  std::vector<Launch> launches;
  for (size_t i = 0; i < grouped.size(); ++i) {
    const size_t g = group_of(grouped[i]);
    if (launches.empty() || launches.back().block != g) launches.push_back({i, 0, g});
    ++launches.back().images;
  }
  // Grown before anything is enqueued (freeing device memory would wait for the device).
  const size_t host_candidates = launches.empty() || launches.back().block != SIZE_MAX ? 0 : launches.back().images;
  lane.d_verify.reserve(host_candidates * kSlotBytes);
  lane.d_verify_scores.reserve(k);
  lane.d_best.reserve(n), lane.d_second.reserve(n);
  lane.d_index.reserve(n);
  lane.d_slots.reserve(k);
  // The host copies' pinned buffers too: an allocation that throws after the launches would give the
  // turn back with them still reading the slots.
  int32_t* hb = lane.best_buf.get(n, true);
  int32_t* hs = lane.second_buf.get(n, true);
  int* hi = lane.index_buf.get(n, true);
  // One int a candidate, uploaded at once: a GPU-tier candidate's slot within its block, a host-tier
  // candidate's count.
  int* list = lane.list_buf.get(size_t(k), true);
  size_t copied = 0;  // host-tier candidates in d_verify
  for (size_t i = 0; i < grouped.size(); ++i) {
    const Place at = store.where(owners[size_t(grouped[i])]);
    const Tier& t = store.tier(at.tier);
    if (at.tier == kGpuTier) {
      list[i] = int(size_t(at.slot) % size_t(t.block_slots));
      continue;
    }
    list[i] = t.counts[size_t(at.slot)];
    PRISM_CUDA_CHECK(cudaMemcpyAsync(lane.d_verify.data() + copied++ * kSlotBytes, t.slot_data(size_t(at.slot)),
                                     kSlotBytes, cudaMemcpyHostToDevice, lane.stream));
  }
  PRISM_CUDA_CHECK(cudaMemcpyAsync(lane.d_slots.data(), list, k * sizeof(int), cudaMemcpyHostToDevice, lane.stream));
  p.query = lane.d_query.data();
  for (const Launch& l : launches) {
    if (l.block != SIZE_MAX) {
      const Tier::Block& blk = *store.tier(kGpuTier).blocks[l.block];
      p.gallery = blk.data;
      p.counts = blk.d_counts.data();
      p.slots = lane.d_slots.data() + l.first;
    } else {
      p.gallery = lane.d_verify.data();
      p.counts = lane.d_slots.data() + l.first;
      p.slots = nullptr;
    }
    p.images = l.images;
    const size_t o = l.first * size_t(rows);
    match_on_device(p, ratio, lane.d_verify_scores.data() + l.first,
                    {lane.d_best.data() + o, lane.d_second.data() + o, lane.d_index.data() + o}, lane.stream);
  }
  // Back to the host vectors.
  PRISM_CUDA_CHECK(cudaMemcpyAsync(hb, lane.d_best.data(), n * 4, cudaMemcpyDeviceToHost, lane.stream));
  PRISM_CUDA_CHECK(cudaMemcpyAsync(hs, lane.d_second.data(), n * 4, cudaMemcpyDeviceToHost, lane.stream));
  PRISM_CUDA_CHECK(cudaMemcpyAsync(hi, lane.d_index.data(), n * 4, cudaMemcpyDeviceToHost, lane.stream));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(lane.stream));
  for (size_t i = 0; i < grouped.size(); ++i) {  // grouped order -> the shortlist's
    const size_t from = i * size_t(rows), to = size_t(grouped[i]) * size_t(rows);
    std::copy_n(hb + from, rows, best.begin() + long(to));
    std::copy_n(hs + from, rows, second.begin() + long(to));
    std::copy_n(hi + from, rows, index.begin() + long(to));
  }
  turn.unlock();
#else
  (void)turn;
#endif
}

}  // namespace prism::texture
