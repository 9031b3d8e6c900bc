/* envisrc: reads ENVI hyperspectral cubes (NAME.hdr + raw data, BSQ/BIL/BIP, kernels/envi) as
 * other/x-prism-tensor frames in system memory, channels = bands, interleaved. `location` names
 * one header, or a numbered sequence with one printf-style integer ("scene_%03d.hdr") read from
 * start-index until a file is missing, like multifilesrc. Every cube of a sequence must have the
 * first one's size, bands and type. */
#pragma once

#include <gst/base/gstpushsrc.h>
#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_ENVI_SRC (gst_envi_src_get_type())
G_DECLARE_FINAL_TYPE(GstEnviSrc, gst_envi_src, GST, ENVI_SRC, GstPushSrc)

GST_ELEMENT_REGISTER_DECLARE(envisrc);

G_END_DECLS
