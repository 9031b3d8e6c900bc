// prism texture reshard: an online split of a sharded deployment, N -> 2N shards, in the steps of
// service/reshard.h (docs/SERVICE.md, "Splitting every shard in two"): begin, copy (per new shard
// and replica), the new workers started by the operator, commit; status at any time.
//
// Exit codes: 0 done, 1 refused (a split already in progress, a count that is not the deployment's,
// a gallery not caught up in time, Redis unreachable: the message names it), 2 usage errors.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "options.h"
#include "redis_flags.h"
#include "reshard.h"
#include "texture_util.h"

namespace prism::cli {

namespace {

constexpr const char* kUsage =
    "usage: prism texture reshard (--redis URL | --sentinel HOST:PORT,... --master NAME) STEP [OPTIONS]\n"
    "\n"
    "Splits every shard of a sharded deployment in two while it serves (N -> 2N shards: the\n"
    "products of shard K stay there or move to shard K+N). The steps, in order:\n"
    "  begin --shards N      begin the split of the deployment's N shards: from now on fronts also\n"
    "                        send each write of a product that moves to its new shard's stream\n"
    "  copy --shard K --from DIR --to DIR\n"
    "                        make new shard K's gallery DIR (absent or empty) from its parent's\n"
    "                        (shard K-N) gallery DIR, on the parent's host, once that gallery holds\n"
    "                        every write from before the split; once per replica of shard K\n"
    "  (then start each new shard's workers: prism texture shard --shard K --gallery DIR ...)\n"
    "  commit                once every new shard's workers are live and caught up: reads go to the\n"
    "                        2N shards, and the parents drop the products that moved\n"
    "  status                the layout, and during a split whether each new shard is ready\n"
    "\n"
    "options:\n"
    "  --wait S              how long copy waits for the parent's gallery and commit for the new\n"
    "                        workers (default 60)\n"
    "\n"
    "Redis (an account that may run scripts, e.g. the admin user of docs/SERVICE.md):\n";

}  // namespace

int texture_reshard_command(const std::vector<std::string>& args) {
  std::string step, from, to;
  int shards = 0, shard = -1, wait_s = 60;
  RedisFlags redis;
  std::string target;
  try {
    using Name = const std::string&;
    using Value = const std::string&;
    std::vector<Option> table = {
        help([] {
          std::fputs(kUsage, stdout);
          std::fputs(kRedisFlagsUsage, stdout);
        }),
        with_value({"--shards"}, [&](Name a, Value v) { shards = parse_int(a, v, 1, 2048); }),
        with_value({"--shard"}, [&](Name a, Value v) { shard = parse_int(a, v, 0, 4095); }),
        with_value({"--from"}, from),
        with_value({"--to"}, to),
        with_value({"--wait"}, [&](Name a, Value v) { wait_s = parse_int(a, v, 0, 86400); }),
    };
    for (Option& row : redis_options(redis)) table.push_back(std::move(row));
    ParseRules rules;
    rules.positional = [&](const std::string& arg) {
      if (!step.empty()) throw UsageError("one step at a time: '" + step + "' and '" + arg + "'");
      step = arg;
    };
    if (!parse_options(args, table, rules)) return 0;  // --help
    target = redis_target(redis);
    if (target.empty()) throw UsageError("--redis URL (or --sentinel HOST:PORT,... --master NAME) is required");
    if (step.empty()) throw UsageError("a step is required: begin, copy, commit or status");
    if (step == "begin") {
      if (shards == 0) throw UsageError("begin needs --shards N, the deployment's shard count now");
    } else if (step == "copy") {
      if (shard < 0) throw UsageError("copy needs --shard K, the new shard (N..2N-1)");
      if (from.empty() || to.empty()) throw UsageError("copy needs --from DIR (the parent's gallery) and --to DIR");
    } else if (step != "commit" && step != "status") {
      throw UsageError("unknown step '" + step + "' (begin, copy, commit or status)");
    }
    try {
      service::Redis probe(target);  // checks the URL (and its password), connects not
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string(redis.sentinel.empty() ? "--redis: " : "--sentinel, --master: ") + e.what());
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "prism texture reshard: error: %s\n\n%s%s", e.what(), kUsage, kRedisFlagsUsage);
    return 2;
  }
  auto say = [](const std::string& line) { std::fprintf(stderr, "prism texture reshard: %s\n", line.c_str()); };
  try {
    service::Redis r(target);
    const std::chrono::seconds wait(wait_s);
    if (step == "begin") {
      const service::shard::Layout l = service::reshard::begin(r, shards);
      std::printf("split begun: %d -> %d shards; now copy each new shard's gallery from its parent's\n", l.shards,
                  l.split);
    } else if (step == "copy") {
      const service::reshard::CopyResult c = service::reshard::copy(r, shard, from, to, wait, say);
      std::printf("shard %d: copied %zu of the %zu products of %s to %s (after its split marker %s)\n", shard, c.copied,
                  c.parent_products, from.c_str(), to.c_str(), c.marker.c_str());
    } else if (step == "commit") {
      const service::shard::Layout l = service::reshard::commit(r, wait, say);
      std::printf("split committed: %d shards; the parents drop what moved as they apply the commit\n", l.shards);
    } else {
      std::printf("%s\n", service::reshard::status(r).c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism texture reshard: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace prism::cli
