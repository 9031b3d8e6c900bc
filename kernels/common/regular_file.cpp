#include "common/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace prism {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "of an unknown kind";
}

void require_regular(const std::filesystem::path& path, const struct stat& st) {
  if (!S_ISREG(st.st_mode)) throw FileError(path.string() + ": not a regular file (" + kind_of(st.st_mode) + ")");
}

}  // namespace

RegularFile::RegularFile(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw FileError(path.string() + ": cannot open: " + std::strerror(errno));
  struct stat st;
  try {
    if (::fstat(fd_, &st) != 0) throw FileError(path.string() + ": cannot stat: " + std::strerror(errno));
    require_regular(path, st);
    // Regular files ignore O_NONBLOCK today; clear it so reads are plain blocking reads regardless.
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0)
      throw FileError(path.string() + ": fcntl failed: " + std::strerror(errno));
  } catch (...) {
    ::close(fd_);
    throw;
  }
  size_ = int64_t(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RegularFile::read_at(int64_t offset, void* out, size_t n) const {
  auto* p = static_cast<uint8_t*>(out);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, p + done, n - done, off_t(offset + int64_t(done)));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw FileError(path_.string() + ": read failed: " + std::strerror(errno));
    if (got == 0)
      throw FileError(path_.string() + ": ends after " + std::to_string(offset + int64_t(done)) + " bytes; " +
                      std::to_string(offset + int64_t(n)) + " expected");
    done += size_t(got);
  }
}

std::vector<uint8_t> RegularFile::read_all() const {
  std::vector<uint8_t> bytes(static_cast<size_t>(size_));
  read_at(0, bytes.data(), bytes.size());
  return bytes;
}

std::string RegularFile::read_text() const {
  std::string text(static_cast<size_t>(size_), '\0');
  read_at(0, text.data(), text.size());
  return text;
}

void check_regular_file(const std::filesystem::path& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw FileError(path.string() + ": " + std::strerror(errno));
  require_regular(path, st);
}

}  // namespace prism
