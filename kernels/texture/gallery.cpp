#include "texture/gallery.h"

#include "common/durable_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <exception>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <map>
#include <chrono>
#include <thread>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include <opencv2/core.hpp>

namespace prism::texture {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'P', 'R', 'I', 'S', 'M', 'T', 'E', 'X'};
constexpr uint32_t kVersion = 2;  // written; 1 (FP16 descriptors, no collection) is still read
constexpr const char* kMarker = "gallery.prism";
constexpr const char* kMarkerText = "prism texture gallery, format 1\n";        // entry files only (older builds)
constexpr const char* kMarkerTextPacked = "prism texture gallery, format 2\n";  // entry files and pack.log
// Format 2 and a contrast normalisation (issue 22) on the next line, "normalise NAME": an older
// build refuses the gallery (unknown format) instead of extracting without it.
constexpr const char* kMarkerTextNormalised = "prism texture gallery, format 3\n";

// What the marker says: whether the gallery has a pack (format 2 or 3) and its normalisation.
struct Marker {
  bool packed = false;
  Normalisation normalisation;
};

// The marker text of a packed gallery with normalisation `n` (format 2 when none).
std::string marker_text(const Normalisation& n) {
  if (n.kind == Normalisation::Kind::kNone) return kMarkerTextPacked;
  return std::string(kMarkerTextNormalised) + "normalise " + n.name() + "\n";
}
constexpr const char* kPack = "pack.log";
constexpr const char* kDirty = "pack.dirty";

struct Header {
  char magic[8];
  uint32_t version, dim, count, width, height, id_len, source_len;
  uint32_t collection_len;  // version 2; version 1 left these 4 bytes as alignment padding
  int64_t enrolled_unix;
};
static_assert(sizeof(Header) == 48, "packed header");
static_assert(sizeof(Keypoint) == 24, "packed keypoint");

std::string errno_text() { return std::strerror(errno); }
// A failed write's error, with its errno.
GalleryError write_error(const fs::path& path, const char* what) {
  const int err = errno;
  return GalleryError(path.string() + ": " + what + ": " + std::strerror(err), err);
}

// The shared durable-file helpers, their errors as GalleryError.
void write_atomically(const fs::path& tmp, const fs::path& final, const std::vector<uint8_t>& bytes) {
  try {
    prism::write_atomically(tmp, final, bytes, /*sync_directory=*/false);  // callers fsync once
  } catch (const FileError& e) {
    throw GalleryError(e.what(), e.error_number);
  }
}
// A file the gallery reads: a FIFO, /dev/zero, ... is refused (it would be read forever).
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

// A killed writer's unfinished file (entries/.tmp-ID-PID, .tmp-marker-PID).
bool is_temporary(const fs::path& p) { return p.filename().string().rfind(".tmp-", 0) == 0; }

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

// An exclusive flock() on DIR/.lock for one write; also clears temporary files of killed writers.
// Unless this process owns the gallery, DIR/.owner is held shared for the write as well, so that
// no write passes an owner of another process (GalleryError naming it).
// With `wait` false it only tries: held() says whether it got the lock (a reader that may repair
// the pack; it never throws then, a read-only or owned gallery simply is not repaired).
class WriterLock {
 public:
  explicit WriterLock(const fs::path& dir, bool wait = true) {
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

template <class T>
void append(std::vector<uint8_t>& out, const T* p, size_t count) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + count * sizeof(T));
}

// ---- The pack: DIR/pack.log and DIR/pack.dirty -------------------------------------------------

// pack.log starts with a 16-byte file header, then records back to back:
//   RecordHeader (24 bytes), the id, then the payload: a whole entry file (kPut) or nothing
//   (kDelete). The header's CRC-32 covers the header (crc field zero) and the id, so a reader can
//   walk the records by their headers alone; the payload is checked by the entry's own CRC-32.
constexpr char kPackMagic[8] = {'P', 'R', 'I', 'S', 'M', 'P', 'A', 'K'};
constexpr uint64_t kPackStart = 16;
enum RecordType : uint16_t { kPut = 1, kDelete = 2 };
struct RecordHeader {
  char magic[4];
  uint16_t type, id_len;
  uint64_t payload_len;
  uint32_t crc, zero;
};
static_assert(sizeof(RecordHeader) == 24, "packed record header");
constexpr char kRecordMagic[4] = {'P', 'R', 'E', 'C'};

std::vector<uint8_t> pack_file_header() {
  std::vector<uint8_t> h(kPackStart, 0);
  std::memcpy(h.data(), kPackMagic, 8);
  const uint32_t version = 1;
  std::memcpy(h.data() + 8, &version, 4);
  const uint32_t crc = crc32(h.data(), 12);
  std::memcpy(h.data() + 12, &crc, 4);
  return h;
}

uint32_t record_crc(RecordHeader h, const std::string& id) {
  h.crc = 0;
  std::vector<uint8_t> b(sizeof h + id.size());
  std::memcpy(b.data(), &h, sizeof h);
  std::memcpy(b.data() + sizeof h, id.data(), id.size());
  return crc32(b.data(), b.size());
}

// One record: `payload` is an entry file's bytes (a put) or null (a delete).
std::vector<uint8_t> make_record(const std::string& id, const std::vector<uint8_t>* payload) {
  RecordHeader h{};
  std::memcpy(h.magic, kRecordMagic, 4);
  h.type = payload ? kPut : kDelete;
  h.id_len = uint16_t(id.size());
  h.payload_len = payload ? payload->size() : 0;
  h.crc = record_crc(h, id);
  std::vector<uint8_t> out;
  out.reserve(sizeof h + id.size() + h.payload_len);
  append(out, &h, 1);
  append(out, id.data(), id.size());
  if (payload) append(out, payload->data(), payload->size());
  return out;
}
uint64_t record_size(const std::string& id, uint64_t payload) { return sizeof(RecordHeader) + id.size() + payload; }

