#include "gst/prism/gstprismimagefile.h"

#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
// (jpeglib.h wants FILE and size_t declared before it)
#include <cstdio>
#include <jpeglib.h>
// (after jpeglib.h)
#include <jerror.h>

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "common/grey.h"
#include "common/regular_file.h"
#include "image/decode.h"

namespace prism {
namespace {

constexpr GstClockTime kTimeout = 10 * GST_SECOND;

/* Links decodebin's video pad to videoconvert, from whichever streaming thread exposes it. decodebin
 * can expose after the error or preroll that ends the load (on the EOS that follows a refusal), so
 * the link may come while the caller is already setting the pipeline to NULL. GstBin sorts its
 * children for that state change from the links it counted when it started: a link made in between
 * left decodebin out of the order ("loop detected in the graph of bin"), still PAUSED with its
 * streaming threads running after the pipeline was dropped, and later loads then ran beside them.
 * So a load closes the door before its teardown, and no link is made once it is closed. */
struct PadLinker {
  GstElement *convert = nullptr;
  std::mutex mutex;
  bool closed = false;

  void close() {
    std::lock_guard<std::mutex> lock(mutex);
    closed = true;
  }
};

void on_pad_added(GstElement *, GstPad *pad, gpointer data) {
  PadLinker *linker = (PadLinker *)data;
  std::lock_guard<std::mutex> lock(linker->mutex);
  if (linker->closed) return;
  GstPad *sink = gst_element_get_static_pad(linker->convert, "sink");
  if (!gst_pad_is_linked(sink)) {
    GstCaps *caps = gst_pad_get_current_caps(pad);
    if (!caps) caps = gst_pad_query_caps(pad, nullptr);
    const GstStructure *s = caps && gst_caps_get_size(caps) ? gst_caps_get_structure(caps, 0) : nullptr;
    if (s && g_str_has_prefix(gst_structure_get_name(s), "video/")) gst_pad_link(pad, sink);
    if (caps) gst_caps_unref(caps);
  }
  gst_object_unref(sink);
}

/* decodebin has exposed every pad and none was video (a sound file, say): the load fails now with
 * its own error rather than waiting out kTimeout for a picture that cannot come. */
void on_no_more_pads(GstElement *decode, gpointer data) {
  PadLinker *linker = (PadLinker *)data;
  std::lock_guard<std::mutex> lock(linker->mutex);
  if (linker->closed) return;
  GstPad *sink = gst_element_get_static_pad(linker->convert, "sink");
  const bool linked = gst_pad_is_linked(sink);
  gst_object_unref(sink);
  if (linked) return;
  GError *err = g_error_new_literal(GST_STREAM_ERROR, GST_STREAM_ERROR_WRONG_TYPE, "it holds no video stream");
  gst_element_post_message(decode, gst_message_new_error(GST_OBJECT(decode), err, "no video pad"));
  g_error_free(err);
}

/* decodebin goes on only through image types (image/png, image/jpeg, ...) and raw video: anything
 * else (a sound file, a tag demuxer's application/x-id3) is exposed undecoded, left unlinked, and the
 * load fails as having no video. Decoders of other media can log GStreamer warnings on garbage
 * (taglists of invalid UTF-8), which an image loader has no business reaching. */
gboolean only_images(GstElement *, GstPad *, GstCaps *caps, gpointer) {
  if (!caps || gst_caps_is_empty(caps) || gst_caps_is_any(caps)) return FALSE;
  for (guint i = 0; i < gst_caps_get_size(caps); ++i) {
    const gchar *name = gst_structure_get_name(gst_caps_get_structure(caps, i));
    if (!g_str_has_prefix(name, "image/") && g_strcmp0(name, "video/x-raw") != 0) return FALSE;
  }
  return TRUE;
}

/* The largest image a load takes, checked on the caps of every source pad inside decodebin (the
 * parser's image/png with the header's size, a decoder's video/x-raw), before the element after
 * the pad allocates or decodes anything for them (pngdec would fill gigabytes, or log
 * GStreamer-CRITICALs where the size overflows GstVideoInfo). A refused caps event is dropped
 * (a sticky event cannot fail from a probe) and every buffer after it fails as not-negotiated, so
 * the stream stops with an error. Streaming threads write; the caller reads after that error. */
struct SizeGuard {
  guint64 max_pixels = 0;
  std::atomic<int> width{0}, height{0};
  std::atomic<bool> refused{false};
};

GstPadProbeReturn check_caps_size(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  SizeGuard *guard = (SizeGuard *)data;
  if (!(info->type & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM)) {
    if (!guard->refused) return GST_PAD_PROBE_OK;
    gst_mini_object_unref(GST_MINI_OBJECT(GST_PAD_PROBE_INFO_DATA(info)));
    GST_PAD_PROBE_INFO_FLOW_RETURN(info) = GST_FLOW_NOT_NEGOTIATED;
    return GST_PAD_PROBE_HANDLED;
  }
  GstEvent *event = GST_PAD_PROBE_INFO_EVENT(info);
  if (GST_EVENT_TYPE(event) != GST_EVENT_CAPS) return GST_PAD_PROBE_OK;
  GstCaps *caps;
  gst_event_parse_caps(event, &caps);
  const GstStructure *s = gst_caps_get_size(caps) ? gst_caps_get_structure(caps, 0) : nullptr;
  int w = 0, h = 0;
  if (!s || !gst_structure_get_int(s, "width", &w) || !gst_structure_get_int(s, "height", &h)) return GST_PAD_PROBE_OK;
  if (w > 0 && h > 0 && (guint64)w * (guint64)h <= guard->max_pixels) return GST_PAD_PROBE_OK;
  GST_DEBUG_OBJECT(pad, "refusing %dx%d (at most %" G_GUINT64_FORMAT " pixels)", w, h, guard->max_pixels);
  if (!guard->refused) {
    guard->width = w;
    guard->height = h;
    guard->refused = true;
  }
  return GST_PAD_PROBE_DROP;
}

void guard_pad(GstElement *, GstPad *pad, gpointer guard) {
  if (GST_PAD_IS_SRC(pad))
    gst_pad_add_probe(pad,
                      (GstPadProbeType)(GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM | GST_PAD_PROBE_TYPE_BUFFER |
                                        GST_PAD_PROBE_TYPE_BUFFER_LIST),
                      check_caps_size, guard, nullptr);
}

/* decodebin's parsers and decoders, as it adds them (before they run). */
void guard_element(GstBin *, GstBin *, GstElement *element, gpointer guard) {
  GstIterator *it = gst_element_iterate_src_pads(element);
  gst_iterator_foreach(
      it, [](const GValue *v, gpointer g) { guard_pad(nullptr, GST_PAD(g_value_get_object(v)), g); }, guard);
  gst_iterator_free(it);
  g_signal_connect(element, "pad-added", G_CALLBACK(guard_pad), guard);
}

/* The size a PNG or PNM file declares, read from its first bytes before any element sees the file.
 * pnmdec has no parser in front of it: a height of 0 went straight into GStreamer's own assertion
 * (GStreamer-Video-CRITICAL gst_video_decoder_negotiate_default: 'GST_VIDEO_INFO_HEIGHT
 * (&state->info) != 0'), where the caps guard above cannot see it. Other formats keep to that guard.
 * PNG: the IHDR chunk, which must come first (PNG specification, 11.2.2); PNM: netpbm's header of
 * P1-P6, tokens between whitespace and '#' comments. The numbers are kept as written for the error;
 * values saturate at 2^32. False where the header is not one of these or not complete in `head`. */
struct DeclaredSize {
  std::string width, height;
  guint64 w = 0, h = 0;
};

bool pnm_number(const std::string &head, size_t *pos, std::string *digits, guint64 *value) {
  size_t i = *pos;
  while (i < head.size() && (g_ascii_isspace(head[i]) || head[i] == '#')) {
    if (head[i] == '#')
      while (i < head.size() && head[i] != '\n' && head[i] != '\r') i++;
    else
      i++;
  }
  const size_t start = i;
  *value = 0;
  for (; i < head.size() && g_ascii_isdigit(head[i]); i++)
    *value = std::min<guint64>(*value * 10 + guint64(head[i] - '0'), guint64(1) << 32);
  // a number must end inside `head` (it could go on past a short read)
  if (i == start || i == head.size() || !(g_ascii_isspace(head[i]) || head[i] == '#')) return false;
  digits->assign(head, start, i - start);
  *pos = i;
  return true;
}

bool read_declared_size(const std::string &head, DeclaredSize *out) {
  static const char kPng[] = "\x89PNG\r\n\x1a\n";
  if (head.size() >= 24 && head.compare(0, 8, kPng, 8) == 0 && head.compare(12, 4, "IHDR") == 0) {
    const auto be32 = [&](size_t at) {
      guint64 v = 0;
      for (size_t k = 0; k < 4; k++) v = (v << 8) | (guint8)head[at + k];
      return v;
    };
    out->w = be32(16);
    out->h = be32(20);
    out->width = std::to_string(out->w);
    out->height = std::to_string(out->h);
    return true;
  }
  if (head.size() >= 3 && head[0] == 'P' && head[1] >= '1' && head[1] <= '6' && g_ascii_isspace(head[2])) {
    size_t pos = 2;
    return pnm_number(head, &pos, &out->width, &out->w) && pnm_number(head, &pos, &out->height, &out->h);
  }
  return false;
}

/* The one wording of a refused size, from the header or from the guard. */
void set_size_error(GError **error, const gchar *path, const std::string &width, const std::string &height, bool empty,
                    guint64 max_pixels) {
  if (empty)
    g_set_error(error, GST_STREAM_ERROR, GST_STREAM_ERROR_DECODE,
                "image file '%s' declares %sx%s pixels: an image needs a width and a height of at least 1", path,
                width.c_str(), height.c_str());
  else
    g_set_error(error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NO_SPACE_LEFT,
                "image file '%s' declares %sx%s pixels, more than the %" G_GUINT64_FORMAT
                " an image may have here; refused before decoding",
                path, width.c_str(), height.c_str(), max_pixels);
}

// A JPEG's first image, read once: the bytes the decoder gets, or why it is refused before any
// decoder sees it. GStreamer 1.22's jpegdec loops for ever on some malformed JPEGs (its streaming
// thread then spins and the pipeline can no longer be stopped; each found by the image fuzzer or a
// review), in two places:
//  - its parser (gst_jpeg_dec_parse) ends a frame 2 bytes before any start-of-image marker it meets
//    inside an image, and at an SOI followed at once by another (FF D8 FF D8) that frame has no
//    bytes and is made again on the same bytes for ever;
//  - its decoder hands libjpeg the frame (with an EOI appended when it has none) from a source that
//    has no more data to give, and decodes a single-scan grey or RGB image in a loop that waits for
//    rows: where libjpeg reads past the frame's end there (an EOI swallowed by a header cut short,
//    or by a header that jpegdec's parser and libjpeg's marker reader see differently), it
//    suspends, gives no rows, and the loop never ends. (YCbCr images are decoded in loops of fixed
//    steps, and a multi-scan image is read whole before decoding, where a suspension is an error.)
// So the file is walked as that parser frames it (a segment's payload skipped by its length, so an
// SOI inside an APPn or COM payload is no marker; entropy-coded data running to the next FF not
// followed by 00; resync as the parser's), an SOI inside the first image is refused (no valid JPEG
// has one), and libjpeg decodes that frame as jpegdec would: a suspension in that loop is refused.
// More than 500 scans are refused as well (libjpeg-turbo's TurboJPEG limit: each is a pass over the
// whole image, so a small file could cost seconds). Only the first image's bytes, through its EOI,
// go to the decoder: a trailer (a second image, a motion photo's video) is never decoded.
struct JpegFirstImage {
  std::vector<guint8> bytes;  // what the decoder gets: the image through its EOI (or the whole file)
  std::string problem;        // why it is refused ("is a malformed JPEG: ..."), or empty
  guint64 width = 0, height = 0;
};

// The file's bytes, read forward in 1 MiB slices as far as the walk asks.
class ForwardBytes {
 public:
  explicit ForwardBytes(const char *path) : file_(path, std::ios::binary) {}
  int at(gint64 i) {  // the byte at offset i, or -1 past the end
    while (i >= (gint64)data.size() && file_) {
      const size_t n = data.size();
      data.resize(n + (size_t(1) << 20));
      file_.read((char *)data.data() + n, (std::streamsize)(data.size() - n));
      data.resize(n + (size_t)std::max<std::streamsize>(file_.gcount(), 0));
    }
    return i < (gint64)data.size() ? data[size_t(i)] : -1;
  }
  std::vector<guint8> data;

