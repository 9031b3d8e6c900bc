#include "backend.h"

#include <algorithm>

namespace prism::service {

namespace {
thread_local const std::function<bool()>* watched_client = nullptr;
}  // namespace

bool client_gone() { return watched_client && (*watched_client)(); }

ClientWatch::ClientWatch(std::function<bool()> gone) : gone_(std::move(gone)), outer_(watched_client) {
  watched_client = &gone_;
}

ClientWatch::~ClientWatch() { watched_client = outer_; }

void check_deadline(Clock::time_point deadline, const char* step) {
  if (Clock::now() >= deadline)
    throw ServiceError(503, "deadline_ms", std::string("the request's deadline passed before ") + step, 1);
}

ShardSearch shard_search(texture::TextureIndex& index, int shard, const texture::Features& query,
                         const texture::SearchParams& params) {
  const texture::SearchResult r = index.search(query, params);
  ShardSearch part;
  part.shard = shard;
  part.searched = r.searched;
  part.digested = r.digested;
  part.gallery_size = index.size();
  part.match_ms = r.match_ms;
  part.verify_ms = r.verify_ms;
  for (const texture::Candidate& c : r.candidates) {
    Match m;
    m.id = c.id;
    m.score = c.score;
    m.matches = c.geometry.matches;
    m.inliers = c.geometry.inliers;
    m.geometric_significance = c.geometry.significance;
    m.homography = c.geometry.homography;
    part.shortlist.push_back(m);
  }
  return part;
}

SearchAnswer merge_search(const std::vector<ShardSearch>& parts, const texture::SearchParams& params, int top_k,
                          int shards) {
  SearchAnswer a;
  a.shards = shards;
  a.shards_answered = int(parts.size());
  std::vector<Match> all;
  for (const ShardSearch& p : parts) {
    all.insert(all.end(), p.shortlist.begin(), p.shortlist.end());
    a.searched += p.searched;
    a.digested += p.digested;
    a.gallery_size += p.gallery_size;
    a.match_ms = std::max(a.match_ms, p.match_ms);
    a.verify_ms = std::max(a.verify_ms, p.verify_ms);
  }
  // The decision of one gallery (texture/decision.h) over the shards' shortlists together.
  std::sort(all.begin(), all.end(),
            [](const Match& x, const Match& y) { return texture::shortlist_before(x.score, x.id, y.score, y.id); });
  all.resize(std::min(all.size(), size_t(std::max(1, params.shortlist))));
  for (Match& m : all) {
    m.significance = texture::decision_significance(m.geometric_significance, all.size());
    m.accepted = texture::accepted(m.inliers, m.significance, params);
  }
  const auto key = [](const Match& m) {
    return texture::VerifiedKey{m.geometric_significance, m.inliers, m.score, m.id};
  };
  std::sort(all.begin(), all.end(),
            [&](const Match& x, const Match& y) { return texture::verified_before(key(x), key(y)); });
  a.identified = !all.empty() && all.front().accepted;
  all.resize(std::min(all.size(), size_t(std::max(0, top_k))));
  a.candidates = std::move(all);
  return a;
}

}  // namespace prism::service
