// The texture service's cost over the in-process path (docs/benchmarks/service.md): the same verify
// and search queries (photos as PGM bytes: decoded, SIFT-extracted and matched every time) answered
//   1. in process: decode + extract + LocalBackend, no HTTP;
//   2. through HTTP on loopback, one process (`prism texture serve --gallery`);
//   3. through HTTP + Redis with 1 shard worker, and with 4 shard workers on the same device
//      (`serve --redis` + `prism texture shard`), workers and front on threads of this process,
//      redis-server (on PATH) a child process.
// Sequential requests give p50/p99 per path (the overhead: p50 less the in-process p50); CLIENTS
// concurrent clients for a few seconds give the throughput.
//
//   bench_service [PRODUCTS=20000] [QUERIES=100] [CLIENTS=16]
//
// Fixture: 16 products are real random textures (640x480) and the queries are warped, noisy
// photos of them; the other products are 768 real SIFT rows each drawn from a pool of 16 textures
// (tests/support/gallery_cases.h), written as gallery entry files directly (no fsync), so a large
// gallery is made in seconds. The index runs on the GPU when there is one (kAuto).
#include <gst/gst.h>
#include <httplib.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "gallery_cases.h"
#include "http_api.h"
#include "images.h"
#include "local_backend.h"
#include "redis_server.h"
#include "shard_protocol.h"
#include "shard_worker.h"
#include "sharded_backend.h"
#include "test_env.h"
#include "ppm.h"
#include "texture_cases.h"

using namespace prism;
using namespace prism::service;
namespace fs = std::filesystem;

namespace {

using BenchClock = std::chrono::steady_clock;

void write_entry(const fs::path& gallery, const texture::GalleryEntry& e) {
  const std::vector<uint8_t> bytes = texture::Gallery::encode(e);
  std::ofstream out(gallery / "entries" / (e.id + ".tex"), std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "bench_service: cannot write under %s\n", gallery.c_str());
    std::exit(1);
  }
}

struct Latencies {
  std::vector<double> ms;
  double p(double q) const {
    std::vector<double> v = ms;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(q * v.size()))];
  }
};

// One way of answering a query: (kind 0 search / 1 verify, query index) -> ok.
using Ask = std::function<bool(int kind, size_t q)>;

Latencies sequential(const Ask& ask, int kind, size_t queries) {
  Latencies l;
  ask(kind, 0);  // warm-up
  for (size_t q = 0; q < queries; ++q) {
    const auto t0 = BenchClock::now();
    if (!ask(kind, q)) {
      std::fprintf(stderr, "bench_service: a %s failed\n", kind ? "verify" : "search");
      std::exit(1);
    }
    l.ms.push_back(std::chrono::duration<double, std::milli>(BenchClock::now() - t0).count());
  }
  return l;
}

// Searches per second of `clients` threads asking for `seconds`.
double throughput(const std::function<Ask()>& make, int clients, double seconds, size_t queries) {
  std::atomic<size_t> done{0}, failed{0};
  const auto until = BenchClock::now() + std::chrono::duration<double>(seconds);
  const auto t0 = BenchClock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      const Ask ask = make();
      for (size_t q = size_t(c); BenchClock::now() < until; q += size_t(clients))
        (ask(0, q % queries) ? done : failed)++;
    });
  for (auto& t : threads) t.join();
  if (failed) std::fprintf(stderr, "bench_service: %zu concurrent searches failed\n", failed.load());
  return double(done) / std::chrono::duration<double>(BenchClock::now() - t0).count();
}

class Served {
 public:
  explicit Served(Backend& b) : api_(b, options()) {
    port_ = api_.bind("127.0.0.1", 0);
    thread_ = std::thread([this] { api_.serve(); });
  }
  ~Served() {
    api_.stop();
    thread_.join();
  }
  static ApiOptions options() {
    ApiOptions o;
    o.threads = 32;
    o.deadline = std::chrono::seconds(60);
    return o;
  }
  int port() const { return port_; }

 private:
  HttpApi api_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  const size_t products = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
  const size_t queries = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 100;
  const int clients = argc > 3 ? std::atoi(argv[3]) : 16;
  if (products < 16 || queries == 0 || clients <= 0) {
    std::fprintf(stderr, "usage: bench_service [PRODUCTS>=16] [QUERIES] [CLIENTS]\n");
    return 2;
  }
  gst_init(nullptr, nullptr);
  std::mt19937 rng(21);
  test::TempDir tmp;
  const fs::path one = tmp.path() / "one";
  std::vector<fs::path> four;
  texture::Gallery::open(one, true);
  for (int k = 0; k < 4; ++k) {
    four.push_back(tmp.path() / ("s" + std::to_string(k)));
    texture::Gallery::open(four.back(), true);
  }
  // The real products and their photos.
  std::vector<std::string> photos, photo_ids;
  for (int i = 0; i < 16; ++i) {
    const cv::Mat t = test::random_texture(rng, 640, 480);
    texture::GalleryEntry e{"real" + std::to_string(i), "bench", 1800000000,
                            texture::extract_features(t, ApiOptions{}.features)};  // as uploads
    write_entry(one, e);
    write_entry(four[size_t(shard::shard_of(e.id, 4))], e);
    for (int c = 0; c < 4; ++c) {
      photos.push_back(test::pgm_bytes(test::noisy_capture(t, rng)));
      photo_ids.push_back(e.id);
    }
  }
  const test::SiftPool pool = test::sift_pool(16, rng);
  for (size_t i = 16; i < products; ++i) {
    char id[24];
    std::snprintf(id, sizeof id, "p%07zu", i);
    texture::GalleryEntry e = test::pooled_gallery_entry(pool, rng, id);
    e.enrolled_unix = 1800000000;
    write_entry(one, e);
    write_entry(four[size_t(shard::shard_of(e.id, 4))], e);
  }
  std::printf("bench_service: %zu products, %zu queries (%zu photos), %d clients\n", products, queries, photos.size(),
              clients);

