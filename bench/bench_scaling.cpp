// The sharded texture service on W shard worker processes (docs/benchmarks/scaling.md): 1:M search
// throughput and latency for W = 1, 2, 4 (8), scaling efficiency against W = 1, capacity per worker
// and per host, the whole host's images/s next to the reference's, and the host-to-device rate of
// every GPU with all GPUs streaming at once. Markdown on stdout, ready for
// docs/benchmarks/scaling.md.
//
//   bench_scaling [IMAGES=20000] [GPU_IMAGES=IMAGES] [CLIENTS=32] [SECONDS=10] [WORKERS=1,2,4]
//
// - One redis-server on 127.0.0.1 (on PATH), W `prism texture shard` processes (the prism next to
//   this binary, else this build's), worker k with `--device cuda:(k mod G)` for G visible GPUs: on
//   a machine of 8 GPUs, W = 8 is one worker per GPU; on one GPU the workers share it. Without a
//   GPU the workers run on the CPU (for trying the benchmark; its figures mean nothing then).
// - Worker k serves its own gallery of IMAGES products (weak scaling: W workers hold W x IMAGES),
//   GPU_IMAGES of them in its GPU tier (`--gpu-memory`) and the rest streamed from its pinned host
//   tier (`--host-memory`), so both tiers can be filled at a size the disk allows. Products are 768
//   real SIFT rows drawn from a pool of 48 random textures' descriptors (bench_texture_index's
//   generator: real SIFT sparsity), written as entry files (no fsync; about 117 KB each, and as
//   much again for the pack the worker builds at its first open). Ids are chosen so that gallery k
//   is shard k of every W dividing 8, so WORKERS must divide 8.
// - The front is a ShardedBackend in this process; CLIENTS threads search with a gallery image's
//   own features for SECONDS (each search must identify it over all W shards). No HTTP and no SIFT
//   of an uploaded photo: those are the fronts' CPU work, which scales with the fronts
//   (bench_service measures it), not with the GPUs.
// - Host-to-device: one process per GPU (this binary), each bound to its GPU's NUMA node
//   (kernels/common/numa.h) before it pins 256 MiB, copying for 3 s alone, then all at once.
#include <cuda_runtime_api.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "common/device_array.h"
#include "common/gpu.h"
#include "common/numa.h"
#include "gallery_cases.h"
#include "match/match.h"
#include "redis.h"
#include "redis_server.h"
#include "shard_protocol.h"
#include "sharded_backend.h"
#include "test_env.h"
#include "texture/gallery.h"
#include "texture/index.h"

using namespace prism;
using namespace prism::service;
namespace fs = std::filesystem;
using BenchClock = std::chrono::steady_clock;

namespace {

constexpr double kReferenceImagesPerS = 581633;  // the reference's cluster: 14 P100s
constexpr int kReferenceGpus = 14;
constexpr double kH2dSeconds = 3;

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "bench_scaling: %s\n", why.c_str());
  std::exit(1);
}

double s_since(BenchClock::time_point t0) { return std::chrono::duration<double>(BenchClock::now() - t0).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The prism CLI: beside this binary (the GPU bundle's bin/), else this build's.
std::string prism_exe() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && fs::exists(self.parent_path() / "prism")) return (self.parent_path() / "prism").string();
  return PRISM_EXE;
}

// --- Host-to-device, one process per GPU -------------------------------------------------------

