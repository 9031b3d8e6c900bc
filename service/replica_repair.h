// Anti-entropy between the replicas of a shard (issue 46, part 3): what a replica's gallery holds,
// summarised so that two replicas compare cheaply, and which entries a replica must copy or drop
// to agree with a sibling. The Redis side (publishing digests, asking a sibling for entries) is
// in ShardWorker (service/shard_worker.h); this is the pure part.
//
// - A digest: per product id the FNV-1a-64 of its stored entry (texture::Gallery::encode: the
//   features, source, collection and enrolment time), grouped into 256 buckets by the top byte of
//   FNV-1a-64(id) (independent of the shard placement, which uses the id hash mod N). Each bucket has
//   a hash of its sorted (id, entry hash) pairs; two replicas compare their 256 bucket hashes and
//   list the entries of differing buckets only.
// - The position: the stream ID of the last write the replica applied to its gallery
//   (GALLERY/stream-applied). The gallery records no tombstones, so an entry one replica holds and
//   its sibling lacks is either a write the sibling missed or a delete this one missed. The positions
//   tell them apart: the replica with the higher position applied every write the other did plus
//   later ones (stream order), so its state wins, for absent and differing entries alike. With equal
//   positions (what two replicas reach once both have applied the whole stream, after Redis lost an
//   entry one of them had applied) nothing tells a missed delete from a missed write, and the safe
//   rule keeps the entry (an acknowledged write is never dropped; a delete lost by Redis may come
//   back and is retried by its client as any write answered 503); an entry held by both with
//   different contents takes the one with the greater entry hash (arbitrary but the same on both
//   sides, so that exactly one of them changes).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shard_protocol.h"
#include "texture/gallery.h"

namespace prism::service::repair {

constexpr int kBuckets = 256;

using Entries = std::map<std::string, uint64_t>;  // id -> entry hash

int bucket_of(const std::string& id);
uint64_t entry_hash(const texture::GalleryEntry& entry);
std::array<uint64_t, kBuckets> bucket_hashes(const Entries& entries);
// A bucket's entries as text ("ID HEX\n" per entry, sorted) and back (std::invalid_argument).
std::string bucket_text(const Entries& entries, int bucket);
Entries parse_bucket_text(const std::string& text);
std::string hex(uint64_t v);

// What a replica does to agree with one sibling, given both positions and the entries of the
// buckets that differ (the sibling's from its digest).
struct Plan {
  std::vector<std::string> copy;    // take the sibling's entry (absent here, or differing)
  std::vector<std::string> remove;  // drop this replica's entry (a delete it missed)
  int64_t divergent = 0;            // entries that differ between the two (either way)
};
Plan plan(const Entries& mine, const shard::StreamId& my_position, const Entries& theirs,
          const shard::StreamId& their_position, const std::vector<int>& buckets);

// Redis keys: a replica's digest (a hash: `position`, `at_ms`, `count`, `divergent`, `repaired`,
// `b:B` the hash of bucket B, `e:B` its entries as bucket_text), and the list its sibling asks it
// for entries on.
std::string digest_key(int shard, const std::string& replica);
std::string ask_key(int shard, const std::string& replica);

}  // namespace prism::service::repair
