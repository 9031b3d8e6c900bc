#include "test_env.h"

#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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
  // mkdtemp creates a folder no one else has: never a stale one left by a killed run.
  std::string name = (std::filesystem::temp_directory_path() / "prism-test-XXXXXX").string();
  if (!::mkdtemp(name.data())) throw std::runtime_error(name + ": mkdtemp failed: " + std::strerror(errno));
  path_ = name;
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

std::string TempDir::fifo(const std::string& name) const {
  const std::filesystem::path f = path_ / name;
  std::filesystem::create_directories(f.parent_path());
  if (::mkfifo(f.c_str(), 0644) != 0) throw std::runtime_error(f.string() + ": mkfifo failed");
  return f.string();
}

std::vector<std::string> source_lines(const std::string& relative, const std::string& prefix) {
  const std::string path = std::string(PRISM_SOURCE_DIR_STR) + "/" + relative;
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot be read");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line.substr(prefix.size()));
  return out;
}

void within_seconds(int seconds, const std::string& what, const std::function<void()>& f) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(m);
    if (!cv.wait_for(lock, std::chrono::seconds(seconds), [&] { return done; })) {
      std::fprintf(stderr, "FAILED: %s did not return within %d s\n", what.c_str(), seconds);
      std::fflush(stderr);
      std::_Exit(1);
    }
  });
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(m);
      done = true;
    }
    cv.notify_one();
    watchdog.join();
  };
  try {
    f();
  } catch (...) {
    finish();
    throw;
  }
  finish();
}

}  // namespace prism::test
