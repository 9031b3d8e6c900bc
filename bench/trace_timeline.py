#!/usr/bin/env python3
"""A timeline picture (SVG) of a CUPTI trace written by bench_texture_index (BENCH_TRACE=DIR).

    bench/trace_timeline.py TRACE.csv OUT.svg "title"

One lane per CUDA stream; kernels coloured by what they are (the 8-bit matchers, gpu::copy_rows_async),
copies by direction. Records of a kind closer than half a pixel on a lane are drawn as one bar, so
that a search of thousands of launches stays a small, readable picture. Standard library only.
"""
import csv
import sys
from xml.sax.saxutils import escape

KINDS = [  # (test on a record, legend, colour)
    (lambda r: r["what"] == "K" and "copy_rows" in r["name"], "copy kernel (pinned host rows)", "#d62728"),
    (lambda r: r["what"] == "K" and "wgmma" in r["name"], "matcher (wgmma)", "#1f77b4"),
    (lambda r: r["what"] == "K" and "match_u8" in r["name"], "matcher (mma.sync)", "#17becf"),
    (lambda r: r["what"] == "K", "other kernel", "#7f7f7f"),
    (lambda r: r["what"] == "H", "copy engine, host to device", "#ff7f0e"),
    (lambda r: r["what"] == "D", "copy engine, device to host", "#2ca02c"),
    (lambda r: r["what"] == "C", "other copy", "#bcbd22"),
]  # memsets (each matcher launch zeroes its scores) are left out: microseconds each


def kind(r):
    return next((i for i, (test, _, _) in enumerate(KINDS) if test(r)), None)


def main():
    src, out, title = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
    rows = list(csv.DictReader(open(src)))
    end = max(float(r["end_us"]) for r in rows) / 1e3
    lanes = sorted({int(r["stream"]) for r in rows})
    width, left, lane_h, top = 1000, 90, 26, 40
    scale = (width - left - 20) / end  # pixels a millisecond
    bars = {}  # (lane, kind) -> merged [start, end] in ms
    for r in sorted(rows, key=lambda r: float(r["start_us"])):
        if kind(r) is None:
            continue
        key = (int(r["stream"]), kind(r))
        a, b = float(r["start_us"]) / 1e3, float(r["end_us"]) / 1e3
        v = bars.setdefault(key, [])
        if v and (a - v[-1][1]) * scale < 0.5:
            v[-1][1] = max(v[-1][1], b)
        else:
            v.append([a, b])
    height = top + lane_h * len(lanes) + 40 + 18 * len(KINDS)
    svg = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        f'font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="20" font-size="14">{escape(title)}</text>',
    ]
    for i, lane in enumerate(lanes):
        y = top + i * lane_h
        svg.append(f'<text x="5" y="{y + 16}">stream {lane}</text>')
        svg.append(f'<rect x="{left}" y="{y}" width="{width - left - 20}" height="{lane_h - 4}" fill="#f4f4f4"/>')
        for k in range(len(KINDS)):  # kernels in a lane's upper half, copies and memsets in its lower
            for a, b in bars.get((lane, k), []):
                half = 0 if k < 4 else 1
                svg.append(
                    f'<rect x="{left + a * scale:.2f}" y="{y + half * (lane_h - 4) / 2:.1f}" '
                    f'width="{max(0.5, (b - a) * scale):.2f}" height="{(lane_h - 4) / 2:.1f}" fill="{KINDS[k][2]}"/>'
                )
    axis_y = top + lane_h * len(lanes) + 4
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if end / s <= 10)
    t = 0
    while t <= end:
        x = left + t * scale
        svg.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{axis_y}" stroke="#999" stroke-width="0.5"/>')
        svg.append(f'<text x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle">{t} ms</text>')
        t += step
    for k, (_, legend, colour) in enumerate(KINDS):
        y = axis_y + 30 + 18 * k
        svg.append(f'<rect x="{left}" y="{y - 10}" width="14" height="10" fill="{colour}"/>')
        svg.append(f'<text x="{left + 20}" y="{y}">{escape(legend)}</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
