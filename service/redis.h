// A small synchronous Redis client over hiredis 0.14 (Debian 12's libhiredis-dev: RESP2, no TLS, no
// cluster), enough for the sharded deployment's streams (service/shard_worker.h): one connection per
// Redis object, one command at a time, binary-safe arguments.
//
// Why its own class rather than hiredis directly: a hiredis context is unusable after any I/O error
// or timeout, and the deployment must survive a Redis restart without a hang. So every command has
// a socket timeout (blocking commands add their own block time to it), a failed connection is
// dropped and the next command reconnects, and every failure is one RedisError saying that Redis is
// unreachable at the URL. Error replies (-ERR, -NOGROUP ...) are not failures: they come back as a
// Reply of type kError for the caller to judge.
//
// Not thread-safe (neither is a hiredis context): a thread uses its own Redis, or takes one from a
// RedisPool for the duration of a request.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

struct redisContext;

namespace prism::service {

// Redis cannot be reached (refused, timed out, connection lost). The message names the URL.
struct RedisError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (PORT defaults to 6379, DB to 0), the form of
// redis-cli -u and redis-py. USER and PASSWORD may be percent-encoded (%40 for '@'). With a password
// the client sends AUTH [USER] PASSWORD on every connection (Redis 6 ACL users, or `requirepass`
// for the default user); USER alone (redis://USER@HOST) takes the password from the environment
// variable PRISM_REDIS_PASSWORD, which keeps it off the command line (ps, systemd units).
// rediss:// is refused: Debian 12's hiredis 0.14 has no TLS (docs/SERVICE.md says what to do).
struct RedisUrl {
  std::string text;  // as given, with the password replaced by *** (what messages and logs show)
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;      // empty: the default user
  std::string password;  // empty: no AUTH (unless PRISM_REDIS_PASSWORD, see Redis)
};
// Throws std::invalid_argument naming the URL (password hidden) and what is wrong with it.
RedisUrl parse_redis_url(const std::string& url);

// One reply. Status replies (+OK) are strings; nested arrays keep their structure.
struct Reply {
  enum class Type { kNil, kInteger, kString, kArray, kError };
  Type type = Type::kNil;
  int64_t integer = 0;
  std::string str;  // kString and kError
  std::vector<Reply> elements;

  bool nil() const { return type == Type::kNil; }
  bool error() const { return type == Type::kError; }
  // The error reply's first word (NOGROUP, BUSYGROUP, LOADING, ...), empty for other replies.
  std::string error_code() const;
};

class Redis {
 public:
  using ms = std::chrono::milliseconds;
  // Parses the URL (std::invalid_argument, also for a USER without a password anywhere); connects
  // at the first command.
  explicit Redis(const std::string& url, ms timeout = ms(2000));
  ~Redis();
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

  // Runs one command; `block` is how long the command itself may block in Redis (XREADGROUP BLOCK,
  // BLPOP), added to the socket timeout. Throws RedisError when Redis is unreachable; the
  // connection is then dropped and the next command reconnects. A connection that was idle in a
  // pool may have been closed by a Redis restart: when a command fails on a reused connection with
  // the connection closed (not a timeout), it is retried once on a fresh one (every command this
  // deployment sends may run twice: stream entries are applied idempotently).
  Reply command(const std::vector<std::string>& argv, ms block = ms(0));

  const std::string& url() const { return url_.text; }
  bool connected() const { return ctx_ != nullptr; }
  void disconnect();

 private:
  void connect();
  RedisUrl url_;
  ms timeout_;
  redisContext* ctx_ = nullptr;
};

// Connections for a multi-threaded caller (the HTTP server calls a backend from many threads):
// acquire() hands out an idle connection or makes one; the Lease returns it when it goes out of
// scope. No cap on connections in use, so acquire() never waits; at most `idle` are kept.
class RedisPool {
 public:
  RedisPool(const std::string& url, size_t idle, Redis::ms timeout = Redis::ms(2000));

  class Lease {
   public:
    Lease(RedisPool* pool, std::unique_ptr<Redis> redis) : pool_(pool), redis_(std::move(redis)) {}
    Lease(Lease&&) = default;
    ~Lease();
    Redis* operator->() { return redis_.get(); }
    Redis& operator*() { return *redis_; }

   private:
    RedisPool* pool_;
    std::unique_ptr<Redis> redis_;
  };
  Lease acquire();
  const std::string& url() const { return shown_; }  // password hidden

 private:
  std::string url_, shown_;
  size_t idle_;
  Redis::ms timeout_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Redis>> free_;
};

}  // namespace prism::service
