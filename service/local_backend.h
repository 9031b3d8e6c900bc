// One gallery directory and its live index in this process (a texture::Catalog): the backend of
// `prism texture serve --gallery G`, and what a shard worker (service/shard_worker.h) serves.
//
// The backend owns its gallery for its lifetime (texture::GalleryOwner): any other writer, in this
// process or another, is refused naming it, since this index would never see that write.
// The gallery directory is the durable record: a write is in it (fsync'ed, crash-safe:
// kernels/texture/gallery.h) before the index changes and before the call returns. Writes are
// serialised (one at a time, so that the gallery and the index agree); searches and verifies run
// concurrently with each other and wait only while the index itself changes. Every call checks its
// deadline before the work (503 naming deadline_ms when it passed), and a write gives up waiting for
// the one before it at its deadline.
//
// Concurrent searches share the index's matching (TextureIndex::search_many: up to 8 queries per matcher
// call, each indexed image read once for all of them) through a dynamic batcher (common/dynamic_batcher.h):
// searches that arrive while earlier ones are searched leave together when their parameters are equal.
// None waits for another to arrive (nobody announces one), so a lone search starts at once. Off by
// default (LocalOptions::search_batching; `serve --search-batch N`).
#pragma once

#include <atomic>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backend.h"
#include "common/dynamic_batcher.h"
#include "texture/catalog.h"

namespace prism::service {

struct LocalOptions {
  std::filesystem::path gallery;  // created when absent or empty
  texture::IndexOptions index;
  int shard = 0;  // the shard this gallery is (for stats)
  // The contrast normalisation: a new gallery records it; an existing one must record the same
  // (GalleryError naming both). Unset: the gallery's record decides (clahe-4-8, texture::poor_light_normalisation(),
  // for a new gallery).
  std::optional<texture::Normalisation> normalisation;
  // What this process is, named to a writer refused while it holds the gallery
  // (texture::GalleryOwner): "prism texture serve on 127.0.0.1:8080".
  std::string owner = "a texture service";
  // Searches per search_many (max_batch) and batches searched at once (instances: one's verification,
  // on the CPU, beside another's matching). max_wait is not used: no search is announced. max_batch 1,
  // the default: each search on its caller's thread, as many at once as there are callers (the batched
  // path has not been measured under load yet, and runs searches on `instances` threads only).
  DynamicBatcherOptions search_batching{1, std::chrono::microseconds(0), 2};
};

class LocalBackend : public Backend {
 public:
  // Opens (or creates) the gallery and indexes every entry; `progress(done)` after each one.
  // Throws texture::GalleryError (unreadable gallery, an index too small for it).
  explicit LocalBackend(const LocalOptions& options, const std::function<void(size_t)>& progress = {});

  WriteResult write(const texture::GalleryEntry& entry, bool replace, Clock::time_point deadline) override;
  bool remove(const std::string& id, Clock::time_point deadline) override;
  std::optional<Product> get(const std::string& id, Clock::time_point deadline) override;
  VerifyAnswer verify(const std::string& id, const texture::Features& query, const texture::SearchParams& params,
                      Clock::time_point deadline) override;
  SearchAnswer search(const SearchQuery& query) override;
  ServiceStats stats(Clock::time_point deadline) override;
  std::string health() override { return {}; }
  texture::Normalisation normalisation() override { return catalog_.normalisation(); }

  // This shard's part of a search (what a shard worker sends to the front): whole (batched with
  // concurrent ones), or one of the two phases of a sharded search (shard_scores, shard_verify in
  // backend.h; one at a time).
  ShardSearch search_part(const texture::Features& query, const texture::SearchParams& params);
  ShardSearch search_scores(const texture::Features& query, const texture::SearchParams& params);
  ShardSearch search_verify(const texture::Features& query, const std::vector<Match>& candidates,
                            const texture::SearchParams& params);
  DynamicBatcherStats search_batching() const { return searches_ ? searches_->stats() : DynamicBatcherStats{}; }
  ShardStats shard_stats();
  size_t size() const { return catalog_.size(); }
  bool contains(const std::string& id) const { return catalog_.contains(id); }
  // Every entry as stored, sorted by id, with no write running meanwhile (replica repair's digest).
  void for_each_entry(const std::function<void(texture::GalleryEntry&&)>& on_entry);
  // One entry as stored (texture::GalleryError when it is not enrolled).
  texture::GalleryEntry entry(const std::string& id) const { return catalog_.read(id); }
  // What a writer refused while this holds the gallery is told holds it (once the port is known).
  void describe_owner(const std::string& who) { catalog_.describe_owner(who); }

 private:
  LocalOptions options_;
  texture::Catalog catalog_;  // owned for the backend's lifetime; damaged copies logged and counted

  std::timed_mutex write_;  // a write waits for the one before it until its deadline (the catalog's writes)
  std::atomic<int64_t> writes_{0};

  // A search handed to the batcher (the caller's, alive while it waits) and its outcome: one query's
  // error is its own, not its batch's.
  struct SearchRequest {
    const texture::Features* query = nullptr;
    const texture::SearchParams* params = nullptr;
  };
  struct SearchOutcome {
    ShardSearch part;
    std::exception_ptr error;
  };
  std::vector<SearchOutcome> search_batch(std::vector<SearchRequest>& batch);
  // After the catalog: stopped (its threads joined) before the index goes.
  std::unique_ptr<DynamicBatcher<SearchRequest, SearchOutcome>> searches_;
};

}  // namespace prism::service
