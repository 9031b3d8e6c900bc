#include "texture/gallery/pack_log.h"

#include "common/durable_file.h"
#include "texture/gallery/entry_codec.h"
#include "texture/gallery/folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include <opencv2/core.hpp>

namespace prism::texture {

namespace fs = std::filesystem;

namespace store {

namespace {

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

}  // namespace

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

namespace {

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
// log sequentially; docs/benchmarks/gallery-open.md). Records are mostly of one size (768 features), so the
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

}  // namespace

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

void append_record(const fs::path& dir, uint64_t at, const std::vector<uint8_t>& record) {
  const fs::path path = dir / kPack;
  Fd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) throw write_error(path, "cannot open");
  if (fd.size() != at && ::ftruncate(fd.get(), off_t(at)) != 0) throw write_error(path, "cannot truncate");
  pwrite_all(fd.get(), at, record, path);
  if (::fdatasync(fd.get()) != 0) throw write_error(path, "fdatasync failed");
}

std::vector<uint8_t> record_from_file(const fs::path& dir, const std::string& id) {
  const fs::path path = dir / "entries" / (id + ".tex");
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return make_record(id, nullptr);
  const std::vector<uint8_t> bytes = read_regular(path);
  return make_record(id, &bytes);
}

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
    if (item.record) {  // one copy lost: said, and repaired by the caller (lost redundancy is never silent)
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

}  // namespace store

}  // namespace prism::texture
