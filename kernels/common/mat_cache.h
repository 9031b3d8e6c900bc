// Large cv::Mat buffers kept for the next image instead of going back to the system: a
// cv::MatAllocator that caches freed blocks by size class, up to a byte cap shared by every thread.
//
// Why: a process that maps every large buffer and unmaps it on free (the texture service sets
// M_MMAP_THRESHOLD to 1 MiB, http_api.cpp, so that glibc's per-thread arenas do not keep cv::SIFT's
// 16 MB pyramid levels resident in every handler thread) pays for every image again in fresh,
// zero-filled pages: cv::SIFT's pyramids of one 1024-pixel image are some 245 MB of such buffers,
// and a CPU extraction served over HTTP faulted in about 19,000 pages where the same extraction in
// a loop (reusing its memory) faulted about 1,300 (docs/benchmarks/service.md). Images of a
// service come in a few sizes, so the blocks of one are the blocks of the next.
//
// What it holds: blocks of `kMinBytes` or more are rounded up to a size class (1/8 of a power of
// two: at most 12.5% more) and, when freed, kept for a later request of the same class. The large
// blocks it has handed out and the ones it keeps together stay within `cap` bytes where they can:
// a miss first frees kept blocks (least recently kept first) until the new block fits; past the cap
// only blocks in use remain, never a kept one. Smaller blocks go to cv::fastMalloc as OpenCV's own
// allocator does. Every Mat remembers its allocator, so installing this one at any time is safe;
// the allocator lives until the process ends.
#pragma once

#include <cstddef>
#include <cstdint>

namespace prism::mat_cache {

constexpr size_t kMinBytes = size_t(1) << 20;

// Makes the cache OpenCV's default Mat allocator (the first call) and sets its cap (every call; a
// lower cap frees kept blocks at once). A cap of 0 keeps nothing (every block freed at once).
void install(size_t cap_bytes);

struct Stats {
  uint64_t hits = 0;        // large blocks handed out from the cache
  uint64_t misses = 0;      // large blocks allocated anew
  uint64_t freed = 0;       // kept blocks freed to stay within the cap
  size_t kept_bytes = 0;    // in the cache now
  size_t in_use_bytes = 0;  // large blocks handed out and not yet given back
  size_t cap_bytes = 0;
  bool installed = false;
};
Stats stats();

// The size class a large block of `bytes` is rounded up to (exposed for the tests).
size_t size_class(size_t bytes);

}  // namespace prism::mat_cache
