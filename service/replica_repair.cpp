#include "replica_repair.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace prism::service::repair {

int bucket_of(const std::string& id) { return int(shard::fnv1a64(id) >> 56); }

uint64_t entry_hash(const texture::GalleryEntry& entry) {
  const std::vector<uint8_t> bytes = texture::Gallery::encode(entry);
  return shard::fnv1a64(std::string(bytes.begin(), bytes.end()));
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::array<uint64_t, kBuckets> bucket_hashes(const Entries& entries) {
  std::array<std::string, kBuckets> text;
  for (const auto& [id, h] : entries) text[size_t(bucket_of(id))] += id + " " + hex(h) + "\n";  // sorted by id
  std::array<uint64_t, kBuckets> out{};
  for (size_t b = 0; b < out.size(); ++b) out[b] = text[b].empty() ? 0 : shard::fnv1a64(text[b]);
  return out;
}

std::string bucket_text(const Entries& entries, int bucket) {
  std::string out;
  for (const auto& [id, h] : entries)
    if (bucket_of(id) == bucket) out += id + " " + hex(h) + "\n";
  return out;
}

Entries parse_bucket_text(const std::string& text) {
  Entries out;
  std::istringstream in(text);
  std::string id, h;
  while (in >> id >> h) {
    if (h.size() != 16 || h.find_first_not_of("0123456789abcdef") != std::string::npos)
      throw std::invalid_argument("a digest entry of '" + id + "' has no valid hash");
    out[id] = std::stoull(h, nullptr, 16);
  }
  return out;
}

Plan plan(const Entries& mine, const shard::StreamId& my_position, const Entries& theirs,
          const shard::StreamId& their_position, const std::vector<int>& buckets) {
  Plan p;
  const bool behind = my_position < their_position, ahead = their_position < my_position;
  auto in_buckets = [&](const std::string& id) {
    return std::find(buckets.begin(), buckets.end(), bucket_of(id)) != buckets.end();
  };
  for (const auto& [id, h] : theirs) {
    if (!in_buckets(id)) continue;
    const auto m = mine.find(id);
    if (m != mine.end() && m->second == h) continue;
    ++p.divergent;
    if (m == mine.end()) {
      if (!ahead) p.copy.push_back(id);  // missed write (or, with equal positions, kept whatever it was)
    } else if (behind || (!ahead && m->second < h)) {
      p.copy.push_back(id);
    }
  }
  for (const auto& [id, h] : mine) {
    if (!in_buckets(id) || theirs.count(id)) continue;
    ++p.divergent;
    if (behind) p.remove.push_back(id);  // a delete this replica missed
  }
  return p;
}

std::string digest_key(int shard, const std::string& replica) {
  return "prism:digest:" + std::to_string(shard) + ":" + replica;
}
std::string ask_key(int shard, const std::string& replica) {
  return "prism:repair:" + std::to_string(shard) + ":" + replica;
}

}  // namespace prism::service::repair
