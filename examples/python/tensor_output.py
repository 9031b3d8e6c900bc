#!/usr/bin/env python3
"""Reads Prism's tensor output (other/x-prism-tensor) into numpy, honouring the row stride.

spectralize turns video into multispectral frames: per pixel, the histogram of the grey levels in a
`window` x `window` neighbourhood over `bins` bins (bin = v * bins / 256), the frame's edge pixels
replicated outwards, so every histogram holds window x window counts. Its output caps
are
    other/x-prism-tensor, dtype={u8,u16,f32}, channels=N, width=W, height=H, layout=interleaved
(channels last). Rows are padded: in system memory to a multiple of 4 bytes, in CUDA memory to the
pool's pitch; when the buffer has a GstVideoMeta, its stride[0] is the row stride, else the rows are
the packed row rounded up to 4 bytes apart. Here a 25-pixel row of 11 u16 channels is 550 bytes,
stored in 552.

Run with the plugin on GST_PLUGIN_PATH (e.g. build/plugins):
    GST_PLUGIN_PATH=build/plugins python3 examples/python/tensor_output.py
"""
from debian_python import need  # noqa: E402  (beside this file)

need("gi", "numpy")

import gi
import numpy as np

gi.require_version("Gst", "1.0")
gi.require_version("GstVideo", "1.0")
from gi.repository import Gst, GstVideo  # noqa: E402

DTYPES = {"u8": np.uint8, "u16": np.uint16, "f32": np.float32}


def tensor_of(sample):
    """A pulled other/x-prism-tensor sample as a (height, width, channels) numpy array (a copy)."""
    s = sample.get_caps().get_structure(0)
    assert s.get_name() == "other/x-prism-tensor" and s.get_value("layout") == "interleaved"
    dtype = np.dtype(DTYPES[s.get_value("dtype")])
    c, w, h = s.get_value("channels"), s.get_value("width"), s.get_value("height")
    buf = sample.get_buffer()
    row_bytes = w * c * dtype.itemsize
    meta = GstVideo.buffer_get_video_meta(buf)
    stride = meta.stride[0] if meta else (row_bytes + 3) // 4 * 4
    ok, info = buf.map(Gst.MapFlags.READ)
    assert ok, "cannot map the buffer"
    try:
        rows = np.frombuffer(info.data, np.uint8, count=stride * h).reshape(h, stride)
        return rows[:, :row_bytes].copy().view(dtype).reshape(h, w, c), stride
    finally:
        buf.unmap(info)


def window_counts(frame, value, window):
    """Independent reference: per pixel, how many pixels of its window (edges replicated) equal `value`."""
    h, w = frame.shape
    r = window // 2
    hits = np.pad((frame == value).astype(np.int64), r, mode="edge")
    out = np.zeros((h, w), np.int64)
    for y in range(h):
        for x in range(w):
            out[y, x] = hits[y : y + window, x : x + window].sum()
    return out


def main():
    Gst.init(None)
    W, H, BINS, WINDOW = 25, 12, 11, 5
    pipeline = Gst.parse_launch(
        f"appsrc name=src format=time caps=video/x-raw,format=GRAY8,width={W},height={H},framerate=10/1 ! "
        f"spectralize bins={BINS} window={WINDOW} ! other/x-prism-tensor,dtype=u16 ! appsink name=sink sync=false"
    )
    src, sink = pipeline.get_by_name("src"), pipeline.get_by_name("sink")
    pipeline.set_state(Gst.State.PLAYING)
    try:
        # A frame of two grey levels: black left of column 10, white from it on. GRAY8 rows are
        # 4-byte aligned in GStreamer's default layout.
        frame = np.zeros((H, W), np.uint8)
        frame[:, 10:] = 255
        stride_in = (W + 3) // 4 * 4
        padded = np.zeros((H, stride_in), np.uint8)
        padded[:, :W] = frame
        buf = Gst.Buffer.new_wrapped(padded.tobytes())
        buf.pts, buf.duration = 0, Gst.SECOND // 10
        src.emit("push-buffer", buf)
        src.emit("end-of-stream")
        sample = sink.emit("try-pull-sample", 20 * Gst.SECOND)
        assert sample is not None, "no tensor within 20 s"
        tensor, stride = tensor_of(sample)
    finally:
        pipeline.set_state(Gst.State.NULL)

    print(f"tensor {tensor.shape} {tensor.dtype}, row stride {stride} bytes for {W * BINS * 2} of data")
    assert tensor.shape == (H, W, BINS) and tensor.dtype == np.uint16
    assert stride >= W * BINS * 2 and stride % 4 == 0
    # Grey 0 lands in the first bin and 255 in the last; no other bin is used.
    assert (tensor[:, :, 1:-1] == 0).all()
    assert (tensor.sum(axis=2) == WINDOW * WINDOW).all()
    assert (tensor[:, :, 0] == window_counts(frame, 0, WINDOW)).all()
    assert (tensor[:, :, -1] == window_counts(frame, 255, WINDOW)).all()
    print("pixel (row 5, column 9): black", tensor[5, 9, 0], "white", tensor[5, 9, -1])  # 15 and 10
    assert (tensor[5, 9, 0], tensor[5, 9, -1]) == (15, 10)
    print("tensor_output: OK")


if __name__ == "__main__":
    main()
