#include "fault_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <list>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace prism::test {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxQueued = 4 << 20;  // bytes held per direction before the sender is no longer read

struct Chunk {
  Clock::time_point due;
  std::string bytes;
  size_t sent = 0;
};

struct Link {
  int client = -1, upstream = -1;
  bool connecting = true;
  bool client_eof = false, upstream_eof = false;
  bool partitioned = false;    // lived through a partition: cut when it heals
  uint64_t opened_after = 0;   // the partition() calls before it was accepted
  bool isolated = false;       // its process is partitioned (partition_process): held, then cut
  unsigned long inode = 0;     // of the client's own socket (0: not looked up yet)
  std::set<pid_t> checked;     // processes it was looked for in
  pid_t owner = 0;             // the process found holding the client's socket (0: none yet)
  std::deque<Chunk> up, down;  // client -> upstream, upstream -> client
  size_t up_bytes = 0, down_bytes = 0;
};

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

void close_link(Link& l) {
  if (l.client >= 0) close(l.client);
  if (l.upstream >= 0) close(l.upstream);
  l.client = l.upstream = -1;
}

// Reads what `fd` has into `q` (due after `delay`): false at EOF or an error.
bool take(int fd, std::deque<Chunk>& q, size_t& queued, std::chrono::milliseconds delay) {
  char buf[65536];
  const ssize_t n = recv(fd, buf, sizeof buf, 0);
  if (n == 0) return false;
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  q.push_back({Clock::now() + delay, std::string(buf, size_t(n))});
  queued += size_t(n);
  return true;
}

// Sends the chunks of `q` that are due: false on an error.
bool give(int fd, std::deque<Chunk>& q, size_t& queued) {
  const auto now = Clock::now();
  while (!q.empty() && q.front().due <= now) {
    Chunk& c = q.front();
    const ssize_t n = send(fd, c.bytes.data() + c.sent, c.bytes.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.sent += size_t(n);
    queued -= size_t(n);
    if (c.sent < c.bytes.size()) return true;
    q.pop_front();
  }
  return true;
}

bool due(const std::deque<Chunk>& q, Clock::time_point now) { return !q.empty() && q.front().due <= now; }

// The inode of the socket at the other end of our connection `fd` (the client's own: its local
// port is our peer's port, its remote port our listening port), from /proc/net/tcp; 0 if not found.
unsigned long client_inode(int fd, int listen_port) {
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return 0;
  char local[32], remote[32];
  std::snprintf(local, sizeof local, ":%04X", ntohs(peer.sin_port));
  std::snprintf(remote, sizeof remote, ":%04X", listen_port);
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // the header
  while (std::getline(tcp, line)) {
    std::istringstream in(line);
    std::string sl, l, r, st, queues, timer, retr, uid, timeout;
    unsigned long inode = 0;
    in >> sl >> l >> r >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
    if (l.size() > 5 && r.size() > 5 && l.compare(l.size() - 5, 5, local) == 0 &&
        r.compare(r.size() - 5, 5, remote) == 0)
      return inode;
  }
  return 0;
}

// Whether process `pid` holds the socket `inode`.
bool holds(pid_t pid, unsigned long inode) {
  const std::string want = "socket:[" + std::to_string(inode) + "]";
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code rec;
    if (std::filesystem::read_symlink(it->path(), rec).string() == want) return true;
  }
  return false;
}

}  // namespace

FaultProxy::FaultProxy(int target_port, int listen_port) : target_(target_port) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a = loopback(listen_port);
  socklen_t len = sizeof a;
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(listen_fd_, 256) != 0 || getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
      pipe2(wake_, O_NONBLOCK | O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    if (listen_fd_ >= 0) close(listen_fd_);
    throw std::runtime_error("fault proxy: cannot listen on 127.0.0.1:" + std::to_string(listen_port) + ": " + why);
  }
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { run(); });
}

FaultProxy::~FaultProxy() {
  stop_ = true;
  wake();
  thread_.join();
  close(listen_fd_);
  close(wake_[0]);
  close(wake_[1]);
}