 private:
  std::ifstream file_;
};

constexpr int kJpegMaxScans = 500;

// Where jpegdec's parser ends the image that begins at byte 0 (through its EOI; -1 when it has
// none), or an SOI inside it (`soi`), or the start of scan kJpegMaxScans + 1 (`scan`).
gint64 jpeg_frame_end(ForwardBytes &b, gint64 *soi, gint64 *scan) {
  int scans = 0;
  gint64 m = 2;  // where the next marker should stand (the file begins FF D8: the caller checked)
  for (;;) {
    gint64 n = m;  // the parser looks for the next FF, and goes past fill bytes
    while (b.at(n) >= 0 && b.at(n) != 0xff) ++n;
    const bool resync = n != m;
    while (b.at(n + 1) == 0xff) ++n;
    const int code = b.at(n + 1);
    if (code < 0) return -1;
    if (code == 0xd9) return n + 2;
    if (code == 0xd8) {
      *soi = n;
      return -1;
    }
    const bool rst = code >= 0xd0 && code <= 0xd7;
    gint64 end = n + 2;
    if (!rst) {
      if (b.at(n + 3) < 0) return -1;
      end += b.at(n + 2) << 8 | b.at(n + 3);  // the length counts its own 2 bytes
    }
    if (code == 0xda && ++scans > kJpegMaxScans) {
      *scan = n;
      return -1;
    }
    if (rst || code == 0xda) {  // entropy-coded data follows
      while (b.at(end) >= 0 && !(b.at(end) == 0xff && b.at(end + 1) != 0)) ++end;
      if (b.at(end + 1) < 0) return -1;
    }
    // Having resynced, the parser takes this for a segment only when another marker follows it.
    if (resync && b.at(end) != 0xff) {
      m = n + 1;
      continue;
    }
    m = end;
  }
}

// libjpeg over jpegdec's frame with jpegdec's source: all the data at once, nothing more to give
// (fill_input_buffer suspends; a skip past the end is ignored; resync_to_restart accepts).
struct JpegdecSource {
  jpeg_source_mgr mgr{};
  explicit JpegdecSource(const std::vector<guint8> &frame) {
    mgr.next_input_byte = frame.data();
    mgr.bytes_in_buffer = frame.size();
    mgr.init_source = [](j_decompress_ptr) {};
    mgr.fill_input_buffer = [](j_decompress_ptr) -> boolean { return FALSE; };
    mgr.skip_input_data = [](j_decompress_ptr c, long n) {
      if (n > 0 && c->src->bytes_in_buffer >= (size_t)n) {
        c->src->next_input_byte += n;
        c->src->bytes_in_buffer -= (size_t)n;
      }
    };
    mgr.resync_to_restart = [](j_decompress_ptr, int) -> boolean { return TRUE; };
    mgr.term_source = [](j_decompress_ptr) {};
  }
};

struct JpegErrors {
  jpeg_error_mgr mgr{};
  std::jmp_buf on_error;
};

enum class JpegdecWould { kDecode, kWaitForEver, kNotBeChecked };

// What jpegdec (gst_jpeg_dec_prepare_decode, then its grey and RGB row loops) would do with `frame`:
// the same libjpeg calls with the same settings (raw data, ifast IDCT, no fancy upsampling) over
// the same source, with its appended EOI (removed again). Sets the declared size; nothing is
// decoded once it is over `max_pixels`. A libjpeg error is left to jpegdec to report (it meets the
// same one), but not an allocation's: then the image cannot be checked, and is refused.
JpegdecWould jpegdec_would(std::vector<guint8> &frame, guint64 max_pixels, JpegFirstImage *r) {
  const size_t n = frame.size();
  if (n < 2 || frame[n - 2] != 0xff || frame[n - 1] != 0xd9) frame.insert(frame.end(), {0xff, 0xd9});
  jpeg_decompress_struct cinfo{};
  JpegErrors errors;
  cinfo.err = jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = [](j_common_ptr c) { std::longjmp(reinterpret_cast<JpegErrors *>(c->err)->on_error, 1); };
  errors.mgr.output_message = [](j_common_ptr) {};
  errors.mgr.emit_message = [](j_common_ptr, int) {};
  JpegdecSource source(frame);
  volatile JpegdecWould out = JpegdecWould::kDecode;
  volatile bool created = false;
  if (!setjmp(errors.on_error)) {  // (no object with a destructor from here to the end of the block)
    jpeg_create_decompress(&cinfo);
    created = true;
    cinfo.src = &source.mgr;
    if (jpeg_read_header(&cinfo, TRUE) == JPEG_HEADER_OK) {  // else jpeg_start_decompress fails
      r->width = cinfo.image_width;
      r->height = cinfo.image_height;
      const bool grey = cinfo.jpeg_color_space == JCS_GRAYSCALE && cinfo.num_components == 1;
      const bool rgb = cinfo.jpeg_color_space == JCS_RGB && cinfo.num_components == 3;
      if ((grey || rgb) && r->width && r->height && r->width <= max_pixels / r->height &&
          !jpeg_has_multiple_scans(&cinfo)) {
        cinfo.do_fancy_upsampling = FALSE;
        cinfo.do_block_smoothing = FALSE;
        cinfo.out_color_space = cinfo.jpeg_color_space;
        cinfo.dct_method = JDCT_IFAST;
        cinfo.raw_data_out = TRUE;
        jpeg_start_decompress(&cinfo);
        if (rgb && (cinfo.max_v_samp_factor > 1 || cinfo.max_h_samp_factor > 1)) {
          // jpegdec refuses it here
        } else {
          // One call's rows, per component, from libjpeg's own pools (freed by jpeg_destroy).
          const int rows = cinfo.max_v_samp_factor * DCTSIZE;
          auto planes = (JSAMPIMAGE)(*cinfo.mem->alloc_small)((j_common_ptr)&cinfo, JPOOL_IMAGE,
                                                              sizeof(JSAMPARRAY) * size_t(cinfo.num_components));
          for (int c = 0; c < cinfo.num_components; ++c)
            planes[c] = (*cinfo.mem->alloc_sarray)((j_common_ptr)&cinfo, JPOOL_IMAGE,
                                                   cinfo.comp_info[c].width_in_blocks * DCTSIZE, JDIMENSION(rows));
          while (cinfo.output_scanline < cinfo.output_height)
            if (jpeg_read_raw_data(&cinfo, planes, JDIMENSION(rows)) == 0) {
              out = JpegdecWould::kWaitForEver;
              break;
            }
        }
      }
    }
  } else if (errors.mgr.msg_code == JERR_OUT_OF_MEMORY || errors.mgr.msg_code == JERR_NO_BACKING_STORE) {
    out = JpegdecWould::kNotBeChecked;
  }
  if (created) jpeg_destroy_decompress(&cinfo);
  frame.resize(n);
  return out;
}

constexpr const char *kNeverReturns = " (GStreamer's jpegdec would never return on it)";

JpegFirstImage jpeg_first_image(const char *path, guint64 max_pixels) {
  ForwardBytes b(path);
  JpegFirstImage r;
  gint64 soi = -1, scan = -1;
  const gint64 end = jpeg_frame_end(b, &soi, &scan);
  if (soi >= 0) {
    r.problem = "is a malformed JPEG: a start-of-image marker at byte " + std::to_string(soi) +
                " inside the image that begins at byte 0" + (soi == 2 ? ", at once after its own" : "") + kNeverReturns;
    return r;
  }
  if (scan >= 0) {
    r.problem = "has more than " + std::to_string(kJpegMaxScans) + " JPEG scans (scan " +
                std::to_string(kJpegMaxScans + 1) + " at byte " + std::to_string(scan) +
                "): each is a pass over the whole image, and libjpeg-turbo's TurboJPEG refuses them too";
    return r;
  }
  if (end < 0) b.at(G_MAXINT64 - 1);  // an image without EOI: the decoder gets the whole file
  r.bytes = std::move(b.data);
  if (end >= 0) r.bytes.resize(size_t(end));
  switch (jpegdec_would(r.bytes, max_pixels, &r)) {
    case JpegdecWould::kWaitForEver:
      r.problem = "is a malformed JPEG: libjpeg runs out of data in its " + std::to_string(r.bytes.size()) +
                  " bytes before the last row, the end marker read as part of a header" + std::string(kNeverReturns);
      break;
    case JpegdecWould::kNotBeChecked:
      r.problem =
          "is a JPEG that libjpeg could not allocate the memory to check (GStreamer's jpegdec could hang on it)";
      break;
    case JpegdecWould::kDecode: break;
  }
  return r;
}

int channels_of(GstVideoFormat format) {
  switch (format) {
    case GST_VIDEO_FORMAT_BGRA:
    case GST_VIDEO_FORMAT_RGBA: return 4;
    case GST_VIDEO_FORMAT_BGR:
    case GST_VIDEO_FORMAT_RGB: return 3;
    case GST_VIDEO_FORMAT_GRAY8: return 1;
    default: return 0;
  }
}

}  // namespace

gboolean image_file_load(const gchar *path, GstVideoFormat format, ImageFile *out, GError **error, int width,
                         int height, guint64 max_pixels) {
  const int channels = channels_of(format);
  if (!path || !*path) {
    g_set_error(error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND, "no image file name given");
    return FALSE;
  }
  if (!channels) {
    g_set_error(error, GST_CORE_ERROR, GST_CORE_ERROR_NOT_IMPLEMENTED,
                "cannot load image file '%s' as %s: only BGRA, RGBA, BGR, RGB and GRAY8", path,
                gst_video_format_to_string(format));
    return FALSE;
  }
  if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
    g_set_error(error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND, "image file '%s' does not exist", path);
    return FALSE;
  }
  try {
    check_regular_file(path);  // filesrc would read a FIFO or /dev/zero forever
  } catch (const FileError &e) {
    g_set_error(error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ, "image file %s", e.what());
    return FALSE;
  }
  JpegFirstImage jpeg;  // for a JPEG, the bytes of its first image: the only ones decoded
  {
    std::string head(4096, '\0');
    std::ifstream file(path, std::ios::binary);
    file.read(head.data(), (std::streamsize)head.size());
    head.resize((size_t)std::max<std::streamsize>(file.gcount(), 0));
    // The formats image::decode_grey reads, and no other decoder of decodebin's.
    try {
      image::check_format((const uint8_t *)head.data(), head.size());
    } catch (const image::DecodeError &e) {
      g_set_error(error, GST_STREAM_ERROR, GST_STREAM_ERROR_WRONG_TYPE, "image file '%s' %s", path, e.what());
      return FALSE;
    }
    DeclaredSize declared;
    if (read_declared_size(head, &declared) &&
        (declared.w == 0 || declared.h == 0 || declared.w > max_pixels / declared.h)) {
      set_size_error(error, path, declared.width, declared.height, declared.w == 0 || declared.h == 0, max_pixels);
      return FALSE;
    }
    // Binary PNM, P4-P6: the whole header must parse here (width, height and, but for P4, maxval
    // 1..65535, within the first 4096 bytes). pnmdec's own header parser asserts on some malformed
    // ones (found by the image fuzzer: a comment running into the data gave GStreamer-Base-CRITICAL
    // gst_adapter_flush 'flush <= adapter->size').
    if (head.size() >= 3 && head[0] == 'P' && head[1] >= '4' && head[1] <= '6' && g_ascii_isspace(head[2])) {
      size_t pos = 2;
      std::string digits;
      guint64 w = 0, h = 0, maxval = 255;
      const bool ok = pnm_number(head, &pos, &digits, &w) && pnm_number(head, &pos, &digits, &h) &&
                      (head[1] == '4' || (pnm_number(head, &pos, &digits, &maxval) && maxval >= 1 && maxval <= 65535));
      if (!ok) {
        g_set_error(error, GST_STREAM_ERROR, GST_STREAM_ERROR_DECODE,
                    "image file '%s' has a malformed or incomplete binary PNM (P%c) header: netpbm's magic, width, "
                    "height%s, separated by whitespace or '#' comments ending with a line break",
                    path, head[1], head[1] == '4' ? "" : " and maxval (1..65535)");
        return FALSE;
      }
    }
    // Plain (ASCII) PNM, P1-P3: pnmdec asserts on malformed sample text (found by the image fuzzer:
    // a P1 header followed by binary bytes gave GStreamer-Video-CRITICAL
    // gst_video_decoder_allocate_output_frame_with_params 'decoder->priv->output_state'). Those
    // formats are rare outside test files: refused, with the conversion to use.
    if (head.size() >= 3 && head[0] == 'P' && head[1] >= '1' && head[1] <= '3' && g_ascii_isspace(head[2])) {
      g_set_error(error, GST_STREAM_ERROR, GST_STREAM_ERROR_DECODE,
                  "image file '%s' is a plain (ASCII) PNM, P%c, which is not read here; save it as binary PNM "
                  "(P4-P6) or PNG",
                  path, head[1]);
      return FALSE;
    }
    if (head.size() >= 2 && (guint8)head[0] == 0xff && (guint8)head[1] == 0xd8) {
      jpeg = jpeg_first_image(path, max_pixels);
      if (jpeg.width && jpeg.height && jpeg.width > max_pixels / jpeg.height) {
        set_size_error(error, path, std::to_string(jpeg.width), std::to_string(jpeg.height), false, max_pixels);
        return FALSE;
      }
      if (!jpeg.problem.empty()) {
        g_set_error(error, GST_STREAM_ERROR, GST_STREAM_ERROR_DECODE, "image file '%s' %s", path, jpeg.problem.c_str());
        return FALSE;
      }
    }
  }

