// The per-thread work of the parallel JPEG decoder (jpeg_parallel.h), shared by its CPU path
// (jpeg_parallel.cpp, loops standing in for threads) and its CUDA path (jpeg_parallel.cu): the
// Huffman decode of one subsequence of the entropy-coded data, and the inverse DCTs of one block.
//
// Sources. The entropy decoding is the self-synchronising parallel Huffman decoding of
// A. Weissenberger and B. Schmidt, "Massively Parallel Huffman Decoding on GPUs" (ICPP 2018), as
// applied to JPEG in their "Accelerating JPEG Decompression on GPUs" (HiPC 2021): the data is cut
// into subsequences of a fixed number of bits; a decoder started at a subsequence's first bit as if
// a codeword began there, with a guessed position in the MCU, soon falls onto the true codeword
// boundaries and MCU position (Huffman codes synchronise by themselves), so decoders of
// neighbouring subsequences that reach the same state at the same bit agree from there on. The
// state compared is (bit, block of the MCU, coefficient index), SyncState here. The per-symbol
// semantics (DC differences, AC runs, ZRL, EOB, a run past coefficient 63 clamped to 63, as the extra
// entries of jpeg_natural_order do) and the inverse DCTs (jpeg_idct_islow of jidctint.c and
// jpeg_idct_4x4/2x2/1x1 of jidctred.c, integer arithmetic and range limiting included) are
// libjpeg-turbo 2.1's, rewritten here.
//
// libjpeg-turbo on x86-64 runs SSE2/AVX2 versions of the 8x8, 4x4 and 2x2 inverse DCTs, equal to the
// C code while the values fit their 16-bit lanes; the C code's range limiting also wraps where the
// SIMD saturates. No encoder's data comes near either limit, but damaged data can: the inverse DCTs
// here say when a block leaves the range where the two agree (a dequantised coefficient or a
// first-pass value outside int16, an output outside [-384, 511] before the +128 and the limit), and
// the decoder then reports the image as not handled, so that libjpeg-turbo decodes it.
#pragma once

#include <cstdint>

#include "common/hostdevice.h"

