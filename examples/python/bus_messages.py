#!/usr/bin/env python3
"""Reads Prism's per-frame bus messages from Python: emdtracker's `detections`.

A `prism-emdtracker` element message per frame carries the common time fields (timestamp,
stream-time, running-time, duration, frame) and `detections`, a GstValueList of `detection`
structures (x, y, width, height, distance, track-id, pixels). Reading a GstValueList needs Debian's
python3-gst-1.0 (the GStreamer overrides of PyGObject); without it `s.get_value("detections")`
raises `TypeError: unknown type GstValueList`. tools/install-deps installs it.

Run with the plugin on GST_PLUGIN_PATH (e.g. build/plugins):
    GST_PLUGIN_PATH=build/plugins python3 examples/python/bus_messages.py
"""
from debian_python import need  # noqa: E402  (beside this file)

need("gi")

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst  # noqa: E402

# SMPTE bars in grey, 160x120: the target is a rectangle inside the leftmost bar (x 0..22), whose
# pixels all have one grey level, so the bar is found again at distance 0 in every frame.
PIPELINE = (
    "videotestsrc num-buffers=4 pattern=smpte ! video/x-raw,format=GRAY8,width=160,height=120,framerate=10/1 ! "
    "emdtracker name=tracker target-rect=4,10,12,40 target-frame=0 threshold=0.5 ! fakesink"
)


def detections_of(structure):
    """The `detections` list of a prism-emdtracker message as plain dicts."""
    out = []
    for d in structure.get_value("detections"):  # a Gst.ValueList of Gst.Structure
        out.append({k: d.get_value(k) for k in ("x", "y", "width", "height", "distance", "track-id", "pixels")})
    return out


def run(launch=PIPELINE, timeout_s=20):
    """Runs `launch` to EOS and returns the prism-* element messages as (name, fields) pairs."""
    pipeline = Gst.parse_launch(launch)
    bus = pipeline.get_bus()
    pipeline.set_state(Gst.State.PLAYING)
    messages = []
    try:
        while True:
            msg = bus.timed_pop_filtered(
                timeout_s * Gst.SECOND, Gst.MessageType.ELEMENT | Gst.MessageType.ERROR | Gst.MessageType.EOS
            )
            if msg is None:
                raise TimeoutError(f"no EOS within {timeout_s} s")
            if msg.type == Gst.MessageType.ERROR:
                err, debug = msg.parse_error()
                raise RuntimeError(f"{msg.src.get_name()}: {err.message} ({debug})")
            if msg.type == Gst.MessageType.EOS:
                return messages
            s = msg.get_structure()
            if s.get_name().startswith("prism-"):
                messages.append((s.get_name(), msg.src.get_name(), s))
    finally:
        pipeline.set_state(Gst.State.NULL)


def main():
    Gst.init(None)
    messages = run()
    assert len(messages) == 4, f"one message per frame expected, got {len(messages)}"
    track_ids = None
    for n, (name, source, s) in enumerate(messages):
        assert name == "prism-emdtracker" and source == "tracker", (name, source)
        assert s.get_value("frame") == n
        assert s.get_value("timestamp") == n * Gst.SECOND // 10  # 10 fps
        assert s.get_value("target-known") is True
        dets = detections_of(s)
        print(f"frame {n} at {s.get_value('timestamp') / Gst.SECOND:.1f} s: {len(dets)} detections")
        for d in dets:
            print(f"  track {d['track-id']}: box ({d['x']}, {d['y']}, {d['width']}, {d['height']}), "
                  f"distance {d['distance']:.2f}, {d['pixels']} pixels")
            assert d["distance"] <= 0.5 and d["pixels"] > 0 and d["width"] > 0 and d["height"] > 0
        # The bar holding the target is found: a box over the target rectangle that stays in the bar
        # (up to the detector's 8-pixel cells).
        bar = [d for d in dets if d["x"] <= 4 and d["y"] <= 10 and d["x"] + d["width"] >= 16 and d["y"] + d["height"] >= 50]
        assert len(bar) == 1 and bar[0]["x"] + bar[0]["width"] <= 32, dets
        ids = sorted(d["track-id"] for d in dets)
        assert track_ids is None or ids == track_ids, "a still scene keeps its track ids"
        track_ids = ids
    print("bus_messages: OK")


if __name__ == "__main__":
    main()
