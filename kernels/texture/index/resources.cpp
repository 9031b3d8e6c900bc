#include "texture/index/resources.h"

#include <memory>

namespace prism::texture {

void match_on_host(const match::MatchU8Problem& p, float ratio, int* out_scores, const RowOutputs& o) {
  match::MatchParams mp;
  mp.ratio = ratio;
  match::match_u8_cpu(p, mp, {out_scores, o.best, o.second, o.index});
}

#if defined(PRISM_HAVE_CUDA)
void match_on_device(const match::MatchU8Problem& p, float ratio, int* out_scores, const RowOutputs& o,
                     cudaStream_t s) {
  match::MatchParams mp;
  mp.ratio = ratio;
  match::match_u8_cuda(p, mp, {out_scores, o.best, o.second, o.index}, s);
}
#endif

Lane::Lane(bool gpu_path) : gpu(gpu_path) {
#if defined(PRISM_HAVE_CUDA)
  if (gpu) {
    stream = gpu::Stream::create();
    d_query.resize(match::kSlotBytes);
  }
#endif
}

SearchResources::SearchResources(bool gpu_path, int n_streams, int batch, int lanes)
    : Lane(gpu_path), streams(n_streams), host_batch(batch) {
  if (gpu)
    for (int l = 1; l < lanes; ++l) more_lanes.push_back(std::make_unique<Lane>(true));
}

#if defined(PRISM_HAVE_CUDA)
void SearchResources::ensure_copy_streams() {
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
  for (int s = 0; s < streams; ++s) cs.push_back(gpu::Stream::create_high_priority());
  // A staging buffer per copy stream, and at least two: a streamed digest search's ring copies into one
  // while the other is matched.
  for (int k = 0; k < std::max(streams, 2); ++k) {
    st.emplace_back(size_t(host_batch) * match::kSlotBytes);
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

}  // namespace prism::texture