// The size of an entry's file as encode() writes it (version 1 as read: FP16 descriptors).
uint64_t entry_file_size(const GalleryEntry& e) {
  return sizeof(Header) + e.id.size() + e.source.size() + (e.version == 1 ? 0 : e.collection.size()) +
         uint64_t(e.features.count()) * (sizeof(Keypoint) + (e.version == 1 ? 2 : 1) * match::kDim) + 4;
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  uint64_t size() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 ? uint64_t(st.st_size) : 0;
  }
  uint64_t inode() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 ? uint64_t(st.st_ino) : 0;
  }

 private:
  int fd_;
};

bool pread_all(int fd, uint64_t at, void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, off_t(at));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    at += uint64_t(r);
    n -= size_t(r);
  }
  return true;
}
void pwrite_all(int fd, uint64_t at, const std::vector<uint8_t>& bytes, const fs::path& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, off_t(at + done));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = ENOSPC;  // a write of 0 bytes: no room
    if (n <= 0) throw write_error(path, "write failed");
    done += size_t(n);
  }
}

// Where each id's latest record is, from walking the record headers (payloads are not read).
struct Rec {
  uint16_t type;
  uint64_t at, size;  // the record's offset and length
  uint64_t payload_at() const { return at + size - payload; }
  uint64_t payload;  // payload length
};
struct Scan {
  std::map<std::string, Rec> latest;
  uint64_t end = kPackStart;  // end of the last good record
  bool stopped = false;       // a bad or short record at `end`
  uint64_t live_bytes() const {
    uint64_t n = 0;
    for (const auto& [id, r] : latest) n += r.type == kPut ? r.size : 0;
    return n;
  }
};

// Asks the kernel to read [at, at + n) in the background (a hint: errors are of no consequence).
void prefetch(int fd, uint64_t at, uint64_t n) { ::posix_fadvise(fd, off_t(at), off_t(n), POSIX_FADV_WILLNEED); }

// Walks records from s.end to `size`; stops at the first record that is short or fails its checks.
// From a cold cache each header is one small read whose place is known only from the header before
// it: a chain of random reads (70 us each on the benchmark's disk: longer than reading the whole
// log sequentially; BENCHMARKS.md, issue 20). Records are mostly of one size (768 features), so the
// headers ahead are asked for at that stride, kPrefetchRecords at a time in the background; a wrong
// guess costs one page read, a right one turns the chain into queued reads.
constexpr uint64_t kPrefetchRecords = 64;
void scan_records(int fd, uint64_t size, Scan& s) {
  s.stopped = false;
  uint8_t buf[sizeof(RecordHeader) + 128];
  uint64_t guessed = 0;  // headers are asked for up to here
  while (s.end < size) {
    const uint64_t left = size - s.end;
    const size_t want = size_t(std::min<uint64_t>(sizeof buf, left));
    RecordHeader h;
    if (left < sizeof h || !pread_all(fd, s.end, buf, want)) break;
    std::memcpy(&h, buf, sizeof h);
    if (std::memcmp(h.magic, kRecordMagic, 4) != 0 || (h.type != kPut && h.type != kDelete) || h.id_len == 0 ||
        h.id_len > 128 || sizeof h + h.id_len > want || h.zero != 0)
      break;
    const std::string id(reinterpret_cast<const char*>(buf) + sizeof h, h.id_len);
    if (record_crc(h, id) != h.crc || h.payload_len > left - sizeof h - h.id_len) break;
    if (h.type == kDelete && h.payload_len != 0) break;
    const uint64_t n = sizeof h + h.id_len + h.payload_len;
    s.latest[id] = Rec{h.type, s.end, n, h.payload_len};
    s.end += n;
    if (n >= 4096) {  // smaller records share pages, and the kernel's readahead sees sequential reads
      if (guessed <= s.end) guessed = s.end;
      for (; guessed < std::min(size, s.end + kPrefetchRecords * n); guessed += n) prefetch(fd, guessed, sizeof buf);
    }
  }
  s.stopped = s.end < size;
}

bool pack_header_ok(int fd) {
  uint8_t h[kPackStart];
  const std::vector<uint8_t> want = pack_file_header();
  return pread_all(fd, 0, h, sizeof h) && std::memcmp(h, want.data(), sizeof h) == 0;
}

// DIR/pack.dirty: the write in flight ("ID OFFSET INODE\n"): its id, where its record begins, and
// which pack.log that offset is in (a rebuild replaces the file; an offset into the old one must
// not cut the new one).
struct Dirty {
  bool present = false, valid = false;
  std::string id;
  uint64_t offset = 0, inode = 0;
  bool torn_tail_at(uint64_t at, uint64_t pack_inode) const { return valid && inode == pack_inode && offset <= at; }
};
Dirty read_dirty(const fs::path& dir) {
  // Writers replace the marker atomically and remove it when done, so a read can lose a race with
  // both: removed meanwhile (nothing in flight), or removed and written anew by the next write
  // (read again). Only a marker that stays unreadable is reported as such.
  for (int attempt = 0;; ++attempt) {
    Dirty d;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(dir / kDirty, ec))) return d;
    d.present = true;
    try {
      const std::vector<uint8_t> b = read_file(dir / kDirty);
      std::istringstream in(std::string(b.begin(), b.end()));
      std::string rest;
      d.valid =
          bool(in >> d.id >> d.offset >> d.inode) && valid_product_id(d.id) && !(in >> rest) && d.offset >= kPackStart;
      return d;
    } catch (const FileError&) {
      d.present = fs::exists(fs::symlink_status(dir / kDirty, ec));
      if (!d.present || attempt == 4) return d;
    }
  }
}

