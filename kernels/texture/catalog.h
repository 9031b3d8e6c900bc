// texture::Catalog: a gallery and its live index as one, what every front end of texture
// identification works with (the textureid element, the service's LocalBackend and so its shard
// workers, the Python Gallery, `prism texture search` and `verify`). It opens the gallery (created,
// and claimed as its owner, when asked), checks or records its contrast normalisation, streams every
// entry into the index with progress, and keeps the two in step: a write is durable in the gallery
// first and then indexed, and rolled back out of the gallery when the index refuses it, so that
// nothing the caller was not told of is left behind. Searches and verifications go to the index.
//
// Threads: searches, verifications and reads run concurrently with each other and with a write; the
// writes (add, update, remove) must be serialised by the caller (the service holds a lock bounded by
// the request's deadline, the Python object one lock for every call).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "texture/features.h"
#include "texture/gallery.h"
#include "texture/index.h"
#include "texture/normalise.h"

namespace prism::texture {

// An existing gallery records another normalisation than the one asked for (CatalogOptions).
struct NormalisationMismatch : GalleryError {
  using GalleryError::GalleryError;
};

struct CatalogOptions {
  std::filesystem::path gallery;
  IndexOptions index;
  // Writable: the gallery is opened for add, update and remove (created when absent or empty with
  // `create`). Read-only: nothing is written, and the gallery must exist.
  bool writable = false;
  bool create = false;
  // Claimed for this catalog's lifetime (GalleryOwner) when set: no other process writes it meanwhile,
  // since this index would never see that write. Says what holds it ("prism texture serve on ...").
  std::optional<std::string> owner;
  // The contrast normalisation: a new gallery records it (unset: poor_light_normalisation()); an
  // existing one must record the same, or NormalisationMismatch names both, the setting by `setting`.
  std::optional<Normalisation> normalisation;
  std::string setting = "normalisation";
};

class Catalog {
 public:
  // Opens the gallery (created and claimed as asked) and makes its index, empty: load() fills it.
  // Throws GalleryError (no gallery, an unreadable one), NormalisationMismatch, std::invalid_argument
  // (index options), gpu::CudaError (device=cuda without a usable GPU).
  explicit Catalog(const CatalogOptions& options);
  // Indexes every entry, streamed (a bounded batch in memory besides the index); `progress(done)`
  // after each. Throws GalleryError (an unreadable entry), IndexFull (the budgets are too small for the
  // gallery), IndexError. Once, before any other call.
  void load(const std::function<void(size_t)>& progress = {});
  ~Catalog();
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  const std::filesystem::path& dir() const { return options_.gallery; }
  // Says anew what holds the gallery (CatalogOptions::owner), as GalleryOwner::describe; a no-op
  // for a catalog that does not own it.
  void describe_owner(const std::string& who) {
    if (owner_) owner_->describe(who);
  }
  const Normalisation& normalisation() const { return normalisation_; }
  // Extraction parameters for enrolments and queries against this gallery (its normalisation).
  FeatureParams feature_params() const;
  // What reading the gallery said (a pack rebuilt, compacted or read around a damaged record), for the
  // user; empty when the pack was read as it was.
  const std::string& open_note() const { return open_note_; }
  // Copies found damaged and repaired from the other since open (lost redundancy must be visible).
  int64_t copies_repaired() const { return copies_repaired_; }
  // Where a note of a repaired copy goes (the service's log; by default stderr, naming the gallery).
  void on_note(std::function<void(const std::string&)> sink) { note_sink_ = std::move(sink); }

  size_t size() const { return index_.size(); }
  bool contains(const std::string& id) const { return index_.find(id) >= 0; }
  // One entry as stored (GalleryError when not enrolled or both copies are damaged); a damaged copy
  // repaired on the way is noted and counted. Through the gallery opened with the catalog (read-only
  // ones too): a read opens the entry file alone, not the gallery.
  GalleryEntry read(const std::string& id) const;
  // Every entry the catalog holds (its index's ids), as stored, sorted by id: what read() of each id
  // in turn would pass on, from one stream of the gallery's pack (Gallery::for_each_entry) rather than
  // a file opened per id. Entries on disk that the index does not hold (written by another process
  // since the catalog was opened) are left out; an id the index holds and the stream did not bring
  // (removed by another process) is read(), which throws GalleryError as it would. Damaged copies read
  // from the other copy are noted and counted. The index's ids are taken when it starts: call it with
  // no write running (as TextureIndex::ids()); an exception from `on_entry` stops it there.
  void for_each_entry(const std::function<void(GalleryEntry&&)>& on_entry) const;

  // Writable catalogs. add: GalleryError for an id on disk already (GalleryConflict when the index
  // does not hold it); update: a product that is enrolled (GalleryError otherwise), indexed anew;
  // remove: false when absent. A write the index refuses (IndexFull, IndexError) leaves the gallery as
  // it was, and the exception goes on.
  void add(const GalleryEntry& entry);
  void update(const GalleryEntry& entry);
  bool remove(const std::string& id);

  SearchResult search(const Features& query, const SearchParams& params) { return index_.search(query, params); }
  SearchResult verify(const Features& query, const std::string& id, const SearchParams& params) {
    return index_.verify(query, id, params);
  }
  TextureIndex& index() { return index_; }
  const TextureIndex& index() const { return index_; }

 private:
  Gallery& writer();
  void note(const std::string& text, int64_t copies = 1) const;

  CatalogOptions options_;
  std::unique_ptr<GalleryOwner> owner_;  // before the gallery: no other process writes it from here on
  // Opened once (Load::kNoEntries: the index holds the entries), read-only catalogs' too: read() goes
  // through it. Only a writable catalog writes through it (writer()).
  Gallery gallery_;
  Normalisation normalisation_;
  TextureIndex index_;
  std::string open_note_;
  mutable std::atomic<int64_t> copies_repaired_{0};
  std::function<void(const std::string&)> note_sink_;
};

}  // namespace prism::texture
