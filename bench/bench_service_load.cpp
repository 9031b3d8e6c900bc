// The fixtures and the decode-only timing of the texture service's load benchmark
// (bench/service_load/run.py, docs/benchmarks/service.md, "Under load"). Not a benchmark of its own:
// the driver runs it, then `prism texture serve` and wrk.
//
//   bench_service_load gallery DIR PRODUCTS [SHARDS...]
//     DIR/all: a gallery (clahe-4-8, the serve default) of PRODUCTS generated products p0000000..,
//     each 768 real SIFT rows drawn at random from the features of a few random textures
//     (tests/support/gallery_cases.h), written as entry files directly (no fsync) on every core,
//     then packed by the gallery's own reader (pack.log rebuilt). For each SHARDS S > 1,
//     DIR/shards-S/K (K = 0..S-1): shard K's gallery, its entries hard links to DIR/all's entries
//     of the ids that shard_of(id, S) places there, packed. So a 100,000-product fixture takes
//     11.7 GB of entries and one pack of as much per deployment, in about a minute on 16 cores.
//   bench_service_load decode REPS FILE...
//     Per file, the decode of an upload to grey timed REPS times on one thread, one markdown row
//     each: at full size (image::decode_grey) and as the service decodes it for extraction
//     (image::decode_grey_reduced with min_side = FeatureParams::max_side: a JPEG of 2048 pixels or
//     more on its longer side reduced by libjpeg's DCT scaling; PNG and PNM at full size).
//   bench_service_load extract REPS FILE...
//     Per file, one request at a time (cv::SIFT threads as it does): what a server without a GPU
//     spends on an upload before matching: the service's decode (decode_grey_reduced) +
//     prepare_detection (the shrink, and clahe-4-8 as a new gallery records) + cv::SIFT with the
//     selection and RootSIFT of texture::Features; and the same without the normalisation, the work
//     of OpenCV's own imdecode + resize + SIFT, which run.py times beside it in Python's cv2 (this
//     binary ships to the GPU machine, where Debian's imgcodecs would bring GDAL's 50 MB along).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "gallery_cases.h"
#include "image/decode.h"
#include "shard_protocol.h"
#include "texture/features.h"
#include "texture/gallery.h"
#include "texture/normalise.h"

using namespace prism;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double s_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string id_of(size_t i) {
  char id[24];
  std::snprintf(id, sizeof id, "p%07zu", i);
  return id;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "bench_service_load: %s\n", what.c_str());
  std::exit(1);
}

// A new gallery in `dir` recording the serve default normalisation, with its empty pack removed so
// that the first reader packs the entry files written behind its back.
void create(const fs::path& dir) {
  if (fs::exists(dir)) fail(dir.string() + " exists: give a fresh folder");
  texture::Gallery::open(dir, true, texture::Gallery::Load::kNoEntries, texture::poor_light_normalisation());
  fs::remove(dir / "pack.log");
}

// Packs the gallery in `dir` (the reader rebuilds pack.log from the entry files) and checks the count.
void pack(const fs::path& dir, size_t expected) {
  size_t n = 0;
  const texture::Gallery::ReadSummary r = texture::Gallery::for_each_entry(dir, [&](texture::GalleryEntry&&) { ++n; });
  if (n != expected || !fs::exists(dir / "pack.log"))
    fail(dir.string() + ": read " + std::to_string(n) + " entries of " + std::to_string(expected) + " (" + r.note +
         ")");
}

