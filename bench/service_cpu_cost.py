#!/usr/bin/env python3
"""What a verify costs a server without a GPU, in CPU time, against OpenCV's own pipeline of the
same bytes (imdecode + resize INTER_AREA + SIFT(768)): `prism texture serve --device cpu` answers N
sequential verifies of each upload over HTTP on loopback, and the server's CPU time (user, system)
and minor page faults per request are read from /proc/PID/stat around them. CPU time first: on a
shared 2-core build machine wall time moves with the neighbours' load, CPU time much less
(docs/benchmarks/service.md, "CPU time per verify"); the wall-time medians beside it (the client's
whole request, HTTP included, against OpenCV's calls) mean something on an idle machine only. Needs Python's cv2 (Debian's
python3-opencv: run it with /usr/bin/python3).

  service_cpu_cost.py [--prism build/tools/prism/prism] [--data ../shared/data] [--requests 10]
"""
import argparse
import http.client
import os
import resource
import statistics
import socket
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(v[7]), int(v[11]) * 1000 / tck, int(v[12]) * 1000 / tck  # minflt, utime ms, stime ms


def opencv_cost(data, n):
    sift = cv2.SIFT_create(768)
    buf = np.frombuffer(data, np.uint8)

    def once():
        g = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
        s = 1024 / max(g.shape)
        if s < 1:
            g = cv2.resize(g, (round(g.shape[1] * s), round(g.shape[0] * s)), interpolation=cv2.INTER_AREA)
        sift.detectAndCompute(g, None)

    once(), once()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    walls = timed(once, n)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return ((r1.ru_minflt - r0.ru_minflt) / n, (r1.ru_utime - r0.ru_utime) * 1000 / n,
            (r1.ru_stime - r0.ru_stime) * 1000 / n, statistics.median(walls))


def timed(f, n):
    """Wall times of n calls of f, in ms."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prism", default=os.path.join(ROOT, "build/tools/prism/prism"))
    p.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data"))
    p.add_argument("--requests", type=int, default=10)
    a = p.parse_args()
    leuven = os.path.join(a.data, "oxford-affine", "leuven")
    q = cv2.imread(os.path.join(leuven, "img3.png"))
    if q is None:
        sys.exit(f"service_cpu_cost: cannot read {leuven}/img3.png")
    uploads = [  # the load benchmark's two extremes: a camera-sized PNG and a phone photo
        ("640x480 PNG", "image/png", cv2.imencode(".png", cv2.resize(q, (640, 480), interpolation=cv2.INTER_AREA))[1]),
        ("4000x3000 JPEG q92", "image/jpeg",
         cv2.imencode(".jpg", cv2.resize(q, (4000, 3000), interpolation=cv2.INTER_CUBIC),
                      [cv2.IMWRITE_JPEG_QUALITY, 92])[1]),
    ]
    with tempfile.TemporaryDirectory() as work:
        gallery = os.path.join(work, "g")
        subprocess.run([a.prism, "texture", "enroll", "--gallery", gallery, "--id", "leuven",
                        os.path.join(leuven, "img2.png")], check=True, stdout=subprocess.DEVNULL)
        log = open(os.path.join(work, "serve.log"), "w")
        with socket.socket() as s:  # a free port
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen([a.prism, "texture", "serve", "--gallery", gallery, "--device", "cpu", "--listen",
                                   f"127.0.0.1:{port}"], stdout=log, stderr=log)
        try:
            for _ in range(600):
                try:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                    c.request("GET", "/healthz")
                    if c.getresponse().status == 200:
                        break
                except OSError:
                    pass
                if server.poll() is not None:
                    sys.exit(f"service_cpu_cost: the server ended: {open(log.name).read()[-500:]}")
                time.sleep(0.1)
            print(f"| upload | server CPU per verify (user + sys) | page faults | OpenCV {cv2.__version__} imdecode + "
                  "resize + SIFT (user + sys) | page faults | server / OpenCV | verify wall p50 | OpenCV wall p50 | "
                  "server / OpenCV, wall |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
            for label, ctype, body in uploads:
                body = body.tobytes()

                def post():
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                    c.request("POST", "/v1/products/leuven/verify", body, {"Content-Type": ctype})
                    r = c.getresponse()
                    text = r.read()
                    if r.status != 200 or b'"accepted":true' not in text:
                        sys.exit(f"service_cpu_cost: {label}: HTTP {r.status} {text[:300]!r}")

                post(), post()
                f0, u0, s0 = stat(server.pid)
                walls = timed(post, a.requests)
                f1, u1, s1 = stat(server.pid)
                n = a.requests
                ours = ((f1 - f0) / n, (u1 - u0) / n, (s1 - s0) / n)
                cv = opencv_cost(body, n)
                print(f"| {label} | {ours[1]:.0f} + {ours[2]:.0f} ms | {ours[0]:,.0f} | {cv[1]:.0f} + {cv[2]:.0f} ms | "
                      f"{cv[0]:,.0f} | {(ours[1] + ours[2]) / (cv[1] + cv[2]):.2f}x | {statistics.median(walls):.1f} ms | "
                      f"{cv[3]:.1f} ms | {statistics.median(walls) / cv[3]:.2f}x |", flush=True)
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
