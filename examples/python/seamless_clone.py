#!/usr/bin/env python3
"""Poisson seamless cloning on numpy arrays: prism.seamless_clone, cv2.seamlessClone's arguments.

prism.seamless_clone(src, dst, mask, center, mode) clones src (where mask is non-zero) into a copy
of dst so that the centre of the mask's bounding box lands at `center`, and returns it. It computes
what OpenCV 4.6's cv2.seamlessClone computes, bit for bit (the CPU path of kernels/poisson, which the
poissonblend element runs), with one difference: a box reaching outside dst is clipped where OpenCV
raises an error.

Run with the module on PYTHONPATH (e.g. build/python):
    PYTHONPATH=build/python python3 examples/python/seamless_clone.py
"""
from debian_python import need  # noqa: E402  (beside this file)

need("numpy", "prism")

import numpy as np

import prism


def scene(h, w, seed):
    """A smooth colour image (BGR), so the gradients are not all zero."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([120 + 60 * np.sin(x / 17 + c) * np.cos(y / 23 - c) for c in (0.0, 1.0, 2.0)], axis=2)
    return np.clip(img + rng.normal(0, 6, img.shape), 0, 255).astype(np.uint8)


def main():
    dst = scene(180, 240, 1)
    src = scene(64, 80, 2)[:, :, ::-1].copy()  # another picture
    mask = np.zeros((64, 80), np.uint8)
    yy, xx = np.mgrid[0:64, 0:80]
    mask[((yy - 32) / 26.0) ** 2 + ((xx - 40) / 34.0) ** 2 <= 1] = 255  # an ellipse
    center = (150, 80)

    out = prism.seamless_clone(src, dst, mask, center, "mixed")
    assert out.shape == dst.shape and out.dtype == np.uint8
    assert not np.shares_memory(out, dst)

    # Outside the destination box (the mask's box, centred on `center`) dst is unchanged.
    ys, xs = np.nonzero(mask[1:-1, 1:-1])  # the mask's outer frame does not count
    bh, bw = ys.max() - ys.min() + 1, xs.max() - xs.min() + 1
    x0, y0 = center[0] - bw // 2, center[1] - bh // 2
    outside = np.ones(dst.shape[:2], bool)
    outside[y0 : y0 + bh, x0 : x0 + bw] = False
    assert (out[outside] == dst[outside]).all()
    changed = (out != dst).any(axis=2).sum()
    print(f"{changed} pixels changed inside the {bw}x{bh} box at ({x0}, {y0})")
    assert changed > 0.5 * bw * bh

    # OpenCV's own, when its Python binding is installed (Debian: python3-opencv): the same bytes.
    try:
        import cv2
    except ImportError:
        print("seamless_clone: python3-opencv not installed: not compared with cv2.seamlessClone")
    else:
        for name, flag in (("normal", cv2.NORMAL_CLONE), ("mixed", cv2.MIXED_CLONE),
                           ("monochrome", cv2.MONOCHROME_TRANSFER)):
            ours = prism.seamless_clone(src, dst, mask, center, name)
            theirs = cv2.seamlessClone(src, dst, mask, center, flag)
            diff = np.abs(ours.astype(int) - theirs.astype(int))
            print(f"{name}: max difference from cv2.seamlessClone {diff.max()}")
            assert (ours == theirs).all(), f"{name}: {np.count_nonzero(diff)} values differ"
            assert (prism.seamless_clone(src, dst, mask, center, flag) == ours).all()  # cv2's flags work too

    # Inputs are only read: read-only and non-contiguous arrays are taken as they are.
    src_ro, dst_view = src.copy(), np.ascontiguousarray(dst[:, ::-1])[:, ::-1]
    src_ro.flags.writeable = False
    assert (prism.seamless_clone(src_ro, dst_view, mask, center, "mixed") == out).all()

    # A box reaching outside dst: OpenCV raises, we clip.
    clipped = prism.seamless_clone(src, dst, mask, (5, 5))
    assert clipped.shape == dst.shape and (clipped[100:, 100:] == dst[100:, 100:]).all()

    # Bad input is an exception naming the argument.
    for bad, error in (((src.astype(np.float32), dst, mask, center), TypeError),
                       ((src, dst, mask[:10], center), ValueError),
                       ((src, dst, mask, center, "poisson"), ValueError)):
        try:
            prism.seamless_clone(*bad)
            raise AssertionError("accepted bad input")
        except error as e:
            print("refused:", e)
    print("seamless_clone: OK")


if __name__ == "__main__":
    main()
