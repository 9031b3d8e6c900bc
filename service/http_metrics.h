// The HTTP servers' request metrics in Prometheus text (docs/SERVICE.md lists them): requests by
// route and status (prism_http_requests_total) and latency histograms per route and per route and
// stage. Used by the texture service (http_api.cpp) and prism run's --control and --metrics server.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>

namespace prism::service {

class HttpMetrics {
 public:
  // From 100 us: a stage such as matching a few products takes less than the requests' first bucket.
  static constexpr std::array<double, 17> kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30};
  void observe(const std::string& route, int status, double seconds) {
    std::lock_guard lock(mutex_);
    ++requests_[{route, status}];
    latency_[route].add(seconds);
  }
  // One stage of one request of `route` (queue, decode, extract, match, verify).
  void observe_stage(const std::string& route, const std::string& stage, double seconds) {
    std::lock_guard lock(mutex_);
    stages_[{route, stage}].add(seconds);
  }
  std::string text() const {
    std::ostringstream o;
    std::lock_guard lock(mutex_);
    o << "# HELP prism_http_requests_total HTTP requests by route and status.\n"
         "# TYPE prism_http_requests_total counter\n";
    for (const auto& [k, n] : requests_)
      o << "prism_http_requests_total{route=\"" << k.first << "\",code=\"" << k.second << "\"} " << n << "\n";
    o << "# HELP prism_http_request_duration_seconds Time from the handler's start to its answer.\n"
         "# TYPE prism_http_request_duration_seconds histogram\n";
    for (const auto& [route, h] : latency_)
      h.write(o, "prism_http_request_duration_seconds", "route=\"" + route + "\"");
    o << "# HELP prism_http_request_stage_duration_seconds Time of one stage of a request: queue (waiting, "
         "complete, for a worker thread), decode, extract (SIFT), match, verify.\n"
         "# TYPE prism_http_request_stage_duration_seconds histogram\n";
    for (const auto& [key, h] : stages_)
      h.write(o, "prism_http_request_stage_duration_seconds",
              "route=\"" + key.first + "\",stage=\"" + key.second + "\"");
    return o.str();
  }

 private:
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> counts{};  // cumulative, as Prometheus counts buckets
    uint64_t count = 0;
    double sum = 0;
    void add(double seconds) {
      for (size_t i = 0; i < kBuckets.size(); ++i)
        if (seconds <= kBuckets[i]) ++counts[i];
      ++count;
      sum += seconds;
    }
    void write(std::ostream& o, const std::string& name, const std::string& labels) const {
      for (size_t i = 0; i < kBuckets.size(); ++i)
        o << name << "_bucket{" << labels << ",le=\"" << kBuckets[i] << "\"} " << counts[i] << "\n";
      o << name << "_bucket{" << labels << ",le=\"+Inf\"} " << count << "\n";
      o << name << "_sum{" << labels << "} " << sum << "\n";
      o << name << "_count{" << labels << "} " << count << "\n";
    }
  };
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, Histogram> latency_;
  std::map<std::pair<std::string, std::string>, Histogram> stages_;
};

}  // namespace prism::service
