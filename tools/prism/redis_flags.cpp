#include "redis_flags.h"

#include <algorithm>
#include <stdexcept>

#include "redis.h"
#include "texture_util.h"

namespace prism::cli {

const char* const kRedisFlagsUsage =
    "  --redis URL          redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], e.g. redis://127.0.0.1:6379\n"
    "                       or redis://prism-front@10.0.0.5:6379 (USER@ without :PASSWORD: the\n"
    "                       password from $PRISM_REDIS_PASSWORD)\n"
    "  --sentinel HOST:PORT[,HOST:PORT...]\n"
    "                       instead of --redis: the Redis Sentinels to ask for the master (each in\n"
    "                       turn); a failover of the master is followed (docs/SERVICE.md)\n"
    "  --master NAME        with --sentinel: the name the sentinels monitor the master by\n"
    "  --redis-user USER    with --sentinel: the master's ACL user (password from\n"
    "                       $PRISM_REDIS_PASSWORD; default: the default user, no AUTH without one)\n"
    "  --redis-db N         with --sentinel: the master's database (default 0)\n";

std::vector<Option> redis_options(RedisFlags& flags) {
  return {
      with_value({"--redis"}, flags.redis),
      with_value({"--sentinel"}, flags.sentinel),
      with_value({"--master"}, flags.master),
      with_value({"--redis-user"}, flags.user),
      with_value({"--redis-db"},
                 [&flags](const std::string& a, const std::string& v) { flags.db = parse_int(a, v, 0, 99999); }),
  };
}

namespace {

// A user name in a URL's user information: what would end it percent-encoded.
std::string url_user(const std::string& user) {
  std::string out;
  const char* hex = "0123456789ABCDEF";
  for (const char c : user) {
    if (c == '%' || c == ':' || c == '@' || c == '/') {
      out += '%';
      out += hex[(static_cast<unsigned char>(c) >> 4) & 15];
      out += hex[static_cast<unsigned char>(c) & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string redis_target(const RedisFlags& f) {
  if (!f.redis.empty() && !f.sentinel.empty())
    throw UsageError("give one of --redis URL and --sentinel HOST:PORT,... --master NAME, not both");
  if (f.sentinel.empty()) {
    if (!f.master.empty()) throw UsageError("--master goes with --sentinel HOST:PORT,...");
    if (!f.user.empty())
      throw UsageError("--redis-user goes with --sentinel (with --redis the user is in the URL: redis://USER@HOST)");
    if (f.db >= 0)
      throw UsageError("--redis-db goes with --sentinel (with --redis the database is in the URL: redis://HOST/DB)");
    return f.redis;
  }
  if (f.master.empty())
    throw UsageError("--sentinel needs --master NAME (the name the sentinels monitor the master by)");
  if (f.master.find_first_of(" \t\r\n/@,") != std::string::npos)
    throw UsageError("--master: invalid name '" + f.master + "' (no spaces, '/', '@' or ',')");
  if (f.user.find_first_of(" \t\r\n") != std::string::npos)
    throw UsageError("--redis-user: invalid user name '" + f.user + "'");
  std::string hosts;
  for (size_t from = 0; from <= f.sentinel.size();) {
    const size_t comma = std::min(f.sentinel.find(',', from), f.sentinel.size());
    const std::string one = f.sentinel.substr(from, comma - from);
    try {
      const auto [host, port] = service::parse_host_port(one);
      hosts += (hosts.empty() ? "" : ",") + host + ":" + std::to_string(port);
    } catch (const std::invalid_argument& e) {
      throw UsageError("--sentinel takes HOST:PORT[,HOST:PORT...] such as 10.0.0.5:26379,10.0.0.6:26379: " +
                       std::string(e.what()));
    }
    from = comma + 1;
  }
  return "sentinel://" + (f.user.empty() ? "" : url_user(f.user) + "@") + hosts + "/" + f.master +
         (f.db > 0 ? "/" + std::to_string(f.db) : "");
}

}  // namespace prism::cli
