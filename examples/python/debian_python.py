"""Puts an example on Debian's Python when the python3 first on PATH lacks what it imports.

tools/install-deps installs python3-gi, python3-gst-1.0 and python3-numpy for Debian's
/usr/bin/python3, and build/python holds the module built for that interpreter. A python3 of pyenv,
conda or a virtual environment first on PATH has none of them: `python3 example.py` then failed with
"No module named 'numpy'". need() runs the example again under /usr/bin/python3, saying so on
stderr, or exits naming what to install.
"""
import importlib.util
import os
import sys

DEBIAN = "/usr/bin/python3"


def need(*modules):
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    what = ", ".join(missing)
    if os.path.exists(DEBIAN) and not os.environ.get("PRISM_EXAMPLE_ON_DEBIAN_PYTHON"):
        print(f"{sys.argv[0]}: {sys.executable} has no {what}: running it with {DEBIAN}", file=sys.stderr)
        os.environ["PRISM_EXAMPLE_ON_DEBIAN_PYTHON"] = "1"
        os.execv(DEBIAN, [DEBIAN] + sys.argv)
    sys.exit(f"{sys.argv[0]}: no {what} for {sys.executable}: tools/install-deps installs python3-gi, "
             "python3-gst-1.0 and python3-numpy; the prism module is build/python (PYTHONPATH)")
