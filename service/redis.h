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
// Sentinel (a master that fails over): hiredis 0.14 has no Sentinel support, so a Redis given a
// sentinel:// URL asks the sentinels itself at every (re)connection, in turn until one knows the
// master (SENTINEL get-master-addr-by-name), checks with ROLE that the address it was given is a
// master, and reconnects the same way when the connection is lost or the server answers READONLY
// (a master demoted to replica). A thread per master and process also asks the sentinels every
// second, so that a failover whose old master is still up (a switchover, a partition) is followed
// at once rather than when Sentinel demotes it. The connections of a process share what they learn:
// the first to see a new master address logs one line (old -> new) and counts one failover
// (SentinelStatus); every other connection then reconnects before its next command, and callers
// see it through failovers() to redo their setup.
//
// Not thread-safe (neither is a hiredis context): a thread uses its own Redis, or takes one from a
// RedisPool for the duration of a request.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
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
//
// sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]: the master named MASTER, as
// the sentinels at HOST:PORT (no default port) say (what `--sentinel HOST:PORT,... --master NAME`
// makes). The login and DB are the master's; the sentinels are asked without one.
struct RedisUrl {
  std::string text;  // as given, with the password replaced by *** (what messages and logs show)
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;      // empty: the default user
  std::string password;  // empty: no AUTH (unless PRISM_REDIS_PASSWORD, see Redis)
  // sentinel:// only: the sentinels, in the order they are asked, and the master's name.
  std::vector<std::pair<std::string, int>> sentinels;
  std::string master;
};
// Throws std::invalid_argument naming the URL (password hidden) and what is wrong with it.
RedisUrl parse_redis_url(const std::string& url);
// HOST:PORT (PORT 1..65535, no default): {host, port}. std::invalid_argument quoting `text` and
// what is wrong with it (not where it came from: the caller names its option).
std::pair<std::string, int> parse_host_port(const std::string& text);

// What this process knows of a sentinel:// master (shared by every connection to it): its address
// HOST:PORT as last found (empty before the first connection) and how many times it changed
// (failovers followed since the process started).
struct SentinelStatus {
  std::string master;   // the name the sentinels know it by
  std::string address;  // HOST:PORT
  uint64_t failovers = 0;
};
// The status of the sentinel:// URL `url`'s master; nullopt for a redis:// URL (or a bad one).
std::optional<SentinelStatus> sentinel_status(const std::string& url);
// Where the line of each failover followed goes (one per process and master): by default stderr,
// as "prism: Redis master 'NAME' failed over: OLD -> NEW (...)". Set it before any connection.
void set_sentinel_log(std::function<void(const std::string&)> log);

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
  // deployment sends may run twice: stream entries are applied idempotently), except XREADGROUP,
  // XAUTOCLAIM and XCLAIM: Redis may have run them, and their reply, lost, is the entries they
  // delivered (sent again, XREADGROUP ... > would deliver the entries after them, and those would
  // wait unseen in the consumer's pending list), so they are a RedisError, after which the caller
  // reads its pending entries again (ID 0); and the commands that pop or move what they answer
  // (BLPOP, BRPOP, LPOP, RPOP, BLMOVE, LMOVE, ZPOPMIN, SPOP, GETDEL, ...: sent again, the second
  // would wait for what the first took). Through sentinels,
  // a READONLY error (the master was demoted) also reconnects to the master the sentinels name
  // and retries once; a second READONLY is a RedisError.
  Reply command(const std::vector<std::string>& argv, ms block = ms(0));
  // Several commands sent at once and their replies read in order (hiredis pipelining): one round
  // trip instead of one each, for commands that do not block. Retried once on a fresh connection
  // as command() is, when no reply had come yet; through sentinels a READONLY reply among them
  // sends them all once more to the master the sentinels name, and a second READONLY is a RedisError.
  // `same_connection`: only on the connection already open, never retried on another (a RedisError
  // instead): a MULTI ... EXEC that relies on an earlier WATCH of this connection, which a fresh
  // connection would not have.
  std::vector<Reply> pipeline(const std::vector<std::vector<std::string>>& commands, bool same_connection = false);

  // The URL (password hidden); through sentinels, with the master's address when connected.
  std::string url() const;
  bool connected() const { return ctx_ != nullptr; }
  void disconnect();
  // Through sentinels: the failovers this process has followed so far (SentinelStatus), which a
  // caller compares with what it saw to redo its setup on the new master. 0 for redis:// URLs.
  uint64_t failovers() const;

  struct SentinelShared;  // redis.cpp: one per master and process

 private:
  void connect();
  // Through sentinels: connected before the process followed a failover (another connection found
  // a new master), so possibly to the old master, which is dropped before the next command.
  bool stale() const;
  // Through sentinels, after a READONLY reply (the master was demoted: what it refused did not
  // run): drops the connection, then returns when `retry` (the caller sends once more, to the
  // master the sentinels name), else throws a RedisError naming `what`. The one place command()
  // and pipeline() follow a demotion.
  void follow_demotion(bool retry, const std::string& what);
  // Through sentinels: the master's address, asking each sentinel in turn. RedisError when none answers.
  std::pair<std::string, int> resolve_master(std::string& via);
  RedisUrl url_;
  ms timeout_;
  redisContext* ctx_ = nullptr;
  std::shared_ptr<SentinelShared> sentinel_;  // null for redis:// URLs
  std::string address_;                       // HOST:PORT of the connected master (sentinels)
  uint64_t connected_failovers_ = 0;          // failovers() when this connection was made
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