  GstElement *pipeline = gst_pipeline_new("prism-image-file");
  const bool from_memory = !jpeg.bytes.empty();
  GstElement *src = gst_element_factory_make(from_memory ? "appsrc" : "filesrc", nullptr);
  GstElement *decode = gst_element_factory_make("decodebin", nullptr);
  GstElement *convert = gst_element_factory_make("videoconvert", nullptr);
  GstElement *scale = gst_element_factory_make("videoscale", nullptr);
  GstElement *filter = gst_element_factory_make("capsfilter", nullptr);
  GstElement *sink = gst_element_factory_make("appsink", nullptr);
  if (!src || !decode || !convert || !scale || !filter || !sink) {
    for (GstElement *e : {src, decode, convert, scale, filter, sink})
      if (e) gst_object_unref(e);
    gst_object_unref(pipeline);
    g_set_error(error, GST_CORE_ERROR, GST_CORE_ERROR_MISSING_PLUGIN,
                "cannot load image file '%s': filesrc, appsrc, decodebin, videoconvert, videoscale, capsfilter "
                "or appsink is missing (GStreamer base/good plugins)",
                path);
    return FALSE;
  }
  GstCaps *caps =
      gst_caps_new_simple("video/x-raw", "format", G_TYPE_STRING, gst_video_format_to_string(format), nullptr);
  if (width > 0 && height > 0)
    gst_caps_set_simple(caps, "width", G_TYPE_INT, width, "height", G_TYPE_INT, height, "pixel-aspect-ratio",
                        GST_TYPE_FRACTION, 1, 1, nullptr);
  if (from_memory)
    g_object_set(src, "format", GST_FORMAT_BYTES, "max-bytes", (guint64)0, nullptr);
  else
    g_object_set(src, "location", path, nullptr);
  g_object_set(filter, "caps", caps, nullptr);
  gst_caps_unref(caps);
  g_object_set(sink, "sync", FALSE, "max-buffers", 1, nullptr);
  gst_bin_add_many(GST_BIN(pipeline), src, decode, convert, scale, filter, sink, nullptr);
  gst_element_link(src, decode);
  gst_element_link_many(convert, scale, filter, sink, nullptr);
  PadLinker linker;
  linker.convert = convert;
  g_signal_connect(decode, "pad-added", G_CALLBACK(on_pad_added), &linker);
  g_signal_connect(decode, "no-more-pads", G_CALLBACK(on_no_more_pads), &linker);
  g_signal_connect(decode, "autoplug-continue", G_CALLBACK(only_images), nullptr);
  SizeGuard guard;
  guard.max_pixels = max_pixels;
  g_signal_connect(pipeline, "deep-element-added", G_CALLBACK(guard_element), &guard);

