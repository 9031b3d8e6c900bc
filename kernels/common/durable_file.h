// Files that survive a crash mid-write, and a checksum to tell a damaged one: shared by the texture
// gallery and the bag-of-words model.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace prism {

// A failed write, naming the file and the system's reason; `error_number` is that reason's errno
// (0 when not a system call's), so that callers can tell a full disk (ENOSPC, EDQUOT) apart.
struct FileError : std::runtime_error {
  explicit FileError(const std::string& what, int error_number = 0)
      : std::runtime_error(what), error_number(error_number) {}
  int error_number;
};

// CRC-32 (IEEE 802.3, reflected: the zlib/PNG checksum).
uint32_t crc32(const uint8_t* data, size_t n);

// Writes `bytes` to `tmp`, fsyncs it, renames it over `final` and, unless told not to, fsyncs
// `final`'s directory: a reader sees the old file or the whole new one, never a part. FileError.
void write_atomically(const std::filesystem::path& tmp, const std::filesystem::path& final,
                      const std::vector<uint8_t>& bytes, bool sync_directory = true);
void fsync_directory(const std::filesystem::path& dir);  // FileError

// The whole file (FileError naming it when it cannot be read or is not a regular file: RegularFile).
std::vector<uint8_t> read_file(const std::filesystem::path& path);

}  // namespace prism
