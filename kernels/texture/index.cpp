#include "texture/index.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "common/device_array.h"
#include "common/gpu.h"
#include "match/match.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace prism::texture {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

constexpr size_t kSlotBytes = match::kSlotBytes;

// Query rows padded to a multiple of 16 with zero vectors (a zero row never passes the ratio test),
// written to `out` (kSlotBytes); returns the row count.
int pad_query(const Features& q, uint8_t* out) {
  const int rows = std::max(16, (std::min(q.count(), match::kSlot) + 15) / 16 * 16);
  const size_t used = std::min(q.descriptors.size(), kSlotBytes);
  std::copy_n(q.descriptors.begin(), used, out);
  std::fill(out + used, out + size_t(rows) * match::kDim, uint8_t(0));
  return rows;
}

}  // namespace

// Host buffers reused by every search: pinned on the GPU path (asynchronous copies), plain on the CPU.
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

struct TextureIndex::Impl {
  bool gpu = false;
  std::string description;
  std::vector<uint8_t> gallery;  // CPU path: [images][kSlot][kDim]
  std::vector<int> counts;
  HostBuffer<uint8_t> query;         // the padded query
  HostBuffer<int> scores;            // per gallery image, and one per verified candidate
  HostBuffer<int32_t> best, second;  // per verified candidate and query row: squared distances
  HostBuffer<int> best_index;
#if defined(PRISM_HAVE_CUDA)
  gpu::Stream stream;  // declared first: destroyed after everything that works on it
  gpu::DeviceArray<uint8_t> d_gallery;
  gpu::DeviceArray<int> d_counts;
  gpu::DeviceArray<uint8_t> d_query;  // kSlot rows
  gpu::DeviceArray<int> d_scores;     // per gallery image
  // Verification runs, per candidate: its score, and per query row the top-2 and the best's index.
  gpu::DeviceArray<int> d_verify_scores;
  gpu::DeviceArray<int32_t> d_best, d_second;  // [verify slot][kSlot]
  gpu::DeviceArray<int> d_index;
  int verify_slots = 0;  // slots that the four above all hold

  void ensure_verify_slots(int n) {
    if (n <= verify_slots) return;
    verify_slots = 0;  // until all four hold n: an allocation may throw between them
    // The old ones go before the new ones are allocated.
    d_verify_scores.reset(), d_best.reset(), d_second.reset(), d_index.reset();
    d_verify_scores.resize(n);
    d_best.resize(size_t(n) * match::kSlot);
    d_second.resize(size_t(n) * match::kSlot);
    d_index.resize(size_t(n) * match::kSlot);
    verify_slots = n;
  }
#endif
};

TextureIndex::TextureIndex(Device device) : impl_(std::make_unique<Impl>()) {
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
      impl_->description = "cuda:" + std::to_string(dev) + " (" + gpu::device_name(dev) + ")";
    }
  }
#endif
  if (device == Device::kCuda && !usable) throw gpu::CudaError("device=cuda but " + why);
  impl_->gpu = usable && device != Device::kCpu;
  if (!impl_->gpu) impl_->description = device == Device::kCpu ? "cpu" : "cpu (" + why + ")";
#if defined(PRISM_HAVE_CUDA)
  if (impl_->gpu) {
    impl_->stream = gpu::Stream::create();
    impl_->d_query.resize(kSlotBytes);
  }
#endif
}

TextureIndex::~TextureIndex() = default;

bool TextureIndex::on_gpu() const { return impl_->gpu; }
std::string TextureIndex::device_description() const { return impl_->description; }

