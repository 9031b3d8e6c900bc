#include "texture/gallery.h"

#include "common/durable_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <sstream>

namespace prism::texture {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'P', 'R', 'I', 'S', 'M', 'T', 'E', 'X'};
constexpr uint32_t kVersion = 2;  // written; 1 (FP16 descriptors, no collection) is still read
constexpr const char* kMarker = "gallery.prism";
constexpr const char* kMarkerText = "prism texture gallery, format 1\n";

struct Header {
  char magic[8];
  uint32_t version, dim, count, width, height, id_len, source_len;
  uint32_t collection_len;  // version 2; version 1 left these 4 bytes as alignment padding
  int64_t enrolled_unix;
};
static_assert(sizeof(Header) == 48, "packed header");
static_assert(sizeof(Keypoint) == 24, "packed keypoint");

std::string errno_text() { return std::strerror(errno); }

// The shared durable-file helpers, their errors as GalleryError.
void write_atomically(const fs::path& tmp, const fs::path& final, const std::vector<uint8_t>& bytes) {
  try {
    prism::write_atomically(tmp, final, bytes, /*sync_directory=*/false);  // callers fsync once
  } catch (const FileError& e) {
    throw GalleryError(e.what());
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
    throw GalleryError(e.what());
  }
}

// A killed writer's unfinished file (entries/.tmp-ID-PID, .tmp-marker-PID).
bool is_temporary(const fs::path& p) { return p.filename().string().rfind(".tmp-", 0) == 0; }

// An exclusive flock() on DIR/.lock for one write; also clears temporary files of killed writers.
class WriterLock {
 public:
  explicit WriterLock(const fs::path& dir) {
    const fs::path p = dir / ".lock";
    fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw GalleryError(p.string() + ": cannot open: " + errno_text());
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        ::close(fd_);
        throw GalleryError(p.string() + ": cannot lock: " + errno_text());
      }
    }
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir / "entries", ec))
      if (is_temporary(e.path())) fs::remove(e.path(), ec);
  }
  ~WriterLock() { ::close(fd_); }  // closing releases the lock
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  int fd_ = -1;
};

// Whether a gallery may be created in `dir`: it is absent or empty, or holds only what a creator
// killed before writing the marker leaves (entries/ with temporary files, .lock, its temporary marker).
bool fresh_folder(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return true;
  try {
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name == ".lock" || name.rfind(".tmp-marker-", 0) == 0) continue;
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

Gallery Gallery::open(const fs::path& dir, bool create, Load load) {
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
    const std::string text = kMarkerText;
    write_atomically(dir / (std::string(".tmp-marker-") + std::to_string(::getpid())), marker,
                     std::vector<uint8_t>(text.begin(), text.end()));
    fsync_dir(dir);
    return g;
  }
  const std::vector<uint8_t> marker_bytes = read_regular(marker);
  std::istringstream m(std::string(marker_bytes.begin(), marker_bytes.end()));
  std::string first;
  std::getline(m, first);
  if (first + "\n" != kMarkerText) throw GalleryError(marker.string() + ":1: unknown gallery format '" + first + "'");
  const fs::path entries = dir / "entries";
  if (!fs::is_directory(entries, ec)) throw GalleryError(entries.string() + ": missing");
  if (load == Load::kEntries) g.entries_ = read_entries(list_entry_files(dir));
  return g;
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
  for (const fs::path& path : files) {
    const std::string file = path.string();
    std::vector<uint8_t> bytes;
    try {
      bytes = read_regular(path);  // refuses a FIFO or device, which would be read forever
    } catch (const GalleryError&) {
      // Readers take no lock: a writer may have deleted the entry since the folder was listed.
      std::error_code ec;
      if (!fs::exists(fs::symlink_status(path, ec))) continue;
      throw;
    }
    const std::string id = path.stem().string();
    try {
      GalleryEntry e = decode(bytes, file);
      if (e.id != id) throw GalleryError(file + ": corrupt gallery entry: holds id '" + e.id + "'");
      out.push_back(std::move(e));
    } catch (const GalleryError& e) {
      // delete and update do not read the entries, so they repair a gallery that readers refuse.
      const std::string dir = path.parent_path().parent_path().string();
      throw GalleryError(std::string(e.what()) + "; remove it with `prism texture delete --gallery " + dir + " " + id +
                         "` or re-enrol it with `prism texture update --gallery " + dir + " --id " + id + " IMAGE`");
    }
  }
  std::sort(out.begin(), out.end(), [](const GalleryEntry& a, const GalleryEntry& b) { return a.id < b.id; });
  return out;
}