void FaultProxy::wake() {
  const char c = 1;
  [[maybe_unused]] const ssize_t n = write(wake_[1], &c, 1);
}

void FaultProxy::set_target(int port) {
  std::lock_guard lock(mutex_);
  target_ = port;
}

void FaultProxy::forward() {
  {
    std::lock_guard lock(mutex_);
    mode_ = Mode::kForward;
  }
  wake();
}

void FaultProxy::heal() { forward(); }

void FaultProxy::refuse() {
  {
    std::lock_guard lock(mutex_);
    mode_ = Mode::kRefuse;
  }
  wake();
}

void FaultProxy::partition() {
  {
    std::lock_guard lock(mutex_);
    mode_ = Mode::kPartition;
    ++partitions_;
  }
  wake();
}

void FaultProxy::stall() {
  {
    std::lock_guard lock(mutex_);
    mode_ = Mode::kStall;
  }
  wake();
}

void FaultProxy::delay(std::chrono::milliseconds d) {
  {
    std::lock_guard lock(mutex_);
    delay_ = d;
  }
  wake();
}

void FaultProxy::cut() {
  {
    std::lock_guard lock(mutex_);
    ++cut_generation_;
  }
  wake();
}

void FaultProxy::partition_process(pid_t pid) {
  {
    std::lock_guard lock(mutex_);
    isolated_.insert(pid);
  }
  wake();
}

void FaultProxy::heal_process(pid_t pid) {
  {
    std::lock_guard lock(mutex_);
    isolated_.erase(pid);
  }
  wake();
}

std::string FaultProxy::mode() const {
  std::lock_guard lock(mutex_);
  std::string m = mode_ == Mode::kForward     ? "forward"
                  : mode_ == Mode::kRefuse    ? "refuse"
                  : mode_ == Mode::kPartition ? "partition"
                                              : "stall";
  if (delay_.count() > 0) m += " (delay " + std::to_string(delay_.count()) + " ms)";
  return m;
}

