// Elapsed time in milliseconds, for the timings the kernels, elements and tools report (latency
// fields, per-stage timings): one definition, so that every report measures alike. steady_clock,
// because the system clock may be set back or forward while a stage runs.
#pragma once

#include <chrono>

namespace prism {

// Milliseconds from `t0` to now.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Milliseconds from `t` to now, and `t` moved to now: consecutive stages timed from one variable.
inline double lap_ms(std::chrono::steady_clock::time_point& t) {
  const auto now = std::chrono::steady_clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - t).count();
  t = now;
  return ms;
}

}  // namespace prism
