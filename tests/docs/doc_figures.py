#!/usr/bin/env python3
"""The figures the docs show, computed again: they went stale unnoticed when contrast
normalisation became the default (README's Python example said 135.5 where it printed 111.1).

usage: doc_figures.py SOURCE_DIR PRISM_EXE DATA_DIR

- README.md, "Python": the code block that enrols box.png runs as written (up to `g.delete`; paths
  under ../shared/data point at DATA_DIR, the gallery into a temporary folder), and each `print(...)`
  with a trailing `# ...` comment prints what the comment says: the same words, and numbers equal to
  the comment's own precision.
- docs/RESULTS.md: the textureid JSON line is the first line that the command above it prints, in a
  folder holding the README's gallery: every field equal (numbers to 1e-6), but latency_ms.

Exit 0 when all agree, 1 naming each difference, 77 (skipped loudly) without DATA_DIR or the module.
"""
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile

SKIP = 77
failures = []


def fail(msg):
    failures.append(msg)
    print("doc_figures: FAIL: " + msg)


def block_with(text, needle, lang):
    for m in re.finditer(r"```" + lang + r"\n(.*?)```", text, re.S):
        if needle in m.group(1):
            return m.group(1)
    return None


def same_words(printed, said):
    """`said` (a doc comment) against `printed`: word by word; a number to the comment's precision."""
    p, s = printed.split(), said.split()
    if len(p) != len(s):
        return False
    for a, b in zip(p, s):
        if re.fullmatch(r"-?\d+\.\d+", b):
            try:
                if round(float(a), len(b.split(".")[1])) != float(b):
                    return False
            except ValueError:
                return False
        elif a != b:
            return False
    return True


def readme_python(source, data, tmp):
    text = open(os.path.join(source, "README.md")).read()
    block = block_with(text, 'prism.Gallery("texture-gallery"', "python")
    if block is None:
        return fail("README.md: no Python block that makes prism.Gallery(\"texture-gallery\")")
    lines = block.splitlines()
    end = next((i for i, l in enumerate(lines) if l.startswith("g.delete")), None)
    if end is None:
        return fail("README.md: the Python block has no g.delete line")
    code, expected = [], []
    for line in lines[: end + 1]:
        line = line.replace("../shared/data", data).replace('"texture-gallery"', repr(os.path.join(tmp, "g")))
        m = re.match(r"(print\(.*\))\s+#\s*(.*)$", line)
        if m:
            expected.append((len(code), m.group(2)))
        code.append(line)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile("\n".join(code), "README.md (Python block)", "exec"), {})
    printed = out.getvalue().splitlines()
    prints = [i for i, l in enumerate(code) if l.startswith("print(")]
    for at, said in expected:
        got = printed[prints.index(at)]
        if not same_words(got, said):
            fail(f"README.md: {code[at].split('#')[0].strip()} prints '{got}', the README says '{said}'")
        else:
            print(f"doc_figures: README.md: '{said}' as printed ('{got}')")


