// The gallery folder's protocol (internal to kernels/texture/gallery*, not for users): the files a
// gallery folder holds (gallery.h lists them), its marker (gallery.prism: the format and the
// normalisation), the writer lock (DIR/.lock) and the owner (DIR/.owner: GalleryOwner, defined in
// folder.cpp), reading one entry file as a reader without the lock does, and the I/O helpers the
// store's units share, their errors as GalleryError. How a write stays crash-safe around the
// entry files is pack_log.h's note.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "texture/gallery.h"

namespace prism::texture::store {

constexpr const char* kMarker = "gallery.prism";
constexpr const char* kMarkerText = "prism texture gallery, format 1\n";        // entry files only (older builds)
constexpr const char* kMarkerTextPacked = "prism texture gallery, format 2\n";  // entry files and pack.log
// Format 2 and a contrast normalisation (for poor light) on the next line, "normalise NAME": an older
// build refuses the gallery (unknown format) instead of extracting without it.
constexpr const char* kMarkerTextNormalised = "prism texture gallery, format 3\n";

// What the marker says: whether the gallery has a pack (format 2 or 3) and its normalisation.
struct Marker {
  bool packed = false;
  Normalisation normalisation;
};

// The marker text of a packed gallery with normalisation `n` (format 2 when none).
std::string marker_text(const Normalisation& n);

constexpr const char* kPack = "pack.log";
constexpr const char* kDirty = "pack.dirty";

std::string errno_text();
// A failed write's error, with its errno.
GalleryError write_error(const std::filesystem::path& path, const char* what);

// The shared durable-file helpers, their errors as GalleryError.
void write_atomically(const std::filesystem::path& tmp, const std::filesystem::path& final,
                      const std::vector<uint8_t>& bytes);
// A file the gallery reads: a FIFO, /dev/zero, ... is refused (it would be read forever).
std::vector<uint8_t> read_regular(const std::filesystem::path& path);
void fsync_dir(const std::filesystem::path& dir);

// A killed writer's unfinished file (entries/.tmp-ID-PID, .tmp-marker-PID).
bool is_temporary(const std::filesystem::path& p);

// An exclusive flock() on DIR/.lock for one write; also clears temporary files of killed writers.
// Unless this process owns the gallery, DIR/.owner is held shared for the write as well, so that
// no write passes an owner of another process (GalleryError naming it).
// With `wait` false it only tries: held() says whether it got the lock (a reader that may repair
// the pack; it never throws then, a read-only or owned gallery simply is not repaired).
class WriterLock {
 public:
  explicit WriterLock(const std::filesystem::path& dir, bool wait = true);
  ~WriterLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
    release_owner();
  }
  bool held() const { return fd_ >= 0; }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  void release_owner() {
    if (owner_fd_ >= 0) ::close(owner_fd_);
    owner_fd_ = -1;
  }
  int fd_ = -1, owner_fd_ = -1;
};

// Whether a gallery may be created in `dir`: it is absent or empty, or holds only what a creator
// killed before writing the marker leaves (entries/ with temporary files, .lock, temporary files,
// the empty pack).
bool fresh_folder(const std::filesystem::path& dir);

// The gallery's marker: format 1 (entry files only), 2 (and the pack) or 3 (2 and a normalisation).
Marker read_marker(const std::filesystem::path& dir);
void set_marker(const std::filesystem::path& dir, const std::string& t);

// entries/ID.tex read and checked as open() does; nullopt when it is not there (deleted since).
std::optional<GalleryEntry> read_entry_file(const std::filesystem::path& path);

}  // namespace prism::texture::store
