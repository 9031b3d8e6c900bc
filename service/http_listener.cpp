#include "http_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

namespace prism::service {

namespace {

using Clock = std::chrono::steady_clock;

thread_local int current_fd = -1;
thread_local double current_wait_s = 0;  // the request current_fd's worker handles: its wait for a worker

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

const char* reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string numeric_host(const sockaddr* a, socklen_t len, int& port) {
  char host[NI_MAXHOST] = {}, serv[NI_MAXSERV] = {};
  if (getnameinfo(a, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    port = -1;
    return {};
  }
  port = std::atoi(serv);
  return host;
}

}  // namespace

RequestHead parse_request_head(std::string_view buffer, const ListenerLimits& limits) {
  RequestHead h;
  using S = RequestHead::Status;
  std::vector<std::string_view> lengths;
  bool chunked = false;
  int fields = 0;
  size_t at = 0;
  // Lines before the request line that are empty are ignored (RFC 9112, 2.2): a client's stray CRLF
  // after a body.
  while (at < buffer.size() && (buffer[at] == '\r' || buffer[at] == '\n')) ++at;
  const size_t start = at;
  for (bool first = true;; first = false) {
    const size_t end = buffer.find('\n', at);
    const size_t line_end = end == std::string_view::npos ? buffer.size() : end;
    if (first && line_end - at > limits.max_request_line) {
      h.status = S::kLineTooLong;
      return h;
    }
    if (line_end - start > limits.max_head_bytes) {
      h.status = S::kHeadTooLarge;
      return h;
    }
    if (end == std::string_view::npos) return h;  // incomplete
    std::string_view line = buffer.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t line_at = at;
    at = end + 1;
    if (first) {
      h.head.append(buffer.substr(line_at, at - line_at));
      continue;
    }
    if (line.empty()) {
      h.head.append("\r\n");
      break;
    }
    if (++fields > limits.max_header_fields) {
      h.status = S::kTooManyFields;
      return h;
    }
    const size_t colon = line.find(':');
    const std::string_view name = colon == std::string_view::npos ? line : line.substr(0, colon);
    const std::string_view value = colon == std::string_view::npos ? std::string_view() : trim(line.substr(colon + 1));
    if (iequals(name, "Expect")) {
      h.expect_continue = iequals(value, "100-continue");
      continue;  // answered here: the handlers would send a second 100 Continue
    }
    if (iequals(name, "Content-Length")) lengths.push_back(value);
    if (iequals(name, "Transfer-Encoding")) chunked = true;
    h.head.append(buffer.substr(line_at, at - line_at));
  }
  h.status = S::kComplete;
  h.head_bytes = at;
  if (chunked) h.framed = false;
  for (const std::string_view v : lengths) {
    const bool digits = !v.empty() && v.size() <= 18 && v.find_first_not_of("0123456789") == std::string_view::npos;
    if (!digits || v != lengths.front()) h.framed = false;
  }
  if (h.framed && !lengths.empty()) h.body_bytes = std::stoull(std::string(lengths.front()));
  if (h.body_bytes > limits.max_body_bytes) {
    h.framed = false;  // the handlers answer 413 from the head; the body is never read
    h.body_bytes = 0;
  }
  if (!h.framed) {
    h.body_bytes = 0;
    h.expect_continue = false;
  }
  return h;
}

struct HttpListener::Impl {
  enum class State { kIdle, kHead, kBody, kBusy, kLinger };
  struct Conn {
    int fd = -1;
    std::string remote_ip, local_ip;
    int remote_port = -1, local_port = -1;
    std::string in;
    State state = State::kIdle;
    Clock::time_point started, last_read, linger_until;
    RequestHead head;
    uint64_t reserved = 0;  // of the buffered-bytes budget
    int served = 0;
    bool peer_closed = false;
    bool close = false;           // after the answer being handled
    Clock::time_point queued_at;  // when its complete request was given to the workers' queue
  };

