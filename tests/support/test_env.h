// The test environment, without gtest (benchmarks use it too): where the test data lives, whether
// the GPU suite demands a GPU, and temporary folders.
#pragma once

#include <filesystem>
#include <string>

namespace prism::test {

// PRISM_REQUIRE_GPU=1 (the GPU suite): a GPU test must fail rather than skip without a GPU.
bool gpu_required();

// Folder of ../shared/data beside the source tree (or $PRISM_DATA_DIR); it may not exist.
std::string data_dir();

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

 private:
  std::filesystem::path path_;
};

}  // namespace prism::test