// Rewrites DIR/pack.log from `records` (id -> record bytes, written in id order) through a
// temporary file, fsync and rename; the lock is held.
void write_pack(const fs::path& dir,
                const std::function<void(const std::function<void(const std::vector<uint8_t>&)>&)>& each) {
  const fs::path tmp = dir / (".tmp-pack-" + std::to_string(::getpid()));
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw write_error(tmp, "cannot create");
  uint64_t at = 0;
  auto put = [&](const std::vector<uint8_t>& bytes) {
    pwrite_all(fd.get(), at, bytes, tmp);
    at += bytes.size();
  };
  try {
    put(pack_file_header());
    each(put);
    if (::fsync(fd.get()) != 0) throw write_error(tmp, "fsync failed");
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), (dir / kPack).c_str()) != 0) {
    const GalleryError e = write_error(dir / kPack, "rename failed");
    ::unlink(tmp.c_str());
    throw e;
  }
  fsync_dir(dir);
}

// The gallery's marker: format 1 (entry files only), 2 (and the pack) or 3 (2 and a normalisation).
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

// The pack built anew from the entry files, as they are (bytes copied, not decoded: a damaged entry
// is still the reader's to refuse, and a writer can still repair it); the lock is held. Files that
// are not entries or cannot be read are left out: readers find them by the listing and refuse them.
// Then the marker says format 2 and nothing is in flight.
void rebuild_pack(const fs::path& dir) {
  std::vector<std::string> ids;
  for (const auto& de : fs::directory_iterator(dir / "entries")) {
    const fs::path& p = de.path();
    if (!is_temporary(p) && p.extension() == ".tex" && valid_product_id(p.stem().string()))
      ids.push_back(p.stem().string());
  }
  std::sort(ids.begin(), ids.end());
  write_pack(dir, [&](const std::function<void(const std::vector<uint8_t>&)>& put) {
    for (const std::string& id : ids) {
      std::vector<uint8_t> bytes;
      try {
        bytes = read_file(dir / "entries" / (id + ".tex"));
      } catch (const FileError&) {
        continue;
      }
      put(make_record(id, &bytes));
    }
  });
  if (!read_marker(dir).packed) set_marker(dir, kMarkerTextPacked);  // format 1 had no normalisation
  ::unlink((dir / kDirty).c_str());
}

// Appends `record` at `at` (the end of the log) and fdatasyncs it.
void append_record(const fs::path& dir, uint64_t at, const std::vector<uint8_t>& record) {
  const fs::path path = dir / kPack;
  Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) throw write_error(path, "cannot open");
  if (fd.size() != at && ::ftruncate(fd.get(), off_t(at)) != 0) throw write_error(path, "cannot truncate");
  pwrite_all(fd.get(), at, record, path);
  if (::fdatasync(fd.get()) != 0) throw write_error(path, "fdatasync failed");
}

// The record that makes the pack agree with entries/ID.tex as it is now.
std::vector<uint8_t> record_from_file(const fs::path& dir, const std::string& id) {
  const fs::path path = dir / "entries" / (id + ".tex");
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return make_record(id, nullptr);
  const std::vector<uint8_t> bytes = read_regular(path);
  return make_record(id, &bytes);
}

// Before a write, with the lock held: a pack the gallery can append to. A gallery without one (an
// older build's, or pack.log lost) gets one built; a write that died in flight (pack.dirty left)
// is finished in O(1): the log is cut back to where that write began appending and the record of
// its id is appended from its entry file as it is (old or new: the write was never acknowledged).
// Returns the log's size and inode.
std::pair<uint64_t, uint64_t> prepare_pack(const fs::path& dir) {
  const bool packed = read_marker(dir).packed;
  const Dirty d = read_dirty(dir);
  {
    Fd fd(::open((dir / kPack).c_str(), O_RDONLY | O_CLOEXEC));
    if (packed && fd.get() >= 0 && pack_header_ok(fd.get())) {
      const uint64_t size = fd.size(), inode = fd.inode();
      if (!d.present) return {size, inode};
      if (d.valid) {
        // Its record may be torn: cut back to where it began, unless the log was rebuilt since
        // (then it holds no torn record, and the id's record goes at the end).
        const uint64_t at = d.inode == inode && d.offset <= size ? d.offset : size;
        const std::vector<uint8_t> record = record_from_file(dir, d.id);
        append_record(dir, at, record);
        ::unlink((dir / kDirty).c_str());  // a marker that reappears after a crash costs one more recovery
        return {at + record.size(), inode};
      }
    }
  }
  rebuild_pack(dir);
  Fd fd(::open((dir / kPack).c_str(), O_RDONLY | O_CLOEXEC));
  return {fd.size(), fd.inode()};
}

// With the lock held and nothing in flight: rewrites pack.log with only its live records, sorted by
// id, when more than half of it is dead. Returns whether it did.
bool compact_pack(const fs::path& dir) {
  if (read_dirty(dir).present) return false;  // its offset would point into the old file
  fsync_dir(dir);                             // pack.dirty's removal durable before the rename
  Fd fd(::open((dir / kPack).c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 || !pack_header_ok(fd.get())) return false;
  Scan s;
  scan_records(fd.get(), fd.size(), s);
  const uint64_t live = s.live_bytes(), dead = s.end - kPackStart - live;
  if (s.stopped || dead <= live) return false;
  write_pack(dir, [&](const std::function<void(const std::vector<uint8_t>&)>& put) {
    std::vector<uint8_t> buf;
    for (const auto& [id, r] : s.latest) {
      if (r.type != kPut) continue;
      buf.resize(r.size);
      if (!pread_all(fd.get(), r.at, buf.data(), buf.size()))
        throw GalleryError((dir / kPack).string() + ": cannot read: " + errno_text());
      put(buf);
    }
  });
  return true;
}

}  // namespace

bool valid_collection(const std::string& c) { return c.empty() || valid_product_id(c); }