  gboolean ok = FALSE;
  GstBus *bus = gst_element_get_bus(pipeline);
  gst_element_set_state(pipeline, GST_STATE_PAUSED);
  if (from_memory) {  // (appsrc takes buffers once started, in PAUSED)
    auto *bytes = new std::vector<guint8>(std::move(jpeg.bytes));
    gst_app_src_push_buffer(
        GST_APP_SRC(src),
        gst_buffer_new_wrapped_full(GST_MEMORY_FLAG_READONLY, bytes->data(), bytes->size(), 0, bytes->size(), bytes,
                                    [](gpointer v) { delete (std::vector<guint8> *)v; }));
    gst_app_src_end_of_stream(GST_APP_SRC(src));
  }
  GstMessage *msg =
      gst_bus_timed_pop_filtered(bus, kTimeout, (GstMessageType)(GST_MESSAGE_ERROR | GST_MESSAGE_ASYNC_DONE));
  if (guard.refused) {
    /* whatever the bus said after it (an error, or a preroll on EOS) */
    const int w = guard.width.load(), h = guard.height.load();
    set_size_error(error, path, std::to_string(w), std::to_string(h), w == 0 || h == 0, max_pixels);
  } else if (!msg) {
    g_set_error(error, GST_STREAM_ERROR, GST_STREAM_ERROR_DECODE,
                "image file '%s' could not be decoded within 10 s (not an image?)", path);
  } else if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR) {
    GError *err = nullptr;
    gchar *debug = nullptr;
    gst_message_parse_error(msg, &err, &debug);
    if (err->domain == GST_RESOURCE_ERROR)
      g_set_error(error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ, "image file '%s' cannot be read: %s", path,
                  err->message);
    else
      g_set_error(error, GST_STREAM_ERROR, GST_STREAM_ERROR_DECODE, "image file '%s' is not a decodable image: %s",
                  path, err->message);
    GST_DEBUG("image file %s: %s (%s)", path, err->message, GST_STR_NULL(debug));
    g_clear_error(&err);
    g_free(debug);
  } else {
    GstSample *sample = gst_app_sink_try_pull_preroll(GST_APP_SINK(sink), 0);
    GstVideoInfo info;
    GstVideoFrame frame;
    if (!sample || !gst_video_info_from_caps(&info, gst_sample_get_caps(sample)) ||
        !gst_video_frame_map(&frame, &info, gst_sample_get_buffer(sample), GST_MAP_READ)) {
      g_set_error(error, GST_STREAM_ERROR, GST_STREAM_ERROR_DECODE, "image file '%s' gave no picture", path);
    } else {
      out->width = GST_VIDEO_INFO_WIDTH(&info);
      out->height = GST_VIDEO_INFO_HEIGHT(&info);
      out->channels = channels;
      const size_t row = (size_t)out->width * channels;
      out->pixels.resize(row * out->height);
      for (int y = 0; y < out->height; y++)
        std::memcpy(out->pixels.data() + row * y,
                    (const uint8_t *)GST_VIDEO_FRAME_PLANE_DATA(&frame, 0) +
                        (size_t)y * GST_VIDEO_FRAME_PLANE_STRIDE(&frame, 0),
                    row);
      gst_video_frame_unmap(&frame);
      ok = TRUE;
    }
    if (sample) gst_sample_unref(sample);
  }
  if (msg) gst_message_unref(msg);
  linker.close();
  gst_element_set_state(pipeline, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(pipeline);
  return ok;
}