namespace prism::image::jpeg {

constexpr int kFastBits = 9;  // codes of up to 9 bits are decoded by one table look-up
constexpr int kMaxTables = 4;
constexpr int kMaxBlocksInMcu = 10;  // libjpeg's D_MAX_BLOCKS_IN_MCU
constexpr uint32_t kInvalidBit = 0xffffffffu;

// One Huffman table as libjpeg's jpeg_make_d_derived_tbl derives it, plus a look-up of the short codes.
struct HuffLut {
  uint16_t fast[1 << kFastBits];  // (length << 8) | symbol for the codes of <= kFastBits bits; 0: longer
  int32_t maxcode[18];            // the largest code of each length, -1 where none
  int32_t valoffset[18];          // values index = code + valoffset[length]
  uint8_t values[256];
};

// What the decode of a scan reads: its tables, its MCU and the first component's quantisation.
struct ScanTables {
  HuffLut dc[kMaxTables], ac[kMaxTables];  // the tables the scan uses, first n_dc and n_ac of each
  int16_t quant[64];                       // the first component's, natural order, as libjpeg-turbo holds it
  uint8_t natural[80];                     // zigzag index -> natural index, 16 more entries of 63
  uint8_t n_dc = 0, n_ac = 0;
  uint8_t blocks_in_mcu = 0;
  uint8_t dc_of[kMaxBlocksInMcu], ac_of[kMaxBlocksInMcu];  // the tables of each block of the MCU
  int8_t y_of[kMaxBlocksInMcu];             // the block's index among the first component's in the MCU, -1: other
  uint8_t y_per_mcu = 1, y_h = 1, y_v = 1;  // the first component's blocks in an MCU: y_h across, y_v down
};

// Interval k of restart markers (or the whole scan): its bits start at first_seq x seq_bits.
struct Interval {
  uint32_t first_seq;  // its first subsequence
  uint32_t end_bit;    // one past its last data bit
};

// A decoder's state between two codewords: the next bit, the MCU's block and the block's next
// coefficient (0: its DC difference). bit = kInvalidBit: no state (the decode failed).
struct SyncState {
  uint32_t bit;
  uint32_t cz;  // block << 8 | coefficient
};
PRISM_HD bool operator==(SyncState a, SyncState b) { return a.bit == b.bit && a.cz == b.cz; }
PRISM_HD bool operator!=(SyncState a, SyncState b) { return !(a == b); }
PRISM_HD SyncState invalid_state() { return {kInvalidBit, kInvalidBit}; }

// A subsequence decoded from an entry state: where it leaves off (the first codeword boundary at or
// after its end, or where the data ran out), how many blocks it began (DC differences decoded),
// whether it met a code that is no code of its table (bad: not on the true path, or damaged data).
struct SeqResult {
  SyncState exit;
  uint32_t blocks;
  uint32_t bad;
};

// The 32 bits of `bytes` from bit `bit` on, the first in the top bit. The caller guarantees 5
// readable bytes from bit / 8 (kPadBytes of zeros follow the data).
PRISM_HD uint32_t peek32(const uint8_t* bytes, uint32_t bit) {
  const uint8_t* p = bytes + (bit >> 3);
  const uint64_t w = uint64_t(p[0]) << 32 | uint64_t(p[1]) << 24 | uint64_t(p[2]) << 16 | uint64_t(p[3]) << 8 | p[4];
  return uint32_t(w >> (8 - (bit & 7)));
}

// libjpeg's HUFF_EXTEND: the s-bit value v as a signed magnitude.
PRISM_HD int huff_extend(uint32_t v, int s) { return v < (1u << (s - 1)) ? int(v) - (1 << s) + 1 : int(v); }

// The code at the top of `w`: its length and symbol, false where no code of `t` begins there.
PRISM_HD bool huff_decode(const HuffLut& t, uint32_t w, int& len, int& sym) {
  const uint32_t e = t.fast[w >> (32 - kFastBits)];
  if (e) {
    len = int(e >> 8);
    sym = int(e & 255);
    return true;
  }
  const uint32_t top = w >> 16;
  for (int l = kFastBits + 1; l <= 16; ++l) {
    const int32_t code = int32_t(top >> (16 - l));
    if (code <= t.maxcode[l]) {
      len = l;
      sym = t.values[(code + t.valoffset[l]) & 255];
      return true;
    }
  }
  return false;
}

enum CodewordResult : int { kCodeword = 0, kDataEnd = 1, kBadCode = 2 };

// A sink that keeps nothing (the synchronisation and counting passes).
struct NullSink {
  PRISM_HD void dc(int) {}
  PRISM_HD void ac(int, int) {}
};

// Decodes one codeword (a Huffman symbol and its extra bits) at `bit` that must end by `limit`,
// advancing (bit, c, z); sink.dc(value) where a block begins, sink.ac(natural index, value) for a
// coefficient. kDataEnd where the codeword would pass `limit` (or, within 16 bits of it, no code
// matches: the bits past the limit are not data), kBadCode where no code matches.
template <class Sink>
PRISM_HD int decode_codeword(const uint8_t* bytes, uint32_t limit, const ScanTables& t, uint32_t& bit, uint32_t& c,
                             uint32_t& z, Sink& sink) {
  if (bit >= limit) return kDataEnd;
  const uint32_t left = limit - bit;
  const uint32_t w = peek32(bytes, bit);
  const HuffLut& h = z == 0 ? t.dc[t.dc_of[c]] : t.ac[t.ac_of[c]];
  int len = 0, sym = 0;
  if (!huff_decode(h, w, len, sym)) return left < 16 ? kDataEnd : kBadCode;
  int r = 0, s = sym;
  if (z != 0) {
    r = sym >> 4;
    s = sym & 15;
  }
  if (uint32_t(len + s) > left) return kDataEnd;
  const int value = s ? huff_extend((w << len) >> (32 - s), s) : 0;
  bit += uint32_t(len + s);
  if (z == 0) {
    sink.dc(value);
    z = 1;
  } else if (s) {
    const uint32_t k = z + uint32_t(r);
    sink.ac(t.natural[k < 63 ? k : 63], value);
    z = k + 1;
  } else if (r == 15) {
    z += 16;  // ZRL
  } else {
    z = 64;  // EOB
  }
  if (z >= 64) {
    z = 0;
    c = c + 1 == t.blocks_in_mcu ? 0 : c + 1;
  }
  return kCodeword;
}

// Decodes from `entry` up to the first codeword boundary at or after `end`, codewords ending by
// `limit` (the interval's end). Bounded: every codeword takes at least one bit.
template <class Sink>
PRISM_HD SeqResult decode_subsequence(const uint8_t* bytes, const ScanTables& t, SyncState entry, uint32_t end,
                                      uint32_t limit, Sink& sink) {
  SeqResult r{entry, 0, 0};
  uint32_t c = entry.cz >> 8, z = entry.cz & 255;
  if (entry.bit == kInvalidBit || c >= t.blocks_in_mcu || z > 63) {
    r.exit = invalid_state();
    r.bad = 1;
    return r;
  }
  uint32_t bit = entry.bit;
  while (bit < end) {
    const bool starts_block = z == 0;
    const int e = decode_codeword(bytes, limit, t, bit, c, z, sink);
    if (e == kDataEnd) break;
    if (e == kBadCode) {
      // Not the true path (or damaged data: the verification fails on `bad` then). The chain goes
      // on from a guess one bit further, as a subsequence's first guess does: an exit that ended
      // here would leave every later subsequence of its group without a state to synchronise from.
      r.bad = 1;
      bit += 1;
      c = 0;
      z = 0;
      continue;
    }
    r.blocks += starts_block ? 1 : 0;
  }
  r.exit = {bit, c << 8 | z};
  return r;
}

// Where subsequence j lies: interval k (binary search of the intervals' first subsequences), its
// bits [start, end) and the interval's end (the limit of its codewords).
struct SeqPlace {
  uint32_t interval, start, end, limit;
  bool first, last;  // the interval's first (its entry state is known) or last subsequence
};
PRISM_HD SeqPlace seq_place(uint32_t j, const Interval* intervals, uint32_t n_intervals, uint32_t n_seq,
                            uint32_t seq_bits) {
  uint32_t lo = 0, hi = n_intervals;  // the last interval whose first_seq <= j
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (intervals[mid].first_seq <= j)
      lo = mid;
    else
      hi = mid;
  }
  SeqPlace p;
  p.interval = lo;
  p.limit = intervals[lo].end_bit;
  p.start = j * seq_bits;
  const uint32_t next_first = lo + 1 < n_intervals ? intervals[lo + 1].first_seq : n_seq;
  p.first = j == intervals[lo].first_seq;
  p.last = j + 1 == next_first;
  p.end = p.last ? p.limit : (j + 1) * seq_bits;
  if (p.end > p.limit) p.end = p.limit;
  return p;
}

