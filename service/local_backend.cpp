#include "local_backend.h"

#include <cstdio>
#include <ctime>
#include <utility>

namespace prism::service {

namespace {

Product product_of(const texture::GalleryEntry& e, int shard) {
  Product p;
  p.id = e.id;
  p.collection = e.collection;
  p.source = e.source;
  p.enrolled_unix = e.enrolled_unix;
  p.features = e.features.count();
  p.width = e.features.width;
  p.height = e.features.height;
  p.shard = shard;
  return p;
}

}  // namespace

namespace {
texture::CatalogOptions catalog_options(const LocalOptions& o) {
  texture::CatalogOptions c;
  c.gallery = o.gallery;
  c.index = o.index;
  c.writable = c.create = true;
  c.owner = o.owner;
  c.normalisation = o.normalisation;
  return c;
}
}  // namespace

LocalBackend::LocalBackend(const LocalOptions& options, const std::function<void(size_t)>& progress)
    : options_(options), catalog_(catalog_options(options)) {
  catalog_.load(progress);
  if (options.search_batching.max_batch > 1)
    searches_ = std::make_unique<DynamicBatcher<SearchRequest, SearchOutcome>>(
        options.search_batching,
        [](const SearchRequest& a, const SearchRequest& b) { return texture::same_params(*a.params, *b.params); },
        [this](std::vector<SearchRequest>& batch) { return search_batch(batch); });
  // A damaged copy read from the other one, a pack rebuilt or compacted: the operator should know
  // (lost redundancy must not be silent).
  if (!catalog_.open_note().empty())
    std::fprintf(stderr, "gallery %s: %s\n", options.gallery.string().c_str(), catalog_.open_note().c_str());
}

// The writer lock, or 503 when the deadline comes first.
static std::unique_lock<std::timed_mutex> lock_until(std::timed_mutex& m, Clock::time_point deadline) {
  std::unique_lock<std::timed_mutex> lock(m, std::defer_lock);
  if (deadline == Clock::time_point::max())
    lock.lock();
  else if (!lock.try_lock_until(deadline))
    throw ServiceError(503, "deadline_ms", "the request's deadline passed while earlier writes were applied", 1);
  return lock;
}

WriteResult LocalBackend::write(const texture::GalleryEntry& given, bool replace, Clock::time_point deadline) {
  check_deadline(deadline, "the write");
  const auto lock = lock_until(write_, deadline);
  const bool present = catalog_.contains(given.id);
  texture::GalleryEntry entry = given;
  if (entry.enrolled_unix == 0) entry.enrolled_unix = int64_t(std::time(nullptr));
  WriteResult r;
  if (!replace && present) {
    const texture::GalleryEntry old = catalog_.read(given.id);
    if (!texture::same_stored_features(old.features, given.features) || old.collection != given.collection)
      throw ServiceError(409, "id",
                         "product '" + given.id + "' is enrolled with another image or collection; PUT replaces it");
    r.outcome = WriteOutcome::kUnchanged;
    r.product = product_of(old, options_.shard);
    return r;
  }
  if (replace && !present) throw ServiceError(404, "id", "product '" + given.id + "' is not enrolled");
  // The gallery first (durable), then the index; when the index refuses, the catalog puts the
  // gallery back, since nothing was acknowledged.
  if (replace) {
    catalog_.update(entry);
    r.outcome = WriteOutcome::kUpdated;
  } else {
    try {
      catalog_.add(entry);
    } catch (const texture::GalleryConflict& e) {  // an entry file the index does not hold
      throw ServiceError(409, "id", e.what());
    } catch (const texture::IndexFull& e) {
      throw ServiceError(507, "", e.what());
    }
    r.outcome = WriteOutcome::kCreated;
  }
  ++writes_;
  r.product = product_of(entry, options_.shard);
  return r;
}

bool LocalBackend::remove(const std::string& id, Clock::time_point deadline) {
  check_deadline(deadline, "the delete");
  const auto lock = lock_until(write_, deadline);
  if (!catalog_.remove(id)) return false;
  ++writes_;
  return true;
}

void LocalBackend::for_each_entry(const std::function<void(texture::GalleryEntry&&)>& on_entry) {
  const std::lock_guard lock(write_);
  catalog_.for_each_entry(on_entry);
}

std::optional<Product> LocalBackend::get(const std::string& id, Clock::time_point deadline) {
  check_deadline(deadline, "the read");
  if (!catalog_.contains(id)) return std::nullopt;
  try {
    return product_of(catalog_.read(id), options_.shard);
  } catch (const texture::GalleryError&) {
    if (!catalog_.contains(id)) return std::nullopt;  // removed meanwhile
    throw;                                            // a damaged entry is not "not enrolled"
  }
}

VerifyAnswer LocalBackend::verify(const std::string& id, const texture::Features& query,
                                  const texture::SearchParams& params, Clock::time_point deadline) {
  check_deadline(deadline, "the verify");
  if (!catalog_.contains(id)) throw ServiceError(404, "id", "product '" + id + "' is not enrolled");
  texture::SearchResult r;
  try {
    r = catalog_.verify(query, id, params);
  } catch (const texture::IndexError&) {
    if (catalog_.contains(id)) throw;                                       // a broken index is not a 404
    throw ServiceError(404, "id", "product '" + id + "' is not enrolled");  // removed meanwhile
  }
  VerifyAnswer a;
  a.match.id = id;
  a.match.score = r.best.score;
  a.match.matches = r.best.geometry.matches;
  a.match.inliers = r.best.geometry.inliers;
  a.match.geometric_significance = r.best.geometry.significance;
  a.match.significance = r.best.significance;
  a.match.homography = r.best.geometry.homography;
  a.match.accepted = r.identified;
  a.match_ms = r.match_ms;
  a.verify_ms = r.verify_ms;
  return a;
}

ShardSearch LocalBackend::search_part(const texture::Features& query, const texture::SearchParams& params) {
  if (!searches_) return shard_search(catalog_.index(), options_.shard, query, params);
  SearchOutcome o = searches_->submit({&query, &params}, false).get();
  if (o.error) std::rethrow_exception(o.error);
  return std::move(o.part);
}

std::vector<LocalBackend::SearchOutcome> LocalBackend::search_batch(std::vector<SearchRequest>& batch) {
  texture::TextureIndex& index = catalog_.index();
  std::vector<SearchOutcome> out(batch.size());
  std::vector<const texture::Features*> queries;
  for (const SearchRequest& r : batch) queries.push_back(r.query);
  try {
    const std::vector<texture::SearchResult> results = index.search_many(queries, *batch.front().params);
    for (size_t k = 0; k < batch.size(); ++k) out[k].part = shard_search_of(results[k], index, options_.shard);
    return out;
  } catch (...) {
    if (batch.size() == 1) {
      out[0].error = std::current_exception();
      return out;
    }
  }
  // A query that search_many refused (or a failure in its batch): each searched alone, with its own outcome.
  for (size_t k = 0; k < batch.size(); ++k) {
    try {
      out[k].part = shard_search(index, options_.shard, *batch[k].query, *batch[k].params);
    } catch (...) {
      out[k].error = std::current_exception();
    }
  }
  return out;
}

ShardSearch LocalBackend::search_scores(const texture::Features& query, const texture::SearchParams& params) {
  return shard_scores(catalog_.index(), options_.shard, query, params);
}

ShardSearch LocalBackend::search_verify(const texture::Features& query, const std::vector<Match>& candidates,
                                        const texture::SearchParams& params) {
  return shard_verify(catalog_.index(), options_.shard, query, candidates, params);
}

SearchAnswer LocalBackend::search(const SearchQuery& q) {
  check_deadline(q.deadline, "the search");
  return merge_search({search_part(q.features, q.params)}, q.params, q.top_k, 1);
}

ShardStats LocalBackend::shard_stats() {
  ShardStats s;
  s.shard = options_.shard;
  s.worker = "local";
  s.index = catalog_.index().stats();
  s.writes_applied = writes_;
  s.copies_repaired = catalog_.copies_repaired();
  return s;
}

ServiceStats LocalBackend::stats(Clock::time_point) {
  ServiceStats s;
  s.shards.push_back(shard_stats());
  return s;
}

}  // namespace prism::service
