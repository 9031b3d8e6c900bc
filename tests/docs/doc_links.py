#!/usr/bin/env python3
"""The benchmark table and the pages it links, checked for the shape readers rely on.

usage: doc_links.py SOURCE_DIR

- Every relative link in README.md, DEVELOPERS.md, BENCHMARKS.md, docs/*.md, docs/benchmarks/*.md
  and tests/fuzz/FINDINGS.md names a file that exists.
- BENCHMARKS.md: each area heading links its page under docs/benchmarks/, every page there is linked
  from it, and every row of its tables has the six columns (benchmark, command, device, commit,
  median, peer) with a device, a median and a commit: a commit of this repository ("rec. X" for the
  one that recorded the figures) or "not recorded" with a date. Commits are looked up in git when the
  source folder has its history.
- No "issue N" or "session N" in BENCHMARKS.md or the pages: they say what a figure is, not when.

Exit 0 when all hold, 1 naming each fault.
"""
import glob
import os
import re
import subprocess
import sys

failures = []


def fail(msg):
    failures.append(msg)
    print("doc_links: FAIL: " + msg)


def links(text):
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1).split("#")[0]
        if target and not re.match(r"[a-z]+:", target):
            yield target


def main():
    source = sys.argv[1]
    pages = sorted(glob.glob(os.path.join(source, "docs", "benchmarks", "*.md")))
    docs = [os.path.join(source, f) for f in ("README.md", "DEVELOPERS.md", "BENCHMARKS.md",
                                              os.path.join("tests", "fuzz", "FINDINGS.md"))]
    docs += sorted(glob.glob(os.path.join(source, "docs", "*.md"))) + pages
    for path in docs:
        for target in links(open(path).read()):
            if not os.path.exists(os.path.join(os.path.dirname(path), target)):
                fail(f"{os.path.relpath(path, source)}: the link {target} names no file")

    table = open(os.path.join(source, "BENCHMARKS.md")).read()
    linked = {os.path.normpath(t) for t in links(table)}
    if not pages:
        fail("docs/benchmarks/ has no pages")
    for page in pages:
        if os.path.relpath(page, source) not in linked:
            fail(f"BENCHMARKS.md links no {os.path.relpath(page, source)}")
    history = os.path.isdir(os.path.join(source, ".git")) or os.path.isfile(os.path.join(source, ".git"))
    rows = 0
    for line in table.splitlines():
        if line.startswith("## ") and "](docs/benchmarks/" not in line:
            fail(f"BENCHMARKS.md: the area '{line[3:]}' links no page under docs/benchmarks/")
        if not line.startswith("|") or line.startswith("|---") or line.startswith("| benchmark |"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) != 6:
            fail(f"BENCHMARKS.md: a row of {len(cells)} columns, not 6: {line[:80]}")
            continue
        rows += 1
        what, _, device, commit, median, _ = cells
        if not device or not median:
            fail(f"BENCHMARKS.md: '{what}' has no device or no median")
        m = re.fullmatch(r"(?:rec\. )?([0-9a-f]{7,40}) \(\d\d-\d\d\)", commit)
        if not m and not re.fullmatch(r"not recorded \(\d\d-\d\d\)", commit):
            fail(f"BENCHMARKS.md: '{what}': the commit column '{commit}' is neither a commit nor 'not recorded'")
        elif m and history:
            known = subprocess.run(["git", "-C", source, "cat-file", "-e", m.group(1) + "^{commit}"],
                                   capture_output=True).returncode == 0
            if not known:
                fail(f"BENCHMARKS.md: '{what}': {m.group(1)} is no commit of this repository")
    if rows < 20:
        fail(f"BENCHMARKS.md: {rows} benchmark rows; the table lost its rows")
    for path in [os.path.join(source, "BENCHMARKS.md")] + pages:
        for n, line in enumerate(open(path), 1):
            if re.search(r"\b(issue|session) ?#?\d", line, re.I):
                fail(f"{os.path.relpath(path, source)}:{n}: names an issue or session: {line.strip()[:80]}")
    if failures:
        print(f"doc_links: {len(failures)} fault(s)")
        return 1
    print(f"doc_links: OK ({rows} benchmark rows, {len(pages)} pages, {len(docs)} documents' links)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
