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

// Slicing-by-8 (Kounavis and Berry, "A Systematic Approach to Building High Performance
// Software-Based CRC Generators", 2005): eight bytes per step through eight tables, about 5x the
// byte-at-a-time loop; opening a gallery checks every entry's CRC, so this bounds its rate.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "crc32's 8-byte step reads little-endian words");

uint32_t crc32(const uint8_t* data, size_t n) {
  static const std::array<std::array<uint32_t, 256>, 8> table = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = t[0][t[s - 1][i] & 0xFFu] ^ (t[s - 1][i] >> 8);
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (; n >= 8; n -= 8, data += 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, data, 4);
    std::memcpy(&hi, data + 4, 4);
    lo ^= c;
    c = table[7][lo & 0xFFu] ^ table[6][(lo >> 8) & 0xFFu] ^ table[5][(lo >> 16) & 0xFFu] ^ table[4][lo >> 24] ^
        table[3][hi & 0xFFu] ^ table[2][(hi >> 8) & 0xFFu] ^ table[1][(hi >> 16) & 0xFFu] ^ table[0][hi >> 24];
  }
  for (; n > 0; --n, ++data) c = table[0][(c ^ *data) & 0xFFu] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void write_atomically(const std::filesystem::path& tmp, const std::filesystem::path& final,
                      const std::vector<uint8_t>& bytes, bool sync_directory) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw FileError(tmp.string() + ": cannot create: " + errno_text());
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      throw FileError(tmp.string() + ": write failed: " + why);
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw FileError(tmp.string() + ": fsync failed: " + why);
  }
  if (::rename(tmp.c_str(), final.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw FileError(final.string() + ": rename failed: " + why);
  }
  if (sync_directory) fsync_directory(final.has_parent_path() ? final.parent_path() : std::filesystem::path("."));
}

void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw FileError(dir.string() + ": cannot open directory: " + errno_text());
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw FileError(dir.string() + ": fsync failed: " + errno_text());
}

std::vector<uint8_t> read_file(const std::filesystem::path& path) { return RegularFile(path).read_all(); }

}  // namespace prism
