// The marker parse and the entropy-coded data of a baseline or extended sequential Huffman JPEG, for
// the parallel decoder (jpeg_parallel.h): what the decode of one image needs, read on the host with
// no pixel decoded, and refused with a reason for anything that decoder does not handle.
//
// Handled: SOF0 and SOF1, 8-bit samples, 1 component (grey) or 3 (YCbCr, as libjpeg-turbo decides
// from the JFIF and Adobe markers and the component ids: jdapimin.c's default_decompress_parms), one
// scan holding every component, Huffman tables defined in the file, quantisation tables of 8 or 16
// bits (values up to 32767), any restart interval, the sampling factors libjpeg accepts (1..4, at
// most 10 blocks per MCU) where the first component has the largest (its grey output then needs no
// upsampling). Everything else is "not handled" (the caller decodes with libjpeg-turbo): progressive,
// lossless, hierarchical, arithmetic coding, 12-bit, 2 or 4 components (CMYK, YCCK), RGB (an Adobe
// transform of 0 or components 'R', 'G', 'B'), one scan per component, tables libjpeg would fill in
// (Motion-JPEG without DHT), garbage between markers, a scan whose data does not end in a marker.
// A refusal here never claims the file is damaged: libjpeg-turbo, the reference, decides that.
//
// Decoding the entropy-coded data needs it without byte stuffing (a 0xFF data byte is written
// FF 00) and split at its restart markers (RSTn, every `restart_interval` MCUs), whose intervals
// decode independently: unstuff_scan() does both in one pass over the bytes, laying each interval
// out from a multiple of `seq_bits` bits, so that the fixed-size subsequences of the parallel decoder
// never straddle two intervals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "image/jpeg_huffman_pixel.h"

namespace prism::image::jpeg {

// What a decode of the first component (the grey output) needs.
struct JpegLayout {
  uint32_t width = 0, height = 0;  // the image's, as SOF declares them
  int components = 0;              // in the frame: 1 or 3
  uint32_t mcus_x = 0, mcus_y = 0;
  uint32_t restart_interval = 0;            // MCUs per interval (DRI), 0: one interval for the whole scan
  uint32_t y_blocks_x = 0, y_blocks_y = 0;  // the first component's blocks (whole MCUs), raster
  ScanTables tables;                        // Huffman tables, MCU layout and quantisation of the scan
  size_t scan_begin = 0;                    // the first byte of entropy-coded data (after SOS)

  uint64_t mcus() const { return uint64_t(mcus_x) * mcus_y; }
  uint64_t intervals() const { return restart_interval ? (mcus() + restart_interval - 1) / restart_interval : 1; }
  uint64_t y_blocks() const { return mcus() * uint64_t(tables.y_per_mcu); }
};

// The layout of a JPEG the parallel decoder handles, or nothing with `why` saying what it is
// ("progressive JPEG", "CMYK or other 4-component JPEG", ...).
std::optional<JpegLayout> parse_jpeg(const uint8_t* data, size_t size, std::string* why = nullptr);

// The entropy-coded data with byte stuffing removed: interval k's bytes start at bit
// intervals[k].first_seq * seq_bits of `bytes` and end at intervals[k].end_bit; the bytes after an
// interval's end up to the next multiple of seq_bits, and kPadBytes past the last, are zero.
struct UnstuffedScan {
  std::vector<uint8_t> bytes;
  std::vector<Interval> intervals;
  uint32_t subsequences = 0;  // of seq_bits bits each: bytes.size() = subsequences * seq_bits / 8 + kPadBytes
};

// Zero bytes after the data, so that a decoder may read a whole 32-bit window at any bit before the
// end without a bounds check per byte.
constexpr size_t kPadBytes = 8;

// An upper bound of the unstuffed size (bytes, padding included) of `layout`'s scan in a file of
// `size` bytes, for a caller that provides the buffer (unstuff_scan_into).
size_t unstuffed_capacity(const JpegLayout& layout, size_t size, int seq_bits);

// Whether the scan's sizes are ones unstuff_scan_into takes (subsequences of 64..4096 bits, a
// multiple of 64; under 512 MB of data; no more restart intervals than the data could hold), false
// with `why` otherwise: checked before a caller sizes its buffers from the header's numbers, which a
// damaged file may make huge (a restart interval of 1 MCU declared for far more MCUs than bytes).
bool unstuff_sizes_ok(const JpegLayout& layout, size_t size, int seq_bits, std::string* why = nullptr);

// One pass over the scan's bytes: unstuffed into `bytes` (unstuffed_capacity bytes) and
// `intervals` (layout.intervals() entries). False with `why` where the scan's data does not end in a
// marker before the file does, a restart marker is missing, out of sequence or in excess, or the
// data is too long for 32-bit bit positions: things libjpeg-turbo copes with in its own way, so the
// caller lets it. `seq_bits`: a multiple of 64, 64..4096.
bool unstuff_scan_into(const JpegLayout& layout, const uint8_t* data, size_t size, int seq_bits, uint8_t* bytes,
                       Interval* intervals, uint32_t* subsequences, size_t* used_bytes, std::string* why = nullptr);
std::optional<UnstuffedScan> unstuff_scan(const JpegLayout& layout, const uint8_t* data, size_t size, int seq_bits,
                                          std::string* why = nullptr);

}  // namespace prism::image::jpeg