bool valid_product_id(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.' || id[0] == '-') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

std::vector<uint8_t> Gallery::encode(const GalleryEntry& e) {
  const Features& f = e.features;
  if (f.descriptors.size() != size_t(f.count()) * match::kDim)
    throw GalleryError("entry '" + e.id + "': descriptor and keypoint counts disagree");
  if (f.count() > match::kSlot) throw GalleryError("entry '" + e.id + "': more than 768 features");
  if (!valid_collection(e.collection))
    throw GalleryError("entry '" + e.id + "': invalid collection '" + e.collection + "'");
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.dim = match::kDim;
  h.count = uint32_t(f.count());
  h.width = uint32_t(f.width);
  h.height = uint32_t(f.height);
  h.id_len = uint32_t(e.id.size());
  h.source_len = uint32_t(e.source.size());
  h.collection_len = uint32_t(e.collection.size());
  h.enrolled_unix = e.enrolled_unix;
  std::vector<uint8_t> out;
  out.reserve(sizeof(Header) + e.id.size() + e.source.size() + e.collection.size() +
              f.keypoints.size() * sizeof(Keypoint) + f.descriptors.size() + 4);
  append(out, &h, 1);
  append(out, e.id.data(), e.id.size());
  append(out, e.source.data(), e.source.size());
  append(out, e.collection.data(), e.collection.size());
  append(out, f.keypoints.data(), f.keypoints.size());
  append(out, f.descriptors.data(), f.descriptors.size());
  const uint32_t crc = crc32(out.data(), out.size());
  append(out, &crc, 1);
  return out;
}

GalleryEntry Gallery::decode(const std::vector<uint8_t>& bytes, const std::string& file) {
  auto corrupt = [&](const std::string& why) { return GalleryError(file + ": corrupt gallery entry: " + why); };
  if (bytes.size() < sizeof(Header) + 4) throw corrupt("truncated (" + std::to_string(bytes.size()) + " bytes)");
  Header h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, 8) != 0) throw corrupt("not a Prism texture entry (bad magic)");
  if (h.version != 1 && h.version != kVersion)
    throw corrupt("format version " + std::to_string(h.version) + ", this build reads 1 and 2");
  const bool v1 = h.version == 1;
  if (v1) h.collection_len = 0;  // padding in version 1
  if (h.dim != uint32_t(match::kDim) || h.count > uint32_t(match::kSlot) || h.id_len > 128 || h.source_len > 65536 ||
      h.collection_len > 128)
    throw corrupt("impossible header values");
  // Features::width and height are ints: a size beyond them would come back negative.
  if (h.width > uint32_t(INT32_MAX) || h.height > uint32_t(INT32_MAX))
    throw corrupt("image size " + std::to_string(h.width) + " x " + std::to_string(h.height) + " is impossible");
  const size_t descriptor_bytes = v1 ? 2 : 1;  // FP16 in version 1, uint8 in version 2
  const size_t expect = sizeof(Header) + h.id_len + h.source_len + h.collection_len +
                        size_t(h.count) * (sizeof(Keypoint) + descriptor_bytes * match::kDim) + 4;
  if (bytes.size() != expect)
    throw corrupt("size " + std::to_string(bytes.size()) + " bytes, header says " + std::to_string(expect));
  uint32_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  if (crc32(bytes.data(), bytes.size() - 4) != stored) throw corrupt("CRC-32 mismatch");
  GalleryEntry e;
  const uint8_t* p = bytes.data() + sizeof(Header);
  e.id.assign(reinterpret_cast<const char*>(p), h.id_len);
  p += h.id_len;
  e.source.assign(reinterpret_cast<const char*>(p), h.source_len);
  p += h.source_len;
  e.collection.assign(reinterpret_cast<const char*>(p), h.collection_len);
  p += h.collection_len;
  if (!valid_collection(e.collection)) throw corrupt("invalid collection '" + e.collection + "'");
  e.enrolled_unix = h.enrolled_unix;
  e.version = int(h.version);
  e.features.width = int(h.width);
  e.features.height = int(h.height);
  if (h.count == 0) return e;  // an entry enrolled before kMinFeatures; memcpy takes no null pointer
  e.features.keypoints.resize(h.count);
  std::memcpy(e.features.keypoints.data(), p, h.count * sizeof(Keypoint));
  p += h.count * sizeof(Keypoint);
  e.features.descriptors.resize(size_t(h.count) * match::kDim);
  if (v1) {  // FP16 RootSIFT: converted as if it had been quantised from the float (match::half_to_u8)
    for (size_t i = 0; i < e.features.descriptors.size(); ++i) {
      uint16_t half;
      std::memcpy(&half, p + 2 * i, 2);
      e.features.descriptors[i] = match::half_to_u8(half);
    }
  } else {
    std::memcpy(e.features.descriptors.data(), p, e.features.descriptors.size());
  }
  return e;
}

