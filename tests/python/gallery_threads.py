#!/usr/bin/env python3
"""prism.Gallery shared between threads: len() and `in` while another thread enrolls.

Every call takes the gallery object's lock, so a reader sees the entries as they were before or
after an enrolment, never in between: len() never goes down, and when it says n, the first n
products (enrolled in order) are all `in` the gallery. Bounded: 12 small textures.
"""
import os
import tempfile
import threading

import numpy as np

import prism


def texture(seed, size=128):
    """A random smooth texture (low-pass filtered noise): rich in SIFT features, unique per seed."""
    rng = np.random.default_rng(seed)
    k = np.fft.fftfreq(size)
    low_pass = np.exp(-((np.hypot(*np.meshgrid(k, k)) / 0.08) ** 2))
    img = np.real(np.fft.ifft2(np.fft.fft2(rng.standard_normal((size, size))) * low_pass))
    return ((img - img.min()) / (img.max() - img.min()) * 255).astype(np.uint8)


def main():
    products = 12
    images = [texture(i) for i in range(products)]
    with tempfile.TemporaryDirectory() as tmp:
        gallery = prism.Gallery(os.path.join(tmp, "gallery"), create=True)
        done = threading.Event()
        failures = []

        def enrol():
            try:
                for i, img in enumerate(images):
                    gallery.enroll(f"p{i:02d}", img)
                    if f"p{i:02d}" not in gallery:  # what returned is there
                        failures.append(f"p{i:02d} not in the gallery after its enroll() returned")
            except Exception as e:  # noqa: BLE001 (reported below)
                failures.append(f"enroll failed: {e!r}")
            finally:
                done.set()

        writer = threading.Thread(target=enrol)
        writer.start()
        calls, last = 0, 0
        while not done.is_set() or calls == 0:
            n = len(gallery)
            if n < last or n > products:
                failures.append(f"len() went from {last} to {n}")
            last = max(last, n)
            # the first n products are enrolled (and stay: nothing is deleted)
            for i in range(n):
                if f"p{i:02d}" not in gallery:
                    failures.append(f"len() was {n} but p{i:02d} is not in the gallery")
            calls += 1
        writer.join(timeout=120)
        assert not writer.is_alive(), "the enrolling thread did not end"
        assert not failures, "\n".join(failures[:10])
        assert len(gallery) == products and all(f"p{i:02d}" in gallery for i in range(products))
        print(f"{calls} reads of len() and `in` while {products} products were enrolled: consistent")


if __name__ == "__main__":
    main()
