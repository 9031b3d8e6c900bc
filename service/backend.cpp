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

namespace {

Match match_of(const texture::Candidate& c) {
  Match m;
  m.id = c.id;
  m.score = c.score;
  m.matches = c.geometry.matches;
  m.inliers = c.geometry.inliers;
  m.geometric_significance = c.geometry.significance;
  m.homography = c.geometry.homography;
  return m;
}

ShardSearch part_of(const texture::SearchResult& r, texture::TextureIndex& index, int shard) {
  ShardSearch part;
  part.shard = shard;
  part.searched = r.searched;
  part.digested = r.digested;
  part.gallery_size = index.size();
  part.match_ms = r.match_ms;
  part.verify_ms = r.verify_ms;
  for (const texture::Candidate& c : r.candidates) part.shortlist.push_back(match_of(c));
  return part;
}

}  // namespace

ShardSearch shard_search(texture::TextureIndex& index, int shard, const texture::Features& query,
                         const texture::SearchParams& params) {
  return part_of(index.search(query, params), index, shard);
}

ShardSearch shard_search_of(const texture::SearchResult& r, texture::TextureIndex& index, int shard) {
  return part_of(r, index, shard);
}

ShardSearch shard_scores(texture::TextureIndex& index, int shard, const texture::Features& query,
                         const texture::SearchParams& params) {
  ShardSearch part = part_of(index.shortlist(query, params), index, shard);
  part.scored = true;
  return part;
}

ShardSearch shard_verify(texture::TextureIndex& index, int shard, const texture::Features& query,
                         const std::vector<Match>& candidates, const texture::SearchParams& params) {
  std::vector<texture::Candidate> given;
  for (const Match& m : candidates) given.push_back({-1, m.id, m.score, {}});
  return part_of(index.verify_shortlist(query, given, params), index, shard);
}

std::vector<std::pair<size_t, size_t>> global_shortlist(const std::vector<ShardSearch>& parts,
                                                        const texture::SearchParams& params) {
  std::vector<std::pair<size_t, size_t>> all;
  for (size_t p = 0; p < parts.size(); ++p)
    for (size_t c = 0; c < parts[p].shortlist.size(); ++c) all.emplace_back(p, c);
  const auto match = [&](const std::pair<size_t, size_t>& at) -> const Match& {
    return parts[at.first].shortlist[at.second];
  };
  std::sort(all.begin(), all.end(), [&](const auto& x, const auto& y) {
    return texture::shortlist_before(match(x).score, match(x).id, match(y).score, match(y).id);
  });
  all.resize(std::min(all.size(), size_t(std::max(1, params.shortlist))));
  return all;
}

std::map<int, std::vector<Match>> shortlist_by_shard(std::vector<ShardSearch>& parts,
                                                     const texture::SearchParams& params) {
  std::vector<std::vector<bool>> chosen(parts.size());
  for (size_t p = 0; p < parts.size(); ++p) chosen[p].assign(parts[p].shortlist.size(), false);
  for (const auto& [p, c] : global_shortlist(parts, params)) chosen[p][c] = true;
  std::map<int, std::vector<Match>> asked;
  for (size_t p = 0; p < parts.size(); ++p) {
    std::vector<Match> kept;
    for (size_t c = 0; c < parts[p].shortlist.size(); ++c)
      if (chosen[p][c]) kept.push_back(std::move(parts[p].shortlist[c]));
    parts[p].shortlist = std::move(kept);
    if (parts[p].scored && !parts[p].shortlist.empty()) asked[parts[p].shard] = parts[p].shortlist;
  }
  return asked;
}

SearchAnswer merge_search(const std::vector<ShardSearch>& parts, const texture::SearchParams& params, int top_k,
                          int shards) {
  SearchAnswer a;
  a.shards = shards;
  a.shards_answered = int(parts.size());
  for (const ShardSearch& p : parts) {
    a.searched += p.searched;
    a.digested += p.digested;
    a.gallery_size += p.gallery_size;
    a.match_ms = std::max(a.match_ms, p.match_ms);
    a.verify_ms = std::max(a.verify_ms, p.verify_ms);
  }
  // The decision of one gallery (texture/decision.h) over the shards' shortlists together.
  std::vector<Match> all;
  for (const auto& [p, c] : global_shortlist(parts, params)) all.push_back(parts[p].shortlist[c]);
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