namespace {

// entries/ID.tex read and checked as open() does; nullopt when it is not there (deleted since).
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

using EntrySink = std::function<void(GalleryEntry&&)>;

struct PackRead {
  Gallery::ReadSummary summary;
  uint64_t live = 0, total = 0;
  bool stale_dirty = false;          // pack.dirty was left by a writer that is gone
  std::vector<std::string> damaged;  // ids whose pack record was damaged (read from their entry file)
};

// Reads the gallery through its pack, or returns nullopt (before passing on any entry) when the
// pack cannot be trusted: absent, a bad file header, a bad record that is not a write's torn tail,
// an unreadable pack.dirty. `why` says which.
std::optional<PackRead> read_pack(const fs::path& dir, const EntrySink& sink, std::string& why) {
  const fs::path path = dir / kPack;
  const Dirty d0 = read_dirty(dir);
  if (d0.present && !d0.valid) {
    why = (dir / kDirty).string() + ": unreadable";
    return std::nullopt;
  }
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    why = path.string() + ": cannot open: " + errno_text();
    return std::nullopt;
  }
  if (!pack_header_ok(fd.get())) {
    why = path.string() + ": not a pack (bad file header)";
    return std::nullopt;
  }
  Scan s;
  scan_records(fd.get(), fd.size(), s);
  std::set<std::string> from_files;  // ids taken from their entry files
  if (d0.present) from_files.insert(d0.id);
  // A bad record at the end is the torn tail of a write in flight (or of a writer killed in it)
  // when pack.dirty says that write began appending at or before it. Otherwise a writer may have
  // finished that record since we read it (its pack.dirty is gone then): read it again.
  for (int attempt = 0; s.stopped; ++attempt) {
    const Dirty d1 = read_dirty(dir);
    if (d1.present && d1.valid) from_files.insert(d1.id);
    if (d0.torn_tail_at(s.end, fd.inode()) || d1.torn_tail_at(s.end, fd.inode())) break;
    if (attempt == 3) {
      why = path.string() + ": damaged record at byte " + std::to_string(s.end);
      return std::nullopt;
    }
    scan_records(fd.get(), fd.size(), s);
  }
  // Files added or removed behind the gallery's back (copied in by hand, a stray file, an entry
  // written by an older build): the listing and the pack disagree on them, and the files decide.
  std::set<std::string> listed;
  for (const fs::path& f : Gallery::list_entry_files(dir)) listed.insert(f.stem().string());
  for (const std::string& id : listed) {
    auto it = s.latest.find(id);
    if (it == s.latest.end() || it->second.type != kPut) from_files.insert(id);
  }
  for (const auto& [id, r] : s.latest)
    if (r.type == kPut && !listed.count(id)) from_files.insert(id);

  PackRead out;
  out.total = s.end - kPackStart;
  out.live = s.live_bytes();
  out.stale_dirty = d0.present;
  // The work in id order: a pack record, or an entry file where the files decide.
  struct Item {
    const std::string* id;
    const Rec* record;  // null: the entry file
  };
  std::vector<Item> items;
  items.reserve(s.latest.size() + from_files.size());
  auto f = from_files.begin();
  for (auto it = s.latest.begin(); it != s.latest.end() || f != from_files.end();) {
    if (f != from_files.end() && (it == s.latest.end() || *f <= it->first)) {  // both in id order: merge
      if (it != s.latest.end() && *f == it->first) ++it;
      items.push_back({&*f++, nullptr});
      continue;
    }
    const auto& [id, r] = *it++;
    if (r.type == kPut) items.push_back({&id, &r});
  }
  // One item read and decoded; a damaged record falls back to its entry file, with that file's errors.
  // The largest entry decode() takes (version 1's FP16 descriptors): a record claiming more is
  // damaged, and is not read into a buffer of its claimed size.
  constexpr uint64_t kMaxEntryBytes =
      sizeof(Header) + 128 + 65536 + 128 + uint64_t(match::kSlot) * (sizeof(Keypoint) + 2 * match::kDim) + 4;
  std::mutex damaged_mutex;
  auto load = [&](const Item& item, std::vector<uint8_t>& buf) -> std::optional<GalleryEntry> {
    if (item.record && item.record->payload <= kMaxEntryBytes) {
      buf.resize(item.record->payload);
      if (pread_all(fd.get(), item.record->payload_at(), buf.data(), buf.size())) {
        try {
          GalleryEntry e = Gallery::decode(buf, path.string() + " (record of '" + *item.id + "')");
          if (e.id == *item.id) return e;
        } catch (const GalleryError&) {
        }
      }
    }
    if (item.record) {  // one copy lost: said, and repaired by the caller (issue 41.7)
      std::lock_guard lock(damaged_mutex);
      out.damaged.push_back(*item.id);
    }
    return read_entry_file(dir / "entries" / (*item.id + ".tex"));
  };
  // Batches are read and decoded (the CRC-32 is most of the CPU work) on OpenCV's threads, then
  // passed on in id order; the next kPrefetchBytes of payloads are asked for in the background so
  // that the disk works meanwhile. The kernel's readahead only follows reads it sees as sequential:
  // a pack compacted or rebuilt in id order, not records appended in enrolment order.
  constexpr uint64_t kPrefetchBytes = uint64_t(64) << 20;
  constexpr size_t kBatch = 128;  // about 15 MB of 768-feature entries in flight
  struct Loaded {
    std::optional<GalleryEntry> entry;
    std::exception_ptr error;
  };
  std::vector<Loaded> loaded;
  size_t ahead = 0;
  uint64_t ahead_bytes = 0;  // asked for and not yet read
  for (size_t b0 = 0; b0 < items.size(); b0 += kBatch) {
    const size_t b1 = std::min(items.size(), b0 + kBatch);
    for (size_t i = b0; i < b1; ++i)
      if (items[i].record) ahead_bytes -= std::min(ahead_bytes, items[i].record->payload);
    for (ahead = std::max(ahead, b1); ahead < items.size() && ahead_bytes < kPrefetchBytes; ++ahead)
      if (const Rec* r = items[ahead].record) {
        prefetch(fd.get(), r->payload_at(), r->payload);
        ahead_bytes += r->payload;
      }
    loaded.assign(b1 - b0, Loaded{});
    cv::parallel_for_(cv::Range(int(b0), int(b1)), [&](const cv::Range& range) {
      std::vector<uint8_t> buf;
      for (int i = range.start; i < range.end; ++i) try {
          loaded[size_t(i) - b0].entry = load(items[size_t(i)], buf);
        } catch (...) {
          loaded[size_t(i) - b0].error = std::current_exception();
        }
    });
    for (Loaded& l : loaded) {  // in id order, the first error as a serial read would meet it
      if (l.error) std::rethrow_exception(l.error);
      if (!l.entry) continue;  // deleted since the listing
      ++out.summary.entries;
      sink(std::move(*l.entry));
    }
  }
  out.summary.from_pack = true;
  return out;
}

