// A timeline of the GPU's copies and kernels over one stretch of a benchmark, from CUPTI's activity
// records: what Nsight Systems would show, for the GPU machine, where nsys cannot make a report.
// Bench-only (header-only; the benchmark links CUPTI). Summarises the stretch: its span, the time
// the host-to-device engine and the multiprocessors were busy (unions of intervals), how much the
// two overlapped, and per stream what ran; optionally writes every record as CSV for a picture.
#pragma once

#include <cupti.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace prism::bench {

class CuptiTrace {
 public:
  struct Record {
    char what;  // 'K' kernel, 'H' host-to-device, 'D' device-to-host, 'C' other copy, 'S' memset
    uint64_t start, end, bytes;
    uint32_t stream;
    std::string name;
  };

  // Starts recording copies, memsets and kernels (once per process).
  static bool begin() {
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS) return false;
    return cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS &&
           cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_SUCCESS &&
           cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) == CUPTI_SUCCESS;
  }
  static uint64_t now() {
    uint64_t t = 0;
    cuptiGetTimestamp(&t);
    return t;
  }
  // The records that started in [from, to), after the GPU is idle (the caller synchronised).
  static std::vector<Record> take(uint64_t from, uint64_t to) {
    cuptiActivityFlushAll(1);
    std::lock_guard<std::mutex> g(mu());
    std::vector<Record> out;
    for (const Record& r : store())
      if (r.start >= from && r.start < to) out.push_back(r);
    store().clear();
    std::sort(out.begin(), out.end(), [](const Record& a, const Record& b) { return a.start < b.start; });
    return out;
  }

  // Prints the summary of `rs` under `title`; writes them to `csv` (start and end in µs from the first
  // record) unless it is empty.
  static void report(const char* title, const std::vector<Record>& rs, const std::string& csv) {
    if (rs.empty()) return (void)std::printf("trace %s: no records\n", title);
    const uint64_t t0 = rs.front().start;
    uint64_t t1 = t0;
    for (const Record& r : rs) t1 = std::max(t1, r.end);
    const auto merged = [&](auto keep) {
      std::vector<std::pair<uint64_t, uint64_t>> v;
      for (const Record& r : rs)
        if (keep(r)) v.emplace_back(r.start, r.end);
      std::sort(v.begin(), v.end());
      std::vector<std::pair<uint64_t, uint64_t>> m;
      for (auto& iv : v)
        if (!m.empty() && iv.first <= m.back().second)
          m.back().second = std::max(m.back().second, iv.second);
        else
          m.push_back(iv);
      return m;
    };
    const auto busy = [](const std::vector<std::pair<uint64_t, uint64_t>>& m) {
      uint64_t s = 0;
      for (auto& iv : m) s += iv.second - iv.first;
      return s;
    };
    const auto h2d = merged([](const Record& r) { return r.what == 'H'; });
    const auto ker = merged([](const Record& r) { return r.what == 'K'; });
    uint64_t both = 0;  // intersection of the two unions
    for (size_t i = 0, j = 0; i < h2d.size() && j < ker.size();) {
      const uint64_t lo = std::max(h2d[i].first, ker[j].first), hi = std::min(h2d[i].second, ker[j].second);
      if (hi > lo) both += hi - lo;
      (h2d[i].second < ker[j].second ? i : j)++;
    }
    uint64_t h2d_bytes = 0, gap = 0;
    for (const Record& r : rs)
      if (r.what == 'H') h2d_bytes += r.bytes;
    for (size_t i = 1; i < h2d.size(); ++i) gap = std::max(gap, h2d[i].first - h2d[i - 1].second);
    const double ms = 1e-6;
    std::printf(
        "trace %s: span %.1f ms; host-to-device busy %.1f ms (%.2f GB, %.1f GB/s while busy, first at %.1f, last end "
        "%.1f, longest idle %.2f ms); kernels busy %.1f ms; both at once %.1f ms\n",
        title, (t1 - t0) * ms, busy(h2d) * ms, h2d_bytes / 1e9, busy(h2d) ? h2d_bytes / double(busy(h2d)) : 0.0,
        h2d.empty() ? 0.0 : (h2d.front().first - t0) * ms, h2d.empty() ? 0.0 : (h2d.back().second - t0) * ms, gap * ms,
        busy(ker) * ms, both * ms);
    struct PerStream {
      int kernels = 0, copies = 0;
      uint64_t kernel_ns = 0, copy_ns = 0, first = UINT64_MAX, last = 0;
    };
    std::map<uint32_t, PerStream> per;
    for (const Record& r : rs) {
      PerStream& p = per[r.stream];
      (r.what == 'K' ? p.kernels : p.copies)++;
      (r.what == 'K' ? p.kernel_ns : p.copy_ns) += r.end - r.start;
      p.first = std::min(p.first, r.start);
      p.last = std::max(p.last, r.end);
    }
    for (auto& [id, p] : per)
      std::printf("  stream %u: %d kernels %.1f ms, %d copies/memsets %.1f ms, from %.1f to %.1f ms\n", id, p.kernels,
                  p.kernel_ns * ms, p.copies, p.copy_ns * ms, (p.first - t0) * ms, (p.last - t0) * ms);
    if (csv.empty()) return;
    if (FILE* f = std::fopen(csv.c_str(), "w")) {
      std::fprintf(f, "what,stream,start_us,end_us,bytes,name\n");
      for (const Record& r : rs)
        std::fprintf(f, "%c,%u,%.3f,%.3f,%llu,%s\n", r.what, r.stream, (r.start - t0) * 1e-3, (r.end - t0) * 1e-3,
                     (unsigned long long)r.bytes, r.name.c_str());
      std::fclose(f);
    }
  }

 private:
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<Record>& store() {
    static std::vector<Record> s;
    return s;
  }
  static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *size = size_t(16) << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
    *max_records = 0;
  }
  static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* a = nullptr;
    std::lock_guard<std::mutex> g(mu());
    while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
      if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(a);
        store().push_back({'K', k->start, k->end, 0, k->streamId, k->name ? k->name : ""});
      } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(a);
        const char w = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? 'H'
                       : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? 'D'
                                                                        : 'C';
        store().push_back({w, m->start, m->end, m->bytes, m->streamId, ""});
      } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(a);
        store().push_back({'S', m->start, m->end, m->bytes, m->streamId, ""});
      }
    }
    std::free(buffer);
  }
};

}  // namespace prism::bench
