#include "texture/gallery.h"

#include "texture/gallery/entry_codec.h"
#include "texture/gallery/folder.h"
#include "texture/gallery/pack_log.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <ctime>
#include <optional>

namespace prism::texture {

namespace fs = std::filesystem;

// The store's units (kernels/texture/gallery/): the entry file format, the folder protocol, the pack.
using namespace store;

namespace {

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
    // By id, as the pack's records come (paths order "a-b.tex" before "a.tex", ids "a" before "a-b").
    std::sort(list.begin(), list.end(),
              [](const fs::path& a, const fs::path& b) { return a.stem().string() < b.stem().string(); });
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
    // The second copy, the id's record in the pack (a damaged entry file must not go unseen
    // while the pack serves it): read from there when intact, and the file written again from it
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
