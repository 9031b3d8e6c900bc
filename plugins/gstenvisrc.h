/* envisrc: reads ENVI hyperspectral cubes (NAME.hdr + raw data, kernels/envi) as
 * other/x-prism-tensor frames, one cube per frame, for emdtracker and other multispectral elements.
 * A GstPushSrc; no CUDA.
 *
 * Inputs:
 *   None (a source): the files named by `location`.
 *
 * Outputs:
 *   src: other/x-prism-tensor in system memory, layout=interleaved (channels last): channels = the
 *   cube's bands (1..1024), width = samples, height = lines, dtype u8 (ENVI data type 1), u16 (12),
 *   or f32 (2, 3, 13, 4, 5: i16, i32, u32, f32, f64 converted). The first cube's header, read at
 *   start, fixes the caps. Rows are padded to a multiple of 4 bytes, with no GstVideoMeta. PTS and
 *   duration follow `framerate` (none at 0/1); the buffer offset is the frame's index.
 *
 * Properties:
 *   location: one header, or a numbered sequence with one %d or %0Nd ("scene_%03d.hdr"; "%%" is a
 *   '%'), read from start-index until a file is missing or past stop-index (-1: no limit), like
 *   multifilesrc. loop: start again after the last cube (one file: repeat it). framerate (default
 *   30/1). start-index, stop-index and loop may change while playing (read for each cube: a loop
 *   then starts again at the new start-index); location and framerate are read at start.
 *
 * Messages and meta:
 *   No message, no meta. Errors name the file (a header's also the line): no location, a missing
 *   first file, a bad header or data file, a bad pattern, a cube unlike the first.
 *
 * Device memory:
 *   None: frames are plain system memory; a CUDA element downstream uploads them through its own
 *   per-caps staging (or cudaupload does).
 *
 * Notes:
 *   BSQ and BIL data are reordered to BIP when read, either byte order, after the header offset
 *   (kernels/envi/envi.h); i32/u32/f64 values beyond float's precision round. Every cube of a
 *   sequence must have the first one's size, bands and type.
 */
#pragma once

#include <gst/base/gstpushsrc.h>
#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_ENVI_SRC (gst_envi_src_get_type())
G_DECLARE_FINAL_TYPE(GstEnviSrc, gst_envi_src, GST, ENVI_SRC, GstPushSrc)

GST_ELEMENT_REGISTER_DECLARE(envisrc);

G_END_DECLS