// The child: GPU `gpu`, bound to its node, pins 256 MiB, says "ready", waits for DIR/go, copies
// for kH2dSeconds and prints "h2d GBPS NODE".
int h2d_child(int gpu, const fs::path& dir) {
  bench::check(cudaSetDevice(gpu));
  const numa::Placement where = numa::placement_of_gpu(gpu);
  std::fprintf(stderr, "GPU %d: %s\n", gpu, numa::apply(where).c_str());
  const size_t bytes = size_t(256) << 20;
  gpu::PinnedArray<uint8_t> h(bytes);
  gpu::DeviceArray<uint8_t> d(bytes);
  std::fill_n(h.data(), bytes, uint8_t(1));
  bench::check(cudaMemcpy(d.data(), h.data(), bytes, cudaMemcpyHostToDevice));  // warm
  std::ofstream(dir / ("ready." + std::to_string(gpu))) << "ready\n";
  const auto give_up = BenchClock::now() + std::chrono::seconds(120);
  while (!fs::exists(dir / "go")) {
    if (BenchClock::now() > give_up) return 1;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  size_t copied = 0;
  const auto t0 = BenchClock::now();
  while (s_since(t0) < kH2dSeconds) {
    bench::check(cudaMemcpy(d.data(), h.data(), bytes, cudaMemcpyHostToDevice));
    copied += bytes;
  }
  std::printf("h2d %.3f %d\n", double(copied) / s_since(t0) / 1e9, where.node);
  return 0;
}

struct H2d {
  double gbps = 0;
  int node = -1;
};

// GB/s of each GPU in `gpus`, all of them copying at once.
std::map<int, H2d> h2d_at_once(const std::vector<int>& gpus, const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::error_code ec;
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  std::vector<std::unique_ptr<test::ChildProcess>> children;
  for (int g : gpus)
    children.push_back(std::make_unique<test::ChildProcess>(
        std::vector<std::string>{self, "--h2d-child", std::to_string(g), dir.string()},
        (dir / ("log." + std::to_string(g))).string()));
  const auto give_up = BenchClock::now() + std::chrono::seconds(120);
  for (int g : gpus)
    while (!fs::exists(dir / ("ready." + std::to_string(g)))) {
      if (BenchClock::now() > give_up)
        fail("the host-to-device process of GPU " + std::to_string(g) +
             " never got ready: " + read_text(dir / ("log." + std::to_string(g))));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  std::ofstream(dir / "go") << "go\n";
  std::map<int, H2d> out;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const std::string log = (dir / ("log." + std::to_string(gpus[i]))).string();
    if (children[i]->wait(int(kH2dSeconds) + 60) != 0) fail("the host-to-device process failed: " + read_text(log));
    const std::string text = read_text(log);
    const size_t at = text.find("h2d ");
    H2d r;
    if (at == std::string::npos || std::sscanf(text.c_str() + at, "h2d %lf %d", &r.gbps, &r.node) != 2)
      fail("no rate in " + log + ": " + text);
    out[gpus[i]] = r;
  }
  return out;
}

// --- Galleries ----------------------------------------------------------------------------------

// `galleries` gallery folders under `root`, `images` products each; gallery k holds ids whose shard
// of 8 is k (so shard k of any W dividing 8). Returns the first 32 entries of gallery 0 (the queries).
std::vector<texture::GalleryEntry> make_galleries(const fs::path& root, int galleries, size_t images) {
  std::mt19937 rng(24);
  const test::SiftPool pool = test::sift_pool(48, rng);
  std::vector<std::vector<std::string>> ids(static_cast<size_t>(galleries));
  size_t full = 0;
  for (size_t i = 0; full < size_t(galleries); ++i) {
    char id[24];
    std::snprintf(id, sizeof id, "p%08zu", i);
    const int k = shard::shard_of(id, 8);
    if (k >= galleries || ids[size_t(k)].size() == images) continue;
    ids[size_t(k)].push_back(id);
    if (ids[size_t(k)].size() == images) ++full;
  }
  std::vector<texture::GalleryEntry> queries;
  std::vector<std::thread> threads;
  std::atomic<bool> bad{false};
  for (int k = 0; k < galleries; ++k) {
    const fs::path dir = root / ("shard" + std::to_string(k));
    texture::Gallery::open(dir, true);
    threads.emplace_back([&, k, dir] {
      std::mt19937 r(100 + k);
      for (const std::string& id : ids[size_t(k)]) {
        texture::GalleryEntry e = test::pooled_gallery_entry(pool, r, id);
        e.enrolled_unix = 1800000000;
        const std::vector<uint8_t> bytes = texture::Gallery::encode(e);
        std::ofstream out(dir / "entries" / (id + ".tex"), std::ios::binary);
        out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
        if (!out) bad = true;
        if (k == 0 && queries.size() < 32) queries.push_back(std::move(e));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (bad) fail("cannot write the galleries under " + root.string() + " (disk full?)");
  return queries;
}

// --- One deployment of W workers ---------------------------------------------------------------

struct Row {
  int workers = 0, gpus_used = 0;
  size_t images = 0, gpu_images = 0, host_images = 0;
  double searches_per_s = 0, images_per_s = 0;
  double p50 = 0, p99 = 0, single_p50 = 0, single_p99 = 0;
  size_t searches = 0, wrong = 0;
  double start_s = 0;
};

Row run_deployment(int w, int gpus, const std::string& redis_url, const fs::path& root, size_t images,
                   size_t gpu_images, int clients, double seconds, const std::vector<texture::GalleryEntry>& queries) {
  Redis(redis_url).command({"FLUSHALL"});  // the shard count is set once per Redis database
  const int64_t slot = match::kSlotBytes, gpu_slot = int64_t(texture::image_bytes(true));
  // Tiers grow a block at a time (1,024 host slots; GPU blocks are cut to the budget): a host block of slack each.
  const int64_t gpu_bytes = int64_t(gpu_images + 1024) * gpu_slot;
  const int64_t host_bytes = int64_t(images - std::min(images, gpu_images) + 1024) * slot;
  std::vector<std::unique_ptr<test::ChildProcess>> workers;
  const auto t0 = BenchClock::now();
  for (int k = 0; k < w; ++k) {
    std::vector<std::string> argv = {prism_exe(),
                                     "texture",
                                     "shard",
                                     "--redis",
                                     redis_url,
                                     "--shard",
                                     std::to_string(k),
                                     "--shards",
                                     std::to_string(w),
                                     "--gallery",
                                     (root / ("shard" + std::to_string(k))).string(),
                                     "--replica",
                                     "bench",
                                     "--readers",
                                     "4",
                                     "--host-memory",
                                     std::to_string(host_bytes)};
    if (gpus > 0) {
      argv.insert(argv.end(), {"--device", "cuda:" + std::to_string(k % gpus), "--gpu-memory",
                               std::to_string(gpu_images == 0 ? 0 : gpu_bytes)});
    } else {
      argv.insert(argv.end(), {"--device", "cpu"});
    }
    workers.push_back(
        std::make_unique<test::ChildProcess>(argv, (root / ("worker" + std::to_string(k) + ".log")).string()));
  }
  ShardedOptions so;
  so.redis = redis_url;
  so.shards = w;
  so.default_timeout = std::chrono::seconds(120);
  ShardedBackend front(so);
  // Each worker announces itself once its gallery is indexed (ShardWorker opens it first).
  const double limit = 120 + 2e-3 * double(images);
  for (;;) {
    const auto live = front.live_workers();
    if (int(live.size()) == w) break;
    for (int k = 0; k < w; ++k)
      if (!workers[size_t(k)]->running())
        fail("worker " + std::to_string(k) + " ended: " + read_text(root / ("worker" + std::to_string(k) + ".log")));
    if (s_since(t0) > limit) fail("the workers did not all start within " + std::to_string(int(limit)) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Row row;
  row.workers = w;
  row.gpus_used = gpus > 0 ? std::min(w, gpus) : 0;
  row.start_s = s_since(t0);
  const ServiceStats st = front.stats(Clock::now() + std::chrono::seconds(60));
  for (const ShardStats& s : st.shards) {
    row.images += s.index.images;
    row.gpu_images += s.index.gpu_images;
    row.host_images += s.index.host_images;
  }
  if (int(st.shards.size()) != w || row.images != size_t(w) * images)
    fail("the workers hold " + std::to_string(row.images) + " images, not " + std::to_string(size_t(w) * images));

  std::atomic<size_t> wrong{0};
  auto search = [&](size_t q, std::vector<double>& ms) {
    const texture::GalleryEntry& e = queries[q % queries.size()];
    SearchQuery sq;
    sq.features = e.features;
    sq.top_k = 1;
    sq.deadline = Clock::now() + std::chrono::seconds(120);
    const auto a = BenchClock::now();
    try {
      const SearchAnswer r = front.search(sq);
      ms.push_back(s_since(a) * 1e3);
      if (!r.identified || r.candidates.empty() || r.candidates[0].id != e.id || r.searched != row.images) ++wrong;
    } catch (const std::exception& x) {
      std::fprintf(stderr, "bench_scaling: W=%d: a search failed: %s\n", w, x.what());
      ++wrong;
    }
  };
  // Single client: latency without queueing (after one search per worker's warm-up).
  std::vector<double> single;
  for (int i = 0; i < 3; ++i) search(size_t(i), single);
  single.clear();
  for (size_t q = 0; q < 20; ++q) search(q, single);
  row.single_p50 = percentile(single, 0.5);
  row.single_p99 = percentile(single, 0.99);
  // CLIENTS at once for SECONDS.
  std::vector<std::vector<double>> ms(static_cast<size_t>(clients));
  const auto until = BenchClock::now() + std::chrono::duration<double>(seconds);
  const auto l0 = BenchClock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      for (size_t q = size_t(c); BenchClock::now() < until; q += size_t(clients)) search(q, ms[size_t(c)]);
    });
  for (auto& t : threads) t.join();
  const double elapsed = s_since(l0);
  std::vector<double> all;
  for (auto& v : ms) all.insert(all.end(), v.begin(), v.end());
  row.searches = all.size();
  row.searches_per_s = double(all.size()) / elapsed;
  row.images_per_s = row.searches_per_s * double(row.images);
  row.p50 = percentile(all, 0.5);
  row.p99 = percentile(all, 0.99);
  row.wrong = wrong;
  for (auto& wk : workers) wk->signal(SIGTERM);
  for (int k = 0; k < w; ++k)
    if (workers[size_t(k)]->wait(60) != 0)
      std::fprintf(stderr, "bench_scaling: worker %d did not stop cleanly (%s)\n", k,
                   (root / ("worker" + std::to_string(k) + ".log")).c_str());
  return row;
}

std::string fmt_count(double x) {
  char b[32];
  if (x >= 1e6)
    std::snprintf(b, sizeof b, "%.2f M", x / 1e6);
  else if (x >= 1e3)
    std::snprintf(b, sizeof b, "%.1f k", x / 1e3);
  else
    std::snprintf(b, sizeof b, "%.0f", x);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--h2d-child") return h2d_child(std::atoi(argv[2]), argv[3]);
  const size_t images = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
  const size_t gpu_images = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : images;
  const int clients = argc > 3 ? std::atoi(argv[3]) : 32;
  const double seconds = argc > 4 ? std::atof(argv[4]) : 10;
  const int gpus = gpu::available() ? gpu::device_count() : 0;
  std::vector<int> counts;
  {
    std::stringstream list(argc > 5 ? argv[5] : gpus >= 8 ? "1,2,4,8" : "1,2,4");
    for (std::string c; std::getline(list, c, ',');) counts.push_back(std::atoi(c.c_str()));
  }
  const bool counts_ok = !counts.empty() && std::all_of(counts.begin(), counts.end(),
                                                        [](int c) { return c == 1 || c == 2 || c == 4 || c == 8; });
  if (images < 32 || gpu_images > images || clients <= 0 || !(seconds > 0) || !counts_ok) {
    std::fprintf(stderr,
                 "usage: bench_scaling [IMAGES>=32 per worker] [GPU_IMAGES<=IMAGES] [CLIENTS] [SECONDS] "
                 "[WORKERS: a list of 1, 2, 4, 8]\n");
    return 2;
  }
  if (test::redis_server_path().empty()) fail("no redis-server on PATH");
  const int max_w = *std::max_element(counts.begin(), counts.end());
  test::TempDir tmp;
  // The disk: entry files and the pack the worker builds, about 2 x 117 KB per product.
  struct statvfs vfs {};
  const double need = double(max_w) * double(images) * 2 * 117e3;
  if (statvfs(tmp.path().c_str(), &vfs) == 0 && double(vfs.f_bavail) * double(vfs.f_frsize) < need * 1.05)
    fail("the galleries need about " + std::to_string(int(need / 1e9)) + " GB under " + tmp.path().string() +
         ", which has " + std::to_string(int(double(vfs.f_bavail) * double(vfs.f_frsize) / 1e9)) +
         " GB free (set TMPDIR, or fewer IMAGES)");

  // The machine.
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const double host_gib = double(pages) * double(page) / double(1 << 30);
  std::map<std::string, int> names;
  std::vector<int> all_gpus;
  double gpu_total_bytes = 0;
  for (int g = 0; g < gpus; ++g) {
    names[gpu::device_name(g)]++;
    all_gpus.push_back(g);
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, g) == cudaSuccess) gpu_total_bytes = double(prop.totalGlobalMem);
  }
  std::string machine;
  for (const auto& [name, n] : names) machine += (machine.empty() ? "" : " + ") + std::to_string(n) + " x " + name;
  if (machine.empty()) machine = "no GPU (workers on the CPU)";
  machine += ", " + std::to_string(std::thread::hardware_concurrency()) + " CPU cores, " +
             std::to_string(int(host_gib + 0.5)) + " GiB host memory";
  std::printf("## bench_scaling: %s\n\n", machine.c_str());
  std::printf(
      "%zu products per worker (%zu in its GPU tier, %zu streamed from its pinned host tier), 768 SIFT "
      "rows each; %d clients for %.0f s; workers on GPU k mod %d; redis-server and the front on the same "
      "host.\n\n",
      images, gpus ? gpu_images : 0, gpus ? images - gpu_images : images, clients, seconds, std::max(gpus, 1));
  std::fflush(stdout);

  // Host-to-device per GPU: alone, then all at once.
  if (gpus > 0) {
    std::map<int, H2d> alone;
    for (int g : all_gpus) alone[g] = h2d_at_once({g}, tmp.path() / "h2d").at(g);
    const std::map<int, H2d> together = h2d_at_once(all_gpus, tmp.path() / "h2d");
    std::printf(
        "| GPU | NUMA node | host-to-device alone (pinned, its node) | all %d GPUs at once |\n|---|---|---|---|\n",
        gpus);
    double sum_alone = 0, sum_together = 0;
    for (int g : all_gpus) {
      std::printf("| %d | %s | %.1f GB/s | %.1f GB/s |\n", g,
                  together.at(g).node < 0 ? "none" : std::to_string(together.at(g).node).c_str(), alone[g].gbps,
                  together.at(g).gbps);
      sum_alone += alone[g].gbps;
      sum_together += together.at(g).gbps;
    }
    std::printf("| total | | %.1f GB/s (sum) | %.1f GB/s = %s images/s from host memory |\n\n", sum_alone, sum_together,
                fmt_count(sum_together * 1e9 / match::kSlotBytes).c_str());
    std::fflush(stdout);
  }

  const auto g0 = BenchClock::now();
  const std::vector<texture::GalleryEntry> queries = make_galleries(tmp.path(), max_w, images);
  std::fprintf(stderr, "bench_scaling: %d galleries of %zu products written in %.0f s\n", max_w, images, s_since(g0));
  test::RedisServer redis(tmp.path() / "redis");
  redis.start();
  std::vector<Row> rows;
  for (int w : counts) {
    rows.push_back(run_deployment(w, gpus, redis.url(), tmp.path(), images, gpu_images, clients, seconds, queries));
    const Row& r = rows.back();
    std::fprintf(stderr, "bench_scaling: W=%d: %.1f searches/s, %zu searches, %zu wrong, started in %.0f s\n", w,
                 r.searches_per_s, r.searches, r.wrong, r.start_s);
  }
  const Row& one = rows.front();
  std::printf(
      "| workers | GPUs | images (GPU tier + host tier) | searches/s | images/s | p50 / p99 under load | "
      "p50 / p99, one client | scaling efficiency |\n|---|---|---|---|---|---|---|---|\n");
  size_t wrong = 0;
  for (const Row& r : rows) {
    // Linear in the GPUs used is ideal: W workers sharing one GPU should match one worker on it.
    const double ideal = one.images_per_s * (gpus > 0 ? double(r.gpus_used) / std::max(one.gpus_used, 1) : 1.0);
    std::printf("| %d | %d | %s (%s + %s) | %.1f | %s | %.0f / %.0f ms | %.0f / %.0f ms | %.0f%% |\n", r.workers,
                r.gpus_used, fmt_count(double(r.images)).c_str(), fmt_count(double(r.gpu_images)).c_str(),
                fmt_count(double(r.host_images)).c_str(), r.searches_per_s, fmt_count(r.images_per_s).c_str(), r.p50,
                r.p99, r.single_p50, r.single_p99, 100.0 * r.images_per_s / ideal);
    wrong += r.wrong;
  }
  const Row& best = *std::max_element(rows.begin(), rows.end(),
                                      [](const Row& a, const Row& b) { return a.images_per_s < b.images_per_s; });
  // Capacity (derived, 8-bit slots): a worker's GPU tier defaults to its GPU's memory less 2 GiB,
  // shared by the workers on that GPU; the host tier to half the host's memory, shared by all.
  const double slot = match::kSlotBytes, gpu_slot = double(texture::image_bytes(true));
  const double per_gpu = gpus ? (gpu_total_bytes - 2.0 * (1 << 30)) / gpu_slot : 0;
  const double host_tier = host_gib * double(1 << 30) / 2 / slot;
  std::printf(
      "\ncapacity (8-bit, %d bytes per image in host memory, %d in GPU memory with |g|^2): per GPU %s images in "
      "GPU memory; per host %s (%d GPUs) + %s in half the host memory = %s; per worker at W = %d: %s\n",
      match::kSlotBytes, int(gpu_slot), fmt_count(per_gpu).c_str(), fmt_count(per_gpu * gpus).c_str(), gpus,
      fmt_count(host_tier).c_str(), fmt_count(per_gpu * gpus + host_tier).c_str(), best.workers,
      fmt_count((per_gpu * gpus + host_tier) / best.workers).c_str());
  std::printf(
      "whole host: %s images/s at W = %d on %d GPU%s (%s per GPU); the reference: %s images/s on %d P100s "
      "(%s per GPU, a 6 M gallery)\n",
      fmt_count(best.images_per_s).c_str(), best.workers, best.gpus_used, best.gpus_used == 1 ? "" : "s",
      fmt_count(best.images_per_s / std::max(best.gpus_used, 1)).c_str(), fmt_count(kReferenceImagesPerS).c_str(),
      kReferenceGpus, fmt_count(kReferenceImagesPerS / kReferenceGpus).c_str());
  if (wrong) std::printf("\n%zu searches failed or did not identify their product (see stderr)\n", wrong);
  return wrong ? 1 : 0;
}
