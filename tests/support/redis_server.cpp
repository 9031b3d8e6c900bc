#include "redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace prism::test {

namespace {

using namespace std::chrono_literals;

// One PING over a fresh connection: true when the answer is +PONG (not -LOADING while the AOF loads).
// Whether the redis-server on `port` answers PING and is process `pid`: a parallel test's server
// may have taken the port between free_port() and our server's bind (ours then exits), and a
// test that went on with that one would share its data.
// With a password, AUTH [USER] PASSWORD first.
bool answers_as(int port, pid_t pid, const std::string& user, const std::string& password) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = false;
  const std::string auth = "AUTH " + (user.empty() ? "" : user + " ") + password + "\r\n";
  const std::string ping = (password.empty() ? "" : auth) + "PING\r\n";
  const std::string pong = std::string(password.empty() ? "" : "+OK\r\n") + "+PONG\r\n";
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      send(fd, ping.data(), ping.size(), MSG_NOSIGNAL) == ssize_t(ping.size())) {
    std::string buf(pong.size(), '\0');
    ok = recv(fd, buf.data(), buf.size(), MSG_WAITALL) == ssize_t(buf.size()) && buf == pong;
  }
  if (ok) {
    const char info[] = "INFO server\r\n";
    ok = send(fd, info, sizeof info - 1, MSG_NOSIGNAL) == ssize_t(sizeof info - 1);
    std::string reply;
    const std::string want = "process_id:" + std::to_string(pid) + "\r\n";
    char buf[4096];
    while (ok && reply.find(want) == std::string::npos && reply.find("process_id:") == std::string::npos) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      reply.append(buf, size_t(n));
    }
    // The line may have arrived in part: read on until its end.
    for (size_t at = reply.find("process_id:");
         ok && at != std::string::npos && reply.find("\r\n", at) == std::string::npos;) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      reply.append(buf, size_t(n));
    }
    ok = ok && reply.find(want) != std::string::npos;
  }
  close(fd);
  return ok;
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& log,
                           const std::vector<std::string>& env) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The environment is made before fork: setenv in the child of a threaded process may deadlock.
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) {
    const std::string name(*e, std::strcspn(*e, "="));
    if (std::none_of(env.begin(), env.end(), [&](const std::string& v) { return v.rfind(name + "=", 0) == 0; }))
      envp.push_back(*e);
  }
  for (const std::string& v : env) envp.push_back(const_cast<char*>(v.c_str()));
  envp.push_back(nullptr);
  const int out = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (out < 0) throw std::runtime_error("cannot open " + log);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out, 1);
    dup2(out, 2);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(out);
  if (pid_ < 0) throw std::runtime_error("cannot start " + argv.at(0));
  started_ = pid_;
  log_ = log;
}

ChildProcess::~ChildProcess() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    wait(10);
  }
}

bool ChildProcess::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0) return true;
  if (r == pid_) status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  pid_ = -1;
  return false;
}

void ChildProcess::signal(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

int ChildProcess::wait(int seconds) {
  for (int i = 0; i < seconds * 20 && running(); ++i) std::this_thread::sleep_for(50ms);
  if (!running()) return status_;
  ::kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

std::string ChildProcess::ended(int lines) {
  if (running()) return "";
  std::string how = status_ < 0      ? "ended (status unknown)"
                    : status_ >= 128 ? "was ended by signal " + std::to_string(status_ - 128)
                                     : "exited with status " + std::to_string(status_);
  std::ifstream in(log_);
  std::vector<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (int(last.size()) > lines) last.erase(last.begin());
  }
  how = "(pid " + std::to_string(started_) + ") " + how + "; the last lines of its log " + log_ + ":";
  for (const std::string& line : last) how += "\n  " + line;
  return how;
}

std::string redis_server_path() {
  const char* env = std::getenv("PRISM_REDIS_SERVER");
  if (env && *env) return access(env, X_OK) == 0 ? env : "";
  // The first on PATH (the GPU suite's bundle puts its own there), then Debian's.
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    for (size_t at = 0; at <= dirs.size();) {
      const size_t colon = std::min(dirs.find(':', at), dirs.size());
      if (colon > at) candidates.push_back(dirs.substr(at, colon - at) + "/redis-server");
      at = colon + 1;
    }
  }
  candidates.push_back("/usr/bin/redis-server");
  for (const std::string& c : candidates)
    if (access(c.c_str(), X_OK) == 0) return c;
  return "";
}

bool redis_required() {
  const char* env = std::getenv("PRISM_REQUIRE_REDIS");
  return env && std::string(env) == "1";
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    throw std::runtime_error("no free TCP port on 127.0.0.1");
  }
  close(fd);
  return ntohs(a.sin_port);
}

RedisServer::RedisServer(std::filesystem::path dir, std::vector<std::string> config, std::string user,
                         std::string password)
    : dir_(std::move(dir)),
      port_(free_port()),
      config_(std::move(config)),
      user_(std::move(user)),
      password_(std::move(password)) {
  std::filesystem::create_directories(dir_);
  // free_port() closes the port before redis-server binds it, and another process (a parallel test's
  // server or client) may take it meanwhile: the first start retries on a new port. A restart keeps
  // its port, which the clients hold.
  for (int attempt = 1;; ++attempt) {
    try {
      start();
      return;
    } catch (const std::runtime_error&) {
      if (attempt == 3) throw;
      port_ = free_port();
    }
  }
}

RedisServer::~RedisServer() { kill(); }

std::string RedisServer::url() const {
  const std::string login = password_.empty() ? "" : user_ + ":" + password_ + "@";
  return "redis://" + login + "127.0.0.1:" + std::to_string(port_);
}

void RedisServer::start() {
  const std::string server = redis_server_path();
  if (server.empty()) throw std::runtime_error("redis-server not found");
  std::vector<std::string> argv{
      server,         "--bind", "127.0.0.1",   "--port", std::to_string(port_), "--dir", dir_.string(), "--save", "",
      "--appendonly", "yes",    "--daemonize", "no",     "--protected-mode",    "no"};
  if (user_.empty() && !password_.empty()) argv.insert(argv.end(), {"--requirepass", password_});
  argv.insert(argv.end(), config_.begin(), config_.end());
  child_ = std::make_unique<ChildProcess>(argv, (dir_ / "redis.log").string());
  for (int i = 0; i < 200; ++i) {
    if (!child_->running()) break;  // e.g. the port was taken: the caller tries another
    if (answers_as(port_, child_->pid(), user_, password_)) return;
    std::this_thread::sleep_for(50ms);
  }
  child_.reset();
  throw std::runtime_error("redis-server on port " + std::to_string(port_) + " did not start: see " +
                           (dir_ / "redis.log").string());
}

void RedisServer::stop() {
  if (!child_) return;
  child_->signal(SIGTERM);
  child_->wait(10);
  child_.reset();
}

void RedisServer::kill() {
  if (!child_) return;
  child_->signal(SIGKILL);
  child_->wait(10);
  child_.reset();
}

}  // namespace prism::test
