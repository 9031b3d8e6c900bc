// The service's connections (service/http_listener.h, pipelining included): the
// head parser on its own, then the real HTTP API on 127.0.0.1 with raw sockets doing what hostile
// or careless clients do: heads without end, too many fields, one byte every few hundred ms, idle
// connections by the hundred, pipelined requests, Expect: 100-continue, a stalled body. Each is a
// few connections for a few seconds; /healthz must be answered throughout.
#include "http_listener.h"

#include <arpa/inet.h>
#include <gst/gst.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "http_api.h"
#include "ppm.h"
#include "texture_cases.h"

namespace prism::service {
namespace {

using namespace std::chrono_literals;
using S = RequestHead::Status;

TEST(RequestHead, FramesByOneContentLengthAndCapsTheHead) {
  ListenerLimits l;
  l.max_request_line = 64;
  l.max_head_bytes = 256;
  l.max_header_fields = 4;
  l.max_body_bytes = 1000;
  RequestHead h = parse_request_head("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\nbody", l);
  EXPECT_EQ(h.status, S::kComplete);
  EXPECT_EQ(h.head_bytes, 49u);
  EXPECT_TRUE(h.framed);
  EXPECT_EQ(h.body_bytes, 12u);
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\nHost: x\r\n", l).status, S::kIncomplete);
  // LF line ends, stray CRLFs before the request line.
  h = parse_request_head("\r\n\r\nGET / HTTP/1.1\nHost: x\n\n", l);
  EXPECT_EQ(h.status, S::kComplete);
  EXPECT_EQ(h.head_bytes, 28u);
  EXPECT_EQ(h.head.rfind("GET / HTTP/1.1\n", 0), 0u) << h.head;
  EXPECT_EQ(h.body_bytes, 0u);
  // Expect is answered by the listener and taken out of the head.
  h = parse_request_head("PUT / HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n", l);
  EXPECT_TRUE(h.expect_continue);
  EXPECT_EQ(h.head.find("Expect"), std::string::npos) << h.head;
  // What cannot be framed goes on with its head alone (the handlers refuse it).
  for (const char* head : {"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                           "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                           "POST / HTTP/1.1\r\ncontent-length: 3 \r\nTransfer-Encoding: chunked\r\n\r\n",
                           "POST / HTTP/1.1\r\nContent-Length: 1001\r\nExpect: 100-continue\r\n\r\n"}) {
    h = parse_request_head(head, l);
    EXPECT_EQ(h.status, S::kComplete) << head;
    EXPECT_FALSE(h.framed) << head;
    EXPECT_EQ(h.body_bytes, 0u) << head;
    EXPECT_FALSE(h.expect_continue) << head;
  }
  // Two equal lengths frame as one.
  EXPECT_TRUE(parse_request_head("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", l).framed);
  // The caps, decided without waiting for the end.
  EXPECT_EQ(parse_request_head("GET /" + std::string(100, 'a'), l).status, S::kLineTooLong);
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\nX: " + std::string(300, 'a'), l).status, S::kHeadTooLarge);
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1\r\na: 1\r\nb: 1\r\nc: 1\r\nd: 1\r\ne: 1\r\n", l).status,
            S::kTooManyFields);
}

// A backend that answers at once: the listener is under test, not the gallery.
class Quick : public Backend {
 public:
  WriteResult write(const texture::GalleryEntry&, bool, Clock::time_point) override { return {}; }
  bool remove(const std::string&, Clock::time_point) override { return false; }
  std::optional<Product> get(const std::string&, Clock::time_point) override { return std::nullopt; }
  VerifyAnswer verify(const std::string&, const texture::Features&, const texture::SearchParams&,
                      Clock::time_point) override {
    throw ServiceError(404, "id", "no such product");
  }
  SearchAnswer search(const SearchQuery&) override { return {}; }
  ServiceStats stats(Clock::time_point) override { return {}; }
  std::string health() override { return {}; }
  texture::Normalisation normalisation() override { return {}; }
};

class Api {
 public:
  explicit Api(ApiOptions o) : api_(backend_, o) {
    port_ = api_.bind("127.0.0.1", 0);
    thread_ = std::thread([this] { api_.serve(); });
  }
  ~Api() {
    api_.stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  Quick backend_;
  HttpApi api_;
  int port_ = 0;
  std::thread thread_;
};

// A raw client connection.
class Conn {
 public:
  explicit Conn(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Conn() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  bool send(const std::string& s) {
    size_t at = 0;
    while (at < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + at, s.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += size_t(n);
    }
    return true;
  }
  // What arrives within `wait` or until `enough` says so, or the server closes.
  std::string read(std::chrono::milliseconds wait, const std::function<bool(const std::string&)>& enough) {
    const auto until = std::chrono::steady_clock::now() + wait;
    char buf[65536];
    while (!enough(got_)) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
      pollfd p{fd_, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, int(left)) <= 0) break;
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      got_.append(buf, size_t(n));
    }
    return got_;
  }
  // The statuses of the complete responses received so far.
  std::vector<int> statuses(std::chrono::milliseconds wait, size_t count) {
    read(wait, [&](const std::string& s) { return responses(s).size() >= count; });
    return responses(got_);
  }
  bool closed() const { return closed_; }
  static std::vector<int> responses(const std::string& s) {
    std::vector<int> out;
    for (size_t at = 0; at < s.size();) {
      const size_t end = s.find("\r\n\r\n", at);
      if (end == std::string::npos || s.compare(at, 9, "HTTP/1.1 ") != 0) break;
      const int status = std::atoi(s.c_str() + at + 9);
      size_t length = 0;
      const size_t cl = s.find("Content-Length: ", at);
      if (cl != std::string::npos && cl < end) length = std::strtoul(s.c_str() + cl + 16, nullptr, 10);
      if (s.size() < end + 4 + length) break;
      out.push_back(status);
      at = end + 4 + length;
    }
    return out;
  }

