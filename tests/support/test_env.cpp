#include "test_env.h"

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <random>

namespace prism::test {

bool gpu_required() {
  const char* v = std::getenv("PRISM_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

std::string data_dir() {
  if (const char* d = std::getenv("PRISM_DATA_DIR")) return d;
  return std::string(PRISM_SOURCE_DIR_STR) + "/../shared/data";
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  std::random_device random;
  path_ = std::filesystem::temp_directory_path() /
          ("prism-test-" + std::to_string(random()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, const std::string& text) const {
  const std::filesystem::path f = path_ / name;
  std::filesystem::create_directories(f.parent_path());
  std::ofstream(f, std::ios::binary) << text;
  return f.string();
}

}  // namespace prism::test
