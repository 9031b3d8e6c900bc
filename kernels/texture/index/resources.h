// What the texture index's searches work with besides the slots: the CUDA streams, events, staging
// and scratch buffers, and the pinned host buffers of their copies (as FAISS's GpuResources: owned
// once per index, lent to the search plan rather than owned by it). Internal to the index
// (texture/index.cpp and the units beside this file).
//
// A search works in a lane (its stream, query buffer and verification scratch), whose `turn` it holds
// from the query's upload until its last matching (the verification's), since d_query holds that
// search's query throughout. The searches that score the index share lane 0, the resources themselves
// (its stream is the slot store's, and the scoring's buffers and copy streams come with it); a
// verification of named products (TextureIndex::verify, verify_shortlist) takes any free lane, so that
// concurrent verifications overlap on the GPU rather than each wait for the one before to be copied
// back. The slot store's writes of what a verification reads (slots, counts, norms) synchronise before
// a writer lets searches in, so a lane's stream needs no ordering with lane 0's (a digest cleared by a
// removal may still be queued on lane 0's stream, which only lane 0's searches read).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/device_array.h"
#include "match/match.h"

namespace prism::texture {

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

// The per-row outputs of a matcher call (null: not wanted).
struct RowOutputs {
  int32_t *best = nullptr, *second = nullptr;  // squared distances
  int* index = nullptr;
};

// One matcher call; out_scores written, not added to, on either path.
void match_on_host(const match::MatchU8Problem& p, float ratio, int* out_scores, const RowOutputs& o = {});
#if defined(PRISM_HAVE_CUDA)
void match_on_device(const match::MatchU8Problem& p, float ratio, int* out_scores, const RowOutputs& o, cudaStream_t s);
#endif

// One search's working set (above). On the CPU path nothing is shared and no turn is taken.
struct Lane {
  explicit Lane(bool gpu);  // gpu: create the stream and the query's device buffer

  const bool gpu;
  std::mutex turn;

  // Pinned on the GPU path, used under `turn`.
  HostBuffer<uint8_t> query_buf;
  HostBuffer<int> list_buf, index_buf;
  HostBuffer<int32_t> best_buf, second_buf;
#if defined(PRISM_HAVE_CUDA)
  gpu::Stream stream;                 // declared first, destroyed last
  gpu::DeviceArray<uint8_t> d_query;  // kSlot rows
  gpu::DeviceArray<int> d_slots;
  gpu::DeviceArray<uint8_t> d_verify;  // the shortlist's host-tier slots (GPU-tier ones are read in place)
  gpu::DeviceArray<int> d_verify_scores, d_index;
  gpu::DeviceArray<int32_t> d_best, d_second;
#endif
};

// Lane 0 and what only the scoring searches use.
struct SearchResources : Lane {
  // gpu: create lane 0's stream and buffers and `lanes - 1` more lanes; `streams` copy streams
  // (IndexOptions::streams), each with `host_batch` slots of staging, come with the first search that
  // streams host memory.
  SearchResources(bool gpu, int streams, int host_batch, int lanes);

  const int streams, host_batch;
  std::vector<std::unique_ptr<Lane>> more_lanes;  // lanes 1..: verifications only

  // Pinned on the GPU path, used under lane 0's turn.
  HostBuffer<int> scores_buf, digest_scores_buf;
#if defined(PRISM_HAVE_CUDA)
  std::vector<gpu::Stream> copy_streams;
  std::vector<gpu::DeviceArray<uint8_t>> staging;  // per copy stream: host_batch slots
  // A streamed digest search's ring over `staging`: landed[k] after its copy into staging[k], freed[k]
  // after the matching that read it (digest_stage.h); digests_matched after a digest search's last matching.
  std::vector<gpu::Event> landed, freed;
  gpu::Event digests_matched;
  int sms = 0;  // the device's multiprocessors
  gpu::DeviceArray<int> d_scores, d_digest_scores;
  // kSlot, as many times as one matcher call takes digest slots (host_batch streamed, a block's kept): the
  // counts of every digest search (a digest slot is read whole)
  gpu::DeviceArray<int> d_full_counts;

  // `streams` high-priority streams, each with host_batch slots of staging (at least two buffers).
  void ensure_copy_streams();
  // A streamed digest search's copies run on gather_blocks() blocks of 512 threads, at most a quarter of
  // a small GPU; the matchers' grids meanwhile leave them that many multiprocessors. (16 blocks: the
  // fewest that kept the copy at PCIe's rate: docs/benchmarks/texture-index.md.)
  static constexpr int kGatherBlocks = 16;
  int gather_blocks() const { return std::clamp(sms / 4, 1, kGatherBlocks); }
  int gather_grid_sms() const { return std::max(1, sms - gather_blocks()); }
#endif
};

}  // namespace prism::texture
