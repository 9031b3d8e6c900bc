// The test environment, without gtest (benchmarks use it too): where the test data lives, whether
// the GPU suite demands a GPU, and temporary folders.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace prism::test {

// PRISM_REQUIRE_GPU=1 (the GPU suite): a GPU test must fail rather than skip without a GPU.
bool gpu_required();

// Folder of ../shared/data beside the source tree (or $PRISM_DATA_DIR); it may not exist.
std::string data_dir();

// The lines of `relative` (a file of the source tree: docs/SERVICE.md, deploy/...) that start with
// `prefix`, without it, in order; throws std::runtime_error naming the file when it cannot be read.
// Tests run what the docs and the shipped files say, as written.
std::vector<std::string> source_lines(const std::string& relative, const std::string& prefix);

// A fresh folder under the system temp folder, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // path()/name (not created).
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Writes `text` to path()/name and returns the full path.
  std::string write(const std::string& name, const std::string& text) const;
  // Makes a FIFO (named pipe) path()/name with no writer and returns its full path.
  std::string fifo(const std::string& name) const;

 private:
  std::filesystem::path path_;
};

// Runs `f` on this thread; if it has not returned after `seconds`, prints `what` and ends the process:
// a test of a read that could block (a FIFO, /dev/zero) fails instead of hanging.
void within_seconds(int seconds, const std::string& what, const std::function<void()>& f);

}  // namespace prism::test
