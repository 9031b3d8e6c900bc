#include "texture/index/digest_stage.h"

#include <algorithm>
#include <numeric>

#include "common/copy_rows.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::texture {

namespace {
constexpr size_t kSlotBytes = match::kSlotBytes;
}

bool digest_search(const SlotStore& store, const SearchParams& params) {
  const DigestLayout& digest = store.digest();
  const size_t host = store.tier(kHostTier).used();
  return digest.rows > 0 && params.digest_candidates > 0 && host > 0 &&
         size_t(params.digest_candidates) * size_t(digest.per) < host;
}

void digest_match(const SlotStore& store, SearchResources& res, const uint8_t* query, int rows, float ratio,
                  std::vector<int>& s, const std::function<void(double)>& progress) {
  const DigestLayout& digest = store.digest();
  const Tier& h = store.tier(kHostTier);
  const size_t B = size_t(h.block_slots), used = h.used();
  const size_t total = digest.slots_of(used, B);
  const size_t bytes = size_t(digest.rows) * match::kDim;  // one image's digest
  match::MatchU8Problem p;
  p.rows = p.query_rows = rows;
  if (!store.gpu()) {
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
        p.gallery = store.digest_slots().blocks[b]->data;
      }
      p.counts = whole.data();
      match_on_host(p, ratio, &s[pos]);
      pos += size_t(p.images);
    }
    return;
  }
#if defined(PRISM_HAVE_CUDA)
  res.ensure_copy_streams();
  res.d_digest_scores.reserve(total);
  // Streamed: batches of at most host_batch digest slots (the staging's size) within a block, each block's
  // from its start, so that image l of a block lands where a kept digest block holds it: l * bytes.
  const size_t per = size_t(digest.per), batch = digest.streamed ? size_t(res.host_batch) * per : B;
  std::vector<int> whole;  // kept alive until `stream` is synchronised below
  const size_t most = digest.streamed ? size_t(res.host_batch) : digest.slots_for(B);  // slots a call
  if (res.d_full_counts.size() < most) {
    whole.assign(most, match::kSlot);
    res.d_full_counts.resize(whole.size());
    PRISM_CUDA_CHECK(cudaMemcpyAsync(res.d_full_counts.data(), whole.data(), whole.size() * sizeof(int),
                                     cudaMemcpyHostToDevice, res.stream));
  }
  // Now: growing pinned memory would wait for all the device's work.
  int* host_scores = res.digest_scores_buf.get(total, true);
  // The copy streams read the query (and the counts) uploaded on `stream`.
  PRISM_CUDA_CHECK(cudaStreamSynchronize(res.stream));
  // Streamed, the rows are copied by gpu::copy_rows_async on one stream into the ring of staging
  // buffers, each copy waiting only for the matching that read its buffer last. The matching, the digest
  // batches' and the GPU tier's, goes on `stream`, every grid res.gather_blocks() multiprocessors short, so
  // that the copies always have room (copy_rows.h says why a kernel copies). The scores come back in
  // one copy on h2d after the last matching, not on `stream` behind the GPU tier's runs that `progress`
  // queued meanwhile.
  cudaStream_t h2d = res.copy_streams[0],
               ms = digest.streamed ? res.stream.get() : res.copy_streams[res.copy_streams.size() > 1 ? 1 : 0];
  if (digest.streamed) p.grid_sms = res.gather_grid_sms();
  const size_t ring = res.staging.size();
  p.query = res.d_query.data();
  p.counts = res.d_full_counts.data();
  size_t next = 0;
  for (size_t b = 0, pos = 0; pos < total; ++b) {
    const size_t n = std::min(B, used - b * B);
    for (size_t l = 0; l < n; l += batch, ++next) {
      const size_t images = std::min(batch, n - l), slots = digest.slots_for(images);
      if (digest.streamed) {
        const size_t k = next % ring;
        uint8_t* dst = res.staging[k].data();
        if (next >= ring) PRISM_CUDA_CHECK(cudaStreamWaitEvent(h2d, res.freed[k]));
        // (255s in the last slot's places no image holds)
        gpu::copy_rows_async(dst, bytes, h.slot_data(b * B + l), kSlotBytes, bytes, images, slots * per - images, 255,
                             res.gather_blocks(), h2d);
        PRISM_CUDA_CHECK(cudaEventRecord(res.landed[k], h2d));
        PRISM_CUDA_CHECK(cudaStreamWaitEvent(ms, res.landed[k]));
        p.gallery = dst;
      } else {
        p.gallery = store.digest_slots().blocks[b]->data;
      }
      p.images = int(slots);
      const size_t at = pos + l / per;
      match_on_device(p, ratio, res.d_digest_scores.data() + at, {}, ms);
      if (digest.streamed) PRISM_CUDA_CHECK(cudaEventRecord(res.freed[next % ring], ms));
      if (progress) progress(double(at + slots) / double(total));
    }
    pos += digest.slots_for(n);
  }
  PRISM_CUDA_CHECK(cudaEventRecord(res.digests_matched, ms));
  PRISM_CUDA_CHECK(cudaStreamWaitEvent(h2d, res.digests_matched));
  PRISM_CUDA_CHECK(
      cudaMemcpyAsync(host_scores, res.d_digest_scores.data(), total * sizeof(int), cudaMemcpyDeviceToHost, h2d));
#else
  (void)query;
  (void)progress;
#endif
}

std::vector<int> digest_pick(const SlotStore& store, SearchResources& res, int digest_candidates, std::vector<int>& s) {
  const DigestLayout& digest = store.digest();
  const Tier& h = store.tier(kHostTier);
  const size_t B = size_t(h.block_slots), used = h.used();
  const size_t per_block = digest.slots_for(B), total = digest.slots_of(used, B);
#if defined(PRISM_HAVE_CUDA)
  if (res.gpu) {
    // The scores' copy on res.copy_streams[0] came after every digest matching, so the staging is free for
    // the candidates' copies; the GPU tier's runs on `stream` go on meanwhile.
    for (auto& cs : res.copy_streams) PRISM_CUDA_CHECK(cudaStreamSynchronize(cs));
    const int* hs = res.digest_scores_buf.get(total, true);
    s.assign(hs, hs + total);
  }
#endif
  std::vector<int> order(total);
  std::iota(order.begin(), order.end(), 0);
  const size_t k = std::min(total, size_t(digest_candidates));
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

}  // namespace prism::texture