  // A complete request for httplib: the head (as parse_request_head rewrote it), then the body in
  // place in the connection's buffer; answers go straight to the socket.
  class RequestStream : public httplib::Stream {
   public:
    RequestStream(Conn& c, ListenerLimits::ms write_timeout)
        : c_(c), body_(c.head.framed ? c.head.body_bytes : 0), write_timeout_(write_timeout) {}
    bool is_readable() const override { return head_at_ < c_.head.head.size() || body_at_ < body_; }
    bool is_writable() const override { return !failed_; }
    ssize_t read(char* ptr, size_t size) override {
      if (head_at_ < c_.head.head.size()) {
        const size_t n = std::min(size, c_.head.head.size() - head_at_);
        std::memcpy(ptr, c_.head.head.data() + head_at_, n);
        head_at_ += n;
        return ssize_t(n);
      }
      const size_t n = std::min(size, size_t(body_ - body_at_));
      std::memcpy(ptr, c_.in.data() + c_.head.head_bytes + body_at_, n);
      body_at_ += n;
      return ssize_t(n);
    }
    ssize_t write(const char* ptr, size_t size) override {
      if (!saw_head_) {  // the answer's head is its first write: does it close the connection?
        head_text_.append(ptr, std::min(size, size_t(8192)));
        const size_t end = head_text_.find("\r\n\r\n");
        if (end != std::string::npos || head_text_.size() >= 8192) {
          saw_head_ = true;
          std::string lower = head_text_.substr(0, end);
          std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
          closes_ = lower.find("\r\nconnection: close") != std::string::npos;
        }
      }
      const auto until = Clock::now() + write_timeout_;
      size_t sent = 0;
      while (sent < size && !failed_) {
        const ssize_t n = ::send(c_.fd, ptr + sent, size - sent, MSG_NOSIGNAL);
        if (n > 0) {
          sent += size_t(n);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
        pollfd p{c_.fd, POLLOUT, 0};
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && left > 0 && ::poll(&p, 1, int(left)) > 0) continue;
        failed_ = true;
      }
      return failed_ ? -1 : ssize_t(size);
    }
    void get_remote_ip_and_port(std::string& ip, int& port) const override {
      ip = c_.remote_ip;
      port = c_.remote_port;
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
      ip = c_.local_ip;
      port = c_.local_port;
    }
    socket_t socket() const override { return c_.fd; }
    bool closes() const { return closes_ || failed_; }

   private:
    Conn& c_;
    size_t head_at_ = 0;
    uint64_t body_, body_at_ = 0;
    ListenerLimits::ms write_timeout_;
    bool failed_ = false, saw_head_ = false, closes_ = false;
    std::string head_text_;
  };

  HttpListener& owner;
  const ListenerLimits& limits;
  std::function<std::string(int, const std::string&, const std::string&)> error_body;
  std::function<void(int)> on_refused;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  std::atomic<bool> stopping{false};
  std::unordered_map<int, std::unique_ptr<Conn>> conns;  // the reading thread's
  uint64_t buffered = 0;                                 // bytes reserved for bodies being received

  std::mutex mutex;  // guards jobs, done, workers_stop
  std::condition_variable ready;
  std::deque<Conn*> jobs, done;
  bool workers_stop = false;

  std::mutex run_mutex;  // guards running
  std::condition_variable run_ended;
  bool running = false;

  Impl(HttpListener& o, std::function<std::string(int, const std::string&, const std::string&)> body,
       std::function<void(int)> refused)
      : owner(o), limits(o.limits_), error_body(std::move(body)), on_refused(std::move(refused)) {
    wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    if (wake_fd < 0 || epoll_fd < 0) throw std::runtime_error(std::string("epoll: ") + std::strerror(errno));
    watch(wake_fd);
  }
  ~Impl() {
    for (auto& [fd, c] : conns) ::close(fd);
    for (const int fd : {listen_fd, epoll_fd, wake_fd})
      if (fd >= 0) ::close(fd);
  }

  void watch(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
  }

  void close_conn(Conn& c) {
    buffered -= c.reserved;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    conns.erase(c.fd);  // destroys c
  }

