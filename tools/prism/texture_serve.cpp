// prism texture serve: the texture identification service over HTTP (docs/SERVICE.md). One process
// holding the gallery by default (--gallery), or a stateless front of shard workers (--redis). The
// work is in service/; this file parses options, starts the server and stops it on SIGINT/SIGTERM.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gst_setup.h"
#include "http_api.h"
#include "local_backend.h"
#include "log_line.h"
#include "sharded_backend.h"
#include "options.h"
#include "redis_flags.h"
#include "texture_util.h"

namespace prism::cli {

namespace {

constexpr const char* kServeUsage =
    "usage: prism texture serve (--gallery DIR | --redis URL | --sentinel HOST:PORT,... --master NAME)\n"
    "                           [OPTIONS]\n"
    "\n"
    "Serves the texture API (docs/SERVICE.md, docs/openapi.yaml) until SIGINT or SIGTERM.\n"
    "\n"
    "  --gallery DIR        one process holds the gallery (created when absent or empty)\n"
    "  --redis URL, --sentinel HOST:PORT,... --master NAME\n"
    "                       a front of shard workers ('prism texture shard') through Redis\n"
    "                       (below)\n"
    "  --shards N           with --redis or --sentinel: the shard count (set once for the\n"
    "                       deployment)\n"
    "  --listen HOST:PORT   where to listen (default 127.0.0.1:8080; port 0: any free port)\n"
    "  --keys FILE          API keys, one 'KEY read|write [NAME]' per line; required unless HOST\n"
    "                       is a loopback address\n"
    "  --threads N          HTTP worker threads (default 16)\n"
    "  --reserved-threads N threads enrolments, updates, verifies and searches may not take: they\n"
    "                       are answered 503 (Retry-After: 1) beyond threads - N at once, so that\n"
    "                       gets, deletes, stats and health are served (default 4)\n"
    "  --max-connections N  connections held at once; more are answered 503 (default 1024)\n"
    "  --max-body SIZE      largest request body (default 32M)\n"
    "  --max-pixels N       largest image, in pixels, checked before decoding (default 50000000)\n"
    "  --decode-memory SIZE memory uploads being decoded and extracted may hold at once; beyond it\n"
    "                       a request waits up to its deadline, then gets 503 (default 2G)\n"
    "  --batch N            uploads extracted as one SIFT batch on the GPU at most (default 1: each\n"
    "                       on its own thread, decoded (JPEG), shrunk and normalised on the GPU)\n"
    "  --gpu-extractors N   with --batch 1: uploads extracted on the GPU at once, each with its own\n"
    "                       extractor and stream (about 250 MB of GPU memory each; 1..64, default 8)\n"
    "  --search-batch N     searches matched together at most (--gallery; 1..8, default 1: each\n"
    "                       alone, on its own thread)\n"
    "  --batch-wait US      how long a batch waits for requests already decoding, in microseconds;\n"
    "                       a lone request never waits (default 1000)\n"
    "  --deadline MS        default request deadline, up to 120000 (default 10000; clients may\n"
    "                       set deadline_ms up to 120000)\n"
    "  --device D           auto (default), cpu or cuda: where features are extracted (SIFT) and\n"
    "                       descriptors matched (--gallery)\n"
    "  --gpu-wait W         how threads wait for the GPU: auto (CUDA's default: spin while the\n"
    "                       process has fewer contexts than cores), block (sleep: no core burnt\n"
    "                       spinning, a few microseconds more per wait), spin or yield (default auto)\n"
    "  --verify-lanes N     verifications that run on the GPU at once, each on its own stream\n"
    "                       and buffers (--gallery; 1..64, default 4)\n"
    "  --gpu-memory SIZE    GPU memory for descriptors (--gallery; default: free memory less 2 GiB)\n"
    "  --host-memory SIZE   host memory beyond it (--gallery; default: half of the available)\n"
    "  --digest-rows N      keep a digest of every host-memory product (--gallery; the N of its\n"
    "                       largest keypoints, N divides 768, 16..384), out of --gpu-memory, for\n"
    "                       approximate searches (digest_candidates; default 0: none)\n"
    "  --digest-candidates K searches re-match exactly only the products of the K best digest slots\n"
    "                       unless the request says otherwise (default 0: exact; with --redis, sent\n"
    "                       to the workers, whose --digest-rows decide)\n"
    "  --stream-digests     with --digest-rows: keep no digests; each digest search copies the\n"
    "                       host-memory products' first N rows across PCIe (no memory; same answers)\n"
    "  --normalise NAME     the contrast normalisation before SIFT (none, clahe-CLIP-TILES): what a\n"
    "                       new --gallery records (default clahe-4-8); an existing gallery's\n"
    "                       record decides and must agree; with --redis, agreed with the workers\n"
    "                       through prism:normalise (until a worker has set it, uploads are\n"
    "                       refused with 503). Queries and enrolments are always extracted with\n"
    "                       the gallery's normalisation\n"
    "  --min-significance S the default decision threshold (default 3.6)\n"
    "  --log                one line per request on stderr\n"
    "\n"
    "Redis (a sharded front):\n";

struct ServeOptions {
  std::string gallery, redis, host = "127.0.0.1", keys;  // redis: redis:// or sentinel:// (redis_target)
  int port = 8080, shards = 0;
  service::ApiOptions api;
  texture::IndexOptions index;
  int search_batch = 1;  // --search-batch
  std::optional<texture::Normalisation> normalisation;
  gpu::HostWait gpu_wait = gpu::HostWait::kAuto;
};

bool loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

ServeOptions parse_serve(int argc, char** argv) {
  ServeOptions o;
  using Name = const std::string&;
  using Value = const std::string&;
  auto listen = [&](Name, Value v) {
    const size_t colon = v.rfind(':');
    if (colon == std::string::npos || colon == 0)
      throw UsageError("--listen takes HOST:PORT such as 127.0.0.1:8080, not '" + v + "'");
    o.host = v.substr(0, colon);
    o.port = parse_int("--listen's port", v.substr(colon + 1), 0, 65535);
  };
  RedisFlags redis;
  std::vector<Option> table = {
      with_value({"--gallery"}, o.gallery),
      with_value({"--shards"}, [&](Name a, Value v) { o.shards = parse_int(a, v, 1, 4096); }),
      with_value({"--listen"}, listen),
      with_value({"--keys"}, o.keys),
      with_value({"--threads"}, [&](Name a, Value v) { o.api.threads = parse_int(a, v, 1, 1024); }),
      with_value({"--max-connections"},
                 [&](Name a, Value v) { o.api.max_connections = parse_int(a, v, 1, 1'000'000); }),
      with_value({"--reserved-threads"}, [&](Name a, Value v) { o.api.reserved_threads = parse_int(a, v, 0, 1023); }),
      with_value({"--max-body"}, [&](Name a, Value v) { o.api.max_body_bytes = size_t(parse_size(a, v)); }),
      with_value({"--max-pixels"},
                 [&](Name a, Value v) { o.api.max_image_pixels = uint64_t(parse_number(a, v, 1, 1e12)); }),
      with_value({"--decode-memory"}, [&](Name a, Value v) { o.api.decode_memory_bytes = parse_size(a, v); }),
      with_value({"--search-batch"},
                 [&](Name a, Value v) { o.search_batch = parse_int(a, v, 1, texture::kMaxBatchQueries); }),
      with_value({"--batch"}, [&](Name a, Value v) { o.api.batching.max_batch = parse_int(a, v, 1, 256); }),
      with_value({"--gpu-extractors"}, [&](Name a, Value v) { texture::set_gpu_extractors(parse_int(a, v, 1, 64)); }),
      with_value(
          {"--batch-wait"},
          [&](Name a, Value v) { o.api.batching.max_wait = std::chrono::microseconds(parse_int(a, v, 0, 1'000'000)); }),
      with_value({"--deadline"},
                 [&](Name a, Value v) {
                   o.api.deadline = std::chrono::milliseconds(parse_int(a, v, 1, int(o.api.max_deadline.count())));
                 }),
      with_value({"--device"}, [&](Name a, Value v) { o.api.features.device = o.index.device = parse_device(a, v); }),
      with_value({"--gpu-memory"}, [&](Name a, Value v) { o.index.gpu_budget = parse_size(a, v); }),
      with_value({"--verify-lanes"}, [&](Name a, Value v) { o.index.verify_lanes = parse_int(a, v, 1, 64); }),
      with_value({"--gpu-wait"}, [&](Name a, Value v) { o.gpu_wait = parse_gpu_wait(a, v); }),
      with_value({"--host-memory"}, [&](Name a, Value v) { o.index.host_budget = parse_size(a, v); }),
      with_value({"--digest-rows"}, [&](Name a, Value v) { o.index.host_digest_rows = parse_digest_rows(a, v, true); }),
      flag({"--stream-digests"}, o.index.stream_host_digests),
      with_value({"--digest-candidates"},
                 [&](Name a, Value v) {
                   o.api.search.digest_candidates = parse_int(a, v, 0, texture::SearchParams::kMaxDigestCandidates);
                 }),
      with_value({"--normalise"}, [&](Name a, Value v) { o.normalisation = parse_normalise(a, v); }),
      with_value({"--min-significance"},
                 [&](Name a, Value v) { o.api.search.min_significance = parse_number(a, v, 0, 1000); }),
      flag({"--log"}, o.api.log_requests),
      help([] {
        std::fputs(kServeUsage, stdout);
        std::fputs(kRedisFlagsUsage, stdout);
        std::exit(0);
      }),
  };
  for (Option& row : redis_options(redis)) table.push_back(std::move(row));
  parse_options(arguments(argc, argv, 1), table);
  o.redis = redis_target(redis);  // UsageError naming the flag
  if (o.gallery.empty() == o.redis.empty())
    throw UsageError("give one of --gallery DIR and --redis URL (or --sentinel HOST:PORT,... --master NAME)");
  if (o.shards && o.redis.empty()) throw UsageError("--shards goes with --redis or --sentinel");
  if (o.index.stream_host_digests && !o.index.host_digest_rows)
    throw UsageError("--stream-digests needs --digest-rows");
  if (o.index.host_digest_rows && o.gallery.empty())
    throw UsageError(
        "--digest-rows goes with --gallery (with --redis, each worker's prism texture shard --digest-rows)");
  if (o.index.verify_lanes != texture::IndexOptions{}.verify_lanes && o.gallery.empty())
    throw UsageError(
        "--verify-lanes goes with --gallery (with --redis, each worker's prism texture shard --verify-lanes)");
  if (o.keys.empty() && !loopback(o.host))
    throw UsageError("--listen " + o.host + " is reachable from other hosts: give --keys FILE");
  if (!o.keys.empty()) o.api.keys = service::load_api_keys(o.keys);  // a regular file only
  return o;
}

// The front of a sharded deployment (service/sharded_backend.h).
std::unique_ptr<service::Backend> sharded_front(const ServeOptions& o) {
  service::ShardedOptions so;
  so.redis = o.redis;
  so.shards = o.shards;
  so.default_timeout = o.api.deadline;
  so.normalisation = o.normalisation;
  // One Redis connection kept per HTTP thread: beyond the pool's idle ones, each request under load
  // would open (and, through Sentinel, check the role of) a connection of its own.
  so.idle_connections = size_t(o.api.threads);
  try {
    return std::make_unique<service::ShardedBackend>(so);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string(o.redis.rfind("sentinel://", 0) == 0 ? "--sentinel, --master: " : "--redis: ") +
                     e.what());
  }
}

}  // namespace

