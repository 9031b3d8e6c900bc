// Reading a file a user named: only a regular file (a symlink to one is fine). A FIFO blocks, and
// /dev/zero or a FIFO with a writer is read forever; a directory reads as nothing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/durable_file.h"

namespace prism {

// An open regular file for reading. The check is on the opened descriptor (fstat), so nothing can
// swap the file between check and open; the open is non-blocking, so a FIFO with no writer is
// refused at once rather than waited on. FileError "<path>: not a regular file (a FIFO)",
// "<path>: cannot open: <reason>", ...
class RegularFile {
 public:
  explicit RegularFile(const std::filesystem::path& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  int64_t size() const { return size_; }  // at open
  // Exactly `n` bytes at `offset` (FileError naming the file when fewer are there).
  void read_at(int64_t offset, void* out, size_t n) const;
  std::vector<uint8_t> read_all() const;
  std::string read_text() const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// The same check without opening, for a path another reader opens (GStreamer's filesrc): FileError
// unless `path` is (or links to) a regular file.
void check_regular_file(const std::filesystem::path& path);

}  // namespace prism
