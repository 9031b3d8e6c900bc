// The gtest part of the test-support library: skips that are loud, and that turn into failures in
// the GPU suite (PRISM_REQUIRE_GPU=1) or where the data must be present (PRISM_REQUIRE_DATA=1).
// Benchmarks use test_env.h, which this includes, and never this header.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "common/gpu.h"
#include "test_env.h"

// In a GPU test: with no usable GPU, fail when PRISM_REQUIRE_GPU=1 (the GPU suite), else skip
// with a loud message.
#define PRISM_NEED_GPU()                                                                       \
  do {                                                                                         \
    std::string why_;                                                                          \
    if (!::prism::gpu::available(&why_)) {                                                     \
      if (::prism::test::gpu_required()) FAIL() << "PRISM_REQUIRE_GPU=1 but no GPU: " << why_; \
      std::cerr << "*** SKIPPING GPU TEST (no GPU: " << why_ << ") ***\n";                     \
      GTEST_SKIP() << "no GPU: " << why_;                                                      \
    }                                                                                          \
  } while (0)

// A test that needs ../shared/data: skips loudly when missing unless PRISM_REQUIRE_DATA=1.
#define PRISM_NEED_FILE(path)                                                                        \
  do {                                                                                               \
    if (!std::ifstream(path).good()) {                                                               \
      const char* req_ = std::getenv("PRISM_REQUIRE_DATA");                                          \
      if (req_ && std::string(req_) == "1") FAIL() << "missing test data: " << (path);               \
      std::cerr << "*** SKIPPING: test data not found: " << (path) << " (set PRISM_DATA_DIR) ***\n"; \
      GTEST_SKIP() << "missing " << (path);                                                          \
    }                                                                                                \
  } while (0)