void TextureIndex::build(const std::vector<GalleryEntry>& entries) {
  Impl& m = *impl_;
  const size_t n = entries.size();
  // ids_ and geometry_ are filled last: when an allocation or upload below throws, the index is left
  // empty rather than naming images whose descriptors are not (all) there.
  ids_.clear();
  geometry_.clear();
  std::vector<std::string> ids;
  std::vector<Features> geometry;
  m.counts.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    ids.push_back(entries[i].id);
    Features g;
    g.width = entries[i].features.width;
    g.height = entries[i].features.height;
    g.keypoints = entries[i].features.keypoints;
    geometry.push_back(std::move(g));
    m.counts[i] = std::min(entries[i].features.count(), match::kSlot);
  }
  auto pack = [&](size_t i, uint8_t* slot) {  // one image's descriptors, the rest of the slot zero
    const auto& d = entries[i].features.descriptors;
    const size_t used = std::min(d.size(), kSlotBytes);
    std::copy_n(d.begin(), used, slot);
    std::fill(slot + used, slot + kSlotBytes, uint8_t(0));
  };
  if (!m.gpu) {
    m.gallery.assign(n * kSlotBytes, 0);
    for (size_t i = 0; i < n; ++i) pack(i, &m.gallery[i * kSlotBytes]);
  } else {
#if defined(PRISM_HAVE_CUDA)
    m.d_gallery.reset(), m.d_counts.reset(), m.d_scores.reset();  // the old gallery goes before the new one comes
    m.d_gallery.resize(n * kSlotBytes);
    m.d_counts = gpu::device_copy(m.counts.data(), n);
    m.d_scores.resize(n);
    // Upload through a host staging buffer of up to 256 images at a time.
    const size_t batch = 256;
    std::vector<uint8_t> staging(std::min(n, batch) * kSlotBytes);
    for (size_t i0 = 0; i0 < n; i0 += batch) {
      const size_t k = std::min(batch, n - i0);
      for (size_t i = 0; i < k; ++i) pack(i0 + i, &staging[i * kSlotBytes]);
      PRISM_CUDA_CHECK(
          cudaMemcpy(m.d_gallery.data() + i0 * kSlotBytes, staging.data(), k * kSlotBytes, cudaMemcpyHostToDevice));
    }
#endif
  }
  ids_ = std::move(ids);
  geometry_ = std::move(geometry);
}

int TextureIndex::find(const std::string& id) const {
  auto it = std::find(ids_.begin(), ids_.end(), id);
  return it == ids_.end() ? -1 : int(it - ids_.begin());
}

std::vector<int> TextureIndex::scores(const Features& query, const SearchParams& params) {
  Impl& m = *impl_;
  const int images = int(ids_.size());
  std::vector<int> scores(images, 0);
  if (images == 0 || query.count() == 0) return scores;
  uint8_t* q = m.query.get(kSlotBytes, m.gpu);
  const int rows = pad_query(query, q);
  match::MatchU8Problem p;
  p.rows = p.query_rows = rows;
  p.images = images;
  match::MatchParams mp;
  mp.ratio = params.ratio;
  if (!m.gpu) {
    p.query = q;
    p.gallery = m.gallery.data();
    p.counts = m.counts.data();
    match::MatchU8Outputs out;
    out.scores = scores.data();
    match::match_u8_cpu(p, mp, out);
    return scores;
  }
#if defined(PRISM_HAVE_CUDA)
  int* h_scores = m.scores.get(images, true);
  PRISM_CUDA_CHECK(cudaMemcpyAsync(m.d_query.data(), q, size_t(rows) * match::kDim, cudaMemcpyHostToDevice, m.stream));
  p.query = m.d_query.data();
  p.gallery = m.d_gallery.data();
  p.counts = m.d_counts.data();
  match::MatchU8Outputs out;
  out.scores = m.d_scores.data();
  match::match_u8_cuda(p, mp, out, m.stream);
  PRISM_CUDA_CHECK(
      cudaMemcpyAsync(h_scores, m.d_scores.data(), images * sizeof(int), cudaMemcpyDeviceToHost, m.stream));
  PRISM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  std::copy_n(h_scores, images, scores.begin());
#endif
  return scores;
}

