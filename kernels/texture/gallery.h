// A persistent texture gallery: one directory, one file per product id, so that every write is one
// atomic rename and a crash at any moment leaves each entry either fully old or fully new; and one
// packed log of the same entries, so that opening a million of them is one sequential read instead
// of a million file opens (docs/benchmarks/gallery-open.md).
//
//   DIR/gallery.prism        marker and format version: "format 2" once the gallery has a pack (an
//                            older build, which reads only "format 1", then refuses the gallery
//                            instead of writing entries the pack would never see); "format 3" is
//                            format 2 with a second line "normalise NAME": the contrast
//                            normalisation (normalise.h) its entries were extracted with and its
//                            queries must use, chosen at creation (for poor light). Formats 1 and 2
//                            mean none, so galleries made before it keep working; an older build
//                            refuses format 3 rather than extract without the normalisation.
//   DIR/.lock                flock()ed by writers (one writer at a time; readers take no lock and
//                            skip an entry deleted between listing the folder and opening it)
//   DIR/.owner               the owner: flock()ed exclusively for its lifetime by the one process
//                            that serves the gallery (GalleryOwner), holding "pid PID: WHO"; every
//                            other writer takes it shared for one write, so it is refused while an
//                            owner runs (the owner's index would never see the write)
//   DIR/entries/ID.tex       an entry: header, id, source, collection, keypoints, 8-bit RootSIFT,
//                            CRC-32 (format version 2; version 1 entries, FP16 RootSIFT and no
//                            collection, are still read and converted with match::half_to_u8)
//   DIR/pack.log             the pack: an append-only log of records, each a CRC'd header with the
//                            id, then (add/update) the entry file's exact bytes or (delete) nothing
//   DIR/pack.dirty           "ID OFFSET": the write in flight, created before the entry file changes
//                            and removed once the pack holds that write
//
// ADD/UPDATE write `entries/.tmp-ID-PID`, fsync it, rename it over `ID.tex` and fsync the
// directory; DELETE unlinks and fsyncs the directory. Around that, under the lock: pack.dirty is
// written (and the directory fsynced) first, the record is appended to pack.log and fdatasynced
// after, then pack.dirty is removed, and only then does the write return. So what returned is in
// the entry files and in the pack, and while pack.dirty exists the two differ at most in its one id.
// A crash leaves pack.dirty behind; the next writer (or a reader that can take the lock) recovers
// in O(1): cut pack.log back to OFFSET and append ID's record from its entry file as it now is.
// Readers take no lock: they read the pack, ignore a torn tail, and take from the entry file the id
// named by pack.dirty and any id the entries/ listing and the pack disagree on (files added or
// removed behind the gallery's back). A pack they cannot trust (damaged, missing, not yet built) is
// rebuilt from the entry files when the lock is free, else the entry files are read one by one.
// When more than half of pack.log is dead (replaced or deleted), the reader that notices (or a
// writer that knows) rewrites it: live records sorted by id into a temporary file, fsync, rename.
// Leftover temporary files of a killed writer are ignored by readers and removed by the next writer.
// Opening validates every entry (magic, version, sizes, CRC-32, id = file name) and refuses a
// corrupt one with a GalleryError naming the file and the repair (delete and update need not read
// the entries: Load::kNoEntries). A damaged entry file whose pack record is intact is read from
// the pack (a second copy); a damaged pack record falls back to the entry file. Add and update
// refuse an entry of fewer than kMinFeatures.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "texture/features.h"