gboolean image_file_load_grey(const gchar *path, ImageFile *out, GError **error, guint64 max_pixels, int min_side) {
  if (!path || !*path) {
    g_set_error(error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND, "no image file name given");
    return FALSE;
  }
  if (!g_file_test(path, G_FILE_TEST_EXISTS)) {
    g_set_error(error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NOT_FOUND, "image file '%s' does not exist", path);
    return FALSE;
  }
  std::vector<uint8_t> bytes;
  try {
    bytes = RegularFile(path).read_all();  // a FIFO or /dev/zero would be read forever
  } catch (const FileError &e) {
    g_set_error(error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ, "image file %s", e.what());
    return FALSE;
  } catch (const std::bad_alloc &) {
    g_set_error(error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NO_SPACE_LEFT, "image file '%s' does not fit in memory",
                path);
    return FALSE;
  }
  try {
    image::DecodeLimits limits;
    limits.max_pixels = max_pixels;
    const image::ReducedGrey d = image::decode_grey_reduced(bytes.data(), bytes.size(), min_side, limits);
    out->width = d.grey.cols;
    out->height = d.grey.rows;
    out->channels = 1;
    out->pixels.assign(d.grey.data, d.grey.data + d.grey.total());
    out->file_width = int(d.width);
    out->file_height = int(d.height);
    out->reduction = d.reduction;
    return TRUE;
  } catch (const image::DecodeError &e) {
    using Kind = image::DecodeError::Kind;
    if (e.kind() == Kind::kTooLarge || e.kind() == Kind::kNoMemory)
      g_set_error(error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NO_SPACE_LEFT, "image file '%s' %s", path, e.what());
    else
      g_set_error(error, GST_STREAM_ERROR,
                  e.kind() == Kind::kUnsupported ? GST_STREAM_ERROR_WRONG_TYPE : GST_STREAM_ERROR_DECODE,
                  "image file '%s' %s", path, e.what());
    return FALSE;
  }
}

}  // namespace prism