  // An answer given here; the connection then closes after a linger, in which what the client
  // still sends is read and dropped (closing at once with unread bytes would reset the connection,
  // and the client might never see the answer).
  void refuse(Conn& c, int status, const std::string& field, const std::string& message, int retry_after_s = 0) {
    const std::string body = error_body(status, field, message);
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) +
                      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\nConnection: close\r\n";
    if (retry_after_s > 0) out += "Retry-After: " + std::to_string(retry_after_s) + "\r\n";
    out += "\r\n" + body;
    [[maybe_unused]] const ssize_t n = ::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (on_refused) on_refused(status);
    ::shutdown(c.fd, SHUT_WR);
    buffered -= c.reserved;
    c.reserved = 0;
    c.in.clear();
    c.state = State::kLinger;
    c.linger_until = Clock::now() + std::chrono::seconds(2);
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage a{};
      socklen_t len = sizeof a;
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN, or out of descriptors (EMFILE): the rest wait in the backlog
      }
      if (int(conns.size()) >= limits.max_connections) {
        const std::string body = error_body(
            503, "", "busy: the server holds its " + std::to_string(limits.max_connections) + " connections");
        const std::string out =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
            std::to_string(body.size()) + "\r\nConnection: close\r\nRetry-After: 1\r\n\r\n" + body;
        [[maybe_unused]] const ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (on_refused) on_refused(503);
        ::close(fd);
        continue;
      }
      const int yes = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);  // answers go out at once
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->remote_ip = numeric_host(reinterpret_cast<sockaddr*>(&a), len, c->remote_port);
      sockaddr_storage l{};
      socklen_t llen = sizeof l;
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&l), &llen) == 0)
        c->local_ip = numeric_host(reinterpret_cast<sockaddr*>(&l), llen, c->local_port);
      c->started = c->last_read = Clock::now();
      watch(fd);
      conns.emplace(fd, std::move(c));
    }
  }

  void on_readable(Conn& c) {
    char buf[65536];
    if (c.state == State::kLinger) {
      for (;;) {
        const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
        if (n > 0) continue;
        if (n < 0 && errno == EINTR) continue;
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) close_conn(c);
        return;
      }
    }
    for (;;) {
      // Bounded reads: a head is read up to its cap, a body up to its length; what comes beyond
      // them is the next pipelined request, read after this one is answered.
      const size_t want = c.state == State::kBody ? c.head.head_bytes + c.head.body_bytes
                                                  : limits.max_head_bytes + limits.max_request_line + 2;
      if (c.in.size() >= want) break;
      const ssize_t n = ::recv(c.fd, buf, std::min(sizeof buf, want - c.in.size()), 0);
      if (n > 0) {
        if (c.state == State::kIdle) {
          c.state = State::kHead;
          c.started = Clock::now();
        }
        c.in.append(buf, size_t(n));
        c.last_read = Clock::now();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      c.peer_closed = true;  // end of stream, or an error
      break;
    }
    advance(c);
  }

  // Moves a connection on with what it has read: refuses a bad head, starts a body, hands a
  // complete request to a worker. A client that closed its side is answered what it completed.
  void advance(Conn& c) {
    using S = RequestHead::Status;
    if (c.state == State::kIdle || c.state == State::kHead) {
      if (c.in.find_first_not_of("\r\n") == std::string::npos) {
        // Nothing but stray line ends (ignored before a request line, RFC 9112, 2.2): dropped, so
        // that the buffer never fills with them; the head's deadline still runs.
        c.in.clear();
        if (c.peer_closed) close_conn(c);
        return;
      }
      RequestHead h = parse_request_head(c.in, limits);
      switch (h.status) {
        case S::kIncomplete:
          if (c.peer_closed) close_conn(c);
          return;
        case S::kLineTooLong:
          return refuse(c, 414, "path",
                        "the request line is longer than " + std::to_string(limits.max_request_line) + " bytes");
        case S::kHeadTooLarge:
          return refuse(c, 431, "headers",
                        "the request head is larger than " + std::to_string(limits.max_head_bytes) + " bytes");
        case S::kTooManyFields:
          return refuse(c, 431, "headers",
                        "the request has more than " + std::to_string(limits.max_header_fields) + " header fields");
        case S::kComplete: break;
      }
      c.head = std::move(h);
      if (c.head.body_bytes > 0) {
        if (buffered + c.head.body_bytes > limits.max_buffered_bytes)
          return refuse(c, 503, "",
                        "busy: the server is receiving " + std::to_string(buffered >> 20) + " MB of uploads; try again",
                        1);
        buffered += c.head.body_bytes;
        c.reserved = c.head.body_bytes;
        if (c.head.expect_continue && c.in.size() == c.head.head_bytes) {
          const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
          [[maybe_unused]] const ssize_t n = ::send(c.fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
      }
      c.state = State::kBody;
    }
    if (c.state != State::kBody) return;
    if (c.in.size() < c.head.head_bytes + c.head.body_bytes) {
      if (c.peer_closed) close_conn(c);
      return;
    }
    dispatch(c);
  }

  void dispatch(Conn& c) {
    bool queued = false;
    {
      std::lock_guard lock(mutex);
      if (jobs.size() < limits.max_queued) {
        c.state = State::kBusy;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
        c.queued_at = Clock::now();
        jobs.push_back(&c);
        queued = true;
      }
    }
    if (queued) return ready.notify_one();
    refuse(c, 503, "",
           "busy: " + std::to_string(limits.max_queued) + " requests are waiting for the server's " +
               std::to_string(limits.threads) + " threads",
           1);
  }

  // A worker's answer is out: the connection reads on (a pipelined request may be buffered
  // already), or closes.
  void returned(Conn& c) {
    buffered -= c.reserved;
    c.reserved = 0;
    if (c.close || stopping) return close_conn(c);
    c.in.erase(0, c.head.head_bytes + c.head.body_bytes);
    c.head = RequestHead();
    c.state = State::kIdle;
    c.started = c.last_read = Clock::now();
    watch(c.fd);
    advance(c);
  }

  void work() {
    for (;;) {
      Conn* c = nullptr;
      {
        std::unique_lock lock(mutex);
        ready.wait(lock, [&] { return !jobs.empty() || workers_stop; });
        if (jobs.empty()) return;
        c = jobs.front();
        jobs.pop_front();
      }
      RequestStream stream(*c, limits.write_timeout);
      const bool last =
          ++c->served >= limits.max_requests_per_connection || !c->head.framed || c->peer_closed || stopping;
      bool closed = false;
      current_fd = c->fd;
      current_wait_s = std::chrono::duration<double>(Clock::now() - c->queued_at).count();
      try {
        owner.process(stream, last, closed);
      } catch (...) {
        closed = true;  // the handlers' exceptions are answered inside; this is the library's own
      }
      current_fd = -1;
      current_wait_s = 0;
      c->close = last || closed || stream.closes();
      {
        std::lock_guard lock(mutex);
        done.push_back(c);
      }
      wake();
    }
  }

  // Connections past their time: 408 for a request in progress, quietly for an idle one.
  void expire() {
    const auto now = Clock::now();
    std::vector<Conn*> all;
    for (auto& [fd, c] : conns) all.push_back(c.get());
    for (Conn* c : all) {
      switch (c->state) {
        case State::kIdle:
          if (now - c->last_read > limits.idle_timeout) close_conn(*c);
          break;
        case State::kHead:
          if (now - c->started > limits.head_timeout)
            refuse(*c, 408, "headers",
                   "the request head did not arrive within " + std::to_string(limits.head_timeout.count()) + " ms");
          else if (now - c->last_read > limits.read_timeout)
            refuse(*c, 408, "", "the request stalled for " + std::to_string(limits.read_timeout.count()) + " ms");
          break;
        case State::kBody:
          if (now - c->started > limits.request_timeout)
            refuse(*c, 408, "body",
                   "the request did not arrive within " + std::to_string(limits.request_timeout.count()) + " ms");
          else if (now - c->last_read > limits.read_timeout)
            refuse(*c, 408, "body", "the body stalled for " + std::to_string(limits.read_timeout.count()) + " ms");
          break;
        case State::kLinger:
          if (now > c->linger_until) close_conn(*c);
          break;
        case State::kBusy: break;
      }
    }
  }

  void take_returned() {
    std::deque<Conn*> back;
    {
      std::lock_guard lock(mutex);
      back.swap(done);
    }
    for (Conn* c : back) returned(*c);
  }

  void run() {
    std::vector<std::thread> workers;
    for (int i = 0; i < std::max(1, limits.threads); ++i) workers.emplace_back([this] { work(); });
    watch(listen_fd);
    epoll_event events[256];
    auto last_expiry = Clock::now();
    while (!stopping) {
      const int n = ::epoll_wait(epoll_fd, events, 256, 50);
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listen_fd) {
          accept_all();
        } else if (fd == wake_fd) {
          uint64_t v;
          [[maybe_unused]] const ssize_t r = ::read(wake_fd, &v, sizeof v);
        } else if (auto it = conns.find(fd); it != conns.end() && it->second->state != State::kBusy) {
          on_readable(*it->second);
        }
      }
      take_returned();
      if (Clock::now() - last_expiry > std::chrono::milliseconds(50)) {
        expire();
        last_expiry = Clock::now();
      }
    }
    // Stopping: no new connections; the requests queued or being handled are answered.
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
    ::close(listen_fd);
    listen_fd = -1;
    {
      std::lock_guard lock(mutex);
      workers_stop = true;
    }
    ready.notify_all();
    for (std::thread& t : workers) t.join();
    take_returned();
    while (!conns.empty()) close_conn(*conns.begin()->second);
  }
};

