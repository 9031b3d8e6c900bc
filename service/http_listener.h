// The service's connections: accepting them, reading requests off them within limits, and handing
// each complete request to a worker thread that runs cpp-httplib's request processing (routing,
// parsing, handlers, the response) over the bytes already read.
//
// Why not cpp-httplib's own server loop (Debian's 0.11, a compiled library): it gives each
// connection a thread from the first byte to the last, with only a per-read timeout and no limit
// on the request head. A client trickling one header byte every 4 s held a thread forever, 16 such
// clients (the thread count) blocked /healthz, 300 idle connections queued everything behind them,
// and a head without its blank line grew the server by 950 MB. Here one thread reads
// every connection without blocking (epoll), the way nginx and Node's http server do, so a slow
// client costs a buffer and never a worker, and:
//   - the head (request line and fields) has caps on its size and its field count: 431 (414 for the
//     request line alone), answered before reading further;
//   - a head must arrive within head_timeout of its first byte, the whole request within
//     request_timeout, and no read may stall for read_timeout: else 408, and the connection closes;
//     an idle keep-alive connection is closed after idle_timeout;
//   - connections beyond max_connections, complete requests beyond max_queued waiting for a
//     worker, and bodies beyond max_buffered_bytes being received at once are answered 503 with
//     Retry-After at once, never left to starve the others;
//   - the body is read by its Content-Length before a worker sees it (a request whose body cannot
//     be framed, chunked or with a bad Content-Length, goes to the handlers with its head only, who
//     refuse it, and the connection closes);
//   - pipelined requests (several sent before the first answer) are answered in order;
//   - `Expect: 100-continue` is answered here once the head is accepted.
// Those answers are the routes' JSON errors (error_body), counted through on_refused.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace prism::service {

struct ListenerLimits {
  using ms = std::chrono::milliseconds;
  size_t max_request_line = 8 << 10;                // beyond: 414
  size_t max_head_bytes = 32 << 10;                 // request line and fields: beyond, 431
  int max_header_fields = 100;                      // beyond: 431
  size_t max_body_bytes = 32 << 20;                 // a larger Content-Length is the handlers' 413
  uint64_t max_buffered_bytes = uint64_t(1) << 30;  // bodies being received at once: beyond, 503
  ms head_timeout{10'000};                          // from a request's first byte to the end of its head
  ms request_timeout{60'000};                       // from a request's first byte to the end of its body
  ms read_timeout{5'000};                           // a request in progress that sends nothing for this long
  ms idle_timeout{5'000};                           // a keep-alive connection between requests
  ms write_timeout{5'000};                          // an answer the client does not read
  int max_connections = 1024;
  int threads = 16;        // workers running handlers
  size_t max_queued = 64;  // complete requests waiting for a worker
  int max_requests_per_connection = 1000;
};

// What framing the head of a request needs (the pure part of the reader, fuzzed on its own).
struct RequestHead {
  enum class Status { kIncomplete, kComplete, kLineTooLong, kHeadTooLarge, kTooManyFields };
  Status status = Status::kIncomplete;
  size_t head_bytes = 0;  // up to and with the blank line
  // The body's length by Content-Length; unframed: no single Content-Length of digits alone, or a
  // Transfer-Encoding: the head goes to the handlers alone and the connection closes after.
  uint64_t body_bytes = 0;
  bool framed = true;
  bool expect_continue = false;  // Expect: 100-continue (taken out of `head`)
  std::string head;              // the head as the handlers see it
};
// Reads the head at the start of `buffer` (fields' names case-insensitive, lines ending in CRLF or LF).
RequestHead parse_request_head(std::string_view buffer, const ListenerLimits& limits);

class HttpListener : public httplib::Server {
 public:
  // `error_body(status, field, message)`: the body of an answer given here (JSON, as the routes');
  // `on_refused(status)`: counted for /metrics.
  HttpListener(ListenerLimits limits,
               std::function<std::string(int, const std::string&, const std::string&)> error_body,
               std::function<void(int)> on_refused);
  ~HttpListener() override;

  // Binds host:port (0: any free port) with SO_REUSEADDR only; returns the port or throws
  // std::runtime_error saying why (a port in use).
  int bind(const std::string& host, int port);
  // Accepts and serves until stop(): the calling thread reads the connections, `threads` workers
  // run the handlers. Requests being handled at stop() are answered first.
  void serve();
  // From any thread (a signal handler's thread too); serve() returns soon after.
  void stop();
  // Waits until serve() has returned (at once when it is not running). The destructor stops and
  // joins: serve() may run on a detached thread destroyed at exit.
  void join();

  // The connection whose request the calling worker is handling (-1 on other threads): its handler
  // may poll it to see that the client went away.
  static int current_connection();
  // How long the request the calling worker handles waited, complete, for a worker (0 on other
  // threads): the queue stage of a request's latency.
  static double current_queue_seconds();
  const ListenerLimits& limits() const { return limits_; }

 private:
  struct Impl;
  ListenerLimits limits_;
  std::unique_ptr<Impl> impl_;
  friend struct Impl;
  bool process(httplib::Stream& stream, bool close, bool& closed) {
    return process_request(stream, close, closed, nullptr);
  }
};

}  // namespace prism::service