// The entry state guessed for a subsequence (a codeword and the MCU's first block begin at its
// first bit); the true one for an interval's first.
PRISM_HD SyncState guess_state(const SeqPlace& p) { return {p.start, 0}; }

// The write pass's sink: the first component's DC differences (by the block's place in decode
// order, d) and its coefficients (64 per block, natural order; none when `coef` is null).
struct CoefSink {
  int16_t* coef_out;
  int32_t* dc_out;
  const ScanTables* t;
  uint64_t next_block;  // the scan's index of the next block to begin (all components, MCU order)
  uint64_t end_block;   // blocks from here on are not written (past the interval: bad data)
  int64_t cur = -1;     // the current block's d, -1: another component's, or none

  PRISM_HD int64_t y_index(uint64_t b) const {
    if (b >= end_block) return -1;
    const uint64_t m = b / t->blocks_in_mcu;
    const int y = t->y_of[b % t->blocks_in_mcu];
    return y < 0 ? -1 : int64_t(m * t->y_per_mcu + uint64_t(y));
  }
  // Entering at a state in the middle of block next_block - 1.
  PRISM_HD void resume(uint32_t z) { cur = z != 0 && next_block > 0 ? y_index(next_block - 1) : -1; }
  PRISM_HD void dc(int value) {
    cur = y_index(next_block++);
    if (cur >= 0) dc_out[cur] = value;
  }
  PRISM_HD void ac(int pos, int value) {
    if (cur >= 0 && coef_out) coef_out[cur * 64 + pos] = int16_t(value);
  }
};

// The first component's block d (decode order) in the component's raster of blocks.
PRISM_HD void y_block_place(uint64_t d, const ScanTables& t, uint32_t mcus_x, uint32_t& bx, uint32_t& by) {
  const uint64_t m = d / t.y_per_mcu;
  const uint32_t i = uint32_t(d % t.y_per_mcu);
  bx = uint32_t(m % mcus_x) * t.y_h + i % t.y_h;
  by = uint32_t(m / mcus_x) * t.y_v + i / t.y_h;
}

// ---- the phases of the parallel decode, per thread (jpeg_parallel.cpp and .cu run the same) ----

