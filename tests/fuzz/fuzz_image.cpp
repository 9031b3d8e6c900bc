// Fuzz target: image files through the bounded loader (gst-libs/gst/prism/gstprismimagefile.h,
// image_file_load_grey over kernels/image/decode.h: PNG, JPEG, binary PNM by allowlist),
// shared by poissonblend's mask-location, `prism texture` and `prism bow`.
// The limit is small here (kMaxPixels) so that the header/dimension check before decoding is hit
// often and accepted images decode quickly. Checks: an accepted image has 1..kMaxPixels pixels and
// exactly width x height grey bytes; a refusal is a GError naming the file; no GStreamer-CRITICAL or
// WARNING (the log handler aborts on one).
#include <glib.h>
#include <gst/gst.h>

#include <string>

#include "fuzz_util.h"
#include "gst/prism/gstprismimagefile.h"

namespace {

constexpr guint64 kMaxPixels = 256 * 256;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  prism::fuzz::set_gstreamer_environment();
  gst_init(nullptr, nullptr);
  prism::fuzz::abort_on_gstreamer_warnings();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = prism::fuzz::write_input("image", data, size);
  prism::ImageFile image;
  GError* error = nullptr;
  if (!prism::image_file_load_grey(path.c_str(), &image, &error, kMaxPixels)) {
    FUZZ_CHECK(error && std::string(error->message).find(path) != std::string::npos,
               error ? error->message : "no GError");
    g_clear_error(&error);
    return 0;
  }
  FUZZ_CHECK(!error, "a GError on success");
  FUZZ_CHECK(image.width > 0 && image.height > 0 && guint64(image.width) * guint64(image.height) <= kMaxPixels,
             "image size");
  FUZZ_CHECK(image.channels == 1 && image.pixels.size() == size_t(image.width) * size_t(image.height), "pixels");
  return 0;
}
