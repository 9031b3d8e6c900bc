#!/usr/bin/env python3
"""Cameras per GPU: K streams of one clip in one process through each analysis chain.

Runs bench_density (bench/bench_density.cpp) for every case and K, with `nvidia-smi dmon` sampling
the GPU's SM and decoder load meanwhile, and writes one markdown table (docs/benchmarks/density.md
holds the measured tables and the command). Cases are the chains of issue 44's table: decode only,
decode -> emdtracker, decode -> spectralize -> emdtracker, the same with a queue between decoder
and analysis, bowclassify, textureid (search, every frame tried); each with one shared blocking-sync CUDA context (what prism run sets)
or with every element's own GstCudaContext (gst-launch). No case starts after --budget seconds.

  python3 bench/density/run.py --bench .gpu/bin/bench_density --clip1080 C --clip576 C --out density.md
"""
import argparse
import os
import subprocess
import sys
import threading
import time


def dmon_sampler(samples, stop):
    """nvidia-smi dmon -s u: sm %, mem %, enc %, dec % per second; kept while the case runs."""
    try:
        p = subprocess.Popen(["nvidia-smi", "dmon", "-s", "u", "-d", "1"], stdout=subprocess.PIPE, text=True)
    except OSError:
        return
    cols = None
    for line in p.stdout:
        if stop.is_set():
            break
        f = line.split()
        if not f:
            continue
        if f[0] == "#":
            if cols is None and len(f) > 2 and f[1] == "gpu":
                cols = f[1:]
            continue
        if cols and len(f) == len(cols):
            samples.append(dict(zip(cols, f)))
    p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--clip1080", required=True, help="1080p H.264 clip (tools/gpu-suite bundle makes one)")
    ap.add_argument("--clip576", required=True, help="768x576 H.264 clip (vtest)")
    ap.add_argument("--bow-model", default="", help="a .bow model for the bowclassify rows")
    ap.add_argument("--texture-gallery", default="", help="a texture gallery folder for the textureid rows")
    ap.add_argument("--cases", default="", help="comma list of case names to run (default: all)")
    ap.add_argument("--budget", type=float, default=480)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    dec = "filesrc location={clip} ! qtdemux ! h264parse ! nvh264dec"
    sink = "fakesink sync=false"
    # target-rect: a person in vtest at 768x576 (634,262,28,50), scaled for 1080p
    emd = "emdtracker device=cuda target-frame=5 target-rect={rect}"
    chains = {
        "decode": f"{dec} ! {sink}",
        "emdtracker": f"{dec} ! {emd} ! {sink}",
        "queue -> emdtracker": f"{dec} ! queue max-size-buffers=4 ! {emd} ! {sink}",
        "spectralize -> emdtracker": f"{dec} ! spectralize device=cuda ! {emd} ! {sink}",
        "emdtracker (distance map out)": f"{dec} ! {emd} ! other/x-prism-tensor(memory:CUDAMemory) ! {sink}",
        "bowclassify interval=0": f"{dec} ! bowclassify interval=0 model={a.bow_model} ! {sink}",
        "bowclassify interval=0 async=false": f"{dec} ! bowclassify interval=0 async=false model={a.bow_model} ! {sink}",
        "textureid interval=0": f"{dec} ! textureid interval=0 gallery={a.texture_gallery} ! {sink}",
    }
    clips = {"1080p": (a.clip1080, "1585,491,70,94"), "768x576": (a.clip576, "634,262,28,50")}
    # (resolution, chain, context, Ks): the first rows answer "where does it top out and why"
    plan = [
        ("1080p", "decode", "shared", [1, 16, 32, 64, 96]),
        ("1080p", "decode", "element", [32, 64, 96]),
        ("1080p", "emdtracker", "shared", [1, 16, 32, 64]),
        ("1080p", "emdtracker", "element", [32, 64]),
        ("1080p", "spectralize -> emdtracker", "shared", [16, 32, 64]),
        ("1080p", "queue -> emdtracker", "shared", [32, 64]),
        ("1080p", "emdtracker (distance map out)", "shared", [64]),
        ("1080p", "bowclassify interval=0", "shared", [16, 64]),
        ("1080p", "bowclassify interval=0 async=false", "shared", [16, 64]),
        ("1080p", "textureid interval=0", "shared", [16, 64]),
        ("768x576", "decode", "shared", [64, 128]),
        ("768x576", "emdtracker", "shared", [64, 128]),
    ]
    wanted = set(filter(None, a.cases.split(",")))
    device = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip() or "no GPU"
    out = open(a.out, "w")

    def emit(line):
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()

    emit(f"Cameras per GPU on {device}, {os.cpu_count()} host cores: K streams of one clip in one process "
         "(bench/density/run.py); steady rate after each stream's first 30 frames; cores: the process's "
         "CPU time over that span; SM and decoder load: nvidia-smi dmon means.")
    emit("")
    emit("| resolution | chain | CUDA context | K | fps | fps per stream | analysed fps | cores | skipped | frames "
         "| wall | SM % | NVDEC % |")
    emit("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    t_start = time.time()
    for res, chain, ctx, ks in plan:
        if wanted and chain not in wanted:
            continue
        if chain.startswith("bowclassify") and not a.bow_model:
            continue
        if chain.startswith("textureid") and not a.texture_gallery:
            continue
        clip, rect = clips[res]
        branch = chains[chain].format(clip=clip, rect=rect)
        for k in ks:
            if time.time() - t_start > a.budget:
                emit(f"| {res} | {chain} | {ctx} | {k} | not run (budget) | | | | | | | | |")
                continue
            samples, stop = [], threading.Event()
            th = threading.Thread(target=dmon_sampler, args=(samples, stop), daemon=True)
            th.start()
            p = subprocess.run([a.bench, "--context", ctx, "--warmup", "30", f"{res} {chain}", str(k), branch],
                               capture_output=True, text=True, timeout=300)
            stop.set()
            row = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
            if p.returncode != 0 or not row.startswith("|"):
                print(f"{res} {chain} K={k} failed; its stderr:\n{p.stderr}", file=sys.stderr, flush=True)
                emit(f"| {res} | {chain} | {ctx} | {k} | failed: {p.stderr.strip()[-160:]} | | | | | | | | |")
                continue
            cells = [c.strip() for c in row.strip("|").split("|")]  # label k fps per cores skipped frames wall
            busy = samples[1:-1] or samples

            def mean(col):
                vals = [float(s[col]) for s in busy if s.get(col, "-").replace(".", "").isdigit()]
                return f"{sum(vals) / len(vals):.0f}" if vals else "-"

            # async elements skip frames while busy: analysed = passed x (1 - skipped share of the run)
            analysed = float(cells[2]) * (1 - int(cells[5]) / max(1, int(cells[6])))
            emit(f"| {res} | {chain} | {ctx} | {cells[1]} | {cells[2]} | {cells[3]} | {analysed:.0f} | {cells[4]} "
                 f"| {cells[5]} | {cells[6]} | {cells[7]} | {mean('sm')} | {mean('dec')} |")
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