HttpListener::HttpListener(ListenerLimits limits,
                           std::function<std::string(int, const std::string&, const std::string&)> error_body,
                           std::function<void(int)> on_refused)
    : limits_(limits), impl_(std::make_unique<Impl>(*this, std::move(error_body), std::move(on_refused))) {
  set_payload_max_length(limits_.max_body_bytes);
  set_keep_alive_max_count(size_t(limits_.max_requests_per_connection));
  set_keep_alive_timeout(std::max<time_t>(1, time_t(limits_.idle_timeout.count() / 1000)));
}

// serve() may still run on another thread (a detached one, destroyed at exit): it is stopped and
// waited for before anything it uses goes.
HttpListener::~HttpListener() {
  stop();
  join();
}

void HttpListener::join() {
  std::unique_lock lock(impl_->run_mutex);
  impl_->run_ended.wait(lock, [&] { return !impl_->running; });
}

int HttpListener::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (const int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); e != 0)
    throw std::runtime_error("cannot listen on " + where + ": " + gai_strerror(e));
  int fd = -1, err = 0;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR only: with SO_REUSEPORT (cpp-httplib's default) a second server on the same
    // port started too and the kernel split the connections between the two (two
    // galleries answering one address); now the second server's bind fails.
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      err = errno;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0)
    throw std::runtime_error(
        "cannot listen on " + where +
        (err == EADDRINUSE ? ": the port is in use (another server there?)" : ": " + std::string(std::strerror(err))));
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int bound = port;
  numeric_host(reinterpret_cast<sockaddr*>(&a), len, bound);
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);
  impl_->listen_fd = fd;
  return bound;
}

void HttpListener::serve() {
  {
    std::lock_guard lock(impl_->run_mutex);
    if (impl_->listen_fd < 0 || impl_->running) throw std::logic_error("HttpListener::serve before bind, or twice");
    impl_->running = true;
  }
  struct Ended {
    Impl& m;
    ~Ended() {
      std::lock_guard lock(m.run_mutex);
      m.running = false;
      m.run_ended.notify_all();
    }
  } ended{*impl_};
  impl_->run();
}

void HttpListener::stop() {
  impl_->stopping = true;
  impl_->wake();
}

int HttpListener::current_connection() { return current_fd; }
double HttpListener::current_queue_seconds() { return current_wait_s; }

}  // namespace prism::service
