// JPEG decoding to grey in parallel, bit for bit libjpeg-turbo's: what image/decode.h's
// decode_grey_reduced gives for a JPEG (JCS_GRAYSCALE, JDCT_ISLOW, scale 1/reduction), for the
// baseline and extended sequential Huffman JPEGs that jpeg_parse.h handles. Why: the texture service
// decodes 4000x3000 phone photos reduced to 2000x1500, and a CPU core spends ~50 ms of that in the
// entropy decoding, which libjpeg does serially; on a GPU the whole decode takes a few ms.
//
// The algorithm (jpeg_huffman_pixel.h names its sources): the unstuffed entropy-coded data is cut
// into subsequences of seq_bits bits (restart intervals start at a subsequence, so they decode
// independently). Phases, each over every subsequence (a CUDA thread each on the GPU, a loop here):
//  1. in groups of `group` consecutive subsequences (a CUDA block), each decodes its subsequence from
//     a guessed entry state (a codeword and an MCU begin at its first bit), and takes as its entry
//     the exit state of its left neighbour until no entry changes (at most group + 1 rounds, each
//     re-decoding only the subsequences whose entry changed);
//  2. each group but the first takes the exit of the previous group's last subsequence and
//     re-decodes until an entry equals the one phase 1 found;
//  3. only where a group of phase 2 never met its phase-1 chain (or phase 1 ran out of rounds): each
//     restart interval decoded sequentially from its start (one thread per interval);
//  4. an exclusive prefix sum of the blocks each subsequence begins gives each its first block, and
//     the decode is checked against the image: every restart interval holds its MCUs exactly and ends
//     within a byte of its data, no code is bad;
//  5. each subsequence is decoded again, writing the first component's DC differences and
//     coefficients (the other components are decoded only to step over them);
//  6. an inclusive prefix sum of the DC differences, restarted at each interval, gives the DCs; the
//     inverse DCT of each block at 8 / reduction samples a side, cropped to the output.
// Anything not handled (jpeg_parse.h) or found damaged is reported, so that the caller decodes with
// libjpeg-turbo, whose way with damaged data stays the reference. No read or write goes out of its
// buffers whatever the data: bit reads stop at each interval's end, block indices are checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <opencv2/core.hpp>

#include "image/jpeg_parse.h"

#if defined(PRISM_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "common/device_array.h"
#endif

namespace prism::image::jpeg {

struct ParallelParams {
  int seq_bits = 256;  // bits per subsequence: a multiple of 64, 64..4096
  int group = 128;     // subsequences synchronised together in phase 1 (CUDA: threads per block, <= 1024)
  int max_rounds = 0;  // phase 1's rounds before phase 3 takes over; 0: group + 1 (always enough)
  uint64_t max_pixels = 64ull << 20;  // width x height refused above (image/decode.h's default)
};

// What a decode did, for tests and benchmarks.
struct ParallelStats {
  uint32_t subsequences = 0, intervals = 0;
  int rounds = 0;           // the most rounds a group of phase 1 ran
  uint32_t resynced = 0;    // subsequences phase 2 re-decoded
  bool sequential = false;  // phase 3 ran
  uint32_t status = 0;      // kStatus* bits (jpeg_huffman_pixel.h)
};

// The grey decode reduced by `reduction` (1, 2, 4 or 8; sides rounded up, as libjpeg), or nothing
// with `why` saying why (not handled, or the data does not decode to the image), where the caller
// decodes with libjpeg-turbo. The same phases as CudaJpegDecoder, run by loops.
std::optional<cv::Mat> decode_grey_parallel(const uint8_t* data, size_t size, int reduction,
                                            const ParallelParams& params = {}, std::string* why = nullptr,
                                            ParallelStats* stats = nullptr);

#if defined(PRISM_HAVE_CUDA)
// A grey image in device memory: height rows of width bytes, continuous (pitch = width). Reused
// across decodes: its array grows, never shrinks.
struct DeviceGrey {
  gpu::DeviceArray<uint8_t> pixels;
  int width = 0, height = 0;
};

// The parallel decode on the GPU. One decoder per stream (not thread-safe); its device buffers and
// pinned staging buffer are kept and grown as images need, so that a server decoding images of one
// camera allocates nothing per image once warm.
class CudaJpegDecoder {
 public:
  explicit CudaJpegDecoder(const ParallelParams& params = {});

  // Decodes into `out` on `stream` and waits for it (one stream synchronisation, to read whether the
  // data decoded to the image). Host work: the marker parse and one pass removing byte stuffing into
  // pinned memory, uploaded with one copy. False (with `why`) where not handled or damaged: decode
  // with libjpeg-turbo then. Throws gpu::CudaError where device memory cannot be had.
  bool decode_grey(const uint8_t* data, size_t size, int reduction, DeviceGrey* out, cudaStream_t stream,
                   std::string* why = nullptr, ParallelStats* stats = nullptr);

 private:
  ParallelParams params_;
  gpu::PinnedArray<uint8_t> staging_;  // ScanTables, intervals, unstuffed bytes
  gpu::PinnedArray<uint32_t> status_host_;
  gpu::DeviceArray<uint8_t> input_;  // the staging buffer's copy
  gpu::DeviceArray<SyncState> entries_;
  gpu::DeviceArray<SeqResult> results_;
  gpu::DeviceArray<SyncState> boundary_;  // phase 1's exit of each group's last subsequence
  gpu::DeviceArray<uint32_t> counts_, starts_;
  gpu::DeviceArray<int16_t> coef_;
  gpu::DeviceArray<int32_t> dc_;
  gpu::DeviceArray<uint32_t> dc_sum_;
  gpu::DeviceArray<uint32_t> status_;    // [0] status bits, [1] rounds, [2] resynced
  gpu::DeviceArray<uint8_t> scan_temp_;  // CUB's scratch
};
#endif

}  // namespace prism::image::jpeg
