// One line of a service process's log on stderr, stamped with the UTC time to the millisecond:
// a deployment's logs (fronts, shard workers, a fault test's history) are read side by side.
#pragma once

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace prism::service {

inline void log_line(const std::string& line) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t s = std::chrono::system_clock::to_time_t(now);
  const long ms = long(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm utc{};
  gmtime_r(&s, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  std::fprintf(stderr, "%s.%03ldZ %s\n", stamp, ms, line.c_str());
}

}  // namespace prism::service
