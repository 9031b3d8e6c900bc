// Online shard splits (`prism texture reshard`, docs/SERVICE.md "Splitting every shard in two"):
// N -> 2N shards while fronts and workers serve. A product lives on FNV-1a-64(id) mod N, so under
// 2N it stays on shard k or moves to k + N: each shard splits in two on its own.
//
// The protocol (service/shard_protocol.h has the keys):
// 1. begin (one Lua script, so atomic): prism:shards = N and no split in progress are checked,
//    prism:split is set to 2N, and a `split` marker entry is added to each parent shard's writes
//    stream (its ID kept in prism:split:marks). Fronts route each write under WATCH of those keys
//    (ShardedBackend::call): from the script on, a write of a product that moves is added to its
//    parent's stream (answered by the parent, as before) and, in the same MULTI/EXEC, to the new
//    shard's stream (answered to nobody). So the new shard's stream holds every write of its
//    products that its parent's stream holds after the marker, in the same order. Reads still go
//    to the N parents, which hold everything.
// 2. copy (per new shard and replica, on the host of a parent's gallery): waits until that gallery
//    has applied its split marker (GALLERY/stream-applied), then writes the products of the new
//    shard into a new gallery (no stream-applied: its worker replays its stream from the start).
//    Each product copied is its parent's state after some of the writes after the marker, and the
//    new shard's worker then applies all of them again, in order: a put or a delete decides alone,
//    a post of a product present changes nothing, so replaying a prefix twice ends in the parent's
//    state.
// 3. The new shards' workers start on the copies (`prism texture shard --shard K`, K in N..2N-1).
// 4. commit (one Lua script, after every new shard has a live worker whose replicas have no lag):
//    prism:shards = 2N, prism:split deleted, and a `split-commit` marker added to each parent's
//    writes stream. Fronts route by 2N from then on. A parent applying the marker drops what moved
//    (ShardWorker::commit_split) and answers under 2N; reads answer with the count they were
//    served under, and a front that routed by N reads again by the new layout, so a search counts
//    each product once: on its parent before the marker, on its new shard after it.
//
// Errors are std::runtime_error naming what is wrong (a split already in progress, a count that is
// not the deployment's, a shard that is not new, a gallery that has not reached its marker in
// time), RedisError when Redis is unreachable.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

#include "redis.h"
#include "shard_protocol.h"

namespace prism::service::reshard {

// Begins the split of `shards` (which must be prism:shards) into 2 * `shards`. Returns the layout
// it leaves ({shards, 2 * shards}).
shard::Layout begin(Redis& redis, int shards);

// What `copy` did: the products copied and the parent's position it waited for.
struct CopyResult {
  size_t copied = 0, parent_products = 0;
  std::string marker;  // the parent's split marker (a stream ID)
};
// Makes the gallery of new shard `shard` (N..2N-1) in `to` (absent or empty) from the gallery of
// its parent (shard - N) in `from`, once `from` has applied its split marker (waited for up to
// `wait`). The gallery is written in `to`.copying and renamed to `to` when complete, so a copy cut
// short leaves nothing a worker would take for a gallery. `log` says what it waits for.
CopyResult copy(Redis& redis, int shard, const std::filesystem::path& from, const std::filesystem::path& to,
                std::chrono::seconds wait, const std::function<void(const std::string&)>& log = {});

// Commits the split in progress, once every new shard has a live worker and its replicas have no
// lag in their writes streams (waited for up to `wait`, naming what is missing). Returns the new
// layout ({2N, 0}).
shard::Layout commit(Redis& redis, std::chrono::seconds wait, const std::function<void(const std::string&)>& log = {});

// One line: the layout, and during a split each new shard's replicas (live, lag).
std::string status(Redis& redis);

}  // namespace prism::service::reshard
