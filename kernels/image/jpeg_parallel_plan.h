// Host-side sizes and checks shared by the CPU and CUDA paths of jpeg_parallel.h.
#pragma once

#include <cstdint>
#include <string>

#include "image/jpeg_huffman_pixel.h"
#include "image/jpeg_parallel.h"
#include "image/jpeg_parse.h"

namespace prism::image::jpeg {

// The grey output of a decode at 1/reduction.
struct OutputPlan {
  uint32_t width = 0, height = 0;  // the image's sides / reduction, rounded up (libjpeg's output size)
  int block = 8;                   // samples per block side: 8 / reduction
  uint64_t interval_y_blocks = 1;  // first-component blocks per restart interval (DC prediction restarts)
};

inline OutputPlan output_plan(const JpegLayout& l, int reduction) {
  OutputPlan p;
  p.width = (l.width + uint32_t(reduction) - 1) / uint32_t(reduction);
  p.height = (l.height + uint32_t(reduction) - 1) / uint32_t(reduction);
  p.block = 8 / reduction;
  p.interval_y_blocks = l.restart_interval ? uint64_t(l.restart_interval) * l.tables.y_per_mcu : l.y_blocks();
  if (p.interval_y_blocks == 0) p.interval_y_blocks = 1;
  return p;
}

// The reduction, parameters and sizes this decoder takes; false with `why` otherwise. Every block
// takes at least a bit of data, so a header claiming more blocks than the data has bits is refused
// before anything of its size is allocated.
inline bool check_plan(const JpegLayout& l, size_t size, int reduction, const ParallelParams& p, std::string* why) {
  const auto no = [&](const std::string& what) {
    if (why) *why = what;
    return false;
  };
  if (reduction != 1 && reduction != 2 && reduction != 4 && reduction != 8)
    return no("a reduction other than 1, 2, 4, 8");
  if (p.seq_bits < 64 || p.seq_bits > 4096 || p.seq_bits % 64 != 0)
    return no("subsequences must be a multiple of 64 bits, 64..4096");
  if (p.group < 1 || p.group > 1024) return no("groups of 1..1024 subsequences");
  if (uint64_t(l.width) * l.height > p.max_pixels) return no("more pixels than max_pixels");
  const uint64_t blocks = l.mcus() * l.tables.blocks_in_mcu;
  const uint64_t data_bits = size > l.scan_begin ? 8 * uint64_t(size - l.scan_begin) : 0;
  if (blocks > data_bits || blocks >= (1ull << 32)) return no("more blocks than the data has bits (truncated)");
  return true;
}

inline ScanView scan_view(const JpegLayout& l, const uint8_t* bytes, const Interval* intervals, uint32_t n_intervals,
                          uint32_t n_seq, int seq_bits) {
  ScanView v;
  v.bytes = bytes;
  v.t = &l.tables;
  v.intervals = intervals;
  v.n_intervals = n_intervals;
  v.n_seq = n_seq;
  v.seq_bits = uint32_t(seq_bits);
  v.total_blocks = l.mcus() * l.tables.blocks_in_mcu;
  v.interval_blocks = l.restart_interval ? uint64_t(l.restart_interval) * l.tables.blocks_in_mcu : v.total_blocks;
  return v;
}

}  // namespace prism::image::jpeg
