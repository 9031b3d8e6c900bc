// Helpers shared by Prism's tests: GPU gating and test data location.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>

#include "common/gpu.h"

namespace prism::test {

inline bool gpu_required() {
  const char* v = std::getenv("PRISM_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

// Folder of ../shared/data (or $PRISM_DATA_DIR); empty when missing.
inline std::string data_dir() {
  if (const char* d = std::getenv("PRISM_DATA_DIR")) return d;
#ifdef PRISM_SOURCE_DIR_STR
  return std::string(PRISM_SOURCE_DIR_STR) + "/../shared/data";
#else
  return "../shared/data";
#endif
}

// A fresh folder under the system temp folder, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device random;
    path_ = std::filesystem::temp_directory_path() /
            ("prism-test-" + std::to_string(random()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // path()/name (not created).
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Writes `text` to path()/name and returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path f = path_ / name;
    std::filesystem::create_directories(f.parent_path());
    std::ofstream(f, std::ios::binary) << text;
    return f.string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace prism::test

// In a GPU test: with no usable GPU, fail when PRISM_REQUIRE_GPU=1 (the GPU suite), else skip
// with a loud message.
#define PRISM_NEED_GPU()                                                                     \
  do {                                                                                       \
    std::string why_;                                                                        \
    if (!::prism::gpu::available(&why_)) {                                                   \
      if (::prism::test::gpu_required()) FAIL() << "PRISM_REQUIRE_GPU=1 but no GPU: " << why_; \
      std::cerr << "*** SKIPPING GPU TEST (no GPU: " << why_ << ") ***\n";                  \
      GTEST_SKIP() << "no GPU: " << why_;                                                    \
    }                                                                                        \
  } while (0)

// A test that needs ../shared/data: skips loudly when missing unless PRISM_REQUIRE_DATA=1.
#define PRISM_NEED_FILE(path)                                                                \
  do {                                                                                       \
    if (!std::ifstream(path).good()) {                                                       \
      const char* req_ = std::getenv("PRISM_REQUIRE_DATA");                                  \
      if (req_ && std::string(req_) == "1") FAIL() << "missing test data: " << (path);       \
      std::cerr << "*** SKIPPING: test data not found: " << (path)                          \
                << " (set PRISM_DATA_DIR) ***\n";                                            \
      GTEST_SKIP() << "missing " << (path);                                                  \
    }                                                                                        \
  } while (0)
