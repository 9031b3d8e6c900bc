// Fuzz target: image files through the bounded loader (gst-libs/gst/prism/gstprismimagefile.h,
// image_file_load_grey over kernels/image/decode.h: PNG, JPEG, binary PNM by allowlist),
// shared by poissonblend's mask-location, `prism texture` and `prism bow`.
// The limit is small here (kMaxPixels) so that the header/dimension check before decoding is hit
// often and accepted images decode quickly. Checks: an accepted image has 1..kMaxPixels pixels and
// exactly width x height grey bytes; a refusal is a GError naming the file; no GStreamer-CRITICAL or
// WARNING (the log handler aborts on one). Each input is loaded a second time with a min_side (a
// JPEG decoded reduced by libjpeg's DCT scaling, as `prism texture` loads large photos) chosen by
// the input's length, so that the reduced path sees every input the full one does: the same checks,
// and where both decode, the same file size, and the reduced size image::jpeg_reduced_size gives.
// A JPEG goes through the parallel decoder's CPU path too (image/jpeg_parallel.h, subsequence and
// group sizes chosen by the input's length) at full size and at the reduction of the reduced load:
// where it decodes, libjpeg-turbo (image::decode_grey_reduced) must decode the same pixels, since a
// caller only falls back to libjpeg where the parallel decoder refuses.
#include <glib.h>
#include <gst/gst.h>

#include <optional>
#include <string>

#include "fuzz_util.h"
#include "gst/prism/gstprismimagefile.h"
#include "image/decode.h"
#include "image/jpeg_parallel.h"
#include "image/jpeg_parse.h"

namespace {

constexpr guint64 kMaxPixels = 256 * 256;
// The reduced load's min_side, by the input's length: every scaling of small and large images.
constexpr int kMinSides[] = {1, 3, 16, 40, 100};

// Loads `path` with `min_side`; false on a refusal (checked to be a GError naming the file).
bool load(const std::string& path, int min_side, prism::ImageFile* image) {
  GError* error = nullptr;
  if (!prism::image_file_load_grey(path.c_str(), image, &error, kMaxPixels, min_side)) {
    FUZZ_CHECK(error && std::string(error->message).find(path) != std::string::npos,
               error ? error->message : "no GError");
    g_clear_error(&error);
    return false;
  }
  FUZZ_CHECK(!error, "a GError on success");
  FUZZ_CHECK(image->width > 0 && image->height > 0 && guint64(image->width) * guint64(image->height) <= kMaxPixels,
             "image size");
  FUZZ_CHECK(image->channels == 1 && image->pixels.size() == size_t(image->width) * size_t(image->height), "pixels");
  FUZZ_CHECK(image->file_width > 0 && image->file_height > 0 &&
                 guint64(image->file_width) * guint64(image->file_height) <= kMaxPixels,
             "file size");
  const prism::image::ReducedSize r =
      prism::image::jpeg_reduced_size(uint64_t(image->file_width), uint64_t(image->file_height), min_side);
  FUZZ_CHECK(image->reduction == 1 || image->reduction == r.reduction, "reduction");
  FUZZ_CHECK(uint64_t(image->width) == (image->reduction == 1 ? uint64_t(image->file_width) : r.width) &&
                 uint64_t(image->height) == (image->reduction == 1 ? uint64_t(image->file_height) : r.height),
             "reduced size");
  return true;
}

// The parallel decode of a JPEG at the reduction a load with `min_side` gets: where it decodes,
// libjpeg-turbo's pixels.
void check_parallel(const uint8_t* data, size_t size, int min_side) {
  namespace jpeg = prism::image::jpeg;
  const std::optional<jpeg::JpegLayout> layout = jpeg::parse_jpeg(data, size);
  if (!layout) return;
  const int reduction = prism::image::jpeg_reduced_size(layout->width, layout->height, min_side).reduction;
  jpeg::ParallelParams params;
  params.max_pixels = kMaxPixels;
  params.seq_bits = 64 << (size % 3);
  params.group = 1 + int(size % 61);
  std::string why;
  const std::optional<cv::Mat> got = jpeg::decode_grey_parallel(data, size, reduction, params, &why);
  if (!got) {
    FUZZ_CHECK(!why.empty(), "a refusal without a reason");
    return;
  }
  prism::image::DecodeLimits limits;
  limits.max_pixels = kMaxPixels;
  prism::image::ReducedGrey want;
  try {
    want = prism::image::decode_grey_reduced(data, size, min_side, limits);
  } catch (const prism::image::DecodeError& e) {
    FUZZ_CHECK(false, (std::string("decoded in parallel, refused by libjpeg-turbo: ") + e.what()).c_str());
  }
  FUZZ_CHECK(want.reduction == reduction, "the reduction");
  FUZZ_CHECK(want.grey.size() == got->size() && cv::norm(want.grey, *got, cv::NORM_INF) == 0,
             "the parallel decode's pixels differ from libjpeg-turbo's");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  prism::fuzz::set_gstreamer_environment();
  gst_init(nullptr, nullptr);
  prism::fuzz::abort_on_gstreamer_warnings();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = prism::fuzz::write_input("image", data, size);
  prism::ImageFile full, reduced;
  const bool full_ok = load(path, 0, &full);
  if (full_ok)
    FUZZ_CHECK(full.reduction == 1 && full.file_width == full.width && full.file_height == full.height, "full size");
  const int min_side = kMinSides[size % (sizeof kMinSides / sizeof kMinSides[0])];
  if (load(path, min_side, &reduced) && full_ok) {
    FUZZ_CHECK(reduced.file_width == full.width && reduced.file_height == full.height, "the file's size");
    const bool is_jpeg = prism::image::sniff_format(data, size) == prism::image::ImageFormat::kJpeg;
    const prism::image::ReducedSize r =
        prism::image::jpeg_reduced_size(uint64_t(full.width), uint64_t(full.height), is_jpeg ? min_side : 0);
    FUZZ_CHECK(reduced.reduction == r.reduction, "the reduction jpeg_reduced_size gives (JPEG alone)");
    if (reduced.reduction == 1) FUZZ_CHECK(reduced.pixels == full.pixels, "full size: the same pixels");
  }
  if (prism::image::sniff_format(data, size) == prism::image::ImageFormat::kJpeg) {
    check_parallel(data, size, 0);
    check_parallel(data, size, min_side);
  }
  return 0;
}