// One image's scan as every phase reads it.
struct ScanView {
  const uint8_t* bytes;  // unstuffed (jpeg_parse.h's UnstuffedScan)
  const ScanTables* t;
  const Interval* intervals;
  uint32_t n_intervals, n_seq, seq_bits;
  uint64_t interval_blocks;  // blocks (all components) per restart interval: MCUs x blocks_in_mcu
  uint64_t total_blocks;     // of the scan
};

// Status bits, ORed together by the phases.
constexpr uint32_t kStatusUnsynced = 1;  // a group did not synchronise: the sequential pass ran (not a failure)
constexpr uint32_t kStatusCorrupt = 2;   // the data does not decode to the image's blocks
constexpr uint32_t kStatusRange = 4;     // a block out of the range where libjpeg-turbo's SIMD IDCT is its C IDCT

PRISM_HD SeqPlace place_of(const ScanView& v, uint32_t j) {
  return seq_place(j, v.intervals, v.n_intervals, v.n_seq, v.seq_bits);
}

PRISM_HD SeqResult decode_from(const ScanView& v, const SeqPlace& p, SyncState entry) {
  NullSink sink;
  return decode_subsequence(v.bytes, *v.t, entry, p.end, p.limit, sink);
}

// Phase 1, one round for subsequence j of a group (x, r: the group's entries and results):
// whether j's entry changes to the exit of j - 1 (not for the group's or an interval's first).
PRISM_HD bool sync_adopt(const ScanView& v, uint32_t j, uint32_t i, const SyncState* x, const SeqResult* r,
                         SyncState* x_out) {
  if (i == 0 || place_of(v, j).first) return false;
  const SyncState want = r[i - 1].exit;
  if (want == x[i]) return false;
  *x_out = want;
  return true;
}

// Phase 2, for group g (subsequences [first, end)): its first entry taken from `before`, the exit
// phase 1 left for the previous group's last subsequence (a copy made by phase 1, so that the
// previous group's own phase 2, rewriting that subsequence at the same time, is not read half
// written), re-decoding until an entry equals the one phase 1 found (from there phase 1's chain is
// the true one). False where the group's end is reached without that and the chain goes on into the
// next group (whose entry may then be wrong: the sequential pass decides). `resynced` counts.
PRISM_HD bool resync_group(const ScanView& v, uint32_t first, uint32_t end, SyncState before, SyncState* x,
                           SeqResult* r, uint32_t* resynced) {
  if (first == 0 || first >= v.n_seq || place_of(v, first).first) return true;
  SyncState entry = before;
  for (uint32_t j = first; j < end; ++j) {
    const SeqPlace p = place_of(v, j);
    if (j > first && p.first) return true;  // a new interval: its entry is known
    if (x[j] == entry) return true;
    x[j] = entry;
    r[j] = decode_from(v, p, entry);
    entry = r[j].exit;
    ++*resynced;
  }
  return end >= v.n_seq || place_of(v, end).first;
}

// Phase 3 (only where a group did not synchronise): interval k decoded from its start, one
// subsequence after the other.
PRISM_HD void sequential_interval(const ScanView& v, uint32_t k, SyncState* x, SeqResult* r) {
  const uint32_t first = v.intervals[k].first_seq;
  const uint32_t end = k + 1 < v.n_intervals ? v.intervals[k + 1].first_seq : v.n_seq;
  for (uint32_t j = first; j < end; ++j) {
    const SeqPlace p = place_of(v, j);
    x[j] = j == first ? guess_state(p) : r[j - 1].exit;
    r[j] = decode_from(v, p, x[j]);
  }
}

// Phase 4, after the exclusive prefix sum `start` of the blocks each subsequence begins: whether
// subsequence j agrees with the image (no bad code; an interval begins at its first block and ends
// with its last, at the end of an MCU, with less than a byte of its data left).
PRISM_HD bool verify_seq(const ScanView& v, uint32_t j, const SeqResult* r, const uint32_t* start) {
  const SeqPlace p = place_of(v, j);
  if (r[j].bad) return false;
  const uint64_t first_block = uint64_t(p.interval) * v.interval_blocks;
  if (p.first && start[j] != first_block) return false;
  if (p.last) {
    const uint64_t end_block =
        first_block + v.interval_blocks < v.total_blocks ? first_block + v.interval_blocks : v.total_blocks;
    if (uint64_t(start[j]) + r[j].blocks != end_block || r[j].exit.cz != 0 || r[j].exit.bit > p.limit ||
        p.limit - r[j].exit.bit >= 8)
      return false;
  }
  return true;
}

