// The CPU path of jpeg_parallel.h: the GPU's phases with loops standing in for its threads and
// blocks (phase 1's rounds over a group are the CUDA block's rounds between barriers), on the same
// per-thread functions (jpeg_huffman_pixel.h). Tests and the fuzz target hold it to libjpeg-turbo.
#include "image/jpeg_parallel.h"

#include <algorithm>
#include <vector>

#include "image/jpeg_parallel_plan.h"

namespace prism::image::jpeg {

std::optional<cv::Mat> decode_grey_parallel(const uint8_t* data, size_t size, int reduction,
                                            const ParallelParams& params, std::string* why, ParallelStats* stats) {
  ParallelStats local;
  ParallelStats& st = stats ? *stats : local;
  st = ParallelStats();
  std::string reason;
  std::string* w = why ? why : &reason;
  const std::optional<JpegLayout> layout = parse_jpeg(data, size, w);
  if (!layout) return std::nullopt;
  if (!check_plan(*layout, size, reduction, params, w)) return std::nullopt;
  std::optional<UnstuffedScan> scan = unstuff_scan(*layout, data, size, params.seq_bits, w);
  if (!scan) return std::nullopt;
  const ScanView v = scan_view(*layout, scan->bytes.data(), scan->intervals.data(), uint32_t(scan->intervals.size()),
                               scan->subsequences, params.seq_bits);
  const uint32_t n = v.n_seq;
  st.subsequences = n;
  st.intervals = v.n_intervals;
  std::vector<SyncState> x(n);
  std::vector<SeqResult> r(n);
  uint32_t status = 0;

  // Phase 1: group by group, rounds between the barriers of a CUDA block.
  const uint32_t group = uint32_t(params.group);
  const int max_rounds = params.max_rounds > 0 ? params.max_rounds : params.group + 1;
  std::vector<SyncState> next(group);
  std::vector<char> dirty(group);
  std::vector<SyncState> boundary;  // phase 1's exit of each group's last subsequence
  for (uint32_t g0 = 0; g0 < n; g0 += group) {
    const uint32_t m = std::min(group, n - g0);
    for (uint32_t i = 0; i < m; ++i) {
      x[g0 + i] = guess_state(place_of(v, g0 + i));
      dirty[i] = 1;
    }
    bool converged = false;
    int round = 0;
    while (round < max_rounds) {
      ++round;
      for (uint32_t i = 0; i < m; ++i)
        if (dirty[i]) r[g0 + i] = decode_from(v, place_of(v, g0 + i), x[g0 + i]);
      bool any = false;
      for (uint32_t i = 0; i < m; ++i) {
        next[i] = x[g0 + i];
        dirty[i] = sync_adopt(v, g0 + i, i, x.data() + g0, r.data() + g0, &next[i]);
        any = any || dirty[i];
      }
      for (uint32_t i = 0; i < m; ++i) x[g0 + i] = next[i];
      if (!any) {
        converged = true;
        break;
      }
    }
    st.rounds = std::max(st.rounds, round);
    if (!converged) status |= kStatusUnsynced;
    boundary.push_back(r[g0 + m - 1].exit);
  }

  // Phase 2: each group from phase 1's exit of the previous group's last subsequence (the copy in
  // `boundary`, as the CUDA threads read it whatever order they run in).
  for (uint32_t g = 1; g < boundary.size(); ++g) {
    const uint32_t first = g * group;
    if (!resync_group(v, first, std::min(first + group, n), boundary[g - 1], x.data(), r.data(), &st.resynced))
      status |= kStatusUnsynced;
  }

  // Phase 3.
  if (status & kStatusUnsynced) {
    st.sequential = true;
    for (uint32_t k = 0; k < v.n_intervals; ++k) sequential_interval(v, k, x.data(), r.data());
  }

  // Phase 4.
  std::vector<uint32_t> start(n);
  uint64_t sum = 0;
  for (uint32_t j = 0; j < n; ++j) {
    start[j] = uint32_t(sum);
    sum += r[j].blocks;
  }
  for (uint32_t j = 0; j < n; ++j)
    if (!verify_seq(v, j, r.data(), start.data())) {
      status |= kStatusCorrupt;
      break;
    }
  st.status = status;
  if (status & kStatusCorrupt) {
    *w = "the entropy-coded data does not decode to the image's blocks (damaged, or not as libjpeg reads it)";
    return std::nullopt;
  }

  // Phase 5.
  const uint64_t y_blocks = layout->y_blocks();
  std::vector<int16_t> coef(reduction == 8 ? 0 : size_t(y_blocks) * 64, 0);
  std::vector<int32_t> dc(size_t(y_blocks), 0);
  for (uint32_t j = 0; j < n; ++j)
    write_seq(v, j, x.data(), start.data(), coef.empty() ? nullptr : coef.data(), dc.data());

  // Phase 6.
  std::vector<uint32_t> dc_sum(static_cast<size_t>(y_blocks));
  uint32_t acc = 0;
  for (uint64_t d = 0; d < y_blocks; ++d) dc_sum[d] = acc += uint32_t(dc[d]);
  const OutputPlan out = output_plan(*layout, reduction);
  cv::Mat grey(int(out.height), int(out.width), CV_8UC1);
  int16_t zero[64] = {0};
  for (uint64_t d = 0; d < y_blocks; ++d) {
    uint32_t bx = 0, by = 0;
    y_block_place(d, layout->tables, layout->mcus_x, bx, by);
    if (uint64_t(bx) * out.block >= out.width || uint64_t(by) * out.block >= out.height) continue;
    int16_t* c = coef.empty() ? zero : coef.data() + d * 64;
    if (!idct_block(c, dc_value(dc_sum.data(), d, out.interval_y_blocks), layout->tables.quant, reduction, bx, by,
                    grey.data, grey.step[0], out.width, out.height))
      status |= kStatusRange;
  }
  st.status = status;
  if (status & kStatusRange) {
    *w = "coefficients out of the range where libjpeg-turbo's SIMD inverse DCT is its C one (damaged data)";
    return std::nullopt;
  }
  return grey;
}

}  // namespace prism::image::jpeg
