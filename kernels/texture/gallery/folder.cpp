#include "texture/gallery/folder.h"

#include "common/durable_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace prism::texture {

namespace fs = std::filesystem;

namespace store {

std::string marker_text(const Normalisation& n) {
  if (n.kind == Normalisation::Kind::kNone) return kMarkerTextPacked;
  return std::string(kMarkerTextNormalised) + "normalise " + n.name() + "\n";
}

std::string errno_text() { return std::strerror(errno); }
GalleryError write_error(const fs::path& path, const char* what) {
  const int err = errno;
  return GalleryError(path.string() + ": " + what + ": " + std::strerror(err), err);
}

void write_atomically(const fs::path& tmp, const fs::path& final, const std::vector<uint8_t>& bytes) {
  try {
    prism::write_atomically(tmp, final, bytes, /*sync_directory=*/false);  // callers fsync once
  } catch (const FileError& e) {
    throw GalleryError(e.what(), e.error_number);
  }
}
std::vector<uint8_t> read_regular(const fs::path& path) {
  try {
    return read_file(path);
  } catch (const FileError& e) {
    throw GalleryError(e.what());
  }
}
void fsync_dir(const fs::path& dir) {
  try {
    prism::fsync_directory(dir);
  } catch (const FileError& e) {
    throw GalleryError(e.what(), e.error_number);
  }
}

bool is_temporary(const fs::path& p) { return p.filename().string().rfind(".tmp-", 0) == 0; }

namespace {

// ---- The owner: DIR/.owner (GalleryOwner) ------------------------------------------------------
constexpr const char* kOwner = ".owner";

// The folders this process owns, by device and inode (however their paths are spelled): its own
// writes skip DIR/.owner, since a second flock() of the file here would conflict with the owner's.
std::mutex& owned_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::pair<uint64_t, uint64_t>>& owned_dirs() {
  static std::set<std::pair<uint64_t, uint64_t>> s;
  return s;
}
bool dir_identity(const fs::path& dir, uint64_t& dev, uint64_t& ino) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return false;
  dev = uint64_t(st.st_dev);
  ino = uint64_t(st.st_ino);
  return true;
}
bool owned_here(const fs::path& dir) {
  uint64_t dev = 0, ino = 0;
  if (!dir_identity(dir, dev, ino)) return false;
  std::lock_guard<std::mutex> g(owned_mutex());
  return owned_dirs().count({dev, ino}) != 0;
}

// What an owner wrote into DIR/.owner ("PID<TAB>WHO"), as a phrase naming it.
std::string owner_text(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string t(buf, n > 0 ? size_t(n) : 0);
  while (!t.empty() && (t.back() == '\n' || t.back() == '\0')) t.pop_back();
  const size_t tab = t.find('\t');
  if (tab == std::string::npos) return "another process";
  return t.substr(tab + 1) + " (pid " + t.substr(0, tab) + ")";
}
std::string held_message(const fs::path& dir, const std::string& holder) {
  return "gallery " + dir.string() + " is held by " + holder +
         ", which alone writes it while it runs: write through it (its HTTP API), or stop it first";
}

}  // namespace

WriterLock::WriterLock(const fs::path& dir, bool wait) {
  if (!owned_here(dir)) {
    const fs::path o = dir / kOwner;
    owner_fd_ = ::open(o.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (owner_fd_ < 0) {
      if (!wait) return;
      throw GalleryError(o.string() + ": cannot open: " + errno_text());
    }
    int rc;
    while ((rc = ::flock(owner_fd_, LOCK_SH | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc != 0) {
      const std::string why = errno == EWOULDBLOCK ? held_message(dir, owner_text(owner_fd_))
                                                   : o.string() + ": cannot lock: " + errno_text();
      ::close(owner_fd_);
      owner_fd_ = -1;
      if (!wait) return;
      throw GalleryError(why);
    }
  }
  const fs::path p = dir / ".lock";
  fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    release_owner();
    if (!wait) return;
    throw GalleryError(p.string() + ": cannot open: " + errno_text());
  }
  while (::flock(fd_, wait ? LOCK_EX : LOCK_EX | LOCK_NB) != 0) {
    if (errno != EINTR || !wait) {
      const std::string why = errno_text();
      ::close(fd_);
      fd_ = -1;
      release_owner();
      if (!wait) return;
      throw GalleryError(p.string() + ": cannot lock: " + why);
    }
  }
  std::error_code ec;
  for (const fs::path& d : {dir / "entries", dir})
    for (const auto& e : fs::directory_iterator(d, ec))
      if (is_temporary(e.path())) fs::remove(e.path(), ec);
}

bool fresh_folder(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return true;
  try {
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name == ".lock" || name == kOwner || name == kPack || name == kDirty || name.rfind(".tmp-", 0) == 0) continue;
      if (name != "entries" || !e.is_directory()) return false;
      for (const auto& f : fs::directory_iterator(e.path()))
        if (!is_temporary(f.path())) return false;
    }
  } catch (const fs::filesystem_error& e) {
    throw GalleryError(dir.string() + ": cannot read: " + e.code().message());
  }
  return true;
}

