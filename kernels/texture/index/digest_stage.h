// The texture index's digest stage: an approximate search of the host tier
// (SearchParams::digest_candidates) ranks the host tier's digest slots (DigestLayout, slot_store.h)
// against the query and keeps the host-tier images of the best ones for the exact matching, so
// that it reads host memory only for those. Kept digests live in the slot store; streamed ones
// (IndexOptions::stream_host_digests) are copied from the host slots into the resources' staging.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "texture/index.h"
#include "texture/index/resources.h"
#include "texture/index/slot_store.h"

namespace prism::texture {

// Whether a search of the whole index (a scoped one never does) with these parameters goes through the
// digests: on an index with digests and a host tier, asking for fewer digest slots than would name
// every host image (those take the exact plan, which streams the host tier without the digests).
bool digest_search(const SlotStore& store, const SearchParams& params);

// Every digest slot's score against the query (padded, `rows` rows; on the GPU path already in the
// resources' d_query), into `s` on the CPU path. On the GPU path enqueued, with their copy back to
// digest_scores_buf: kept digests matched on a copy stream, beside the GPU tier's matching on the
// resources' stream; streamed ones copied batch by batch on a copy stream and matched on the stream
// between the GPU tier's runs. `progress(share)` after each batch enqueued: the caller enqueues as much
// of the GPU tier (as in an exact search, a long queue of one kind would fill CUDA's launch queue and
// serialise the two).
void digest_match(const SlotStore& store, SearchResources& res, const uint8_t* query, int rows, float ratio,
                  std::vector<int>& s, const std::function<void(double)>& progress);
// The host-tier slots of the `digest_candidates` digest slots that score highest, ties to the lower
// slot, in slot order (on the GPU path after digest_match's scores have landed in `s`).
std::vector<int> digest_pick(const SlotStore& store, SearchResources& res, int digest_candidates, std::vector<int>& s);

}  // namespace prism::texture
