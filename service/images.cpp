#include "images.h"

#include <gst/gst.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "backend.h"
#include "gst/prism/gstprismimagefile.h"

namespace prism::service {

namespace {

// Replaces every occurrence of `from` in `s` with `to`.
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); !from.empty() && at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// The bytes in an anonymous memory file (memfd_create), readable by path as /proc/self/fd/N: no
// temporary file to clean up, none left behind by a killed server. Closed when it goes out of scope.
class MemoryFile {
 public:
  explicit MemoryFile(const std::string& bytes) {
    fd_ = ::memfd_create("prism-image", MFD_CLOEXEC);
    if (fd_ < 0) throw ServiceError(500, "", std::string("cannot create a memory file: ") + std::strerror(errno));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = errno;
        ::close(fd_);
        throw ServiceError(e == ENOMEM || e == ENOSPC ? 503 : 500, "",
                           std::string("cannot hold the image in memory: ") + std::strerror(e));
      }
      done += size_t(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace

cv::Mat decode_grey(const std::string& bytes, const std::string& field, uint64_t max_pixels) {
  if (bytes.empty()) throw ServiceError(400, field, "'" + field + "' is empty: send an image (PNG, JPEG, ...)");
  MemoryFile file(bytes);
  ImageFile image;
  GError* error = nullptr;
  if (!image_file_load_grey(file.path().c_str(), &image, &error, max_pixels)) {
    const bool too_large =
        error && error->domain == GST_RESOURCE_ERROR && error->code == GST_RESOURCE_ERROR_NO_SPACE_LEFT;
    // The loader names the file: name the request field instead.
    std::string why = error ? error->message : "not a decodable image";
    g_clear_error(&error);
    why = replace_all(why, "image file '" + file.path() + "'", "'" + field + "'");
    why = replace_all(why, file.path(), "'" + field + "'");
    throw ServiceError(too_large ? 413 : 400, field, why);
  }
  return cv::Mat(image.height, image.width, CV_8UC1, image.pixels.data()).clone();
}

}  // namespace prism::service