int gallery(const fs::path& dir, size_t products, const std::vector<int>& shard_counts) {
  const auto t0 = Clock::now();
  std::mt19937 rng(21);
  // Real SIFT of a few random textures: 16 for a large gallery (as bench_service), 4 for a small one
  // (a CI run on two cores).
  const test::SiftPool pool = test::sift_pool(products >= 1000 ? 16 : 4, rng);
  const fs::path all = dir / "all";
  fs::create_directories(dir);
  create(all);
  // Chunks of 1,000 ids, each with its own generator: the same gallery on any number of threads.
  constexpr size_t kChunk = 1000;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      for (size_t c; (c = next++) * kChunk < products && !failed;) {
        std::mt19937 g(uint32_t(1000003 * c + 7));
        for (size_t i = c * kChunk; i < std::min(products, (c + 1) * kChunk); ++i) {
          texture::GalleryEntry e = test::pooled_gallery_entry(pool, g, id_of(i));
          e.source = "generated";
          e.enrolled_unix = 1800000000;
          const std::vector<uint8_t> bytes = texture::Gallery::encode(e);
          std::ofstream out(all / "entries" / (e.id + ".tex"), std::ios::binary);
          out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
          if (!out) failed = true;
        }
      }
    });
  for (std::thread& w : workers) w.join();
  if (failed) fail("cannot write the entries under " + all.string() + " (disk full?)");
  const double write_s = s_since(t0);
  pack(all, products);
  std::printf("bench_service_load: %zu products in %s: entries written in %.1f s, packed in %.1f s\n", products,
              all.c_str(), write_s, s_since(t0) - write_s);
  for (const int s : shard_counts) {
    if (s < 2) continue;  // one shard serves DIR/all itself
    const auto t1 = Clock::now();
    std::vector<size_t> counts(size_t(s), 0);
    for (int k = 0; k < s; ++k) create(dir / ("shards-" + std::to_string(s)) / std::to_string(k));
    for (size_t i = 0; i < products; ++i) {
      const std::string id = id_of(i);
      const int k = service::shard::shard_of(id, s);
      const fs::path to = dir / ("shards-" + std::to_string(s)) / std::to_string(k) / "entries" / (id + ".tex");
      std::error_code ec;
      fs::create_hard_link(all / "entries" / (id + ".tex"), to, ec);
      if (ec) fs::copy_file(all / "entries" / (id + ".tex"), to);  // another file system: a copy
      ++counts[size_t(k)];
    }
    std::vector<std::thread> packers;
    for (int k = 0; k < s; ++k)
      packers.emplace_back(
          [&, k] { pack(dir / ("shards-" + std::to_string(s)) / std::to_string(k), counts[size_t(k)]); });
    for (std::thread& p : packers) p.join();
    std::printf("bench_service_load: %d shards of them in %s/shards-%d in %.1f s\n", s, dir.c_str(), s, s_since(t1));
  }
  return 0;
}

// Median and minimum ms of `reps` calls of f after one untimed call.
template <class F>
std::pair<double, double> time_ms(int reps, F f) {
  f();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return {bench::median(ms), *std::min_element(ms.begin(), ms.end())};
}

int decode(int reps, const std::vector<std::string>& files) {
  const int min_side = texture::FeatureParams{}.max_side;
  std::printf(
      "| upload | bytes | pixels | full decode p50 | min | service decode p50 | min | decoded as |\n"
      "|---|---:|---|---:|---:|---:|---:|---|\n");
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in && !in.eof()) fail("cannot read " + f);
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    cv::Mat full;
    image::ReducedGrey reduced;
    const auto [full_ms, full_min] = time_ms(reps, [&] { full = image::decode_grey(data, bytes.size()); });
    const auto [service_ms, service_min] =
        time_ms(reps, [&] { reduced = image::decode_grey_reduced(data, bytes.size(), min_side); });
    std::printf("| %s | %zu | %dx%d | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %dx%d (1/%d) |\n",
                fs::path(f).filename().c_str(), bytes.size(), full.cols, full.rows, full_ms, full_min, service_ms,
                service_min, reduced.grey.cols, reduced.grey.rows, reduced.reduction);
  }
  return 0;
}

int extract(int reps, const std::vector<std::string>& files) {
  texture::FeatureParams clahe;
  clahe.device = gpu::Device::kCpu;
  clahe.normalisation = texture::poor_light_normalisation();
  texture::FeatureParams plain = clahe;
  plain.normalisation = {};
  std::printf("| upload | service decode + extract p50 | features | without clahe p50 |\n|---|---:|---:|---:|\n");
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in && !in.eof()) fail("cannot read " + f);
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    int features = 0;
    const auto service = [&](const texture::FeatureParams& p) {
      return time_ms(reps, [&] {
        const image::ReducedGrey d = image::decode_grey_reduced(data, bytes.size(), p.max_side);
        features = texture::extract_prepared({texture::prepare_detection(d.grey, p)}, p).front().count();
      });
    };
    const double with_ms = service(clahe).first, plain_ms = service(plain).first;
    std::printf("| %s | %.2f ms | %d | %.2f ms |\n", fs::path(f).filename().c_str(), with_ms, features, plain_ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "gallery" && argc >= 4) {
      const long long n = std::atoll(argv[3]);
      if (n < 1) fail("PRODUCTS must be at least 1");
      std::vector<int> shards;
      for (int i = 4; i < argc; ++i) shards.push_back(std::atoi(argv[i]));
      return gallery(argv[2], size_t(n), shards);
    }
    if (mode == "decode" && argc >= 4) return decode(std::max(1, std::atoi(argv[2])), {argv + 3, argv + argc});
    if (mode == "extract" && argc >= 4) return extract(std::max(1, std::atoi(argv[2])), {argv + 3, argv + argc});
  } catch (const std::exception& e) {
    fail(e.what());
  }
  std::fprintf(stderr,
               "usage: bench_service_load gallery DIR PRODUCTS [SHARDS...]\n"
               "       bench_service_load decode REPS FILE...\n"
               "       bench_service_load extract REPS FILE...\n");
  return 2;
}
