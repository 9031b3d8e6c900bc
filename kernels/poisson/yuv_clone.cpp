#include "poisson/yuv_clone.h"

#include <algorithm>

#if defined(PRISM_HAVE_CUDA)
#include "common/gpu.h"
#endif

namespace prism::poisson {

namespace cc = colorconvert;

Box yuv_rectangle(const Box& dst, int width, int height) {
  Box r;
  r.x = std::max(0, dst.x - 1) & ~1;
  r.y = std::max(0, dst.y - 1) & ~1;
  const int x1 = std::min(width, (std::min(width, dst.x + dst.width + 1) + 1) & ~1);
  const int y1 = std::min(height, (std::min(height, dst.y + dst.height + 1) + 1) & ~1);
  r.width = x1 - r.x;
  r.height = y1 - r.y;
  return r;
}

namespace {

// The sub-rectangle `r` (even origin) of a 4:2:0 frame: plane pointers offset, strides kept.
cc::Image yuv_view(const cc::Image& frame, const Box& r) {
  cc::Image im = frame;
  im.width = r.width;
  im.height = r.height;
  im.plane[0] = frame.plane[0] + static_cast<int64_t>(r.y) * frame.stride[0] + r.x;
  if (frame.format == cc::PixelFormat::NV12) {
    im.plane[1] = frame.plane[1] + static_cast<int64_t>(r.y / 2) * frame.stride[1] + r.x;
  } else {
    for (int p = 1; p < 3; p++)
      im.plane[p] = frame.plane[p] + static_cast<int64_t>(r.y / 2) * frame.stride[p] + r.x / 2;
  }
  return im;
}

}  // namespace

YuvRoundTrip YuvRoundTrip::plan(const YuvBackground& background, const CloneJob& job) {
  YuvRoundTrip t;
  const cc::Image& frame = background.frame;
  const cc::Colorimetry& cm = background.colorimetry;
  t.rect = yuv_rectangle(job.placement.dst, frame.width, frame.height);
  const Box& r = t.rect;
  t.yuv = yuv_view(frame, r);
  t.rgba.format = cc::PixelFormat::RGBA;
  t.rgba.width = r.width;
  t.rgba.height = r.height;
  t.rgba.plane[0] = background.rgba;
  t.rgba.stride[0] = r.width * 4;
  t.to_rgba = cc::make_plan(frame.format, cm, r.width, r.height, cc::PixelFormat::RGBA, cm, r.width, r.height);
  t.to_yuv = cc::make_plan(cc::PixelFormat::RGBA, cm, r.width, r.height, frame.format, cm, r.width, r.height);
  t.job = job;
  t.job.background = PackedImage{t.rgba.plane[0], r.width, r.height, t.rgba.stride[0], 4, 0, 1, 2};
  t.job.placement.dst.x -= r.x;
  t.job.placement.dst.y -= r.y;
  return t;
}

void clone_yuv_cpu(const YuvBackground& background, const CloneJob& job) {
  if (!job.placement.solvable()) return;
  const YuvRoundTrip t = YuvRoundTrip::plan(background, job);
  cc::convert_cpu(t.to_rgba, t.yuv, t.rgba);
  clone_cpu(t.job);
  cc::convert_cpu(t.to_yuv, t.rgba, t.yuv);
}

#if defined(PRISM_HAVE_CUDA)
void clone_yuv_cuda(CudaCloner& cloner, const YuvBackground& background, const CloneJob& job, cudaStream_t stream) {
  if (!job.placement.solvable()) return;
  const YuvRoundTrip t = YuvRoundTrip::plan(background, job);
  cc::convert_cuda(t.to_rgba, t.yuv, t.rgba, stream);
  cloner.clone(t.job);
  cc::convert_cuda(t.to_yuv, t.rgba, t.yuv, stream);
}
#endif

}  // namespace prism::poisson