const GalleryEntry* Gallery::find(const std::string& id) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                             [](const GalleryEntry& e, const std::string& k) { return e.id < k; });
  return it != entries_.end() && it->id == id ? &*it : nullptr;
}

fs::path Gallery::entry_path(const std::string& id) const { return dir_ / "entries" / (id + ".tex"); }

void Gallery::write_entry(GalleryEntry entry, Write mode) {
  if (!valid_product_id(entry.id))
    throw GalleryError("invalid product id '" + entry.id + "' (1..128 of A-Z a-z 0-9 . _ -, not starting with . or -)");
  if (!valid_collection(entry.collection))
    throw GalleryError("invalid collection '" + entry.collection +
                       "' (1..128 of A-Z a-z 0-9 . _ -, not starting with . or -; empty for none)");
  if (entry.features.count() < kMinFeatures)
    throw GalleryError((entry.source.empty() ? "product '" + entry.id + "'" : entry.source) + ": " +
                       std::to_string(entry.features.count()) + " features (product '" + entry.id + "'); at least " +
                       std::to_string(kMinFeatures) + " are needed to identify it (a flat, blank or tiny image?)");
  if (entry.enrolled_unix == 0) entry.enrolled_unix = int64_t(std::time(nullptr));
  const std::vector<uint8_t> bytes = encode(entry);
  WriterLock lock(dir_);
  const fs::path final = entry_path(entry.id);
  const bool exists = fs::exists(final);
  if (mode == Write::kAdd && exists) throw GalleryError("product '" + entry.id + "' is already enrolled (use update)");
  if (mode == Write::kUpdate && !exists) throw GalleryError("product '" + entry.id + "' is not enrolled");
  write_atomically(dir_ / "entries" / (".tmp-" + entry.id + "-" + std::to_string(::getpid())), final, bytes);
  fsync_dir(dir_ / "entries");
  auto it = std::lower_bound(entries_.begin(), entries_.end(), entry.id,
                             [](const GalleryEntry& e, const std::string& k) { return e.id < k; });
  if (it != entries_.end() && it->id == entry.id)
    *it = std::move(entry);
  else
    entries_.insert(it, std::move(entry));
}

GalleryEntry Gallery::read_entry(const std::string& id) const {
  if (!valid_product_id(id)) throw GalleryError("invalid product id '" + id + "'");
  const fs::path path = entry_path(id);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) throw GalleryError("product '" + id + "' is not enrolled");
  GalleryEntry e = decode(read_regular(path), path.string());
  if (e.id != id) throw GalleryError(path.string() + ": corrupt gallery entry: holds id '" + e.id + "'");
  return e;
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
        write_atomically(dir_ / "entries" / (".tmp-" + id + "-" + std::to_string(::getpid())), path, encode(e));
        fsync_dir(dir_ / "entries");
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

void Gallery::add(GalleryEntry entry) { write_entry(std::move(entry), Write::kAdd); }
void Gallery::update(GalleryEntry entry) { write_entry(std::move(entry), Write::kUpdate); }

void Gallery::remove(const std::string& id) {
  if (!valid_product_id(id)) throw GalleryError("invalid product id '" + id + "'");
  WriterLock lock(dir_);
  const fs::path final = entry_path(id);
  if (::unlink(final.c_str()) != 0) {
    if (errno == ENOENT) throw GalleryError("product '" + id + "' is not enrolled");
    throw GalleryError(final.string() + ": cannot delete: " + errno_text());
  }
  fsync_dir(dir_ / "entries");
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [&](const GalleryEntry& e) { return e.id == id; }),
                 entries_.end());
}

}  // namespace prism::texture
