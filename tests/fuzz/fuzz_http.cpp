// Fuzz target: raw HTTP requests to the texture service (service/http_api.h over
// service/local_backend.h), sent over a real loopback connection to a server running in this
// process on a gallery of two products: cpp-httplib's request parsing, our routing, parameter and
// body parsing (multipart, JSON, base64), the image loader and the backend behind them.
// Input: the bytes of one or more requests, as a client would send them.
// Cheap enough for CI's 60 s (about 5 executions per second before, 40 to 60 after): most mutations cut a request
// or break its Content-Length, and the server waited for the rest (5 s; the client gave up after
// 1 s). Here the server's read timeout is 200 ms, so it closes such a connection and the client sees
// that at once; complete requests are parsed, routed and answered exactly as before (the images of
// the corpus are small: decoding and SIFT take milliseconds).
// Checks: the answer is an HTTP response; never a 500 (the server's own failure); a JSON answer
// parses, and an error names a status and a message; the server still answers /healthz afterwards.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "fuzz_util.h"
#include "gst_setup.h"
#include "http_api.h"
#include "local_backend.h"
#include "ppm.h"
#include "texture_cases.h"

namespace {

int port = 0;

// The length of the first complete response in `a` (head and Content-Length body), or 0.
size_t complete_response(const std::string& a) {
  const size_t head_end = a.find("\r\n\r\n");
  if (head_end == std::string::npos) return 0;
  const size_t at = a.find("Content-Length: ");
  const size_t length = at == std::string::npos || at > head_end ? 0 : std::strtoul(a.c_str() + at + 16, nullptr, 10);
  return a.size() >= head_end + 4 + length ? head_end + 4 + length : 0;
}

// How an exchange ended without a response (for the /healthz check's message).
enum class Ending { kAnswered, kClosed, kTimedOut };

// Sends `request` and returns the first response, or "" when none came within `wait` or the
// server closed the connection: it waits for the rest of an incomplete request for its read timeout
// (cpp-httplib does not answer a client that half-closed its side, so the request cannot be ended
// that way).
std::string exchange(const std::string& request, std::chrono::milliseconds wait = std::chrono::seconds(1),
                     Ending* ending = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  FUZZ_CHECK(fd >= 0, "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FUZZ_CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0, "connect to the server");
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close early (a body over the limit)
    sent += size_t(n);
  }
  std::string answer;
  char buf[65536];
  const auto until = std::chrono::steady_clock::now() + wait;
  Ending how = Ending::kAnswered;
  while (!complete_response(answer)) {
    const int left =
        int(std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count());
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, left) <= 0) {
      how = Ending::kTimedOut;
      break;
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      how = Ending::kClosed;
      break;
    }
    answer.append(buf, size_t(n));
  }
  ::close(fd);
  if (ending) *ending = how;
  return answer;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  prism::fuzz::set_gstreamer_environment();
  prism::init_gstreamer();
  prism::fuzz::abort_on_gstreamer_warnings();
  using namespace prism::service;
  LocalOptions lo;
  lo.gallery = prism::fuzz::scratch_dir() / "gallery";
  lo.index.device = prism::texture::Device::kCpu;
  lo.index.host_budget = int64_t(16) << 20;
  static LocalBackend backend(lo);
  ApiOptions options;
  options.max_body_bytes = 1 << 20;
  options.max_image_pixels = 1 << 20;
  options.threads = 4;
  options.read_timeout = std::chrono::milliseconds(200);
  static HttpApi api(backend, options);
  port = api.bind("127.0.0.1", 0);
  std::thread([] { api.serve(); }).detach();
  // Two products, enrolled through the API itself.
  std::mt19937 rng(1);
  for (const char* id : {"p1", "p2"}) {
    const std::string image = prism::test::pgm_bytes(prism::test::random_texture(rng, 160, 120));
    std::string answer;
    for (int i = 0; i < 20 && answer.find("HTTP/1.1 201") != 0; ++i) {
      answer = exchange(std::string("POST /v1/products/") + id +
                            " HTTP/1.1\r\nHost: x\r\nContent-Type: image/x-portable-graymap\r\nContent-Length: " +
                            std::to_string(image.size()) + "\r\nConnection: close\r\n\r\n" + image,
                        std::chrono::seconds(60));  // SIFT under the sanitizers on a loaded machine
      if (answer.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FUZZ_CHECK(answer.find("HTTP/1.1 201") == 0, answer.substr(0, 200).c_str());
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string answer = exchange(std::string(reinterpret_cast<const char*>(data), size));
  if (!answer.empty()) {
    FUZZ_CHECK(answer.rfind("HTTP/1.1 ", 0) == 0 && answer.size() >= 12, answer.substr(0, 80).c_str());
    const int status = std::atoi(answer.c_str() + 9);
    FUZZ_CHECK(status >= 100 && status < 600, answer.substr(0, 80).c_str());
    FUZZ_CHECK(status != 500, answer.substr(0, 400).c_str());
    if (std::getenv("PRISM_FUZZ_VERBOSE")) std::fprintf(stderr, "%s\n", answer.substr(0, answer.find("\r\n")).c_str());
    const size_t head_end = answer.find("\r\n\r\n");
    const std::string head = answer.substr(0, head_end);
    if (head_end != std::string::npos && head.find("Content-Type: application/json") != std::string::npos) {
      const std::string body = answer.substr(head_end + 4, complete_response(answer) - head_end - 4);
      const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
      FUZZ_CHECK(!j.is_discarded(), body.substr(0, 200).c_str());
      if (status >= 400)
        FUZZ_CHECK(j.contains("error") && j["error"]["status"] == status && j["error"]["message"].is_string() &&
                       !j["error"]["message"].get<std::string>().empty(),
                   body.substr(0, 200).c_str());
    }
  }
  // Liveness, not speed: the probe waits 8 s, what is left of libFuzzer's 10 s per input after the
  // input's own exchange (1 s at most), so a hung server is still caught. One second was too short
  // once in CI's fresh-clone run on a loaded 2-core machine (the input replayed clean in 0.8 s);
  // five seconds too, once, after 940 inputs (the input replayed clean in 0.4 s, and 1,915 inputs of
  // the same seed ran clean on an idle machine). The message says how the probe ended.
  Ending ending = Ending::kAnswered;
  const std::string health =
      exchange("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", std::chrono::seconds(8), &ending);
  if (health.rfind("HTTP/1.1 200", 0) != 0) {
    const std::string why = ending == Ending::kTimedOut ? "the server no longer answers /healthz: no answer within 8 s"
                            : ending == Ending::kClosed ? "the server closed /healthz's connection without an answer"
                                                        : "/healthz answered " + health.substr(0, 200);
    FUZZ_CHECK(false, why.c_str());
  }
  return 0;
}