def close(a, b):
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)):
        return a == b
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def compare(path, a, b, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k == "latency_ms":
                continue
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'the doc' if k in b else 'the run'}")
            else:
                compare(f"{path}.{k}", a[k], b[k], out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            compare(f"{path}[{i}]", x, y, out)
    elif not close(a, b):
        out.append(f"{path}: run {a!r}, doc {b!r}")


def results_textureid(source, prism, data, tmp):
    text = open(os.path.join(source, "docs", "RESULTS.md")).read()
    m = re.search(r"`(prism run configs/texture-id\.yaml [^`]*)`(?:(?!```).)*?```json\n(.*?)\n```", text, re.S)
    if not m:
        return fail("docs/RESULTS.md: no `prism run configs/texture-id.yaml ...` command before the textureid JSON line")
    command, doc = m.group(1).split(), json.loads(m.group(2))
    cwd = os.path.join(tmp, "results")
    os.makedirs(cwd)
    images = os.path.join(data, "images")
    jpgs = sorted(os.path.join(images, f) for f in os.listdir(images) if f.endswith(".jpg"))
    subprocess.run([prism, "texture", "enroll", "--gallery", "texture-gallery", os.path.join(images, "box.png"),
                    os.path.join(images, "graf1.png")] + jpgs, cwd=cwd, check=True, capture_output=True)
    args = [prism] + [a.replace("configs/", os.path.join(source, "configs") + "/", 1) for a in command[1:]]
    run = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    if run.returncode != 0 or not run.stdout:
        return fail(f"docs/RESULTS.md: {' '.join(command)} exited {run.returncode}: {run.stderr[-2000:]}")
    got = json.loads(run.stdout.splitlines()[0])
    diffs = []
    compare("line", got, doc, diffs)
    for d in diffs:
        fail(f"docs/RESULTS.md, the textureid line: {d}")
    if not diffs:
        print(f"doc_figures: docs/RESULTS.md: the textureid line is what `{' '.join(command)}` prints")


def readme_envi(source, tmp):
    """README's ENVI example (it once drew every pixel but the target blue): run as written
    (gst-launch-1.0 from the repository's folder, the frames into a temporary one), its heat map
    must show the scene's materials apart: no colour covers most of the frame."""
    text = open(os.path.join(source, "README.md")).read()
    m = re.search(r"^(gst-launch-1\.0 envisrc location=configs/data/envi/.*?location=envi-%04d\.png)$", text, re.S | re.M)
    if not m:
        return fail("README.md: no gst-launch-1.0 envisrc example writing envi-%04d.png")
    out = os.path.join(tmp, "envi")
    os.makedirs(out)
    line = m.group(1).replace("location=envi-%04d.png", "location=" + os.path.join(out, "envi-%04d.png"))
    run = subprocess.run(["sh", "-c", line], cwd=source, capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        return fail(f"README.md: the ENVI example exited {run.returncode}: {run.stderr[-2000:]}")
    import cv2
    import numpy as np

    frame = cv2.imread(os.path.join(out, "envi-0000.png"))
    if frame is None:
        return fail("README.md: the ENVI example wrote no envi-0000.png")
    _, counts = np.unique(frame.reshape(-1, 3), axis=0, return_counts=True)
    share = counts.max() / counts.sum()
    if share > 0.5:
        fail(f"README.md: the ENVI example's heat map is {share:.0%} one colour")
    else:
        print(f"doc_figures: README.md: the ENVI heat map's commonest colour covers {share:.0%} of it")


def readme_emdtracker(source, data, tmp):
    """README's emdtracker examples (the GPU one's target once matched the whole frame): the
    CPU one run as written on its first 42 frames (with -m and an identity eos-after=43 added,
    vtest.mp4 from DATA_DIR), the GPU one's emdtracker on the CPU's frames; none of frame 41's
    detections may cover a quarter of the frame."""
    text = open(os.path.join(source, "README.md")).read()
    m = re.search(r"^gst-launch-1\.0 (filesrc location=\.\./shared/data/video/vtest\.mp4 ! qtdemux ! h264parse ! "
                  r"openh264dec ! \\\n\s*emdtracker .*?location=emd-%04d\.png)$", text, re.S | re.M)
    if not m:
        return fail("README.md: no CPU emdtracker example writing emd-%04d.png")
    out = os.path.join(tmp, "emd")
    os.makedirs(out)
    line = (m.group(1).replace("../shared/data", data).replace("openh264dec !", "openh264dec ! identity eos-after=43 !")
            .replace("location=emd-%04d.png", "location=" + os.path.join(out, "emd-%04d.png")))
    run = subprocess.run(["sh", "-c", "gst-launch-1.0 -m " + line], cwd=source, capture_output=True, text=True,
                         timeout=280)
    if run.returncode != 0:
        return fail(f"README.md: the emdtracker example exited {run.returncode}: {run.stderr[-2000:]}")
    last = [l for l in run.stdout.splitlines() if "prism-emdtracker" in l and "frame=(guint64)41," in l]
    if not last:
        return fail("README.md: the emdtracker example posted no message for frame 41")
    # The GPU example's emdtracker (its target given the same way), here on the CPU's decoded frames.
    g = re.search(r"nvh264dec ! \\\n\s*(emdtracker [^!]*?) ! cudadownload", text)
    if not g:
        return fail("README.md: no GPU emdtracker example (nvh264dec ! ... emdtracker ... ! cudadownload)")
    gpu_line = (f"filesrc location={data}/video/vtest.mp4 ! qtdemux ! h264parse ! openh264dec ! identity eos-after=43 ! "
                f"{g.group(1)} device=cpu ! fakesink")
    run_gpu = subprocess.run(["sh", "-c", "gst-launch-1.0 -m " + gpu_line], cwd=source, capture_output=True, text=True,
                             timeout=280)
    last += [l for l in run_gpu.stdout.splitlines() if "prism-emdtracker" in l and "frame=(guint64)41," in l][:1]
    if len(last) < 2:
        return fail(f"README.md: the GPU emdtracker example's element posted nothing for frame 41: {run_gpu.stderr[-500:]}")
    boxes = re.findall(r"width\\=\\\(int\\\)(\d+)\\,\\ height\\=\\\(int\\\)(\d+)", last[0] + last[1])
    if not boxes:
        return fail("README.md: the emdtracker example detected nothing in frame 41: " + last[0][:300])
    largest = max(int(w) * int(h) for w, h in boxes) / (768 * 576)
    if largest > 0.25:
        fail(f"README.md: an emdtracker detection covers {largest:.0%} of frame 41")
    else:
        print(f"doc_figures: README.md: both emdtracker examples' boxes in frame 41 ({len(boxes)}, detections and "
              f"tracks): the largest covers {largest:.1%} of the frame")


def main():
    source, prism, data = sys.argv[1:4]
    if not os.path.isdir(os.path.join(data, "images")):
        if os.environ.get("PRISM_REQUIRE_DATA"):
            sys.exit(f"doc_figures: no {data}/images")
        print(f"*** SKIPPED LOUDLY: doc_figures: no {data}/images ***")
        return SKIP
    try:
        import prism as _  # noqa: F401
    except ImportError as e:
        if os.environ.get("PRISM_REQUIRE_PYTHON") == "1":
            sys.exit(f"doc_figures: the prism module: {e}")
        print(f"*** SKIPPED LOUDLY: doc_figures: no prism module ({e}) ***")
        return SKIP
    with tempfile.TemporaryDirectory() as tmp:
        readme_python(source, data, tmp)
        results_textureid(source, prism, data, tmp)
        readme_envi(source, tmp)
        readme_emdtracker(source, data, tmp)
    if failures:
        print(f"doc_figures: {len(failures)} figure(s) in the docs differ from what the commands print")
        return 1
    print("doc_figures: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