 private:
  int fd_;
  bool connected_ = false, closed_ = false;
  std::string got_;
};

long rss_kb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

int health(int port) {
  Conn c(port);
  if (!c.connected()) return -1;
  c.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::vector<int> s = c.statuses(3s, 1);
  return s.empty() ? 0 : s[0];
}

// A head without its blank line grew the server by 950 MB. It is refused at the cap
// (431; 414 for the request line), while the client is still sending, and so are 101 fields.
TEST(HttpListener, AnEndlessHeadIsRefusedAtItsCap) {
  Api api(ApiOptions{});
  // A head of `mb` MB, one header at a time; what passed the cap is dropped. Returns the kB the
  // process (server and client) grew while it was being sent.
  // One MB of header lines, sent again and again: the client allocates nothing per line.
  std::string mb_of_fields;
  for (int i = 0; i < 1024; ++i)
    mb_of_fields += "X-Filler-" + std::to_string(i) + ": " + std::string(1000, 'a') + "\r\n";
  const auto endless_head = [&](int mb) {
    Conn c(api.port());
    EXPECT_TRUE(c.connected());
    const long before = rss_kb();
    c.send("GET /healthz HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < mb; ++i)
      if (!c.send(mb_of_fields)) break;
    const long grown = rss_kb() - before;
    EXPECT_EQ(c.statuses(3s, 1), std::vector<int>{431});
    return grown;
  };
  // The first one is not measured: serve() starts its workers (stacks, malloc arenas) on its own
  // thread, which on a loaded machine is still going on when the first head arrives (CI saw 26 MB).
  EXPECT_EQ(health(api.port()), 200);
  endless_head(4);
  // Then a head of 64 MB, which a server that buffered it would hold whole, grows it by < 16 MB.
  const long grown = endless_head(64);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // (their quarantine keeps what was freed)
  EXPECT_LT(grown, 16 << 10) << "kB more after a 64 MB head";
#else
  (void)grown;
#endif
  {
    Conn c(api.port());
    std::string head = "GET /healthz HTTP/1.1\r\n";
    for (int i = 0; i < 101; ++i) head += "X-" + std::to_string(i) + ": 1\r\n";
    c.send(head + "\r\n");
    EXPECT_EQ(c.statuses(3s, 1), std::vector<int>{431});
  }
  {
    Conn c(api.port());
    c.send("GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(c.statuses(3s, 1), std::vector<int>{414});
  }
  EXPECT_EQ(health(api.port()), 200);
}

// 16 connections trickling a header byte every 4 s held every thread and /healthz
// waited behind them; 300 idle connections were a 36 s outage. Here with 4 threads: 16 tricklers
// and 300 idle connections, /healthz answered all along; the tricklers get 408 at the head's
// deadline; connections beyond max_connections get 503 at once.
TEST(HttpListener, HealthIsAnsweredDuringASlowlorisAndIdleConnections) {
  ApiOptions o;
  o.threads = 4;
  o.reserved_threads = 1;
  o.head_timeout = 2500ms;
  o.idle_timeout = 30s;  // the idle ones stay for the whole test
  o.max_connections = 340;
  Api api(o);
  std::vector<std::unique_ptr<Conn>> slow, idle;
  for (int i = 0; i < 16; ++i) {
    slow.push_back(std::make_unique<Conn>(api.port()));
    ASSERT_TRUE(slow.back()->connected());
  }
  for (int i = 0; i < 300; ++i) idle.push_back(std::make_unique<Conn>(api.port()));
  const std::string head = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1234567890\r\n\r\n";
  int answered = 0;
  for (size_t b = 0; b < 12; ++b) {  // a byte every 250 ms from each: 3 s
    for (auto& c : slow) c->send(head.substr(b, 1));
    answered += health(api.port()) == 200;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(answered, 12) << "of 12 health checks during the slowloris";
  for (auto& c : slow) EXPECT_EQ(c->statuses(3s, 1), std::vector<int>{408});
  // 316 held (the idle ones within their 5 s): the next 30 are 503 at once.
  std::vector<std::unique_ptr<Conn>> more;
  int refused = 0;
  for (int i = 0; i < 30; ++i) {
    more.push_back(std::make_unique<Conn>(api.port()));
    more.back()->send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  }
  for (auto& c : more) refused += c->statuses(3s, 1) == std::vector<int>{503};
  EXPECT_GE(refused, 1);
  idle.clear();
  more.clear();
  EXPECT_EQ(health(api.port()), 200);
}

// Requests sent before the first answer were dropped after the first. They are
// answered, in order, on the one connection (the last asks to close).
TEST(HttpListener, PipelinedRequestsAreAnsweredInOrder) {
  Api api(ApiOptions{});
  Conn c(api.port());
  c.send(
      "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
      "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: 4\r\n\r\nabcd"
      "GET /v1/stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(c.statuses(10s, 4), (std::vector<int>{200, 404, 415, 200}));
  c.read(3s, [](const std::string&) { return false; });
  EXPECT_TRUE(c.closed());
}

// curl sends Expect: 100-continue before a body over 1 MB and waits for it: answered once, then
// the request is served; a body that stalls gets 408; bodies beyond the receive budget get 503.
TEST(HttpListener, ContinueOnceStalledBodiesAndTheReceiveBudget) {
  gst_init(nullptr, nullptr);
  ApiOptions o;
  o.read_timeout = 1s;
  o.max_buffered_bytes = 4 << 20;
  Api api(o);
  std::mt19937 rng(3);
  const std::string image = test::pgm_bytes(test::random_texture(rng));
  {
    Conn c(api.port());
    c.send("POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: image/x-portable-graymap\r\nContent-Length: " +
           std::to_string(image.size()) + "\r\nExpect: 100-continue\r\n\r\n");
    const std::string cont = c.read(3s, [](const std::string& s) { return s.find("\r\n\r\n") != std::string::npos; });
    EXPECT_EQ(cont, "HTTP/1.1 100 Continue\r\n\r\n");
    c.send(image);
    const std::string all =
        c.read(10s, [](const std::string& s) { return s.find("\"candidates\"") != std::string::npos; });
    EXPECT_EQ(all.find("100 Continue", 10), std::string::npos) << all.substr(0, 300);
    EXPECT_NE(all.find("HTTP/1.1 200 OK"), std::string::npos) << all.substr(0, 300);
  }
  {
    Conn c(api.port());
    c.send("POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: 1000\r\n\r\nabc");
    EXPECT_EQ(c.statuses(5s, 1), std::vector<int>{408});
  }
  {
    Conn a(api.port()), b(api.port());
    const std::string three_mb =
        "POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: 3000000\r\n\r\nabc";
    a.send(three_mb);
    a.read(200ms, [](const std::string&) { return false; });  // the first holds 3 of the 4 MB
    b.send(three_mb);
    EXPECT_EQ(b.statuses(3s, 1), std::vector<int>{503});
  }
  EXPECT_EQ(health(api.port()), 200);
}

}  // namespace
}  // namespace prism::service