namespace prism::texture {

// `error_number`: the errno of a failed write (0 for everything else), so that a server can answer
// a full disk (ENOSPC, EDQUOT: disk_full()) as such rather than as its own fault.
struct GalleryError : std::runtime_error {
  explicit GalleryError(const std::string& what, int error_number = 0)
      : std::runtime_error(what), error_number(error_number) {}
  bool disk_full() const;
  int error_number;
};
// Gallery::add of an id whose entry file is on disk already.
struct GalleryConflict : GalleryError {
  using GalleryError::GalleryError;
};

struct GalleryEntry {
  std::string id;
  std::string source;  // where the enrolled image came from (informational)
  int64_t enrolled_unix = 0;
  Features features;  // descriptors in 8 bits; descriptors_fp16 is never stored
  // The scope the product belongs to (a lot, a factory, a product line): searches may be limited
  // to one or more collections. Empty = none. Same characters as a product id.
  std::string collection{};  // (initialised: entries written as {id, source, time, features} stay warning-free)
  int version = 2;           // the entry format it was read from (1: converted from FP16); written as 2
};

// The fewest features an entry may have: an image with fewer can never be identified (RANSAC fits
// a homography to 4 matches, and verify.h scores fewer than 5 inliers as no evidence; the search's
// default min_inliers is 5). A flat, blank or tiny image has none.
constexpr int kMinFeatures = 5;

// Product ids: 1..128 characters of [A-Za-z0-9._-], not starting with '.' or '-'.
bool valid_product_id(const std::string& id);
// Collections: empty (none) or a valid product id.
bool valid_collection(const std::string& collection);

// The one process that writes a gallery for as long as it runs: a server or shard worker holds the
// gallery's entries in an index, so a write by anyone else (`prism texture enroll` beside `serve`)
// would leave the index answering for entries that are gone. The claim is an exclusive flock() on
// DIR/.owner, which the kernel releases when the process dies, however it dies. While it is held,
// writes of other processes (and a second owner, in this process or another) are refused with a
// GalleryError naming the holder; writes through this process's own Gallery objects go on. Readers
// take no part (search, list and stats keep working). Without an owner, writers of any process
// interleave as before, one write at a time (DIR/.lock).
class GalleryOwner {
 public:
  // Claims `dir` (created when absent, as Gallery::open(create) would). `who` says what holds it
  // ("prism texture serve on 127.0.0.1:8080"), for the message a refused writer gets. Waits up to
  // a few seconds for a one-off write of another process to finish. Throws GalleryError.
  GalleryOwner(const std::filesystem::path& dir, const std::string& who);
  ~GalleryOwner();
  GalleryOwner(const GalleryOwner&) = delete;
  GalleryOwner& operator=(const GalleryOwner&) = delete;
  // Says anew what holds it: a server knows its port only once it has bound it (port 0).
  void describe(const std::string& who);

 private:
  std::filesystem::path file_;  // DIR/.owner
  int fd_ = -1;
  uint64_t dev_ = 0, ino_ = 0;  // the folder's identity, however its path is spelled
};

class Gallery {
 public:
  // What open reads: every entry (validated), or none of them (entries() stays empty): enough to
  // add, update and remove, and so the way to repair a gallery whose entry is damaged.
  enum class Load { kEntries, kNoEntries };

  // Opens the gallery in `dir` and reads every entry (unless told not to); with `create` an absent
  // or empty directory becomes a new gallery, and a non-empty one that is not a gallery is refused
  // untouched. Throws GalleryError.
  // A gallery created here records `normalisation` (none: format 2, as older builds write). Of
  // two creators racing for one new folder, the first to take the writer lock creates it; the other
  // opens it as an existing gallery, whose normalisation() is the first's (compare it with the one
  // asked for, as with any existing gallery: `prism texture enroll --normalise` refuses a mismatch).
  static Gallery open(const std::filesystem::path& dir, bool create = false, Load load = Load::kEntries,
                      const Normalisation& normalisation = {});

  // The contrast normalisation of this gallery's entries, which every extraction against it
  // (enrolment, search, verify) must apply: FeatureParams::normalisation. None for a gallery that
  // records none (format 1 or 2).
  const Normalisation& normalisation() const { return normalisation_; }
  // The same, read from the marker of the gallery in `dir` alone (what a streaming reader needs
  // before for_each_entry). Throws GalleryError as open() does.
  static Normalisation read_normalisation(const std::filesystem::path& dir);
  // Whether `dir` holds a gallery (its marker), without reading it.
  static bool exists(const std::filesystem::path& dir);
  // Makes the gallery in `dir` record `normalisation` instead, under the writer lock, if it holds
  // no entry (a gallery just created with a default, before its deployment's was known); returns
  // false, touching nothing, when it holds one. Throws GalleryError as open() does.
  static bool renormalise_if_empty(const std::filesystem::path& dir, const Normalisation& normalisation);