// Phase 5: subsequence j decoded again from its entry, writing the first component's DC
// differences and coefficients (coef: null at reduction 8, where only DC counts).
PRISM_HD void write_seq(const ScanView& v, uint32_t j, const SyncState* x, const uint32_t* start, int16_t* coef,
                        int32_t* dc) {
  const SeqPlace p = place_of(v, j);
  const uint64_t first_block = uint64_t(p.interval) * v.interval_blocks;
  CoefSink sink{coef, dc, v.t, start[j],
                first_block + v.interval_blocks < v.total_blocks ? first_block + v.interval_blocks : v.total_blocks};
  sink.resume(x[j].cz & 255);
  decode_subsequence(v.bytes, *v.t, x[j], p.end, p.limit, sink);
}

// Phase 6 (after an inclusive prefix sum `dc_sum` of the DC differences in decode order, wrapping):
// block d's DC, the sum since its interval began (libjpeg's running last_dc_val).
PRISM_HD int dc_value(const uint32_t* dc_sum, uint64_t d, uint64_t interval_y_blocks) {
  const uint64_t d0 = d - d % interval_y_blocks;
  return int(dc_sum[d] - (d0 ? dc_sum[d0 - 1] : 0u));
}

// ---- inverse DCTs (libjpeg-turbo 2.1: jidctint.c jpeg_idct_islow, jidctred.c jpeg_idct_4x4,
// jpeg_idct_2x2, jpeg_idct_1x1; CONST_BITS 13, PASS1_BITS 2) ----

namespace idct {

constexpr int kConstBits = 13, kPass1Bits = 2;

PRISM_HD int64_t descale(int64_t x, int n) { return (x + (int64_t(1) << (n - 1))) >> n; }
PRISM_HD int64_t lshift(int64_t x, int n) { return int64_t(uint64_t(x) << n); }

// libjpeg's range_limit[x & RANGE_MASK] (IDCT_range_limit: x + 128 limited to 0..255 for x in
// [-384, 511], wrapping beyond).
PRISM_HD uint8_t range_limit(int64_t x) {
  const int i = int(x & 1023);
  if (i < 128) return uint8_t(i + 128);
  if (i < 512) return 255;
  if (i < 896) return 0;
  return uint8_t(i - 896);
}

// Whether libjpeg-turbo's SIMD inverse DCTs agree with the C code on these values.
PRISM_HD bool fits16(int64_t v) { return v >= -32768 && v <= 32767; }
PRISM_HD bool output_in_range(int64_t x) { return x >= -384 && x <= 511; }

// DEQUANTIZE: (ISLOW_MULT_TYPE)coef x quantval, both 16-bit.
PRISM_HD int dq(const int16_t* in, const int16_t* q, int i, bool& ok) {
  const int v = int(in[i]) * int(q[i]);
  ok = ok && fits16(v);
  return v;
}

}  // namespace idct

