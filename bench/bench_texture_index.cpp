// The tiered 8-bit texture index at scale (GPU machine): capacity per tier, the host-to-device
// bandwidth, gallery images/s matched from GPU memory and streamed from pinned host memory, 1:M
// search latency (p50/p99) over the whole index and over one collection, and the INT8 tensor-core
// peak (cuBLAS s8 GEMM) for the share of it the matcher reaches.
//
//   bench_texture_index [GPU_IMAGES=770000] [HOST_IMAGES=300000] [COLLECTION=10000] [STREAMS=4] [HOST_BATCH=256]
//                       [GPU_NORMS=1] (0: the GPU tier without |g|^2, IndexOptions::gpu_norms)
//                       [DIGEST_ROWS=0] [DIGEST_CANDIDATES=1000] (IndexOptions::host_digest_rows: the host
//                       tier's digests in GPU memory beside GPU_IMAGES, and the whole index searched through
//                       them too, SearchParams::digest_candidates digest slots re-matched exactly; a list
//                       such as 1000,2000,4000 times each, the first traced)
//                       [STREAM_DIGESTS=0] (1: IndexOptions::stream_host_digests, the digests copied from the
//                       host tier by each search instead of kept in GPU memory)
//   BENCH_TRACE=DIR: after the timed searches, one exact and one digest search are traced (CUPTI: when
//   copies and kernels ran, cupti_trace.h), summarised on stdout and written to DIR/*.csv.
//
// Generated gallery (no 2 M SIFT extractions): 48 fresh random textures (640x480, smoothed noise at
// two scales as in the tests) give a pool of real SIFT descriptors with their keypoints; each
// gallery image is 768 rows drawn at random from that pool (so the descriptors have real SIFT's
// sparsity and value distribution). The query is one gallery image's own features, so the search
// must identify it (geometry included).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <opencv2/core.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "cupti_trace.h"
#include "common/device_array.h"
#include "match/match.h"
#include "texture/gallery.h"
#include "texture/index.h"
#include "gallery_cases.h"

using namespace prism;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * (v.size() - 1) + 0.5))];
}

// Host-to-device bandwidth from pinned memory (what streaming the host tier can reach).
double h2d_gbps() {
  const size_t bytes = size_t(256) << 20;
  gpu::PinnedArray<uint8_t> h(bytes);
  gpu::DeviceArray<uint8_t> d(bytes);
  std::fill_n(h.data(), bytes, uint8_t(1));
  std::vector<double> ms;
  for (int i = 0; i < 9; ++i) {
    const auto t0 = Clock::now();
    bench::check(cudaMemcpy(d.data(), h.data(), bytes, cudaMemcpyHostToDevice));
    ms.push_back(ms_since(t0));
  }
  return bytes / bench::median(ms) / 1e6;
}

// Dense INT8 tensor-core rate, cuBLAS s8 x s8 -> s32 GEMM 8192^3 (TOPS).
double int8_peak_tops() {
  const int n = 8192;
  gpu::DeviceArray<int8_t> a(size_t(n) * n), b(size_t(n) * n);
  gpu::DeviceArray<int32_t> c(size_t(n) * n);
  bench::check(cudaMemset(a.data(), 1, a.size()));
  bench::check(cudaMemset(b.data(), 1, b.size()));
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  const int32_t alpha = 1, beta = 0;
  auto gemm = [&] {
    return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &alpha, a.data(), CUDA_R_8I, n, b.data(), CUDA_R_8I, n,
                        &beta, c.data(), CUDA_R_32I, n, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
  };
  if (gemm() != CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(h);
    return 0;
  }
  bench::check(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = Clock::now();
    gemm();
    bench::check(cudaDeviceSynchronize());
    ms.push_back(ms_since(t0));
  }
  cublasDestroy(h);
  return 2.0 * n * n * double(n) / bench::median(ms) / 1e9;
}

