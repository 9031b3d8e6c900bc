#!/usr/bin/env python3
"""Per-kernel GPU time from Nsight Compute's raw CSV (`ncu --csv --page raw --metrics
gpu__time_duration.sum ...`): each kernel's launches, median and mean duration and its share of
the total, as a markdown table (tools/gpu-suite, GPU_SUITE_PART=profile).

  kernel_times.py NCU.csv
"""
import collections
import csv
import statistics
import sys


def main():
    rows = [line for line in open(sys.argv[1], errors="replace") if line.startswith('"')]
    table = list(csv.reader(rows))
    if len(table) < 2:
        print("no kernel rows (see profile.log)\n")
        return
    head = table[0]
    name_col, time_col = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    units = table[1] if table[1][name_col] == "" else None  # ncu's second row names the units
    by = collections.defaultdict(list)
    for row in table[2:] if units else table[1:]:
        try:
            by[row[name_col][:70]].append(float(row[time_col].replace(",", "")))
        except (ValueError, IndexError):
            pass
    total = sum(sum(v) for v in by.values())
    unit = units[time_col] if units else "?"
    print(f"\n| kernel | launches | median ({unit}) | mean ({unit}) | share |\n|---|---:|---:|---:|---:|")
    for name, v in sorted(by.items(), key=lambda kv: -sum(kv[1])):
        print(f"| `{name}` | {len(v)} | {statistics.median(v):.2f} | {statistics.mean(v):.2f} | "
              f"{100 * sum(v) / total:.1f}% |")
    print()


if __name__ == "__main__":
    main()