Marker read_marker(const fs::path& dir) {
  const fs::path marker = dir / kMarker;
  const std::vector<uint8_t> marker_bytes = read_regular(marker);
  std::istringstream m(std::string(marker_bytes.begin(), marker_bytes.end()));
  std::string first;
  std::getline(m, first);
  Marker out;
  if (first + "\n" == kMarkerText) return out;
  out.packed = true;
  if (first + "\n" == kMarkerTextPacked) return out;
  if (first + "\n" == kMarkerTextNormalised) {
    std::string line, key, name, rest;
    std::getline(m, line);
    std::istringstream fields(line);
    if (!(fields >> key >> name) || key != "normalise" || (fields >> rest))
      throw GalleryError(marker.string() + ":2: expected 'normalise NAME', not '" + line + "'");
    try {
      out.normalisation = parse_normalisation(name);
    } catch (const std::invalid_argument& e) {
      throw GalleryError(marker.string() + ":2: " + e.what() + " (a newer Prism wrote it?)");
    }
    return out;
  }
  throw GalleryError(marker.string() + ":1: unknown gallery format '" + first +
                     "' (this build reads formats 1, 2 and 3; a newer Prism wrote it?)");
}

void set_marker(const fs::path& dir, const std::string& t) {
  write_atomically(dir / (std::string(".tmp-marker-") + std::to_string(::getpid())), dir / kMarker,
                   std::vector<uint8_t>(t.begin(), t.end()));
  fsync_dir(dir);
}

std::optional<GalleryEntry> read_entry_file(const fs::path& path) {
  const std::string file = path.string();
  std::vector<uint8_t> bytes;
  for (int attempt = 0;; ++attempt) {
    try {
      bytes = read_regular(path);  // refuses a FIFO or device, which would be read forever
      break;
    } catch (const GalleryError&) {
      // Readers take no lock: a writer may have deleted the entry since the folder was listed, or
      // renamed in the one in flight (pack.dirty's) just after this open missed it: look again.
      std::error_code ec;
      if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
      if (attempt == 2) throw;
    }
  }
  const std::string id = path.stem().string();
  try {
    GalleryEntry e = Gallery::decode(bytes, file);
    if (e.id != id) throw GalleryError(file + ": corrupt gallery entry: holds id '" + e.id + "'");
    return e;
  } catch (const GalleryError& e) {
    // delete and update do not read the entries, so they repair a gallery that readers refuse.
    const std::string dir = path.parent_path().parent_path().string();
    throw GalleryError(std::string(e.what()) + "; remove it with `prism texture delete --gallery " + dir + " " + id +
                       "` or re-enrol it with `prism texture update --gallery " + dir + " --id " + id + " IMAGE`");
  }
}

}  // namespace store

using namespace store;

GalleryOwner::GalleryOwner(const fs::path& dir, const std::string& who) {
  std::error_code ec;
  if (!fs::exists(dir / kMarker, ec)) {
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw GalleryError(dir.string() + ": not a directory");
    if (!fresh_folder(dir))
      throw GalleryError(dir.string() + ": not a Prism texture gallery and not empty; choose a new or empty folder");
    fs::create_directories(dir, ec);
    if (ec) throw GalleryError(dir.string() + ": cannot create: " + ec.message());
  }
  if (!dir_identity(dir, dev_, ino_)) throw GalleryError(dir.string() + ": cannot read: " + errno_text());
  {
    std::lock_guard<std::mutex> g(owned_mutex());
    if (owned_dirs().count({dev_, ino_})) throw GalleryError(held_message(dir, "this process already"));
  }
  const fs::path p = dir / kOwner;
  fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw GalleryError(p.string() + ": cannot open: " + errno_text());
  for (int tries = 0;; ++tries) {
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) break;
    if (errno == EINTR) continue;
    std::string why = p.string() + ": cannot lock: " + errno_text();
    if (errno == EWOULDBLOCK) {
      // Held exclusively by an owner, or shared by one-off writes, which end in milliseconds.
      const bool owner = ::flock(fd_, LOCK_SH | LOCK_NB) != 0;
      if (!owner) ::flock(fd_, LOCK_UN);
      if (!owner && tries < 500) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      why = held_message(dir, owner ? owner_text(fd_) : "writes of another process that did not end within 5 s");
    }
    ::close(fd_);
    throw GalleryError(why);
  }
  file_ = p;
  try {
    describe(who);
  } catch (const GalleryError&) {
    ::close(fd_);
    throw;
  }
  std::lock_guard<std::mutex> g(owned_mutex());
  if (!owned_dirs().insert({dev_, ino_}).second) {  // another owner of this process won the race
    ::close(fd_);
    throw GalleryError(held_message(dir, "this process already"));
  }
}

void GalleryOwner::describe(const std::string& who) {
  const std::string text = std::to_string(::getpid()) + "\t" + who + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != ssize_t(text.size()))
    throw GalleryError(file_.string() + ": cannot write: " + errno_text());
}

GalleryOwner::~GalleryOwner() {
  {
    std::lock_guard<std::mutex> g(owned_mutex());
    owned_dirs().erase({dev_, ino_});
  }
  ::close(fd_);  // the kernel releases the flock
}

}  // namespace prism::texture
