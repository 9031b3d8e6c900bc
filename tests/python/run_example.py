#!/usr/bin/env python3
"""Runs one example of examples/python as a test (ctest: python_EXAMPLE).

usage: run_example.py EXAMPLE.py [NEEDS...]   NEEDS: gst (PyGObject with python3-gst-1.0's
overrides), numpy, prism (the module of build/python), cv2

The example asserts its own results and exits non-zero when one fails. When something it needs is
not installed the test says so loudly and is skipped (exit 77, ctest's SKIP_RETURN_CODE), unless
PRISM_REQUIRE_PYTHON=1 (CI after tools/install-deps) makes that a failure. The example gets 120 s.
"""
import importlib
import os
import subprocess
import sys

SKIP = 77


def missing(need):
    try:
        if need == "gst":
            import gi

            gi.require_version("Gst", "1.0")
            from gi.repository import Gst

            if not hasattr(Gst, "ValueList"):
                return "python3-gst-1.0 (GStreamer's PyGObject overrides: GstValueList & co)"
        elif need == "prism":
            importlib.import_module("prism")
        else:
            importlib.import_module(need)
    except (ImportError, ValueError) as e:
        return {"gst": "python3-gi / python3-gst-1.0", "numpy": "python3-numpy",
                "prism": "the prism module (pybind11-dev; build/python)"}.get(need, need) + f": {e}"
    return None


def main():
    example, needs = sys.argv[1], sys.argv[2:]
    absent = [m for m in (missing(n) for n in needs) if m]
    if absent:
        print(f"*** SKIPPING PYTHON TEST ({os.path.basename(example)}: not installed: {'; '.join(absent)}) ***")
        return 1 if os.environ.get("PRISM_REQUIRE_PYTHON") == "1" else SKIP
    try:
        return subprocess.run([sys.executable, example], timeout=120).returncode
    except subprocess.TimeoutExpired:
        print(f"{example}: no end within 120 s")
        return 1


if __name__ == "__main__":
    sys.exit(main())
