#!/usr/bin/env python3
"""prism.Gallery.list(): the products the object holds, as stored, sorted by id.

One dict per product with exactly the fields id, features, width, height, enrolled_unix, collection,
format, source; in id order (also for ids whose entry files' names sort otherwise: "t-b.tex" before
"t.tex"); the object's own writes included. Another object on the same folder (as another process)
writes behind it: a product it adds is not listed (the object sees the gallery as opened plus its own
writes), one it updates is listed as stored, one it deletes raises GalleryError (as reading it would).
"""
import os
import tempfile

import numpy as np

import prism


def texture(seed, size=128):
    """A random smooth texture (low-pass filtered noise): rich in SIFT features, unique per seed."""
    rng = np.random.default_rng(seed)
    k = np.fft.fftfreq(size)
    low_pass = np.exp(-((np.hypot(*np.meshgrid(k, k)) / 0.08) ** 2))
    img = np.real(np.fft.ifft2(np.fft.fft2(rng.standard_normal((size, size))) * low_pass))
    return ((img - img.min()) / (img.max() - img.min()) * 255).astype(np.uint8)


FIELDS = {"id", "features", "width", "height", "enrolled_unix", "collection", "format", "source"}


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gallery")
        gallery = prism.Gallery(path, create=True, device="cpu")
        ids = ["t-b", "t", "t.a", "t_c", "s", "u"]
        counts = {}
        for i, pid in enumerate(ids):
            counts[pid] = gallery.enroll(pid, texture(i), collection="lot" if i % 2 else None)
        counts["s"] = gallery.update("s", texture(50), collection="other")
        gallery.delete("u")
        del counts["u"]
        listed = gallery.list()
        assert [e["id"] for e in listed] == sorted(counts), [e["id"] for e in listed]
        assert [e["id"] for e in listed] == ["s", "t", "t-b", "t.a", "t_c"]
        for e in listed:
            assert set(e) == FIELDS, e.keys()
            assert e["features"] == counts[e["id"]] and e["features"] > 0, e
            assert (e["width"], e["height"], e["format"]) == (128, 128, 2), e
            assert e["source"] == "numpy array 128x128x1", e
            assert isinstance(e["enrolled_unix"], int) and e["enrolled_unix"] > 0, e
        by_id = {e["id"]: e for e in listed}
        assert by_id["s"]["collection"] == "other" and by_id["t-b"]["collection"] is None
        assert by_id["t"]["collection"] == "lot", by_id["t"]

        other = prism.Gallery(path, device="cpu")
        assert other.list() == listed
        other.enroll("new", texture(60))
        n = other.update("t.a", texture(61))
        assert "new" in [e["id"] for e in other.list()]
        now = gallery.list()
        assert [e["id"] for e in now] == [e["id"] for e in listed], now
        assert {e["id"]: e for e in now}["t.a"]["features"] == n
        other.delete("t_c")
        try:
            gallery.list()
            raise AssertionError("list() passed over a product deleted behind the object's back")
        except prism.GalleryError as e:
            assert "t_c" in str(e), e
        print(f"list() of {len(listed)} products: sorted by id, as stored")


if __name__ == "__main__":
    main()
