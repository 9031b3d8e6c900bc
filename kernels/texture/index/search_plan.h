// The texture index's search plan: the ratio-test scores of a query against the images in a search's
// scope (the GPU tier matched in place, block by block; the host tier streamed through the GPU in
// batches on the copy streams, each batch's copy overlapping the other streams' matching, as FAISS
// stages a host gallery; or, for an approximate search, the digest stage's candidates), and the
// per-row matches of the shortlist for verification. The slot store says where images are; the
// resources lend the streams and buffers; the index holds the locks (both halves of a search run
// under its shared lock and a lane's `turn`) and makes the decision.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "texture/features.h"
#include "texture/index.h"
#include "texture/index/resources.h"
#include "texture/index/slot_store.h"

namespace prism::texture {

// A search's query, padded once (rows a multiple of 16, zero rows after the query's: a zero row never
// passes the ratio test) and on the GPU path uploaded once, to its lane's d_query on the lane's stream:
// the scoring (lane 0's), the digests and the verification all read it there. On the GPU path it lives
// in the lane's query_buf and d_query, so the search holds the lane's `turn` from prepare_query until
// its last matching (the verification's); on the CPU path in `plain`.
//
// Or up to kMaxQueries queries at once (prepare_queries), matched by one matcher call per run of images
// (the matcher's batched queries: query j owns rows [j * rows, (j + 1) * rows)). Each is padded to the
// longest one's rows: the extra rows are zero and never pass, so each query's scores are its own alone.
struct Query {
  std::vector<uint8_t> plain;
  const uint8_t* host = nullptr;
  int rows = 0;      // per query, padded to a multiple of 16
  int features = 0;  // the query's own (batched: the most any has; 0: nothing to match)
  int queries = 1;
};
constexpr int kMaxQueries = kMaxBatchQueries;  // (index.h says why 8)
// std::invalid_argument unless the query carries 8-bit descriptors (check_descriptors).
void prepare_query(Lane& lane, const Features& query, Query& q);
// 1 to kMaxQueries queries (std::invalid_argument otherwise, or when one is not 8-bit: check_descriptors).
void prepare_queries(Lane& lane, const std::vector<const Features*>& queries, Query& q);

// The ratio-test scores of the owners in the search's scope, scores[i] for owner owner_of[i]: every
// image, on lane 0 (scope null; through the digests when digest_search says so, `digested` then counting the
// host-tier images ranked by their digest alone), or the owners listed in `scope`. A batch of queries
// (Query::queries > 1) has query j's scores at scores[j * owner_of.size() + i]; it never goes through
// the digests (std::logic_error: the index searches such batches one query at a time).
void score(const SlotStore& store, SearchResources& res, const Query& q, const SearchParams& params,
           const std::vector<int>* scope, std::vector<int>& scores, std::vector<int>& owner_of,
           size_t* digested = nullptr);

// Each of `owners` re-matched against the prepared query for its per-row top-2: rows [c * q.rows, +q.rows)
// of best, second (squared distances) and index are owner c's. On the GPU the owners in the GPU tier
// are matched where they live (one launch per GPU block, through a slot list, with the block's counts),
// and only those in the host tier are copied (pinned memory) into the lane's d_verify and matched
// there: the same integers as matching copies of every slot. `turn` (the lane's, held since
// prepare_query) is given
// back once the results are in host memory, before the caller's geometric verification, so that
// another search matches on the GPU meanwhile.
void rematch(const SlotStore& store, Lane& lane, const Query& q, const std::vector<int>& owners, float ratio,
             std::vector<int32_t>& best, std::vector<int32_t>& second, std::vector<int>& index,
             std::unique_lock<std::mutex>& turn);

}  // namespace prism::texture