// jpeg_idct_islow: 8x8 samples, rows of 8 in `out`. False where the SIMD version may differ.
PRISM_HD bool idct_8x8(const int16_t* in, const int16_t* q, uint8_t* out) {
  using namespace idct;
  constexpr int64_t F0_298 = 2446, F0_390 = 3196, F0_541 = 4433, F0_765 = 6270, F0_899 = 7373, F1_175 = 9633,
                    F1_501 = 12299, F1_847 = 15137, F1_961 = 16069, F2_053 = 16819, F2_562 = 20995, F3_072 = 25172;
  bool ok = true;
  int ws[64];
  for (int col = 0; col < 8; ++col) {
    const int16_t* ip = in + col;
    const int16_t* qp = q + col;
    if (ip[8] == 0 && ip[16] == 0 && ip[24] == 0 && ip[32] == 0 && ip[40] == 0 && ip[48] == 0 && ip[56] == 0) {
      const int64_t dcval = lshift(dq(ip, qp, 0, ok), kPass1Bits);
      ok = ok && fits16(dcval);
      for (int r = 0; r < 8; ++r) ws[r * 8 + col] = int(dcval);
      continue;
    }
    int64_t z2 = dq(ip, qp, 16, ok), z3 = dq(ip, qp, 48, ok);
    int64_t z1 = (z2 + z3) * F0_541;
    int64_t tmp2 = z1 + z3 * -F1_847;
    int64_t tmp3 = z1 + z2 * F0_765;
    z2 = dq(ip, qp, 0, ok);
    z3 = dq(ip, qp, 32, ok);
    int64_t tmp0 = lshift(z2 + z3, kConstBits);
    int64_t tmp1 = lshift(z2 - z3, kConstBits);
    const int64_t tmp10 = tmp0 + tmp3, tmp13 = tmp0 - tmp3, tmp11 = tmp1 + tmp2, tmp12 = tmp1 - tmp2;
    tmp0 = dq(ip, qp, 56, ok);
    tmp1 = dq(ip, qp, 40, ok);
    tmp2 = dq(ip, qp, 24, ok);
    tmp3 = dq(ip, qp, 8, ok);
    z1 = tmp0 + tmp3;
    z2 = tmp1 + tmp2;
    z3 = tmp0 + tmp2;
    int64_t z4 = tmp1 + tmp3;
    const int64_t z5 = (z3 + z4) * F1_175;
    tmp0 = tmp0 * F0_298;
    tmp1 = tmp1 * F2_053;
    tmp2 = tmp2 * F3_072;
    tmp3 = tmp3 * F1_501;
    z1 = z1 * -F0_899;
    z2 = z2 * -F2_562;
    z3 = z3 * -F1_961;
    z4 = z4 * -F0_390;
    z3 += z5;
    z4 += z5;
    tmp0 += z1 + z3;
    tmp1 += z2 + z4;
    tmp2 += z2 + z3;
    tmp3 += z1 + z4;
    const int n = kConstBits - kPass1Bits;
    const int64_t o[8] = {descale(tmp10 + tmp3, n), descale(tmp11 + tmp2, n), descale(tmp12 + tmp1, n),
                          descale(tmp13 + tmp0, n), descale(tmp13 - tmp0, n), descale(tmp12 - tmp1, n),
                          descale(tmp11 - tmp2, n), descale(tmp10 - tmp3, n)};
    for (int r = 0; r < 8; ++r) {
      ok = ok && fits16(o[r]);
      ws[r * 8 + col] = int(o[r]);
    }
  }
  for (int row = 0; row < 8; ++row) {
    const int* w = ws + row * 8;
    uint8_t* op = out + row * 8;
    if (w[1] == 0 && w[2] == 0 && w[3] == 0 && w[4] == 0 && w[5] == 0 && w[6] == 0 && w[7] == 0) {
      const int64_t x = descale(w[0], kPass1Bits + 3);
      ok = ok && output_in_range(x);
      const uint8_t v = range_limit(x);
      for (int i = 0; i < 8; ++i) op[i] = v;
      continue;
    }
    int64_t z2 = w[2], z3 = w[6];
    int64_t z1 = (z2 + z3) * F0_541;
    int64_t tmp2 = z1 + z3 * -F1_847;
    int64_t tmp3 = z1 + z2 * F0_765;
    int64_t tmp0 = lshift(int64_t(w[0]) + w[4], kConstBits);
    int64_t tmp1 = lshift(int64_t(w[0]) - w[4], kConstBits);
    const int64_t tmp10 = tmp0 + tmp3, tmp13 = tmp0 - tmp3, tmp11 = tmp1 + tmp2, tmp12 = tmp1 - tmp2;
    tmp0 = w[7];
    tmp1 = w[5];
    tmp2 = w[3];
    tmp3 = w[1];
    z1 = tmp0 + tmp3;
    z2 = tmp1 + tmp2;
    z3 = tmp0 + tmp2;
    int64_t z4 = tmp1 + tmp3;
    const int64_t z5 = (z3 + z4) * F1_175;
    tmp0 = tmp0 * F0_298;
    tmp1 = tmp1 * F2_053;
    tmp2 = tmp2 * F3_072;
    tmp3 = tmp3 * F1_501;
    z1 = z1 * -F0_899;
    z2 = z2 * -F2_562;
    z3 = z3 * -F1_961;
    z4 = z4 * -F0_390;
    z3 += z5;
    z4 += z5;
    tmp0 += z1 + z3;
    tmp1 += z2 + z4;
    tmp2 += z2 + z3;
    tmp3 += z1 + z4;
    const int n = kConstBits + kPass1Bits + 3;
    const int64_t o[8] = {descale(tmp10 + tmp3, n), descale(tmp11 + tmp2, n), descale(tmp12 + tmp1, n),
                          descale(tmp13 + tmp0, n), descale(tmp13 - tmp0, n), descale(tmp12 - tmp1, n),
                          descale(tmp11 - tmp2, n), descale(tmp10 - tmp3, n)};
    for (int i = 0; i < 8; ++i) {
      ok = ok && output_in_range(o[i]);
      op[i] = range_limit(o[i]);
    }
  }
  return ok;
}

