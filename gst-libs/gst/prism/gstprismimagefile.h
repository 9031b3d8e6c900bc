/* Loading an image file into memory.
 *
 * image_file_load_grey, the loader of every product path (`prism texture`, `prism bow`,
 * poissonblend's `mask-location`, Python's Gallery), decodes with kernels/image/decode.h: PNG, JPEG
 * and binary PNM alone, decided from the bytes, straight to grey, bounded in pixels.
 *
 * image_file_load (colour, for the tests' photos and frames) decodes the same formats with a small
 * GStreamer pipeline:
 *
 *   filesrc ! decodebin ! videoconvert [! videoscale] ! video/x-raw,format=FORMAT[,width,height] ! appsink
 *
 * Errors come back as a GError that names the file (GST_RESOURCE_ERROR_NOT_FOUND when it does not
 * exist or cannot be read, GST_STREAM_ERROR_WRONG_TYPE for another format, GST_STREAM_ERROR_DECODE
 * when it is not a decodable image).
 */
#pragma once

#include <gst/gst.h>
#include <gst/video/video.h>

#include <cstdint>
#include <vector>

namespace prism {

struct ImageFile {
  int width = 0;
  int height = 0;
  int channels = 0;             // bytes per pixel: 4 for BGRA/RGBA, 3 for BGR/RGB, 1 for GRAY8
  std::vector<uint8_t> pixels;  // rows packed without padding: width * channels bytes each
  // Set by image_file_load_grey alone: the file's own size, and the factor (1, 2, 4 or 8) its image
  // was decoded reduced by (a large JPEG with `min_side`: image::decode_grey_reduced); width x
  // height is the pixels' size, the file's divided by `reduction` and rounded up.
  int file_width = 0;
  int file_height = 0;
  int reduction = 1;
};

// The default of `max_pixels` below: 8192 x 8192 (256 MiB as BGRA).
constexpr guint64 kImageFileMaxPixels = 64ull << 20;

// Decodes the first image of `path` into `format` (GST_VIDEO_FORMAT_BGRA, RGBA, BGR, RGB or
// GRAY8), scaled to width x height when both are > 0 (videoscale's bilinear), else at its own
// size. Returns FALSE with `error` set (naming the file) on failure; never hangs (10 s limit).
// A file whose header declares more than `max_pixels` pixels (width x height, as a PNG or PNM
// or JPEG header says or a parser or decoder announces them, before any pixel is decoded) is refused with
// GST_RESOURCE_ERROR_NO_SPACE_LEFT naming the file and the declared size; one declaring a width or
// height of 0 with GST_STREAM_ERROR_DECODE, also before a decoder sees it (GStreamer's decoders
// assert on it). A JPEG is framed as GStreamer 1.22's jpegdec frames it and read by libjpeg as
// jpegdec would read it; one that would leave that decoder looping for ever (a start-of-image
// marker inside the image; headers that run past the image's end) is refused with
// GST_STREAM_ERROR_DECODE saying which. The decoder gets only the first image's bytes, through its
// end-of-image marker (a trailer is never decoded).
// Each load is independent: its whole pipeline is in NULL, no streaming thread left, when this returns.
gboolean image_file_load(const gchar *path, GstVideoFormat format, ImageFile *out, GError **error, int width = 0,
                         int height = 0, guint64 max_pixels = kImageFileMaxPixels);

// The file as 8-bit grey, by prism::image::decode_grey (kernels/image/decode.h says what grey is per
// format): another format than PNG, JPEG or binary PNM is GST_STREAM_ERROR_WRONG_TYPE, more than
// `max_pixels` GST_RESOURCE_ERROR_NO_SPACE_LEFT (from the header, before decoding), a damaged file
// GST_STREAM_ERROR_DECODE; each message names the file. `min_side` > 0: a JPEG whose longer side is
// at least twice it is decoded reduced by libjpeg's DCT scaling (image::decode_grey_reduced), for a
// caller that shrinks it to min_side anyway (texture features: FeatureParams::max_side); `out`'s
// file_width, file_height and reduction say how to map its pixels back to the file's.
gboolean image_file_load_grey(const gchar *path, ImageFile *out, GError **error,
                              guint64 max_pixels = kImageFileMaxPixels, int min_side = 0);

}  // namespace prism