// Any read: through the pack when it can be trusted; otherwise the pack is rebuilt first when the
// lock is free (then read), or the entry files are read one by one. Afterwards a reader that can
// take the lock finishes a dead writer's write and compacts a pack more than half dead.
PackRead read_gallery(const fs::path& dir, const EntrySink& sink) {
  std::string why;
  std::optional<PackRead> r;
  if (read_marker(dir).packed) {
    r = read_pack(dir, sink, why);
  } else {
    why = (dir / kMarker).string() + ": format 1, no pack yet";
  }
  std::string note;
  if (!r) {
    bool rebuilt = false;
    try {
      WriterLock lock(dir, /*wait=*/false);
      if (lock.held()) {
        rebuild_pack(dir);
        rebuilt = true;
      }
    } catch (const GalleryError&) {  // a read-only gallery: read the files instead
    } catch (const fs::filesystem_error&) {
    }
    std::string again;
    if (rebuilt) r = read_pack(dir, sink, again);
    if (r) {
      r->summary.note = why + "; rebuilt the pack from the entry files";
      return *r;
    }
    PackRead files;
    std::vector<fs::path> list = Gallery::list_entry_files(dir);
    std::sort(list.begin(), list.end());
    for (const fs::path& p : list)
      if (std::optional<GalleryEntry> e = read_entry_file(p)) {
        ++files.summary.entries;
        sink(std::move(*e));
      }
    files.summary.note = why + "; read the entry files one by one";
    return files;
  }
  if (!r->damaged.empty()) {
    // Their entry files were good (or the read would have failed): each gets a fresh record from
    // its file appended (the latest record of an id is the one read), so that the second copy is
    // back, when the lock is free; the note names what was lost. Not a rebuild of the whole pack:
    // that would copy every entry file's bytes, and one damaged there (whose record is intact,
    // unnoticed by this read) would then have no good copy left.
    std::sort(r->damaged.begin(), r->damaged.end());
    std::string ids;
    for (size_t i = 0; i < r->damaged.size() && i < 5; ++i) ids += (i ? ", '" : "'") + r->damaged[i] + "'";
    if (r->damaged.size() > 5) ids += " and " + std::to_string(r->damaged.size() - 5) + " more";
    r->summary.damaged_copies = r->damaged.size();
    r->summary.note = std::to_string(r->damaged.size()) + " damaged record" + (r->damaged.size() > 1 ? "s" : "") +
                      " in " + (dir / kPack).string() + " (" + ids + "): read from the entry files";
    try {
      WriterLock lock(dir, /*wait=*/false);
      if (lock.held()) {
        uint64_t at = prepare_pack(dir).first;
        for (const std::string& id : r->damaged) {
          if (!read_entry_file(dir / "entries" / (id + ".tex"))) continue;  // deleted meanwhile
          const std::vector<uint8_t> record = record_from_file(dir, id);
          append_record(dir, at, record);
          at += record.size();
        }
        r->summary.note += "; wrote their records again";
        return *r;
      }
    } catch (const GalleryError&) {
    } catch (const fs::filesystem_error&) {
    }
    r->summary.note += " (written again by the next reader that can take the gallery's lock)";
    return *r;
  }
  if (r->stale_dirty || r->total - r->live > r->live) {
    try {
      WriterLock lock(dir, /*wait=*/false);
      if (lock.held()) {
        if (r->stale_dirty) {
          prepare_pack(dir);
          r->summary.note = "finished the pack record of a write that was interrupted";
        }
        if (compact_pack(dir))
          r->summary.note += std::string(r->summary.note.empty() ? "" : "; ") + "compacted " + kPack;
      }
    } catch (const GalleryError&) {
    } catch (const fs::filesystem_error&) {
    }
  }
  return *r;
}

}  // namespace

Gallery Gallery::open(const fs::path& dir, bool create, Load load, const Normalisation& normalisation) {
  Gallery g;
  g.dir_ = dir;
  std::error_code ec;
  const fs::path marker = dir / kMarker;
  if (!fs::exists(marker, ec)) {
    if (!create && !fs::exists(dir, ec)) throw GalleryError(dir.string() + ": no such gallery directory");
    if (!create) throw GalleryError(dir.string() + ": not a Prism texture gallery (no " + kMarker + ")");
    if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw GalleryError(dir.string() + ": not a directory");
    // Checked before anything is written: a folder of other files is left exactly as it was.
    if (!fresh_folder(dir))
      throw GalleryError(dir.string() + ": not a Prism texture gallery and not empty; choose a new or empty folder");
    fs::create_directories(dir / "entries", ec);
    if (ec) throw GalleryError(dir.string() + ": cannot create: " + ec.message());
    WriterLock lock(dir);
    // Checked again under the lock: another creator may have passed the checks above at the same
    // time and written its marker (its normalisation) while this one waited. Then the gallery is
    // theirs, and this open goes on as the open of an existing gallery (the caller compares its
    // normalisation, as for any existing gallery); writing ours now would relabel their entries.
    if (!fs::exists(marker, ec)) {
      if (!fresh_folder(dir))
        throw GalleryError(dir.string() + ": not a Prism texture gallery and not empty; choose a new or empty folder");
      write_pack(dir, [](const std::function<void(const std::vector<uint8_t>&)>&) {});  // empty, before the marker
      set_marker(dir, marker_text(normalisation));
      g.normalisation_ = normalisation;
      return g;
    }
  }
  g.normalisation_ = read_marker(dir).normalisation;
  const fs::path entries = dir / "entries";
  if (!fs::is_directory(entries, ec)) throw GalleryError(entries.string() + ": missing");
  if (load == Load::kEntries) {
    const PackRead r = read_gallery(dir, [&](GalleryEntry&& e) { g.entries_.push_back(std::move(e)); });
    g.pack_note_ = r.summary.note;
    g.pack_live_ = r.live;
    g.pack_total_ = r.total;
  }
  return g;
}

Normalisation Gallery::read_normalisation(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / kMarker, ec)) {
    if (!fs::exists(dir, ec)) throw GalleryError(dir.string() + ": no such gallery directory");
    throw GalleryError(dir.string() + ": not a Prism texture gallery (no " + kMarker + ")");
  }
  return read_marker(dir).normalisation;
}