// Median ms of a whole-index search (scores of every image) over `reps` runs.
double search_ms(texture::TextureIndex& index, const texture::Features& q, int reps) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) ms.push_back(index.search(q, {}).match_ms);
  return bench::median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t gpu_images = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 770000;
  const size_t host_images = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 300000;
  const size_t collection = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 10000;
  texture::IndexOptions defaults;
  const int streams = argc > 4 ? std::atoi(argv[4]) : defaults.streams;
  const int host_batch = argc > 5 ? std::atoi(argv[5]) : defaults.host_batch;
  const bool gpu_norms = argc > 6 ? std::atoi(argv[6]) != 0 : defaults.gpu_norms;  // 0: the GPU tier without |g|^2
  const int digest_rows = argc > 7 ? std::atoi(argv[7]) : 0;
  // DIGEST_CANDIDATES may be a list (1000,2000,4000): the digest searches are timed at each
  std::vector<int> candidate_counts;
  const char* const candidate_list = argc > 8 ? argv[8] : "1000";
  for (const char* at = candidate_list; *at;) {
    char* end = nullptr;
    const long k = std::strtol(at, &end, 10);
    if (end == at || k <= 0 || k > (1 << 30) || (*end && (*end != ',' || !end[1]))) {
      candidate_counts.clear();
      break;
    }
    candidate_counts.push_back(int(k));
    at = *end ? end + 1 : end;
  }
  if (candidate_counts.empty()) {
    std::fprintf(stderr, "bench_texture_index: DIGEST_CANDIDATES '%s' is not a list of counts\n", candidate_list);
    return 2;
  }
  const int digest_candidates = candidate_counts.front();  // the traced search's
  const bool stream_digests = argc > 9 && std::atoi(argv[9]) != 0;
  std::string why;
  if (!gpu::available(&why)) {
    std::fprintf(stderr, "bench_texture_index: no GPU: %s\n", why.c_str());
    return 1;
  }
  std::mt19937 rng(5);
  const test::SiftPool pool = test::sift_pool(48, rng);
  const double gbps = h2d_gbps();
  const double tops = int8_peak_tops();
  std::printf(
      "device: %s; pool of %zu real SIFT descriptors; slot %d bytes per image (8-bit), %zu in GPU memory (|g|^2 "
      "%s); host tier streamed on %d streams in batches of %d\n\n",
      gpu::device_name(0).c_str(), pool.size(), match::kSlotBytes, texture::image_bytes(true, gpu_norms),
      gpu_norms ? "kept" : "not kept", streams, host_batch);
  std::printf("| measure | value |\n|---|---|\n");
  std::printf("| host-to-device bandwidth (pinned, 256 MiB copies) | %.1f GB/s = %.0f k images/s |\n", gbps,
              gbps * 1e9 / match::kSlotBytes / 1e3);
  std::printf("| INT8 tensor-core peak (cuBLAS s8 GEMM 8192^3) | %.0f TOPS |\n", tops);
  std::fflush(stdout);

  const int64_t slot = match::kSlotBytes;  // crosses PCIe per host-tier image
  const int64_t gpu_slot = int64_t(texture::image_bytes(true, gpu_norms));
  // 1. Rates per tier, on indexes of 100,000 images entirely in one tier.
  const size_t tier_n = 100000;
  double gpu_rate = 0, host_rate = 0;
  texture::Features probe;
  for (int tier = 0; tier < 2; ++tier) {
    texture::IndexOptions o;
    o.device = texture::Device::kCuda;
    o.gpu_budget = tier == 0 ? int64_t(tier_n) * gpu_slot : 0;
    o.host_budget = tier == 0 ? 0 : int64_t(tier_n) * slot;
    o.streams = streams;
    o.host_batch = host_batch;
    o.gpu_norms = gpu_norms;
    texture::TextureIndex index(o);
    for (size_t i = 0; i < tier_n; ++i) {
      texture::GalleryEntry e = test::pooled_gallery_entry(pool, rng, "p" + std::to_string(i));
      if (i == 0 && tier == 0) probe = e.features;
      index.add(e);
    }
    const double ms = search_ms(index, probe, 9);
    (tier == 0 ? gpu_rate : host_rate) = tier_n / ms * 1e3;
    std::printf(
        "| %s tier: %zu images, one 768-row query | %.2f ms = %.2f M images/s (%.1f%% of INT8 peak)%s |\n",
        tier == 0 ? "GPU" : "host (streamed)", tier_n, ms, tier_n / ms / 1e3,
        100.0 * tier_n / ms * 1e3 * 2.0 * match::kSlot * match::kSlot * match::kDim / (tops * 1e12),
        tier == 0
            ? ""
            : (", " + std::to_string(int(100.0 * tier_n * slot / (ms * 1e-3) / (gbps * 1e9))) + "% of H2D").c_str());
    std::fflush(stdout);
  }

  // 2. The tiered index: GPU_IMAGES in GPU memory, HOST_IMAGES in host memory (the oldest).
  texture::IndexOptions o;
  o.device = texture::Device::kCuda;
  o.gpu_budget = int64_t(gpu_images) * gpu_slot;
  o.host_budget = int64_t(host_images) * slot;
  o.streams = streams;
  o.host_batch = host_batch;
  o.gpu_norms = gpu_norms;
  o.host_digest_rows = digest_rows;
  o.stream_host_digests = stream_digests;
  if (digest_rows > 0 && !stream_digests) {  // the digests' GPU memory on top of GPU_IMAGES' (host blocks)
    const size_t per = size_t(match::kSlot / digest_rows), b = size_t(o.block_slots);
    o.gpu_budget += int64_t(host_images / b * ((b + per - 1) / per) + (host_images % b + per - 1) / per) * slot;
  }
  texture::TextureIndex index(o);
  const size_t total = gpu_images + host_images;
  const size_t lots = std::max<size_t>(1, total / collection);
  auto t0 = Clock::now();
  texture::Features target;
  size_t added = 0;
  std::string full;      // the IndexFull that stopped the adds, if one did (the machine's memory)
  double filled_s = -1;  // when the GPU tier was full: every later add moves its oldest image to host
  for (size_t i = 0; i < total; ++i, ++added) {
    if (i == gpu_images) filled_s = ms_since(t0) / 1e3;
    texture::GalleryEntry e = test::pooled_gallery_entry(pool, rng, "p" + std::to_string(i));
    e.collection = "lot" + std::to_string(i % lots);
    if (i == 12345 % total) target = e.features;  // host-resident by the end (added early)
    try {
      index.add(e);
    } catch (const texture::IndexFull& x) {
      full = x.what();
      break;
    }
    if ((i + 1) % 100000 == 0) std::fprintf(stderr, "bench_texture_index: %zu / %zu added\n", i + 1, total);
  }
  const double add_s = ms_since(t0) / 1e3;
  const texture::IndexStats st = index.stats();
  std::printf("| tiered index: adds (newest to GPU memory, the oldest moved to host) | %zu in %.1f s = %.0f adds/s |\n",
              added, add_s, added / add_s);
  if (gpu_images > 0 && filled_s > 0 && added > gpu_images)
    std::printf(
        "| the same: while the GPU tier fills / then (each moves the GPU tier's oldest to host) | %.1f / %.1f us an "
        "add |\n",
        filled_s * 1e6 / double(gpu_images), (add_s - filled_s) * 1e6 / double(added - gpu_images));
  if (!full.empty()) std::printf("| capacity: %zu asked, %zu held | %s |\n", total, added, full.c_str());
  if (added <= 12345 % total) {
    std::fprintf(stderr, "bench_texture_index: the query's image (p%zu) was not added\n", size_t(12345 % total));
    return 1;
  }
  std::printf("| capacity in use: GPU tier | %zu images, %.1f GB |\n", st.gpu_images, st.gpu_bytes / 1e9);
  std::printf("| capacity in use: host tier (pinned) | %zu images, %.1f GB |\n", st.host_images, st.host_bytes / 1e9);
  if (digest_rows > 0 && !stream_digests)
    std::printf("| host tier's digests in GPU memory | %d rows an image, %d a slot: %.1f GB |\n", digest_rows,
                match::kSlot / digest_rows, st.digest_bytes / 1e9);
  if (stream_digests)
    std::printf(
        "| host tier's digests streamed by each digest search | %d rows an image, %d a slot: %.1f GB a search |\n",
        digest_rows, match::kSlot / digest_rows, double(st.host_images) * digest_rows * match::kDim / 1e9);
  std::fflush(stdout);

  std::vector<double> whole, whole_total, scoped, scoped_total;
  texture::SearchResult r, rs;
  texture::SearchParams in_lot;
  in_lot.collections = {"lot" + std::to_string(12345 % total % lots)};
  for (int i = 0; i < 21; ++i) {
    auto a = Clock::now();
    r = index.search(target, {});
    if (i) whole.push_back(r.match_ms), whole_total.push_back(ms_since(a));
    a = Clock::now();
    rs = index.search(target, in_lot);
    if (i) scoped.push_back(rs.match_ms), scoped_total.push_back(ms_since(a));
  }
  std::printf("| 1:M over all %zu images: matching p50 / p99 | %.1f / %.1f ms (%.2f M images/s) |\n", r.searched,
              percentile(whole, 0.5), percentile(whole, 0.99), r.searched / percentile(whole, 0.5) / 1e3);
  std::printf("| 1:M over all %zu images: with verification p50 / p99 | %.1f / %.1f ms |\n", r.searched,
              percentile(whole_total, 0.5), percentile(whole_total, 0.99));
  std::printf("| 1:M within one collection of %zu: p50 / p99 (with verification) | %.2f / %.2f ms |\n", rs.searched,
              percentile(scoped_total, 0.5), percentile(scoped_total, 0.99));
  std::printf("result: whole %s identified=%d, collection %s identified=%d (expected p%zu)\n", r.best.id.c_str(),
              int(r.identified), rs.best.id.c_str(), int(rs.identified), size_t(12345 % total));
  bool digest_ok = true;
  for (const int k : digest_rows > 0 ? candidate_counts : std::vector<int>{}) {
    texture::SearchParams approx;
    approx.digest_candidates = k;
    std::vector<double> dm, dt;
    texture::SearchResult rd;
    for (int i = 0; i < 21; ++i) {
      const auto a = Clock::now();
      rd = index.search(target, approx);
      if (i) dm.push_back(rd.match_ms), dt.push_back(ms_since(a));
    }
    std::printf(
        "| 1:M over all %zu images through the host tier's digests (%d digest slots re-matched: %zu images matched "
        "exactly, %zu by digest only): matching p50 / p99 | %.1f / %.1f ms |\n",
        rd.searched + rd.digested, k, rd.searched, rd.digested, percentile(dm, 0.5), percentile(dm, 0.99));
    std::printf("| the same with verification p50 / p99 | %.1f / %.1f ms |\n", percentile(dt, 0.5),
                percentile(dt, 0.99));
    std::printf("result: through the digests (%d) %s identified=%d\n", k, rd.best.id.c_str(), int(rd.identified));
    digest_ok = digest_ok && rd.identified && rd.best.id == "p" + std::to_string(12345 % total);
  }
  if (const char* dir = std::getenv("BENCH_TRACE")) {
    const std::string d = dir;
    if (!bench::CuptiTrace::begin()) {
      std::fprintf(stderr, "bench_texture_index: CUPTI tracing could not start\n");
    } else {
      const auto traced = [&](const char* title, const texture::SearchParams& sp, const std::string& file) {
        bench::check(cudaDeviceSynchronize());
        const uint64_t from = bench::CuptiTrace::now();
        const texture::SearchResult tr = index.search(target, sp);
        bench::check(cudaDeviceSynchronize());
        const uint64_t to = bench::CuptiTrace::now();
        std::printf("traced %s: matching %.1f ms\n", title, tr.match_ms);
        bench::CuptiTrace::report(title, bench::CuptiTrace::take(from, to), d + "/" + file);
      };
      traced("exact", {}, "trace_exact.csv");
      if (digest_rows > 0) {
        texture::SearchParams approx;
        approx.digest_candidates = digest_candidates;
        traced("digest", approx, "trace_digest.csv");
      }
    }
  }
  std::printf("rates: GPU tier %.2f M images/s, host tier %.2f M images/s (%.1f%% of H2D)\n", gpu_rate / 1e6,
              host_rate / 1e6, 100.0 * host_rate * slot / (gbps * 1e9));
  const std::string want = "p" + std::to_string(12345 % total);
  return r.identified && rs.identified && r.best.id == want && rs.best.id == want && digest_ok ? 0 : 1;
}