// Re-matches each candidate for its per-row top-2 (one matcher call per image), verifies it and
// sorts the candidates by significance (then inliers, score, index). Returns the best.
Candidate TextureIndex::verify_candidates(const Features& query, std::vector<Candidate>& cands,
                                          const SearchParams& params, SearchResult& result) {
  Impl& m = *impl_;
  const auto t0 = Clock::now();
  if (cands.empty()) {  // nothing to verify (and no zero-length device buffers to pass around)
    result.verify_ms = ms_since(t0);
    return Candidate{};
  }
  uint8_t* q = m.query.get(kSlotBytes, m.gpu);
  const int rows = pad_query(query, q);
  const int k = int(cands.size());
  const size_t n = size_t(k) * rows;
  int32_t* best = m.best.get(n, m.gpu);
  int32_t* second = m.second.get(n, m.gpu);
  int* index = m.best_index.get(n, m.gpu);
  match::MatchParams mp;
  mp.ratio = params.ratio;
  match::MatchU8Problem p;
  p.rows = p.query_rows = rows;
  p.images = 1;
  if (!m.gpu) {
    int score = 0;
    p.query = q;
    for (int c = 0; c < k; ++c) {
      p.gallery = &m.gallery[size_t(cands[c].index) * kSlotBytes];
      p.counts = &m.counts[cands[c].index];
      match::match_u8_cpu(p, mp,
                          {&score, &best[size_t(c) * rows], &second[size_t(c) * rows], &index[size_t(c) * rows]});
    }
  } else {
#if defined(PRISM_HAVE_CUDA)
    m.ensure_verify_slots(k);
    PRISM_CUDA_CHECK(
        cudaMemcpyAsync(m.d_query.data(), q, size_t(rows) * match::kDim, cudaMemcpyHostToDevice, m.stream));
    int* d_score = m.d_verify_scores.data();
    p.query = m.d_query.data();
    for (int c = 0; c < k; ++c) {
      p.gallery = m.d_gallery.data() + size_t(cands[c].index) * kSlotBytes;
      p.counts = m.d_counts.data() + cands[c].index;
      const size_t o = size_t(c) * rows;
      match::match_u8_cuda(p, mp, {d_score + c, m.d_best.data() + o, m.d_second.data() + o, m.d_index.data() + o},
                           m.stream);
    }
    PRISM_CUDA_CHECK(cudaMemcpyAsync(best, m.d_best.data(), n * 4, cudaMemcpyDeviceToHost, m.stream));
    PRISM_CUDA_CHECK(cudaMemcpyAsync(second, m.d_second.data(), n * 4, cudaMemcpyDeviceToHost, m.stream));
    PRISM_CUDA_CHECK(cudaMemcpyAsync(index, m.d_index.data(), n * 4, cudaMemcpyDeviceToHost, m.stream));
    PRISM_CUDA_CHECK(cudaStreamSynchronize(m.stream));
#endif
  }
  const double tests = std::log10(std::max(1, k));
  for (int c = 0; c < k; ++c) {
    const size_t o = size_t(c) * rows;
    const auto matches = ratio_matches(&best[o], &second[o], &index[o], query.count(), params.ratio);
    cands[c].geometry = verify_geometry(query, geometry_[cands[c].index], matches, params.verify);
    cands[c].significance = cands[c].geometry.significance - tests;
  }
  std::sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    if (a.geometry.significance != b.geometry.significance) return a.geometry.significance > b.geometry.significance;
    if (a.geometry.inliers != b.geometry.inliers) return a.geometry.inliers > b.geometry.inliers;
    if (a.score != b.score) return a.score > b.score;
    return a.index < b.index;
  });
  result.verify_ms = ms_since(t0);
  return cands.empty() ? Candidate{} : cands.front();
}

bool accepted(const Candidate& c, const SearchParams& params) {
  return c.geometry.inliers >= params.min_inliers && c.significance >= params.min_significance;
}

SearchResult TextureIndex::search(const Features& query, const SearchParams& params) {
  SearchResult r;
  const auto t0 = Clock::now();
  const std::vector<int> s = scores(query, params);
  r.match_ms = ms_since(t0);
  std::vector<int> order(s.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t k = std::min(order.size(), size_t(std::max(1, params.shortlist)));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return s[a] != s[b] ? s[a] > s[b] : a < b; });
  for (size_t i = 0; i < k; ++i)
    if (s[order[i]] >= 4) r.candidates.push_back({order[i], ids_[order[i]], s[order[i]], {}});  // RANSAC needs 4
  r.best = verify_candidates(query, r.candidates, params, r);
  if (r.best.index < 0 && !order.empty()) r.best = {order[0], ids_[order[0]], s[order[0]], {}};
  r.identified = r.best.index >= 0 && accepted(r.best, params);
  return r;
}

SearchResult TextureIndex::verify(const Features& query, const std::string& id, const SearchParams& params) {
  const int i = find(id);
  if (i < 0) throw GalleryError("product '" + id + "' is not enrolled");
  SearchResult r;
  r.candidates.push_back({i, id, 0, {}});
  r.best = verify_candidates(query, r.candidates, params, r);
  r.best.score = r.candidates.front().score = r.best.geometry.matches;
  r.identified = accepted(r.best, params);
  return r;
}

}  // namespace prism::texture