void FaultProxy::run() {
  std::list<Link> links;
  uint64_t cuts_seen = 0, partitions_seen = 0, opened_after = 0;
  std::vector<pollfd> fds;
  std::vector<Link*> owners;  // fds[i]'s link (nullptr: the wake pipe and the listener)
  while (!stop_) {
    Mode mode;
    std::chrono::milliseconds delay;
    int target;
    uint64_t cuts;
    std::set<pid_t> isolated;
    {
      std::lock_guard lock(mutex_);
      mode = mode_;
      delay = delay_;
      target = target_;
      cuts = cut_generation_;
      isolated = isolated_;
      if (partitions_ != partitions_seen)  // a partition since: every connection older lived through it
        for (Link& l : links)
          if (l.opened_after < partitions_) l.partitioned = true;
      partitions_seen = partitions_;
    }
    // Which connections belong to a partitioned process (looked up once per connection and process).
    for (Link& l : links) {
      for (const pid_t pid : isolated) {
        if (l.owner != 0 || l.checked.count(pid)) continue;
        if (l.inode == 0) l.inode = client_inode(l.client, port_);
        l.checked.insert(pid);
        if (l.inode != 0 && holds(pid, l.inode)) l.owner = pid;
      }
      const bool now_isolated = l.owner != 0 && isolated.count(l.owner);
      if (l.isolated && !now_isolated) l.partitioned = true, l.isolated = false;  // healed: cut below
      if (now_isolated) l.isolated = true;
    }
    // Connections to close: every one at a cut() or while refusing, those that lived through a
    // partition once it is over, and those whose peer has gone (after what it sent was delivered).
    for (auto it = links.begin(); it != links.end();) {
      const bool cut =
          cuts != cuts_seen || mode == Mode::kRefuse || (it->partitioned && mode != Mode::kPartition && !it->isolated);
      const bool ended = it->client < 0 || it->upstream < 0 || (it->client_eof && it->up.empty()) ||
                         (it->upstream_eof && it->down.empty());
      if (cut || ended) {
        if (cut && !ended) ++cut_;
        close_link(*it);
        it = links.erase(it);
        --open_;
      } else {
        if (mode == Mode::kPartition) it->partitioned = true;
        ++it;
      }
    }
    cuts_seen = cuts;
    bool sending = mode == Mode::kForward;
    const auto now = Clock::now();
    int timeout_ms = 100;
    fds.clear();
    owners.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    owners.push_back(nullptr);
    fds.push_back({listen_fd_, POLLIN, 0});
    owners.push_back(nullptr);
    for (Link& l : links) {
      short c = 0, u = 0;
      if (!l.client_eof && l.up_bytes < kMaxQueued) c |= POLLIN;
      if (l.connecting) {
        u |= POLLOUT;
      } else {
        if (!l.upstream_eof && l.down_bytes < kMaxQueued) u |= POLLIN;
        if (sending && !l.isolated && due(l.up, now)) u |= POLLOUT;
      }
      if (sending && !l.isolated && due(l.down, now)) c |= POLLOUT;
      for (const std::deque<Chunk>* q : {&l.up, &l.down})
        if (sending && !l.isolated && !q->empty() && q->front().due > now)
          timeout_ms = std::min<int>(
              timeout_ms, 1 + int(std::chrono::duration_cast<std::chrono::milliseconds>(q->front().due - now).count()));
      // A side that has closed is no longer polled (its POLLHUP would wake the loop at once).
      fds.push_back({l.client_eof ? -1 : l.client, c, 0});
      owners.push_back(&l);
      fds.push_back({l.upstream_eof ? -1 : l.upstream, u, 0});
      owners.push_back(&l);
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    {  // as the test set it now, not before the wait: bytes or a connection that came after
       // forward() or delay() are handled as those say; none pass after a partition() that the
       // loop's top has not seen yet (even one healed since: its connections are cut there)
      std::lock_guard lock(mutex_);
      mode = mode_;
      delay = delay_;
      target = target_;
      if (partitions_ != partitions_seen && mode == Mode::kForward) mode = Mode::kPartition;
    }
    if (fds[0].revents) {
      char buf[64];
      while (read(wake_[0], buf, sizeof buf) > 0) {
      }
    }
    if (fds[1].revents & POLLIN) {
      for (;;) {
        const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) break;
        ++accepted_;
        {  // the mode now: the test may have changed it since the last accept of this loop
          std::lock_guard lock(mutex_);
          mode = mode_;
          target = target_;
          opened_after = partitions_;
        }
        if (mode == Mode::kRefuse) {
          close(c);
          continue;
        }
        const int u = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        const sockaddr_in a = loopback(target);
        if (u < 0 || (connect(u, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS)) {
          if (u >= 0) close(u);
          close(c);
          continue;
        }
        const int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        Link l;
        l.client = c;
        l.upstream = u;
        l.partitioned = mode == Mode::kPartition;
        l.opened_after = opened_after;
        links.push_back(std::move(l));
        ++open_;
      }
    }
    sending = mode == Mode::kForward;
    for (size_t i = 2; i < fds.size(); i += 2) {
      Link& l = *owners[i];
      const short c = fds[i].revents, u = fds[i + 1].revents;
      if (l.connecting && u) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(l.upstream, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {  // the target is down: the client sees its connection closed
          close(l.upstream);
          l.upstream = -1;
          continue;
        }
        l.connecting = false;
        continue;
      }
      bool ok = true;
      if (c & (POLLIN | POLLHUP | POLLERR)) {
        if (!take(l.client, l.up, l.up_bytes, delay)) l.client_eof = true;
      }
      if (!l.connecting && (u & (POLLIN | POLLHUP | POLLERR))) {
        if (!take(l.upstream, l.down, l.down_bytes, delay)) l.upstream_eof = true;
      }
      if (sending && !l.isolated) {
        if (c & POLLOUT) ok = give(l.client, l.down, l.down_bytes) && ok;
        if (u & POLLOUT) ok = give(l.upstream, l.up, l.up_bytes) && ok;
      }
      if (!ok) l.client_eof = l.upstream_eof = true, l.up.clear(), l.down.clear();
    }
  }
  for (Link& l : links) close_link(l);
}

}  // namespace prism::test
