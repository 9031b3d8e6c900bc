// prism texture shard: a shard worker of the sharded deployment (service/shard_worker.h has the
// protocol). It serves one shard's gallery directory to the fronts (`prism texture serve --redis`)
// through Redis Streams until SIGTERM or SIGINT.
//
// Exit codes: 0 stopped by a signal, 2 usage or startup errors (bad URL, unreadable gallery, a
// shard count that disagrees with Redis).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/numa.h"
#include "log_line.h"
#include "shard_worker.h"
#include "options.h"
#include "redis_flags.h"
#include "texture_util.h"

namespace prism::cli {

namespace {

constexpr const char* kUsage =
    "usage: prism texture shard (--redis URL | --sentinel HOST:PORT,... --master NAME) --shard K\n"
    "                           [--shards N] --gallery DIR [OPTIONS]\n"
    "\n"
    "Serves shard K of a sharded deployment: applies its writes to the gallery DIR and answers\n"
    "gets, verifies and searches for the fronts (prism texture serve --redis URL). Runs until\n"
    "SIGTERM or SIGINT.\n"
    "\n"
    "options (and Redis's, below):\n"
    "  --shard K            the shard this worker serves (0 .. N-1)\n"
    "  --shards N           the shard count; checked against (or stored in) Redis's prism:shards;\n"
    "                       default: what prism:shards says\n"
    "  --gallery DIR        the shard's gallery directory (created when absent or empty)\n"
    "  --replica NAME       this replica's name (each replica of a shard applies every write;\n"
    "                       default: the host name); a restarted worker must keep its name\n"
    "  --readers N          threads answering reads (default 2)\n"
    "  --repair-every S     compare the gallery with the shard's other replicas every S seconds\n"
    "                       (and at start) and copy or drop what differs (default 30; 0: off)\n"
    "  --device D           auto (default), cpu, cuda or cuda:N (GPU N only, for this worker; its\n"
    "                       threads run on GPU N's NUMA node, where its pinned memory then lands)\n"
    "  --normalise NAME     a new gallery's contrast normalisation (none, clahe-CLIP-TILES; default:\n"
    "                       Redis's prism:normalise when set, else clahe-4-8; an existing gallery's\n"
    "                       record decides and must agree); agreed with prism:normalise, which\n"
    "                       every front then applies to its queries\n"
    "  --gpu-wait W         how threads wait for the GPU: auto (CUDA's default: spin while the\n"
    "                       process has fewer contexts than cores), block (sleep: no core burnt\n"
    "                       spinning, a few microseconds more per wait), spin or yield (default auto)\n"
    "  --verify-lanes N     verifications that run on the GPU at once, each on its own stream\n"
    "                       and buffers (1..64, default 4)\n"
    "  --gpu-memory SIZE    GPU memory for the descriptors (e.g. 40G; default: the free memory less 2 GiB)\n"
    "  --host-memory SIZE   host memory for the products beyond --gpu-memory (default: half the available)\n"
    "  --digest-rows N      keep a digest of every host-memory product (the N of its largest keypoints; N\n"
    "                       divides 768, 16..384), out of --gpu-memory, for searches that ask for\n"
    "                       digest_candidates (default 0: none; such searches are then exact)\n"
    "  --stream-digests     with --digest-rows: keep no digests; each digest search copies the\n"
    "                       host-memory products' first N rows across PCIe (no memory; same answers)\n"
    "\n"
    "Redis:\n";

std::atomic<bool> g_stop{false};

extern "C" void on_signal(int) { g_stop = true; }

}  // namespace

int texture_shard_command(const std::vector<std::string>& args) {
  service::ShardWorkerOptions o;
  o.local.index.device = texture::Device::kAuto;
  bool have_shard = false;
  bool one_gpu = false;  // --device cuda:N
  gpu::HostWait gpu_wait = gpu::HostWait::kAuto;
  try {
    using Name = const std::string&;
    using Value = const std::string&;
    auto device = [&](Name a, Value v) {
      if (v.rfind("cuda:", 0) == 0) {
        // One worker, one GPU: the process sees only GPU N (the Nth of CUDA_VISIBLE_DEVICES when
        // it is set), chosen before any CUDA call.
        const int n = parse_int("--device cuda:N", v.substr(5), 0, 63);
        std::vector<std::string> visible;
        if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
          std::stringstream list(env);
          for (std::string d; std::getline(list, d, ',');) visible.push_back(d);
        }
        if (!visible.empty() && n >= int(visible.size()))
          throw UsageError("--device " + v + ": CUDA_VISIBLE_DEVICES lists " + std::to_string(visible.size()) +
                           " GPUs");
        setenv("CUDA_VISIBLE_DEVICES", visible.empty() ? std::to_string(n).c_str() : visible[size_t(n)].c_str(), 1);
        o.local.index.device = gpu::Device::kCuda;
        one_gpu = true;
      } else {
        o.local.index.device = parse_device(a, v);
      }
    };
    RedisFlags redis;
    std::vector<Option> table = {
        help([] {
          std::fputs(kUsage, stdout);
          std::fputs(kRedisFlagsUsage, stdout);
        }),
        with_value({"--shard"},
                   [&](Name a, Value v) {
                     o.shard = parse_int(a, v, 0, 4095);
                     have_shard = true;
                   }),
        with_value({"--shards"}, [&](Name a, Value v) { o.shards = parse_int(a, v, 1, 4096); }),
        with_value({"--gallery"}, [&](Name, Value v) { o.local.gallery = v; }),  // a path
        with_value({"--replica"}, o.replica),
        with_value({"--readers"}, [&](Name a, Value v) { o.readers = parse_int(a, v, 1, 64); }),
        with_value({"--repair-every"}, [&](Name a, Value v) { o.repair_every_s = parse_int(a, v, 0, 86400); }),
        with_value({"--device"}, device),
        with_value({"--normalise"}, [&](Name a, Value v) { o.local.normalisation = parse_normalise(a, v); }),
        with_value({"--gpu-memory"}, [&](Name a, Value v) { o.local.index.gpu_budget = parse_size(a, v); }),
        with_value({"--verify-lanes"}, [&](Name a, Value v) { o.local.index.verify_lanes = parse_int(a, v, 1, 64); }),
        with_value({"--gpu-wait"}, [&](Name a, Value v) { gpu_wait = parse_gpu_wait(a, v); }),
        with_value({"--host-memory"}, [&](Name a, Value v) { o.local.index.host_budget = parse_size(a, v); }),
        with_value({"--digest-rows"},
                   [&](Name a, Value v) { o.local.index.host_digest_rows = parse_digest_rows(a, v, true); }),
        flag({"--stream-digests"}, o.local.index.stream_host_digests),
    };
    for (Option& row : redis_options(redis)) table.push_back(std::move(row));
    if (!parse_options(args, table)) return 0;  // --help
    o.redis = redis_target(redis);              // UsageError naming the flag
    if (o.redis.empty()) throw UsageError("--redis URL (or --sentinel HOST:PORT,... --master NAME) is required");
    if (!have_shard) throw UsageError("--shard K is required");
    if (o.local.gallery.empty()) throw UsageError("--gallery DIR is required");
    if (o.local.index.stream_host_digests && !o.local.index.host_digest_rows)
      throw UsageError("--stream-digests needs --digest-rows");
    if (o.shards > 0 && o.shard >= o.shards)
      throw UsageError("--shard " + std::to_string(o.shard) + " is not below --shards " + std::to_string(o.shards));
    if (!o.replica.empty() && !texture::valid_product_id(o.replica))
      throw UsageError("--replica: invalid name '" + o.replica + "' (1..128 of A-Z a-z 0-9 . _ -)");
    try {
      service::Redis probe(o.redis);  // checks the URL (and its password), connects not
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string(redis.sentinel.empty() ? "--redis: " : "--sentinel, --master: ") + e.what());
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "prism texture shard: error: %s\n\n%s%s", e.what(), kUsage, kRedisFlagsUsage);
    return 2;
  }
  try {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a connection Redis closed is an error to handle, not a death
    if (gpu_wait != gpu::HostWait::kAuto) gpu::set_host_wait(gpu_wait);  // before the worker's GPU work
    if (one_gpu) {
      // Before the index's pinned host tier is allocated (ShardWorker opens it): its pages are
      // first touched, and so placed, on the CPUs the threads run on (kernels/common/numa.h).
      std::string placed;
      try {
        placed = numa::apply(numa::placement_of_gpu(0));
      } catch (const std::exception& e) {  // a sysfs file we cannot read as documented
        placed = std::string(e.what()) + ": threads left unbound";
      }
      std::fprintf(stderr, "prism texture shard: shard %d: %s\n", o.shard, placed.c_str());
    }
    const int shard = o.shard;
    service::set_sentinel_log([shard](const std::string& line) {  // the master's address, a line per failover
      service::log_line("prism texture shard: shard " + std::to_string(shard) + ": " + line);
    });
    service::ShardWorker worker(o);
    worker.run(g_stop);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism texture shard: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace prism::cli
