// The texture identification service's HTTP + JSON API (docs/SERVICE.md, docs/openapi.yaml) over a
// Backend (service/backend.h): the same routes whether one process holds the gallery or a front
// forwards to shard workers.
//
// Its own listener (service/http_listener.h) reads the connections within limits, and a pool of
// threads runs cpp-httplib's (Debian's libcpp-httplib-dev 0.11) request processing and routing on
// each complete request, which suits requests that spend milliseconds to seconds in SIFT and
// matching and lets a handler call the backend synchronously; the client of the tests and
// benchmarks is the same library.
//
// Every refusal is a JSON body {"error": {"status", "field", "message"}} with a 4xx (5xx only for
// the service's own trouble: a shard that did not answer, a full index); nothing a client sends is
// meant to crash or hang the server (tests/service/test_http_api.cpp tries).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "texture/extraction_batcher.h"
#include "texture/features.h"

namespace prism::service {

// One API key: clients send it as `Authorization: Bearer KEY` or `X-API-Key: KEY`.
struct ApiKey {
  std::string key;
  std::string name;    // for logs and product sources
  bool write = false;  // may enrol, update and delete; every key may read, verify and search
};

// Keys from a file: one per line, `KEY ROLE [NAME]` with ROLE `read` or `write`; blank lines and
// lines starting with '#' are ignored; a key is at least 16 characters of [A-Za-z0-9._~+/=-].
// Throws std::runtime_error naming the file and line.
std::vector<ApiKey> load_api_keys(const std::filesystem::path& file);

struct ApiOptions {
  std::vector<ApiKey> keys;                  // empty: no authentication (serve allows that on loopback only)
  size_t max_body_bytes = size_t(32) << 20;  // larger bodies get 413
  uint64_t max_image_pixels = 50'000'000;    // images declaring more get 413, before decoding
  // Memory that uploads being decoded and extracted may hold at once (service/images.h): beyond it
  // a request waits up to its deadline, then gets 503 with Retry-After.
  uint64_t decode_memory_bytes = uint64_t(2) << 30;
  // A request's deadline, from when its handler starts; a client may ask for less or more with
  // `deadline_ms` (up to max_deadline).
  std::chrono::milliseconds deadline{10'000}, max_deadline{120'000};
  int threads = 16;  // the threads running handlers
  // Threads enrolments, updates, verifies and searches (which extract SIFT and may wait for their
  // shards up to the deadline) may not take: with `threads - reserved_threads` of them running, the
  // next is answered 503 at once (Retry-After: 1), so gets, deletes, stats, /healthz and /metrics
  // are still served when slow requests pile up (searches waiting on their shards once took every
  // thread, and /healthz with them). At least one slow request may run.
  int reserved_threads = 4;
  // Connections (service/http_listener.h): they are read by one thread without blocking, so a slow
  // client holds no worker. A request in progress that sends nothing for read_timeout, a head not
  // complete within head_timeout, a request (head and body) not complete within request_timeout
  // get 408 and are closed (fuzz_http shortens read_timeout: a cut request then ends at once); an
  // idle keep-alive connection is closed after idle_timeout. Beyond max_connections, max_queued
  // complete requests waiting for a thread or max_buffered_bytes of bodies being received, the
  // answer is 503 with Retry-After: 1 at once.
  std::chrono::milliseconds read_timeout{5'000}, head_timeout{10'000}, request_timeout{60'000}, idle_timeout{5'000};
  int max_connections = 1024;
  size_t max_queued = 256;
  uint64_t max_buffered_bytes = uint64_t(1) << 30;
  int max_top_k = 100;
  texture::SearchParams search;  // defaults of verify and search (threshold: min_significance)
  // How uploads are extracted; its normalisation is replaced by Backend::normalisation(). SIFT runs on
  // the GPU when there is one (kAuto; FeatureParams alone defaults to the CPU): on an H100 that is
  // 12 ms of a 640x480 upload's verify instead of 63 (docs/benchmarks/service.md).
  texture::FeatureParams features = [] {
    texture::FeatureParams p;
    p.device = gpu::Device::kAuto;
    return p;
  }();
  // How uploads are extracted (texture/extraction_batcher.h). max_batch 1 (the default): each on its
  // own request's thread with every step on the GPU, a JPEG's decode included; more: as SIFT batches
  // of the requests arriving together, a batch waiting up to max_wait for requests already decoding,
  // never for a lone one. On the H100 node the first served 1.3-1.4x the verifies per second of the
  // second (BENCHMARKS.md): the host's shrink and normalisation were the larger cost.
  texture::BatcherOptions batching = [] {
    texture::BatcherOptions b;
    b.max_batch = 1;
    return b;
  }();
  bool log_requests = false;  // one line per request on stderr
};

class HttpApi {
 public:
  HttpApi(Backend& backend, ApiOptions options);
  ~HttpApi();
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  // Binds host:port (port 0: any free port); returns the port, or throws std::runtime_error.
  int bind(const std::string& host, int port);
  // Where uploads are extracted (texture::extraction_device), as /v1/stats' `extraction` says.
  const std::string& extraction_device() const;
  // Serves until stop() (from another thread or a signal handler's thread).
  void serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::service