// jpeg_idct_4x4: 4x4 samples, rows of 4 in `out`.
PRISM_HD bool idct_4x4(const int16_t* in, const int16_t* q, uint8_t* out) {
  using namespace idct;
  constexpr int64_t F0_211 = 1730, F0_509 = 4176, F0_601 = 4926, F0_765 = 6270, F0_899 = 7373, F1_061 = 8697,
                    F1_451 = 11893, F1_847 = 15137, F2_172 = 17799, F2_562 = 20995;
  bool ok = true;
  int ws[32];
  for (int col = 0; col < 8; ++col) {
    if (col == 4) continue;  // the second pass does not use column 4
    const int16_t* ip = in + col;
    const int16_t* qp = q + col;
    if (ip[8] == 0 && ip[16] == 0 && ip[24] == 0 && ip[40] == 0 && ip[48] == 0 && ip[56] == 0) {
      const int64_t dcval = lshift(dq(ip, qp, 0, ok), kPass1Bits);
      ok = ok && fits16(dcval);
      for (int r = 0; r < 4; ++r) ws[r * 8 + col] = int(dcval);
      continue;
    }
    int64_t tmp0 = lshift(dq(ip, qp, 0, ok), kConstBits + 1);
    int64_t z2 = dq(ip, qp, 16, ok), z3 = dq(ip, qp, 48, ok);
    int64_t tmp2 = z2 * F1_847 + z3 * -F0_765;
    const int64_t tmp10 = tmp0 + tmp2, tmp12 = tmp0 - tmp2;
    const int64_t z1 = dq(ip, qp, 56, ok);
    z2 = dq(ip, qp, 40, ok);
    z3 = dq(ip, qp, 24, ok);
    const int64_t z4 = dq(ip, qp, 8, ok);
    tmp0 = z1 * -F0_211 + z2 * F1_451 + z3 * -F2_172 + z4 * F1_061;
    tmp2 = z1 * -F0_509 + z2 * -F0_601 + z3 * F0_899 + z4 * F2_562;
    const int n = kConstBits - kPass1Bits + 1;
    const int64_t o[4] = {descale(tmp10 + tmp2, n), descale(tmp12 + tmp0, n), descale(tmp12 - tmp0, n),
                          descale(tmp10 - tmp2, n)};
    for (int r = 0; r < 4; ++r) {
      ok = ok && fits16(o[r]);
      ws[r * 8 + col] = int(o[r]);
    }
  }
  for (int row = 0; row < 4; ++row) {
    const int* w = ws + row * 8;
    uint8_t* op = out + row * 4;
    if (w[1] == 0 && w[2] == 0 && w[3] == 0 && w[5] == 0 && w[6] == 0 && w[7] == 0) {
      const int64_t x = descale(w[0], kPass1Bits + 3);
      ok = ok && output_in_range(x);
      const uint8_t v = range_limit(x);
      for (int i = 0; i < 4; ++i) op[i] = v;
      continue;
    }
    const int64_t tmp0 = lshift(w[0], kConstBits + 1);
    const int64_t tmp2 = int64_t(w[2]) * F1_847 + int64_t(w[6]) * -F0_765;
    const int64_t tmp10 = tmp0 + tmp2, tmp12 = tmp0 - tmp2;
    const int64_t z1 = w[7], z2 = w[5], z3 = w[3], z4 = w[1];
    const int64_t t0 = z1 * -F0_211 + z2 * F1_451 + z3 * -F2_172 + z4 * F1_061;
    const int64_t t2 = z1 * -F0_509 + z2 * -F0_601 + z3 * F0_899 + z4 * F2_562;
    const int n = kConstBits + kPass1Bits + 3 + 1;
    const int64_t o[4] = {descale(tmp10 + t2, n), descale(tmp12 + t0, n), descale(tmp12 - t0, n),
                          descale(tmp10 - t2, n)};
    for (int i = 0; i < 4; ++i) {
      ok = ok && output_in_range(o[i]);
      op[i] = range_limit(o[i]);
    }
  }
  return ok;
}

