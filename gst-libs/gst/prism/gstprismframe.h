/* GstPrismFrameMap: a video frame mapped for a scope, for the C++ code of the bases and elements.
 *
 * Frame maps are the resources an element most often leaks on an error path (a map left open keeps
 * the buffer's memory locked, and a CUDA memory mapped for writing stays marked as changed). The
 * guard unmaps in its destructor, so an element can return or throw anywhere in between without a
 * goto ladder. It maps either on the host (gst_video_frame_map: system memory as it lies, another
 * context's GstCudaMemory copied by GstCudaMemory itself) or, in a CUDA build, on the device
 * (gst_prism_cuda_map_frame: the plane pointers of a GstCudaMemory, GST_MAP_CUDA).
 *
 * The map takes no reference of the buffer (GST_VIDEO_FRAME_MAP_FLAG_NO_REF), so the buffer stays
 * writable while mapped (meta may be added to it, as in-place elements do); the caller's reference
 * must outlive the guard, which a scope guard gives.
 */
#pragma once

#include <gst/video/video.h>

#include "gst/prism/gstprismcuda.h"

namespace prism {

class GstPrismFrameMap {
 public:
  GstPrismFrameMap() = default;
  ~GstPrismFrameMap() { unmap(); }
  GstPrismFrameMap(const GstPrismFrameMap &) = delete;
  GstPrismFrameMap &operator=(const GstPrismFrameMap &) = delete;
  /* Movable, so that a frame's maps can be kept in a container (poissonblend's overlays); the
   * mapped GstVideoFrame holds no pointer into itself. */
  GstPrismFrameMap(GstPrismFrameMap &&o) noexcept : frame_(o.frame_), mapped_(o.mapped_) { o.mapped_ = false; }
  GstPrismFrameMap &operator=(GstPrismFrameMap &&o) noexcept {
    if (this != &o) {
      unmap();
      frame_ = o.frame_;
      mapped_ = o.mapped_;
      o.mapped_ = false;
    }
    return *this;
  }

  /* Maps `buf` on the host; `out` (optional) receives the host plane pointers. */
  bool map_host(const GstVideoInfo *info, GstBuffer *buf, GstMapFlags flags, GstPrismFrame *out = nullptr) {
    unmap();
    mapped_ = gst_video_frame_map(&frame_, info, buf, no_ref(flags));
    if (mapped_ && out) gst_prism_frame_from_host(&frame_, out);
    return mapped_;
  }
#if defined(PRISM_HAVE_CUDA)
  /* Maps GstCudaMemory `buf` for device access; false (nothing mapped) when it is not CUDA memory or
   * the map fails. Whose context the memory belongs to is the caller's question
   * (gst_prism_cuda_buffer_is_ours). */
  bool map_device(const GstVideoInfo *info, GstBuffer *buf, GstMapFlags flags, GstPrismFrame *out) {
    unmap();
    mapped_ = gst_prism_cuda_map_frame(&frame_, info, buf, no_ref(flags), out);
    return mapped_;
  }
#endif
  void unmap() {
    if (mapped_) gst_video_frame_unmap(&frame_);
    mapped_ = false;
  }

  bool mapped() const { return mapped_; }
  /* The mapped GstVideoFrame (host plane pointers only after map_host). */
  GstVideoFrame *frame() { return &frame_; }

 private:
  static GstMapFlags no_ref(GstMapFlags flags) { return GstMapFlags(flags | GST_VIDEO_FRAME_MAP_FLAG_NO_REF); }

  GstVideoFrame frame_{};
  bool mapped_ = false;
};

}  // namespace prism
