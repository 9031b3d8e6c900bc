// A real redis-server for the sharded service's tests (tests/service), and child processes (a
// `prism texture shard` worker the test kills with SIGKILL). Loopback only, a free port, the
// server's own data folder; gtest-free.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace prism::test {

// A process started from `argv` (no shell), stdout and stderr appended to `log`. The destructor
// kills (SIGKILL) and reaps it if it still runs. `env`: NAME=VALUE entries set (or replaced) in its
// environment.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& log, const std::vector<std::string>& env = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  pid_t pid() const { return pid_; }
  bool running();
  void signal(int sig);
  // Waits up to `seconds` for it to end, then kills it. Returns the exit status, 128 + the signal
  // for a process a signal ended, or -1 when it had to be killed.
  int wait(int seconds);
  // "" while it runs; else how it ended (its exit status, or the signal) and the last `lines`
  // lines of its log: what a test reports of a process that ended without the test ending it.
  std::string ended(int lines = 20);

 private:
  pid_t pid_ = -1;
  pid_t started_ = -1;  // pid_ as started, for the report once it ended
  int status_ = -1;
  std::string log_;
};

// The redis-server to use ($PRISM_REDIS_SERVER, else the first on PATH, else /usr/bin/redis-server),
// "" when absent.
std::string redis_server_path();
// PRISM_REQUIRE_REDIS=1 (CI): a test that needs redis-server fails instead of skipping without it.
bool redis_required();
// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

// redis-server on 127.0.0.1:port() with its data in `dir` (--save "" --appendonly yes: the AOF is
// its durable state). start() waits until it answers PING; throws std::runtime_error when it does
// not within 10 s (its log is `dir`/redis.log). `config` is more of redis-server's arguments (ACL
// users: {"--user", "NAME", "on", ">PASSWORD", ...}). With a `password` the test logs in with it,
// as `user` (one of `config`'s) or, with no user, as the default user (given it as requirepass).
class RedisServer {
 public:
  explicit RedisServer(std::filesystem::path dir, std::vector<std::string> config = {}, std::string user = "",
                       std::string password = "");
  ~RedisServer();
  int port() const { return port_; }
  std::string url() const;  // with the test's login
  void start();
  void stop();  // SIGTERM (Redis flushes the AOF), then waits
  void kill();  // SIGKILL
  void restart() {
    stop();
    start();
  }
  bool running() const { return child_ != nullptr; }
  // "" unless the server ended although neither stop() nor kill() ended it: then ChildProcess::ended's.
  std::string ended(int lines = 20) { return child_ ? child_->ended(lines) : ""; }
  pid_t pid() const { return child_ ? child_->pid() : -1; }  // SIGSTOP, SIGCONT

 private:
  std::filesystem::path dir_;
  int port_;
  std::vector<std::string> config_;
  std::string user_, password_;
  std::unique_ptr<ChildProcess> child_;
};

}  // namespace prism::test
