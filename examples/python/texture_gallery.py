#!/usr/bin/env python3
"""The texture gallery from Python: enrol, search (top-k with scores), verify, list, delete.

prism.Gallery is the gallery `prism texture` and the textureid element use (a directory; every
write is durable when it returns). Images are file paths (decoded by GStreamer, as the CLI does)
or numpy uint8 arrays: (H, W) grey, (H, W, 3) BGR or (H, W, 4) BGRA.

Run with the module on PYTHONPATH (e.g. build/python):
    PYTHONPATH=build/python python3 examples/python/texture_gallery.py
"""
from debian_python import need  # noqa: E402  (beside this file)

need("numpy", "prism")

import os
import tempfile

import numpy as np

import prism


def texture(seed, size=256):
    """A random smooth texture (low-pass filtered noise): rich in SIFT features, unique per seed."""
    rng = np.random.default_rng(seed)
    k = np.fft.fftfreq(size)
    low_pass = np.exp(-((np.hypot(*np.meshgrid(k, k)) / 0.06) ** 2))
    img = np.real(np.fft.ifft2(np.fft.fft2(rng.standard_normal((size, size))) * low_pass))
    return ((img - img.min()) / (img.max() - img.min()) * 255).astype(np.uint8)


def write_pgm(path, grey):
    """A binary PGM file (what any decoder reads; here so that enrolment from a path is shown)."""
    with open(path, "wb") as f:
        f.write(b"P5\n%d %d\n255\n" % (grey.shape[1], grey.shape[0]))
        f.write(grey.tobytes())


def main():
    with tempfile.TemporaryDirectory() as tmp:
        gallery = prism.Gallery(os.path.join(tmp, "gallery"), create=True)
        # A new gallery records the contrast normalisation applied before SIFT (the CLI's default,
        # chosen for dim captures); reopening with another one is refused.
        assert gallery.normalisation == "clahe-4-8", gallery.normalisation
        try:
            prism.Gallery(os.path.join(tmp, "gallery"), normalise="none")
            raise AssertionError("a gallery was reopened with another normalisation")
        except ValueError as e:
            print("refused:", e)
        products = {f"tile-{i}": texture(i) for i in range(4)}
        for pid, img in products.items():
            n = gallery.enroll(pid, img, collection="lot-1")
            print(f"enrolled {pid}: {n} features")
        # From a file: the id is ours to choose; the file is the entry's source.
        path = os.path.join(tmp, "poster.pgm")
        write_pgm(path, texture(100))
        gallery.enroll("poster", path)
        assert len(gallery) == 5 and "poster" in gallery
        listed = {e["id"]: e for e in gallery.list()}
        assert listed["poster"]["source"] == path and listed["poster"]["collection"] is None
        assert listed["tile-2"]["collection"] == "lot-1" and listed["tile-2"]["width"] == 256

        # An id enrolled already is refused, unless replace=True.
        try:
            gallery.enroll("tile-0", products["tile-0"])
            raise AssertionError("a second enrolment of tile-0 was accepted")
        except prism.GalleryError as e:
            print("refused:", e)
        # Bad input is an exception naming the argument, never garbage.
        try:
            gallery.search(products["tile-0"].astype(np.float32))
            raise AssertionError("a float image was accepted")
        except TypeError as e:
            print("refused:", e)

        # 1:M. The query: a crop of tile-2 from (40, 30), with noise.
        noise = np.random.default_rng(7).integers(-8, 9, (200, 180))
        query = np.clip(products["tile-2"][30:230, 40:220].astype(int) + noise, 0, 255).astype(np.uint8)
        result = gallery.search(query, top=3)
        print(result, [(c.id, c.inliers, round(c.significance, 1)) for c in result.candidates])
        assert result.identified and result.best.id == "tile-2" and result.best.accepted
        assert result.searched == 5 and 1 <= len(result.candidates) <= 3
        assert result.candidates[0].id == "tile-2"
        assert all(not c.accepted for c in result.candidates[1:])
        # The homography maps the query into the gallery image: a shift by (40, 30).
        h = result.best.homography / result.best.homography[2, 2]
        assert np.allclose(h[:2, :2], np.eye(2), atol=0.02) and np.allclose(h[:2, 2], [40, 30], atol=1.0), h
        assert np.allclose(h[2, :2], 0, atol=1e-4), h
        x, y, w, hgt = result.best.query_box
        assert 0 <= x and 0 <= y and x + w <= 180 and y + hgt <= 200

        # A read-only array is read as it is.
        frozen = np.frombuffer(query.tobytes(), np.uint8).reshape(query.shape)
        assert not frozen.flags.writeable and gallery.search(frozen).best.id == "tile-2"

        # Search within collections: the poster is in none.
        assert not gallery.search(texture(100), collections=["lot-1"]).identified
        assert gallery.search(texture(100)).best.id == "poster"

        # 1:1.
        assert gallery.verify("tile-2", query).identified
        rejected = gallery.verify("tile-1", query)
        print("verify tile-1:", rejected.best)
        assert not rejected.identified and rejected.best.significance < 3.6

        # An unknown texture is not identified.
        assert not gallery.search(texture(999)).identified

        # Delete: gone from the gallery and from the searches.
        gallery.delete("tile-2")
        assert "tile-2" not in gallery and len(gallery) == 4
        assert not gallery.search(query).identified
        # A reopened gallery is what is on disk.
        again = prism.Gallery(os.path.join(tmp, "gallery"))
        assert sorted(e["id"] for e in again.list()) == ["poster", "tile-0", "tile-1", "tile-3"]
    print("texture_gallery: OK")


if __name__ == "__main__":
    main()