bool Gallery::exists(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / kMarker, ec);
}

bool Gallery::renormalise_if_empty(const fs::path& dir, const Normalisation& normalisation) {
  read_normalisation(dir);  // a gallery at all, with a readable marker
  WriterLock lock(dir);
  // The entry files decide what a gallery holds (a pack record without its file is not read).
  if (!list_entry_files(dir).empty()) return false;
  if (read_marker(dir).normalisation != normalisation) set_marker(dir, marker_text(normalisation));
  return true;
}

Gallery::ReadSummary Gallery::for_each_entry(const fs::path& dir, const std::function<void(GalleryEntry&&)>& on_entry) {
  std::error_code ec;
  if (!fs::exists(dir / kMarker, ec)) {
    if (!fs::exists(dir, ec)) throw GalleryError(dir.string() + ": no such gallery directory");
    throw GalleryError(dir.string() + ": not a Prism texture gallery (no " + kMarker + ")");
  }
  if (!fs::is_directory(dir / "entries", ec)) throw GalleryError((dir / "entries").string() + ": missing");
  return read_gallery(dir, on_entry).summary;
}

std::vector<fs::path> Gallery::list_entry_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& de : fs::directory_iterator(dir / "entries")) {
    if (is_temporary(de.path())) continue;
    if (de.path().extension() != ".tex" || !valid_product_id(de.path().stem().string()))
      throw GalleryError(de.path().string() + ": unexpected file in the gallery");
    files.push_back(de.path());
  }
  return files;
}

std::vector<GalleryEntry> Gallery::read_entries(const std::vector<fs::path>& files) {
  std::vector<GalleryEntry> out;
  for (const fs::path& path : files)
    if (std::optional<GalleryEntry> e = read_entry_file(path)) out.push_back(std::move(*e));
  std::sort(out.begin(), out.end(), [](const GalleryEntry& a, const GalleryEntry& b) { return a.id < b.id; });
  return out;
}

const GalleryEntry* Gallery::find(const std::string& id) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                             [](const GalleryEntry& e, const std::string& k) { return e.id < k; });
  return it != entries_.end() && it->id == id ? &*it : nullptr;
}

fs::path Gallery::entry_path(const std::string& id) const { return dir_ / "entries" / (id + ".tex"); }

void Gallery::commit_locked(const std::string& id, const std::vector<uint8_t>* bytes, uint64_t old_bytes) {
  const auto [at, inode] = prepare_pack(dir_);
  // 1. pack.dirty, durable before the entry file changes: from here until it is removed the pack
  //    and the entry files may differ in this id, and every reader knows it.
  const std::string dirty = id + " " + std::to_string(at) + " " + std::to_string(inode) + "\n";
  write_atomically(dir_ / (".tmp-dirty-" + std::to_string(::getpid())), dir_ / kDirty,
                   std::vector<uint8_t>(dirty.begin(), dirty.end()));
  fsync_dir(dir_);
  // 2. the entry file, as without a pack. What it held before is kept: a write that throws (a full
  //    disk) puts it back below, so that an error means "not written", also after a restart.
  const fs::path final = entry_path(id);
  const fs::path tmp = dir_ / "entries" / (".tmp-" + id + "-" + std::to_string(::getpid()));
  std::error_code ec;
  std::optional<std::vector<uint8_t>> before;
  if (fs::exists(fs::symlink_status(final, ec))) before = read_regular(final);
  if (bytes) {
    write_atomically(tmp, final, *bytes);
  } else if (::unlink(final.c_str()) != 0) {
    throw write_error(final, "cannot delete");
  }
  // 3. the record, durable; 4. nothing in flight any more (not fsynced: a marker that comes back
  //    after a crash costs one O(1) recovery).
  const std::vector<uint8_t> record = make_record(id, bytes);
  try {
    fsync_dir(dir_ / "entries");
    append_record(dir_, at, record);
  } catch (const GalleryError&) {
    // pack.dirty stays: the next writer cuts the log back to `at` and records the entry file as it
    // is then, which is the old one when it could be put back (else the new one, never acknowledged).
    try {
      if (before)
        write_atomically(tmp, final, *before);
      else
        ::unlink(final.c_str());
      fsync_dir(dir_ / "entries");
    } catch (const GalleryError&) {
    }
    throw;
  }
  ::unlink((dir_ / kDirty).c_str());
  if (pack_total_ > 0) {  // what this object knows of the log: compact when more than half is dead
    pack_total_ += record.size();
    pack_live_ += (bytes ? record.size() : 0);
    pack_live_ -= std::min(pack_live_, old_bytes ? record_size(id, old_bytes) : 0);
    // The write is done and durable: a compaction that fails (no room for the new log) leaves the
    // log as it is, to be compacted by a later write.
    try {
      if (pack_total_ - pack_live_ > pack_live_ && compact_pack(dir_)) pack_total_ = pack_live_;
    } catch (const GalleryError&) {
    }
  }
}

bool GalleryError::disk_full() const { return error_number == ENOSPC || error_number == EDQUOT; }

void Gallery::check_entry(const GalleryEntry& entry) {
  if (!valid_product_id(entry.id))
    throw GalleryError("invalid product id '" + entry.id + "' (1..128 of A-Z a-z 0-9 . _ -, not starting with . or -)");
  if (!valid_collection(entry.collection))
    throw GalleryError("invalid collection '" + entry.collection +
                       "' (1..128 of A-Z a-z 0-9 . _ -, not starting with . or -; empty for none)");
  if (entry.features.count() < kMinFeatures)
    throw GalleryError((entry.source.empty() ? "product '" + entry.id + "'" : entry.source) + ": " +
                       std::to_string(entry.features.count()) + " features (product '" + entry.id + "'); at least " +
                       std::to_string(kMinFeatures) + " are needed to identify it (a flat, blank or tiny image?)");
}

