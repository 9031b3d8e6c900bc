#!/usr/bin/env python3
"""Reads the results Prism attaches to frames: GstVideoRegionOfInterestMeta and its params.

textureid identifies a texture in each due frame; an identified frame carries a region-of-interest
meta of type "texture" over the matched area with a "textureid" param (id, identified, inliers,
matches, score, latency-ms, and where the enrolled image lies in the frame: homography, 9 numbers
mapping its pixels to the frame's, and quad, its 4 corners in the frame). emdtracker's metas are of type "emd-target" with an "emd" param
(distance, track-id, pixels), one per detection, their meta id being the track id; bowclassify's is
"scene" over the whole frame. PyGObject 1.22 cannot iterate a buffer's metas, so a meta is fetched
by its id: GstVideo.buffer_get_video_region_of_interest_meta_id(buffer, id) (textureid's and
bowclassify's id is 0; emdtracker's are the track ids of its bus message).

Here: a gallery with one product (enrolled with the prism module), then a scene showing that
product, pushed through appsrc ! textureid ! appsink. async=false: each frame carries its own result
(with the default async=true, for live sources, a result goes on the next frame pushed after it,
its param adding source-frame and source-timestamp; README "Live sources").

Run with the plugin on GST_PLUGIN_PATH and the module on PYTHONPATH:
    GST_PLUGIN_PATH=build/plugins PYTHONPATH=build/python python3 examples/python/roi_meta.py
"""
from debian_python import need  # noqa: E402  (beside this file)

need("gi", "numpy", "prism")

import os
import tempfile

import gi
import numpy as np

import prism

gi.require_version("Gst", "1.0")
gi.require_version("GstVideo", "1.0")
from gi.repository import GLib, Gst, GstVideo  # noqa: E402

from texture_gallery import texture  # noqa: E402  (the example beside this one)


def rois(buffer, ids=(0,)):
    """The region-of-interest metas of `buffer` with the given meta ids, as dicts."""
    out = []
    for i in ids:
        m = GstVideo.buffer_get_video_region_of_interest_meta_id(buffer, i)
        if m is None:
            continue
        params = {}
        for name in ("textureid", "emd", "bowclassify"):
            p = m.get_param(name)
            if p is not None:
                params[name] = {p.nth_field_name(k): p.get_value(p.nth_field_name(k)) for k in range(p.n_fields())}
        out.append({"type": GLib.quark_to_string(m.roi_type), "box": (m.x, m.y, m.w, m.h), "params": params})
    return out


def main():
    Gst.init(None)
    W, H = 320, 240
    product = texture(3, size=160)
    frame = np.full((H, W), 128, np.uint8)
    frame[50:210, 120:280] = product  # the product's image at (120, 50)
    with tempfile.TemporaryDirectory() as tmp:
        gallery_dir = os.path.join(tmp, "gallery")
        prism.Gallery(gallery_dir, create=True).enroll("tile-3", product)
        pipeline = Gst.parse_launch(
            f"appsrc name=src format=time caps=video/x-raw,format=GRAY8,width={W},height={H},framerate=10/1 ! "
            f"textureid gallery={gallery_dir} interval=0 async=false ! appsink name=sink sync=false"
        )
        src, sink = pipeline.get_by_name("src"), pipeline.get_by_name("sink")
        pipeline.set_state(Gst.State.PLAYING)
        found = []
        try:
            for n in range(2):
                buf = Gst.Buffer.new_wrapped(frame.tobytes())  # 320 is a multiple of 4: no row padding
                buf.pts, buf.duration = n * Gst.SECOND // 10, Gst.SECOND // 10
                src.emit("push-buffer", buf)
            src.emit("end-of-stream")
            while True:
                sample = sink.emit("try-pull-sample", 20 * Gst.SECOND)
                if sample is None:
                    break
                found += rois(sample.get_buffer())
        finally:
            pipeline.set_state(Gst.State.NULL)

    for r in found:
        print(r)
    assert found, "no frame carried a textureid meta"
    for r in found:
        t = r["params"]["textureid"]
        assert r["type"] == "texture" and t["id"] == "tile-3" and t["identified"] is True
        assert t["score"] >= 3.6 and t["inliers"] >= 5 and t["inliers"] <= t["matches"]
        x, y, w, h = r["box"]
        # The box bounds the inliers, all on the product's image at (120, 50, 160, 160).
        assert 115 <= x and 45 <= y and x + w <= 285 and y + h <= 215 and w > 80 and h > 80, r["box"]
        # The product's 160x160 image as the frame shows it: its outer corners (top-left, top-right,
        # bottom-right, bottom-left; pixel centres at integers) where it was pasted, within 3 px.
        quad = [float(v) for v in t["quad"]]
        want = [119.5, 49.5, 279.5, 49.5, 279.5, 209.5, 119.5, 209.5]
        assert len(t["homography"]) == 9 and len(quad) == 8, t
        assert all(abs(a - b) < 3 for a, b in zip(quad, want)), quad
    print("roi_meta: OK")


if __name__ == "__main__":
    main()
