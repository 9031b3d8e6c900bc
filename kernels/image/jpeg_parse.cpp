#include "image/jpeg_parse.h"

#include <algorithm>
#include <cstring>

namespace prism::image::jpeg {
namespace {

// jpeg_natural_order: zigzag index -> natural (row-major) index, with 16 extra entries of 63.
constexpr uint8_t kNatural[80] = {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
                                  40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
                                  29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
                                  47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

bool refuse(std::string* why, const std::string& what) {
  if (why) *why = what;
  return false;
}

struct RawHuff {
  bool defined = false;
  uint8_t bits[17] = {0};
  uint8_t values[256] = {0};
};

// jpeg_make_d_derived_tbl's derivation and checks, plus the short codes' look-up table.
bool derive(const RawHuff& raw, bool dc, HuffLut* out) {
  int huffsize[257];
  uint32_t huffcode[257];
  int p = 0;
  for (int l = 1; l <= 16; ++l) {
    const int n = raw.bits[l];
    if (p + n > 256) return false;
    for (int i = 0; i < n; ++i) huffsize[p++] = l;
  }
  huffsize[p] = 0;
  const int count = p;
  uint32_t code = 0;
  int si = huffsize[0];
  p = 0;
  while (huffsize[p]) {
    while (huffsize[p] == si) {
      huffcode[p++] = code;
      ++code;
    }
    if (code >= (1u << si)) return false;
    code <<= 1;
    ++si;
  }
  std::memset(out, 0, sizeof *out);
  p = 0;
  for (int l = 1; l <= 16; ++l) {
    if (raw.bits[l]) {
      out->valoffset[l] = p - int32_t(huffcode[p]);
      p += raw.bits[l];
      out->maxcode[l] = int32_t(huffcode[p - 1]);
    } else {
      out->maxcode[l] = -1;
    }
  }
  out->maxcode[17] = 0xfffff;
  std::memcpy(out->values, raw.values, 256);
  for (int i = 0; i < count; ++i) {
    if (dc && raw.values[i] > 15) return false;  // libjpeg: JERR_BAD_HUFF_TABLE
    const int l = huffsize[i];
    if (l > kFastBits) continue;
    const uint32_t first = huffcode[i] << (kFastBits - l), n = 1u << (kFastBits - l);
    for (uint32_t k = 0; k < n; ++k) out->fast[first + k] = uint16_t(l << 8 | raw.values[i]);
  }
  return true;
}

struct Component {
  int id = 0, h = 0, v = 0, tq = 0;
};

uint32_t be16(const uint8_t* p) { return uint32_t(p[0]) << 8 | p[1]; }

}  // namespace

std::optional<JpegLayout> parse_jpeg(const uint8_t* data, size_t size, std::string* why) {
  if (size < 4 || data[0] != 0xff || data[1] != 0xd8) {
    refuse(why, "not a JPEG (no SOI marker)");
    return std::nullopt;
  }
  RawHuff dc_raw[kMaxTables], ac_raw[kMaxTables];
  uint16_t quant[kMaxTables][64];
  bool quant_defined[kMaxTables] = {false, false, false, false};
  Component comps[3];
  int ncomp = 0;
  bool saw_sof = false, saw_jfif = false, saw_adobe = false;
  int adobe_transform = 0;
  uint32_t width = 0, height = 0, restart = 0;
  size_t pos = 2;
  for (;;) {
    if (pos >= size || data[pos] != 0xff) {
      refuse(why, pos >= size ? "the data ends before the scan" : "bytes between markers");
      return std::nullopt;
    }
    while (pos < size && data[pos] == 0xff) ++pos;  // fill bytes
    if (pos >= size) {
      refuse(why, "the data ends before the scan");
      return std::nullopt;
    }
    const uint8_t marker = data[pos++];
    if (marker == 0xd8 || marker == 0xd9 || (marker >= 0xd0 && marker <= 0xd7) || marker == 0x01 || marker == 0) {
      refuse(why, "a marker without parameters before the scan");
      return std::nullopt;
    }
    if (pos + 2 > size) {
      refuse(why, "the data ends in a marker");
      return std::nullopt;
    }
    const uint32_t length = be16(data + pos);
    if (length < 2 || pos + length > size) {
      refuse(why, "a marker segment's length passes the end of the data");
      return std::nullopt;
    }
    const uint8_t* seg = data + pos + 2;
    const uint32_t n = length - 2;
    pos += length;
    if (marker >= 0xe0 && marker <= 0xef) {
      // APP0 JFIF and APP14 Adobe decide the colour space (libjpeg's examine_app0/examine_app14).
      if (marker == 0xe0 && n >= 14 && std::memcmp(seg, "JFIF", 5) == 0) saw_jfif = true;
      if (marker == 0xee && n >= 12 && std::memcmp(seg, "Adobe", 5) == 0) {
        saw_adobe = true;
        adobe_transform = seg[11];
      }
      continue;
    }
    switch (marker) {
      case 0xfe: continue;  // COM
      case 0xdb: {          // DQT
        uint32_t i = 0;
        while (i < n) {
          const int pq = seg[i] >> 4, tq = seg[i] & 15;
          ++i;
          if (tq >= kMaxTables || pq > 1 || i + 64u * (pq + 1) > n) {
            refuse(why, "a malformed DQT");
            return std::nullopt;
          }
          for (int k = 0; k < 64; ++k) {
            const uint32_t v = pq ? be16(seg + i + 2 * k) : seg[i + k];
            quant[tq][kNatural[k]] = uint16_t(v);
          }
          i += 64u * (pq + 1);
          quant_defined[tq] = true;
        }
        continue;
      }
      case 0xc4: {  // DHT
        uint32_t i = 0;
        while (i < n) {
          if (i + 17 > n) {
            refuse(why, "a malformed DHT");
            return std::nullopt;
          }
          const int index = seg[i];
          const bool ac = index & 0x10;
          const int th = index & ~0x10;
          uint32_t count = 0;
          for (int l = 1; l <= 16; ++l) count += seg[i + l];
          if (th >= kMaxTables || count > 256 || i + 17 + count > n) {
            refuse(why, "a malformed DHT");
            return std::nullopt;
          }
          RawHuff& t = ac ? ac_raw[th] : dc_raw[th];
          t = RawHuff();
          t.defined = true;
          for (int l = 1; l <= 16; ++l) t.bits[l] = seg[i + l];
          std::memcpy(t.values, seg + i + 17, count);
          i += 17 + count;
        }
        continue;
      }
      case 0xdd:  // DRI
        if (n != 2) {
          refuse(why, "a malformed DRI");
          return std::nullopt;
        }
        restart = be16(seg);
        continue;
      case 0xc0:
      case 0xc1: {  // SOF0, SOF1
        if (saw_sof) {
          refuse(why, "two SOF markers");
          return std::nullopt;
        }
        saw_sof = true;
        if (n < 6) {
          refuse(why, "a malformed SOF");
          return std::nullopt;
        }
        if (seg[0] != 8) {
          refuse(why, std::to_string(seg[0]) + "-bit samples");
          return std::nullopt;
        }
        height = be16(seg + 1);
        width = be16(seg + 3);
        ncomp = seg[5];
        if (height == 0 || width == 0 || width > 65500 || height > 65500) {
          refuse(why, "a width or height of 0 (DNL) or over 65500");
          return std::nullopt;
        }
        if (ncomp != 1 && ncomp != 3) {
          refuse(why, std::to_string(ncomp) + "-component JPEG (CMYK, YCCK or other)");
          return std::nullopt;
        }
        if (n != 6 + 3u * ncomp) {
          refuse(why, "a malformed SOF");
          return std::nullopt;
        }
        for (int c = 0; c < ncomp; ++c) {
          const uint8_t* q = seg + 6 + 3 * c;
          comps[c] = {q[0], q[1] >> 4, q[1] & 15, q[2]};
          if (comps[c].h < 1 || comps[c].h > 4 || comps[c].v < 1 || comps[c].v > 4 || comps[c].tq >= kMaxTables) {
            refuse(why, "sampling factors or a quantisation table libjpeg refuses");
            return std::nullopt;
          }
          for (int o = 0; o < c; ++o)
            if (comps[o].id == comps[c].id) {
              refuse(why, "two components with one id");
              return std::nullopt;
            }
        }
        continue;
      }
      case 0xc2: refuse(why, "progressive JPEG"); return std::nullopt;
      case 0xc3: refuse(why, "lossless JPEG"); return std::nullopt;
      case 0xc5:
      case 0xc6:
      case 0xc7: refuse(why, "hierarchical JPEG"); return std::nullopt;
      case 0xc9:
      case 0xca:
      case 0xcb:
      case 0xcc:
      case 0xcd:
      case 0xce:
      case 0xcf: refuse(why, "arithmetic-coded or hierarchical JPEG"); return std::nullopt;
      case 0xda: break;  // SOS, below
      default: refuse(why, "an unexpected marker before the scan"); return std::nullopt;
    }
    // SOS
    if (!saw_sof) {
      refuse(why, "SOS before SOF");
      return std::nullopt;
    }
    if (n < 1 || n != 4 + 2u * seg[0]) {
      refuse(why, "a malformed SOS");
      return std::nullopt;
    }
    const int ns = seg[0];
    if (ns != ncomp) {
      refuse(why, "a scan without every component (one scan per component)");
      return std::nullopt;
    }
    const uint8_t* params = seg + 1 + 2 * ns;
    if (params[0] != 0 || params[1] != 63 || params[2] != 0) {
      refuse(why, "a scan with spectral selection or successive approximation");
      return std::nullopt;
    }
    if (ncomp == 3) {  // jdapimin.c default_decompress_parms
      bool rgb = false;
      if (saw_jfif)
        rgb = false;
      else if (saw_adobe)
        rgb = adobe_transform == 0;
      else
        rgb = comps[0].id == 'R' && comps[1].id == 'G' && comps[2].id == 'B';
      if (rgb) {
        refuse(why, "an RGB JPEG (its grey is a colour conversion)");
        return std::nullopt;
      }
    }
    int max_h = 1, max_v = 1;
    for (int c = 0; c < ncomp; ++c) {
      max_h = std::max(max_h, comps[c].h);
      max_v = std::max(max_v, comps[c].v);
    }
    if (comps[0].h != max_h || comps[0].v != max_v) {
      refuse(why, "a first component sampled below the others (its grey needs upsampling)");
      return std::nullopt;
    }
    if (!quant_defined[comps[0].tq]) {
      refuse(why, "no quantisation table for the first component");
      return std::nullopt;
    }
    JpegLayout L;
    L.width = width;
    L.height = height;
    L.components = ncomp;
    L.restart_interval = restart;
    ScanTables& t = L.tables;
    std::memset(static_cast<void*>(&t), 0, sizeof t);
    std::memcpy(t.natural, kNatural, sizeof kNatural);
    for (int k = 0; k < 64; ++k) {
      if (quant[comps[0].tq][k] > 32767) {
        refuse(why, "a quantisation value over 32767");
        return std::nullopt;
      }
      t.quant[k] = int16_t(quant[comps[0].tq][k]);
    }
    int dc_slot[kMaxTables], ac_slot[kMaxTables];
    std::fill(dc_slot, dc_slot + kMaxTables, -1);
    std::fill(ac_slot, ac_slot + kMaxTables, -1);
    bool used[3] = {false, false, false};
    int blocks = 0;
    for (int i = 0; i < ns; ++i) {
      const int id = seg[1 + 2 * i], td = seg[2 + 2 * i] >> 4, ta = seg[2 + 2 * i] & 15;
      // libjpeg-turbo's get_sos takes the first frame component of this id whose place is not below
      // the scan's (it tests cur_comp_info[ci] for the i-th scan slot): a scan naming the frame's
      // components in another order is "Invalid component ID" there, so refused here too.
      int c = i;
      while (c < ncomp && (comps[c].id != id || used[c])) ++c;
      if (c == ncomp) {
        refuse(why, "a scan naming a component that is not in the frame");
        return std::nullopt;
      }
      used[c] = true;
      if (!quant_defined[comps[c].tq]) {  // libjpeg latches every scanned component's table
        refuse(why, "no quantisation table for a component");
        return std::nullopt;
      }
      if (td >= kMaxTables || ta >= kMaxTables || !dc_raw[td].defined || !ac_raw[ta].defined) {
        refuse(why, "a scan using a Huffman table the file does not define");
        return std::nullopt;
      }
      if (dc_slot[td] < 0) {
        dc_slot[td] = t.n_dc;
        if (!derive(dc_raw[td], true, &t.dc[t.n_dc++])) {
          refuse(why, "a bad Huffman table");
          return std::nullopt;
        }
      }
      if (ac_slot[ta] < 0) {
        ac_slot[ta] = t.n_ac;
        if (!derive(ac_raw[ta], false, &t.ac[t.n_ac++])) {
          refuse(why, "a bad Huffman table");
          return std::nullopt;
        }
      }
      const int bh = ns == 1 ? 1 : comps[c].h, bv = ns == 1 ? 1 : comps[c].v;
      if (blocks + bh * bv > kMaxBlocksInMcu) {
        refuse(why, "more than 10 blocks in an MCU");
        return std::nullopt;
      }
      for (int b = 0; b < bh * bv; ++b, ++blocks) {
        t.dc_of[blocks] = uint8_t(dc_slot[td]);
        t.ac_of[blocks] = uint8_t(ac_slot[ta]);
        t.y_of[blocks] = int8_t(c == 0 ? b : -1);
      }
      if (c == 0) {
        t.y_h = uint8_t(bh);
        t.y_v = uint8_t(bv);
        t.y_per_mcu = uint8_t(bh * bv);
      }
    }
    t.blocks_in_mcu = uint8_t(blocks);
    if (ns == 1) {                 // non-interleaved: one block per MCU, the component's blocks (jdinput.c)
      L.mcus_x = (width + 7) / 8;  // comps[0] has the largest sampling: ceil(w h / (8 max_h))
      L.mcus_y = (height + 7) / 8;
    } else {
      L.mcus_x = (width + 8 * max_h - 1) / (8 * max_h);
      L.mcus_y = (height + 8 * max_v - 1) / (8 * max_v);
    }
    L.y_blocks_x = L.mcus_x * t.y_h;
    L.y_blocks_y = L.mcus_y * t.y_v;
    L.scan_begin = pos;
    return L;
  }
}

size_t unstuffed_capacity(const JpegLayout& layout, size_t size, int seq_bits) {
  const size_t seq_bytes = size_t(seq_bits) / 8;
  const size_t data = size > layout.scan_begin ? size - layout.scan_begin : 0;
  return data + size_t(layout.intervals()) * seq_bytes + seq_bytes + kPadBytes;
}

bool unstuff_sizes_ok(const JpegLayout& layout, size_t size, int seq_bits, std::string* why) {
  if (seq_bits < 64 || seq_bits > 4096 || seq_bits % 64 != 0)
    return refuse(why, "subsequences must be a multiple of 64 bits, 64..4096");
  // every interval but the last ends in a 2-byte restart marker (checked first: the capacity grows
  // with the intervals)
  if (size <= layout.scan_begin || layout.intervals() - 1 > (size - layout.scan_begin) / 2)
    return refuse(why, "more restart intervals than the data could hold");
  if (unstuffed_capacity(layout, size, seq_bits) - kPadBytes >= (size_t(1) << 29))
    return refuse(why, "entropy-coded data over 512 MB");
  return true;
}

bool unstuff_scan_into(const JpegLayout& layout, const uint8_t* data, size_t size, int seq_bits, uint8_t* out,
                       Interval* intervals, uint32_t* subsequences, size_t* used_bytes, std::string* why) {
  if (!unstuff_sizes_ok(layout, size, seq_bits, why)) return false;
  const size_t seq_bytes = size_t(seq_bits) / 8;
  const uint64_t n_intervals = layout.intervals();
  size_t o = 0;    // output bytes
  uint64_t k = 0;  // the interval being copied
  size_t i = layout.scan_begin;
  intervals[0].first_seq = 0;
  const auto close_interval = [&]() {
    intervals[k].end_bit = uint32_t(o * 8);
    // pad to the next subsequence, at least one subsequence per interval
    size_t next = (o + seq_bytes - 1) / seq_bytes * seq_bytes;
    if (next == intervals[k].first_seq * seq_bytes) next += seq_bytes;
    std::memset(out + o, 0, next - o);
    o = next;
  };
  const uint8_t* end = data + size;
  const uint8_t* p = data + i;
  for (;;) {
    // copy plain bytes
    const uint8_t* ff = static_cast<const uint8_t*>(std::memchr(p, 0xff, size_t(end - p)));
    if (!ff) return refuse(why, "the scan's data does not end in a marker");
    std::memcpy(out + o, p, size_t(ff - p));
    o += size_t(ff - p);
    p = ff;
    while (p < end && *p == 0xff) ++p;  // FF, and fill FFs before a marker
    if (p == end) return refuse(why, "the scan's data does not end in a marker");
    const uint8_t m = *p++;
    if (m == 0) {
      out[o++] = 0xff;
      continue;
    }
    if (m >= 0xd0 && m <= 0xd7) {
      if (layout.restart_interval == 0 || k + 1 >= n_intervals || m != 0xd0 + (k & 7))
        return refuse(why, "a restart marker missing, out of sequence or in excess");
      close_interval();
      ++k;
      intervals[k].first_seq = uint32_t(o / seq_bytes);
      continue;
    }
    break;  // the marker that ends the scan
  }
  if (k + 1 != n_intervals) return refuse(why, "fewer restart markers than the image has intervals");
  close_interval();
  std::memset(out + o, 0, kPadBytes);
  *subsequences = uint32_t(o / seq_bytes);
  *used_bytes = o + kPadBytes;
  return true;
}

std::optional<UnstuffedScan> unstuff_scan(const JpegLayout& layout, const uint8_t* data, size_t size, int seq_bits,
                                          std::string* why) {
  UnstuffedScan s;
  if (seq_bits < 64 || seq_bits > 4096 || seq_bits % 64 != 0) {
    refuse(why, "subsequences must be a multiple of 64 bits, 64..4096");
    return std::nullopt;
  }
  if (size <= layout.scan_begin || layout.intervals() - 1 > (size - layout.scan_begin) / 2) {
    refuse(why, "more restart intervals than the data could hold");
    return std::nullopt;
  }
  s.bytes.resize(unstuffed_capacity(layout, size, seq_bits));
  s.intervals.resize(size_t(layout.intervals()));
  size_t used = 0;
  if (!unstuff_scan_into(layout, data, size, seq_bits, s.bytes.data(), s.intervals.data(), &s.subsequences, &used, why))
    return std::nullopt;
  s.bytes.resize(used);
  return s;
}

}  // namespace prism::image::jpeg
