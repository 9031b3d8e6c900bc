/* other/x-prism-tensor: Prism's caps for frames that are not video, such as multispectral cubes
 * and float distance maps.
 *
 *   other/x-prism-tensor(memory:CUDAMemory), dtype=(string){u8,u16,f32}, channels=(int)[1,1024],
 *       width=(int), height=(int), framerate=(fraction), layout=(string)interleaved
 *
 * A frame is height rows of width pixels of `channels` values (channels last, ENVI's BIP). In
 * system memory the rows are packed to a multiple of 4 bytes, like GStreamer's default video
 * strides. In CUDA memory the frame is one GstCudaMemory (nvcodec's allocator and buffer pool,
 * so device pointers, host mapping and context sharing work as for video) holding the frame as if
 * it were an RGBA plane of row_bytes / 4 pixels; its pitch is the row stride. Buffers from pools
 * carry a GstVideoMeta for that plane, whose stride[0] is the row stride a consumer must use. */
#pragma once

#include <gst/gst.h>
#include <gst/video/video.h>

#include "tensor/tensor.h"

#define GST_PRISM_TENSOR_MEDIA_TYPE "other/x-prism-tensor"
#define GST_PRISM_TENSOR_MAX_CHANNELS 1024

typedef struct {
  prism::tensor::DType dtype;
  gint channels, width, height;
  gint fps_n, fps_d;
  gsize row_bytes; /* packed row rounded up to 4 bytes: the system-memory stride */
} GstPrismTensorInfo;

gboolean gst_prism_structure_is_tensor(const GstStructure *s);
gboolean gst_prism_caps_are_tensor(const GstCaps *caps);
/* From fixed caps; FALSE (nothing set) when they are not a complete tensor description. */
gboolean gst_prism_tensor_info_from_caps(GstPrismTensorInfo *info, const GstCaps *caps);
/* System-memory caps of a tensor description. */
GstCaps *gst_prism_tensor_info_to_caps(const GstPrismTensorInfo *info);
void gst_prism_tensor_info_init(GstPrismTensorInfo *info, prism::tensor::DType dtype, gint channels, gint width,
                                gint height, gint fps_n, gint fps_d);
/* A structure of any size and framerate; dtypes like "f32" or "{ u8, u16, f32 }". */
GstStructure *gst_prism_tensor_structure_new(const gchar *dtypes, gint min_channels, gint max_channels);
/* Copies width, height and framerate (those `from` has) into `to`: what a filter keeps when it
 * turns video into tensors or back. */
void gst_prism_structure_copy_geometry(GstStructure *to, const GstStructure *from);
/* Template caps: the structure in memory:CUDAMemory (CUDA builds, listed first) and in system
 * memory. */
GstCaps *gst_prism_tensor_template_caps(const gchar *dtypes, gint min_channels, gint max_channels);
/* The storage description of a tensor frame: an RGBA plane of row_bytes / 4 x height. */
void gst_prism_tensor_storage_info(const GstPrismTensorInfo *info, GstVideoInfo *storage);
/* The layout of a mapped frame for the kernels (row stride from the mapping). */
prism::tensor::FrameLayout gst_prism_tensor_layout(const GstPrismTensorInfo *info, gint row_stride);

/* Video caps as GstVideoInfo, tensor caps as their storage GstVideoInfo. */
gboolean gst_prism_info_from_caps(GstVideoInfo *info, const GstCaps *caps);
