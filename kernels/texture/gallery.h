// A persistent texture gallery: one directory, one file per product id, so that every write is one
// atomic rename and a crash at any moment leaves each entry either fully old or fully new.
//
//   DIR/gallery.prism        marker and format version
//   DIR/.lock                flock()ed by writers (one writer at a time; readers take no lock and
//                            skip an entry deleted between listing the folder and opening it)
//   DIR/entries/ID.tex       an entry: header, id, source, collection, keypoints, 8-bit RootSIFT,
//                            CRC-32 (format version 2; version 1 entries, FP16 RootSIFT and no
//                            collection, are still read and converted with match::half_to_u8)
//
// ADD/UPDATE write `entries/.tmp-ID-PID`, fsync it, rename it over `ID.tex` and fsync the
// directory before returning: what returned is on disk. DELETE unlinks and fsyncs the directory.
// Leftover temporary files of a killed writer are ignored by readers and removed by the next writer.
// Opening validates every entry (magic, version, sizes, CRC-32, id = file name) and refuses a
// corrupt one with a GalleryError naming the file and the repair (delete and update need not read
// the entries: Load::kNoEntries). Add and update refuse an entry of fewer than kMinFeatures.
#pragma once
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "texture/features.h"

namespace prism::texture {

struct GalleryError : std::runtime_error {
  using std::runtime_error::runtime_error;
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

class Gallery {
 public:
  // What open reads: every entry (validated), or none of them (entries() stays empty): enough to
  // add, update and remove, and so the way to repair a gallery whose entry is damaged.
  enum class Load { kEntries, kNoEntries };

  // Opens the gallery in `dir` and reads every entry (unless told not to); with `create` an absent
  // or empty directory becomes a new gallery, and a non-empty one that is not a gallery is refused
  // untouched. Throws GalleryError.
  static Gallery open(const std::filesystem::path& dir, bool create = false, Load load = Load::kEntries);

  const std::filesystem::path& dir() const { return dir_; }
  const std::vector<GalleryEntry>& entries() const { return entries_; }  // sorted by id
  const GalleryEntry* find(const std::string& id) const;

  // Durable when they return. add refuses an id that is on disk already, update and remove one
  // that is not. Throws GalleryError.
  void add(GalleryEntry entry);
  void update(GalleryEntry entry);
  void remove(const std::string& id);

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
  std::filesystem::path entry_path(const std::string& id) const;
  std::filesystem::path dir_;
  std::vector<GalleryEntry> entries_;
};

}  // namespace prism::texture