  // How a read went: the entries passed on, whether the pack was used, and otherwise (or when it
  // was repaired or compacted on the way) a sentence saying what happened, for the user.
  struct ReadSummary {
    size_t entries = 0;
    bool from_pack = false;
    std::string note;           // empty when the pack was read as it was
    size_t damaged_copies = 0;  // pack records found damaged, read from their entry files (and written again)
  };
  // Streams every entry of the gallery in `dir` to `on_entry`, sorted by id, with a bounded batch
  // in memory (128 entries, decoded on several threads): what an index of a million entries is
  // built from (open() would hold them all).
  // Same entries and errors as open(); an exception from `on_entry` stops the read there.
  static ReadSummary for_each_entry(const std::filesystem::path& dir,
                                    const std::function<void(GalleryEntry&&)>& on_entry);
  // What open() said about the pack (ReadSummary::note); empty for Load::kNoEntries.
  const std::string& pack_note() const { return pack_note_; }

  const std::filesystem::path& dir() const { return dir_; }
  const std::vector<GalleryEntry>& entries() const { return entries_; }  // sorted by id
  const GalleryEntry* find(const std::string& id) const;

  // What add and update refuse of the entry itself, whatever the gallery holds (an invalid id or
  // collection, fewer than kMinFeatures): GalleryError.
  static void check_entry(const GalleryEntry& entry);

  // Durable when they return. add refuses an id that is on disk already, update and remove one
  // that is not. Throws GalleryError.
  void add(GalleryEntry entry);
  void update(GalleryEntry entry);
  void remove(const std::string& id);

  // One entry read from disk (whatever open loaded): what update needs to keep an entry's
  // collection without loading the gallery. A damaged entry file is read from its copy in the pack
  // when that one is intact, and written again from it when the writer lock is free; `note` (when
  // given) then says so, for the caller's log and counts. Throws GalleryError (not enrolled, both
  // copies damaged).
  GalleryEntry read_entry(const std::string& id, std::string* note = nullptr) const;

  // Rewrites every version-1 entry as version 2 (match::half_to_u8 of its FP16 descriptors, no
  // collection), each one as an ordinary atomic update under the writer lock: a migration killed
  // at any point leaves every entry readable (old or new), and running it again finishes the rest.
  // `on_entry(id, migrated)` is called after each entry (migrated: it was version 1 and is now 2);
  // an exception from it stops the migration there. Readers never need it: version-1 entries are
  // converted as they are read. Returns the number of entries rewritten.
  int migrate(const std::function<void(const std::string& id, bool migrated)>& on_entry = {});

  // The two steps of reading the entries, exposed for tests: the entry files of the gallery in
  // `dir` (temporary files skipped, stray files refused), then those files read, validated and
  // sorted by id.
  static std::vector<std::filesystem::path> list_entry_files(const std::filesystem::path& dir);
  static std::vector<GalleryEntry> read_entries(const std::vector<std::filesystem::path>& files);

  // Encoding of one entry file (exposed for tests).
  static std::vector<uint8_t> encode(const GalleryEntry& entry);
  static GalleryEntry decode(const std::vector<uint8_t>& bytes, const std::string& file);

 private:
  enum class Write { kAdd, kUpdate };
  void write_entry(GalleryEntry entry, Write mode);
  // One write with the lock held: pack.dirty, the entry file (`bytes`, or deleted when null), the
  // pack record, pack.dirty removed. `old_bytes`: the size of the entry it replaces (0: none).
  void commit_locked(const std::string& id, const std::vector<uint8_t>* bytes, uint64_t old_bytes);
  std::filesystem::path entry_path(const std::string& id) const;
  std::filesystem::path dir_;
  std::vector<GalleryEntry> entries_;
  std::string pack_note_;
  Normalisation normalisation_;
  // Live and total record bytes of pack.log as this object last knew them (0: unknown, as after
  // Load::kNoEntries): a writer that knows compacts when more than half is dead.
  uint64_t pack_live_ = 0, pack_total_ = 0;
};

}  // namespace prism::texture