int texture_serve_command(int argc, char** argv) {
  try {
    const ServeOptions o = parse_serve(argc, argv);
    // SIGINT and SIGTERM are taken by a thread of ours (sigwait), not by whichever thread they hit:
    // blocked before any thread starts (GStreamer's, the server's), which inherit the mask.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    // Each connection and each image held while decoded takes a descriptor: the soft limit up to
    // the hard one.
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      setrlimit(RLIMIT_NOFILE, &files);
    }
    init_gstreamer();  // the image loader

    if (o.gpu_wait != gpu::HostWait::kAuto) gpu::set_host_wait(o.gpu_wait);  // before any GPU work
    std::unique_ptr<service::Backend> backend;
    std::string what;
    if (!o.gallery.empty()) {
      service::LocalOptions lo;
      lo.gallery = o.gallery;
      lo.index = o.index;
      lo.search_batching.max_batch = o.search_batch;
      lo.normalisation = o.normalisation;
      lo.owner = "prism texture serve on " + o.host + ":" + std::to_string(o.port);  // port 0: told after bind
      std::unique_ptr<service::LocalBackend> local;
      try {
        local = std::make_unique<service::LocalBackend>(lo);
      } catch (const std::invalid_argument& e) {  // the index refused its options: digests too large
        throw UsageError(std::string("--digest-rows, --gpu-memory, --host-memory: ") + e.what());
      }
      what = "gallery " + o.gallery + ": " + std::to_string(local->size()) + " products, normalisation " +
             local->normalisation().name();
      backend = std::move(local);
    } else {
      service::set_sentinel_log(  // through Sentinel: the master's address, then one line per failover
          [](const std::string& line) { service::log_line("prism texture serve: " + line); });
      backend = sharded_front(o);
      what = "shards through " + service::parse_redis_url(o.redis).text;  // password hidden
    }
    service::HttpApi api(*backend, o.api);
    const int port = api.bind(o.host, o.port);
    if (auto* local = dynamic_cast<service::LocalBackend*>(backend.get()))
      local->describe_owner("prism texture serve on " + o.host + ":" + std::to_string(port));
    std::printf("prism texture serve: listening on http://%s:%d (%s; features extracted on %s; %s)\n", o.host.c_str(),
                port, what.c_str(), api.extraction_device().c_str(),
                o.api.keys.empty() ? "no API keys: loopback only" : "API keys required");
    std::fflush(stdout);
    std::thread stopper([&] {
      int sig = 0;
      sigwait(&stop_signals, &sig);
      if (sig == SIGINT || sig == SIGTERM) api.stop();
    });
    api.serve();
    // serve() returned: stopped by a signal (or the listener failed). Wake the stopper if needed.
    pthread_kill(stopper.native_handle(), SIGTERM);
    stopper.join();
    std::printf("prism texture serve: stopped\n");
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "prism texture serve: error: %s\n\n%s%s", e.what(), kServeUsage, kRedisFlagsUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism texture serve: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace prism::cli
