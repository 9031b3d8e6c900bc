// The options that say where a sharded deployment's Redis is, shared by `prism texture serve` (a
// front) and `prism texture shard` (a worker): --redis URL, or --sentinel HOST:PORT,... with
// --master NAME (and the master's login and database: --redis-user, --redis-db), made into the
// one URL the service takes (service/redis.h: redis:// or sentinel://).
#pragma once

#include <string>
#include <vector>

#include "options.h"

namespace prism::cli {

struct RedisFlags {
  std::string redis, sentinel, master, user;
  int db = -1;  // --redis-db; -1: not given
};

// The option table rows of those flags, filling `flags`.
std::vector<Option> redis_options(RedisFlags& flags);

// The service's URL for `flags`: the --redis URL as given, or sentinel://[USER@]HOST:PORT,.../NAME[/DB]
// from --sentinel, --master, --redis-user and --redis-db; "" when neither --redis nor --sentinel
// was given (the caller says which it needs). UsageError naming the flag for a bad HOST:PORT,
// --sentinel without --master (or the reverse), both --redis and --sentinel, or --redis-user or
// --redis-db without --sentinel. The password comes from PRISM_REDIS_PASSWORD (service/redis.h).
std::string redis_target(const RedisFlags& flags);

// The usage lines of those flags (two spaces in, as the commands' option lists).
extern const char* const kRedisFlagsUsage;

}  // namespace prism::cli