  // 1. In process.
  LocalOptions lo;
  lo.gallery = one;
  auto owner = std::make_unique<LocalBackend>(lo);  // released before a worker owns `one`
  LocalBackend& local = *owner;
  const std::string device = local.shard_stats().index.device;
  std::printf("device: %s\n", device.c_str());
  // Extracted as the API extracts (on the GPU when there is one, the gallery's normalisation).
  texture::FeatureParams fp = ApiOptions{}.features;
  fp.normalisation = local.normalisation();
  std::printf("features extracted on %s\n", texture::extraction_device(fp).c_str());
  texture::ExtractionBatcher batcher(fp.device, ApiOptions{}.batching);  // as the API's, shared by the clients
  auto in_process = [&](int kind, size_t q) {
    const std::string& bytes = photos[q % photos.size()];
    const texture::Features f =
        extract_upload(bytes, "image", 50'000'000, fp, batcher.reserve(), Clock::time_point::max());
    if (kind == 1) return local.verify(photo_ids[q % photos.size()], f, {}, Clock::time_point::max()).match.accepted;
    SearchQuery sq;
    sq.features = f;
    return local.search(sq).identified;
  };
  // Through HTTP to a port.
  auto http = [&](int port) {
    return [&, port]() -> Ask {
      auto c = std::make_shared<httplib::Client>("127.0.0.1", port);
      c->set_keep_alive(true);
      c->set_tcp_nodelay(true);
      c->set_read_timeout(std::chrono::seconds(120));
      return [&, c](int kind, size_t q) {
        const size_t i = q % photos.size();
        const std::string path = kind == 1 ? "/v1/products/" + photo_ids[i] + "/verify" : "/v1/search";
        const httplib::Result r = c->Post(path.c_str(), photos[i], "image/x-portable-graymap");
        return r && r->status == 200 && r->body.find("\"id\":\"" + photo_ids[i] + "\"") != std::string::npos;
      };
    };
  };

  struct Row {
    std::string path;
    Latencies search, verify;
    double qps = 0;
  };
  std::vector<Row> rows;
  rows.push_back({"in process (decode + SIFT + LocalBackend)", sequential(in_process, 0, queries),
                  sequential(in_process, 1, queries),
                  throughput([&] { return Ask(in_process); }, clients, 5, queries)});
  {
    Served s(local);
    const auto make = http(s.port());
    const Ask ask = make();
    rows.push_back({"HTTP, one process (serve --gallery)", sequential(ask, 0, queries), sequential(ask, 1, queries),
                    throughput(make, clients, 5, queries)});
  }
  owner.reset();  // one process owns a gallery at a time (GalleryOwner)
  if (test::redis_server_path().empty()) {
    std::printf("no redis-server on PATH: the sharded rows are not measured\n");
  } else {
    test::RedisServer redis(tmp.path() / "redis");
    redis.start();
    for (int shards : {1, 4}) {
      // A fresh key space per deployment (the shard count is set once per Redis database).
      Redis(redis.url()).command({"FLUSHALL"});
      std::vector<std::unique_ptr<ShardWorker>> workers;
      std::vector<std::thread> threads;
      std::atomic<bool> stop{false};
      for (int k = 0; k < shards; ++k) {
        ShardWorkerOptions wo;
        wo.redis = redis.url();
        wo.shard = k;
        wo.shards = shards;
        wo.replica = "bench";
        wo.readers = 8;
        wo.local.gallery = shards == 1 ? one : four[size_t(k)];
        wo.log = [](const std::string&) {};
        workers.push_back(std::make_unique<ShardWorker>(wo));
        threads.emplace_back([&, k] { workers[size_t(k)]->run(stop); });
      }
      {
        ShardedOptions so;
        so.redis = redis.url();
        so.shards = shards;
        so.default_timeout = std::chrono::seconds(60);
        ShardedBackend front(so);
        Served s(front);
        const auto make = http(s.port());
        const Ask ask = make();
        rows.push_back(
            {"HTTP + Redis, " + std::to_string(shards) + " shard worker" + (shards > 1 ? "s" : "") + " on one device",
             sequential(ask, 0, queries), sequential(ask, 1, queries), throughput(make, clients, 5, queries)});
      }
      stop = true;
      for (auto& t : threads) t.join();
    }
  }
  std::printf("\n| path (%s, %zu products) | search p50 | p99 | verify p50 | p99 | searches/s, %d clients |\n",
              device.c_str(), products, clients);
  std::printf("|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.1f |\n", r.path.c_str(), r.search.p(0.5),
                r.search.p(0.99), r.verify.p(0.5), r.verify.p(0.99), r.qps);
  std::printf("\nadded to the in-process p50:");
  for (size_t i = 1; i < rows.size(); ++i)
    std::printf("%s %s: search %+.2f ms, verify %+.2f ms", i > 1 ? ";" : "", rows[i].path.c_str(),
                rows[i].search.p(0.5) - rows[0].search.p(0.5), rows[i].verify.p(0.5) - rows[0].verify.p(0.5));
  std::printf("\n");
  return 0;
}