// jpeg_idct_2x2: 2x2 samples, rows of 2 in `out`.
PRISM_HD bool idct_2x2(const int16_t* in, const int16_t* q, uint8_t* out) {
  using namespace idct;
  constexpr int64_t F0_720 = 5906, F0_850 = 6967, F1_272 = 10426, F3_624 = 29692;
  bool ok = true;
  int ws[16];
  for (int col = 0; col < 8; ++col) {
    if (col == 2 || col == 4 || col == 6) continue;
    const int16_t* ip = in + col;
    const int16_t* qp = q + col;
    if (ip[8] == 0 && ip[24] == 0 && ip[40] == 0 && ip[56] == 0) {
      const int64_t dcval = lshift(dq(ip, qp, 0, ok), kPass1Bits);
      ok = ok && fits16(dcval);
      ws[col] = ws[8 + col] = int(dcval);
      continue;
    }
    const int64_t tmp10 = lshift(dq(ip, qp, 0, ok), kConstBits + 2);
    int64_t tmp0 = int64_t(dq(ip, qp, 56, ok)) * -F0_720;
    tmp0 += int64_t(dq(ip, qp, 40, ok)) * F0_850;
    tmp0 += int64_t(dq(ip, qp, 24, ok)) * -F1_272;
    tmp0 += int64_t(dq(ip, qp, 8, ok)) * F3_624;
    const int n = kConstBits - kPass1Bits + 2;
    const int64_t o0 = descale(tmp10 + tmp0, n), o1 = descale(tmp10 - tmp0, n);
    ok = ok && fits16(o0) && fits16(o1);
    ws[col] = int(o0);
    ws[8 + col] = int(o1);
  }
  for (int row = 0; row < 2; ++row) {
    const int* w = ws + row * 8;
    uint8_t* op = out + row * 2;
    if (w[1] == 0 && w[3] == 0 && w[5] == 0 && w[7] == 0) {
      const int64_t x = descale(w[0], kPass1Bits + 3);
      ok = ok && output_in_range(x);
      op[0] = op[1] = range_limit(x);
      continue;
    }
    const int64_t tmp10 = lshift(w[0], kConstBits + 2);
    const int64_t tmp0 =
        int64_t(w[7]) * -F0_720 + int64_t(w[5]) * F0_850 + int64_t(w[3]) * -F1_272 + int64_t(w[1]) * F3_624;
    const int n = kConstBits + kPass1Bits + 3 + 2;
    const int64_t o0 = descale(tmp10 + tmp0, n), o1 = descale(tmp10 - tmp0, n);
    ok = ok && output_in_range(o0) && output_in_range(o1);
    op[0] = range_limit(o0);
    op[1] = range_limit(o1);
  }
  return ok;
}

// jpeg_idct_1x1 (plain C in libjpeg-turbo too: no range to check).
PRISM_HD uint8_t idct_1x1(int dc, const int16_t* q) {
  const int dcval = int(idct::descale(int64_t(int(int16_t(dc)) * int(q[0])), 3));
  return idct::range_limit(dcval);
}

// The first component's block d: its DC (the running sum of its interval's differences, as
// libjpeg's int truncated to JCOEF) put into its coefficients, the inverse DCT at 8 / reduction
// samples a side, written into the grey image (rows `pitch` apart) where it lies inside
// out_w x out_h. False where libjpeg-turbo's SIMD IDCT may differ (see the top of this file).
PRISM_HD bool idct_block(int16_t* coef, int dc, const int16_t* quant, int reduction, uint32_t bx, uint32_t by,
                         uint8_t* out, uint64_t pitch, uint32_t out_w, uint32_t out_h) {
  uint8_t px[64];
  bool ok = true;
  const int k = 8 / reduction;
  if (reduction == 8) {
    px[0] = idct_1x1(dc, quant);
  } else {
    coef[0] = int16_t(dc);
    ok = reduction == 1   ? idct_8x8(coef, quant, px)
         : reduction == 2 ? idct_4x4(coef, quant, px)
                          : idct_2x2(coef, quant, px);
  }
  for (int y = 0; y < k; ++y) {
    const uint64_t oy = uint64_t(by) * k + y;
    if (oy >= out_h) break;
    for (int x = 0; x < k; ++x) {
      const uint64_t ox = uint64_t(bx) * k + x;
      if (ox >= out_w) break;
      out[oy * pitch + ox] = px[y * k + x];
    }
  }
  return ok;
}

}  // namespace prism::image::jpeg
