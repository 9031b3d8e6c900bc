#include "common/durable_file.h"

#include "common/regular_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace prism {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

// Slicing-by-16 (the slicing-by-8 of Kounavis and Berry, "A Systematic Approach to Building High
// Performance Software-Based CRC Generators", 2005, sixteen bytes per step): about 6x the
// byte-at-a-time loop here; opening a gallery checks every entry's CRC, so this bounds its rate.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "crc32's 16-byte step reads little-endian words");

uint32_t crc32(const uint8_t* data, size_t n) {
  static const std::array<std::array<uint32_t, 256>, 16> table = [] {
    std::array<std::array<uint32_t, 256>, 16> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 16; ++s) t[s][i] = t[0][t[s - 1][i] & 0xFFu] ^ (t[s - 1][i] >> 8);
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (; n >= 16; n -= 16, data += 16) {
    uint32_t w[4];
    std::memcpy(w, data, 16);
    w[0] ^= c;
    c = 0;
    for (int k = 0; k < 4; ++k)  // byte j of the 16 goes through table 15 - j
      c ^= table[15 - 4 * k][w[k] & 0xFFu] ^ table[14 - 4 * k][(w[k] >> 8) & 0xFFu] ^
           table[13 - 4 * k][(w[k] >> 16) & 0xFFu] ^ table[12 - 4 * k][w[k] >> 24];
  }
  for (; n > 0; --n, ++data) c = table[0][(c ^ *data) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void write_atomically(const std::filesystem::path& tmp, const std::filesystem::path& final,
                      const std::vector<uint8_t>& bytes, bool sync_directory) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw FileError(tmp.string() + ": cannot create: " + errno_text(), errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;  // a write of 0 bytes: no room
      ::close(fd);
      ::unlink(tmp.c_str());
      throw FileError(tmp.string() + ": write failed: " + std::strerror(err), err);
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw FileError(tmp.string() + ": fsync failed: " + std::strerror(err), err);
  }
  if (::rename(tmp.c_str(), final.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw FileError(final.string() + ": rename failed: " + std::strerror(err), err);
  }
  if (sync_directory) fsync_directory(final.has_parent_path() ? final.parent_path() : std::filesystem::path("."));
}

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw FileError(dir.string() + ": cannot open directory: " + errno_text(), errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw FileError(dir.string() + ": fsync failed: " + std::strerror(err), err);
}

std::vector<uint8_t> read_file(const std::filesystem::path& path) { return RegularFile(path).read_all(); }

}  // namespace prism