void Gallery::write_entry(GalleryEntry entry, Write mode) {
  check_entry(entry);
  if (entry.enrolled_unix == 0) entry.enrolled_unix = int64_t(std::time(nullptr));
  const std::vector<uint8_t> bytes = encode(entry);
  entry.version = int(kVersion);
  WriterLock lock(dir_);
  const fs::path final = entry_path(entry.id);
  const bool exists = fs::exists(final);
  if (mode == Write::kAdd && exists)
    throw GalleryConflict("product '" + entry.id + "' is already enrolled: to replace it, `prism texture update --id " +
                          entry.id + " IMAGE` (or enroll --update); to skip it, leave it out");
  if (mode == Write::kUpdate && !exists) throw GalleryError("product '" + entry.id + "' is not enrolled");
  auto it = std::lower_bound(entries_.begin(), entries_.end(), entry.id,
                             [](const GalleryEntry& e, const std::string& k) { return e.id < k; });
  const bool known = it != entries_.end() && it->id == entry.id;
  commit_locked(entry.id, &bytes, known ? entry_file_size(*it) : 0);
  if (known)
    *it = std::move(entry);
  else
    entries_.insert(it, std::move(entry));
}

namespace {
// The payload of `id`'s latest record in DIR/pack.log (its entry file's bytes), or nullopt: no
// pack, a delete, a write of that id in flight, or a record that cannot be read.
std::optional<std::vector<uint8_t>> pack_copy(const fs::path& dir, const std::string& id) {
  const Dirty d = read_dirty(dir);
  if (d.present && (!d.valid || d.id == id)) return std::nullopt;
  Fd fd(::open((dir / kPack).c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 || !pack_header_ok(fd.get())) return std::nullopt;
  Scan s;
  scan_records(fd.get(), fd.size(), s);
  const auto it = s.latest.find(id);
  if (it == s.latest.end() || it->second.type != kPut) return std::nullopt;
  std::vector<uint8_t> bytes(it->second.payload);
  if (!pread_all(fd.get(), it->second.payload_at(), bytes.data(), bytes.size())) return std::nullopt;
  return bytes;
}
}  // namespace

GalleryEntry Gallery::read_entry(const std::string& id, std::string* note) const {
  if (!valid_product_id(id)) throw GalleryError("invalid product id '" + id + "'");
  const fs::path path = entry_path(id);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) throw GalleryError("product '" + id + "' is not enrolled");
  try {
    GalleryEntry e = decode(read_regular(path), path.string());
    if (e.id != id) throw GalleryError(path.string() + ": corrupt gallery entry: holds id '" + e.id + "'");
    return e;
  } catch (const GalleryError& damaged) {
    // The second copy, the id's record in the pack (issue 41.7: a damaged entry file went unseen
    // while the pack served it): read from there when intact, and the file written again from it
    // when the lock is free, so that both copies are back; the note says which.
    if (!fs::exists(fs::symlink_status(path, ec))) throw GalleryError("product '" + id + "' is not enrolled");
    const std::optional<std::vector<uint8_t>> copy = pack_copy(dir_, id);
    if (!copy) throw;
    GalleryEntry e;
    try {
      e = decode(*copy, (dir_ / kPack).string() + " ('" + id + "')");
    } catch (const GalleryError&) {
      throw damaged;  // both copies lost
    }
    if (e.id != id) throw damaged;
    std::string said = std::string(damaged.what()) + ": read from its copy in " + (dir_ / kPack).string();
    try {
      WriterLock lock(dir_, /*wait=*/false);
      if (lock.held() && pack_copy(dir_, id) == copy) {  // not rewritten meanwhile
        write_atomically(dir_ / "entries" / (".tmp-" + id + "-" + std::to_string(::getpid())), path, *copy);
        fsync_dir(dir_ / "entries");
        said += "; wrote the entry file again";
      } else {
        said += " (written again by a later read that can take the gallery's lock)";
      }
    } catch (const GalleryError& e2) {
      said += std::string("; could not write it again: ") + e2.what();
    }
    if (note) *note = said;
    return e;
  }
}

int Gallery::migrate(const std::function<void(const std::string&, bool)>& on_entry) {
  int migrated = 0;
  for (const fs::path& path : list_entry_files(dir_)) {
    const std::string id = path.stem().string();
    bool rewritten = false;
    {
      WriterLock lock(dir_);  // per entry: other writers interleave, each entry is one atomic step
      std::vector<uint8_t> bytes;
      try {
        bytes = read_regular(path);
      } catch (const GalleryError&) {
        std::error_code ec;
        if (!fs::exists(fs::symlink_status(path, ec))) continue;  // deleted since the listing
        throw;
      }
      GalleryEntry e = decode(bytes, path.string());
      if (e.version == 1) {
        e.version = kVersion;
        const std::vector<uint8_t> v2 = encode(e);
        commit_locked(id, &v2, bytes.size());
        rewritten = true;
        ++migrated;
        auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                                   [](const GalleryEntry& x, const std::string& k) { return x.id < k; });
        if (it != entries_.end() && it->id == id) it->version = kVersion;
      }
    }
    if (on_entry) on_entry(id, rewritten);
  }
  return migrated;
}

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

void Gallery::add(GalleryEntry entry) { write_entry(std::move(entry), Write::kAdd); }
void Gallery::update(GalleryEntry entry) { write_entry(std::move(entry), Write::kUpdate); }

void Gallery::remove(const std::string& id) {
  if (!valid_product_id(id)) throw GalleryError("invalid product id '" + id + "'");
  WriterLock lock(dir_);
  const fs::path final = entry_path(id);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(final, ec))) throw GalleryError("product '" + id + "' is not enrolled");
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const GalleryEntry& e) { return e.id == id; });
  commit_locked(id, nullptr, it != entries_.end() ? entry_file_size(*it) : 0);
  if (it != entries_.end()) entries_.erase(it);
}

}  // namespace prism::texture
