#!/usr/bin/env python3
"""Where a request's time goes in `prism texture serve`: sequential and concurrent verifies and
searches of three uploads (640x480 PNG, 1280x960 JPEG, 4000x3000 JPEG), reporting the server's own
latency_ms parts (p50) and the client's p50/p99 and requests/s. A profiling aid (Python client on
loopback), not the load benchmark.

  service_profile.py PRISM DATA_DIR OUT_DIR [PRODUCTS=5]
"""
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import cv2
import numpy as np

prism, data, out = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(out, exist_ok=True)
port = 18431
gallery = os.path.join(out, "gallery")


def img(path):
    m = cv2.imread(path, cv2.IMREAD_COLOR)
    assert m is not None, path
    return m


enrol = []
for s in ["bark", "leuven"]:  # img2 is enrolled, img3 queried
    p = os.path.join(out, s + ".png")
    cv2.imwrite(p, img(os.path.join(data, "oxford-affine", s, "img2.ppm")))
    enrol.append((s, p))
for name in ["graf1.png", "box.png", "baboon.jpg"]:
    p = os.path.join(data, "images", name)
    enrol.append((os.path.splitext(name)[0], p))
subprocess.run([prism, "texture", "enroll", "--gallery", gallery] + [p for _, p in enrol], check=True,
               stdout=subprocess.DEVNULL)

q = img(os.path.join(data, "oxford-affine", "bark", "img3.ppm"))
uploads = {
    "640x480 PNG": cv2.imencode(".png", cv2.resize(q, (640, 480), interpolation=cv2.INTER_AREA))[1].tobytes(),
    "1280x960 JPEG": cv2.imencode(".jpg", cv2.resize(q, (1280, 960), interpolation=cv2.INTER_CUBIC),
                                  [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes(),
    "4000x3000 JPEG": cv2.imencode(".jpg", cv2.resize(q, (4000, 3000), interpolation=cv2.INTER_CUBIC),
                                   [cv2.IMWRITE_JPEG_QUALITY, 92])[1].tobytes(),
}
for k, v in uploads.items():
    buf = np.frombuffer(v, np.uint8)
    ts = []
    for _ in range(10):
        t = time.perf_counter()
        cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
        ts.append((time.perf_counter() - t) * 1e3)
    ts2 = []
    for _ in range(10):
        t = time.perf_counter()
        cv2.imdecode(buf, cv2.IMREAD_REDUCED_GRAYSCALE_2)
        ts2.append((time.perf_counter() - t) * 1e3)
    print(f"{k}: {len(v)} bytes; cv2.imdecode grey p50 {statistics.median(ts):.2f} ms, reduced 1/2 "
          f"{statistics.median(ts2):.2f} ms", flush=True)

log = open(os.path.join(out, "serve.log"), "w")
server = subprocess.Popen([prism, "texture", "serve", "--gallery", gallery, "--listen", f"127.0.0.1:{port}", "--threads", "72"] + os.environ.get("PROFILE_SERVE_ARGS", "").split(), stdout=log,
                          stderr=subprocess.STDOUT)
for _ in range(600):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/healthz")
        if c.getresponse().status == 200:
            break
    except OSError:
        pass
    time.sleep(0.1)


def post(conn, path, body):
    t = time.perf_counter()
    conn.request("POST", path, body=body, headers={"Content-Type": "application/octet-stream"})
    r = conn.getresponse()
    data = r.read()
    ms = (time.perf_counter() - t) * 1e3
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data[:200]}")
    return ms, json.loads(data)


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


routes = {"verify": "/v1/products/bark/verify", "search": "/v1/search?top_k=3"}
rows = []
for kind, body in uploads.items():
    if os.environ.get("PROFILE_KINDS") and kind not in os.environ["PROFILE_KINDS"]:
        continue
    for route, path in routes.items():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(3):
            post(conn, path, body)  # warm
        client, parts = [], {}
        for _ in range(20):
            ms, j = post(conn, path, body)
            client.append(ms)
            for k, v in j.get("latency_ms", {}).items():
                parts.setdefault(k, []).append(v)
        seq = {k: statistics.median(v) for k, v in parts.items()}
        through = {}
        for clients in (16, 64):
            done = [0]
            lat = []
            stop = time.perf_counter() + 4
            lock = threading.Lock()

            errors = [0]

            def run():
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                while time.perf_counter() < stop:
                    try:
                        ms, _ = post(c, path, body)
                    except Exception:
                        with lock:
                            errors[0] += 1
                        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                        continue
                    with lock:
                        done[0] += 1
                        lat.append(ms)

            ts = [threading.Thread(target=run) for _ in range(clients)]
            t0 = time.perf_counter()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            through[clients] = (done[0] / (time.perf_counter() - t0), pct(lat, 50) if lat else -1, pct(lat, 99) if lat else -1, errors[0])
        row = (f"| {kind} | {route} | {pct(client, 50):.1f} | {pct(client, 99):.1f} | "
               + " / ".join(f"{k} {v:.2f}" for k, v in seq.items())
               + " | " + " | ".join(f"{r:.0f}/s p50 {a:.0f} p99 {b:.0f} err {e}" for r, a, b, e in through.values()) + " |")
        print(row, flush=True)
        rows.append(row)

server.terminate()
server.wait()
with open(os.path.join(out, "profile.md"), "w") as f:
    f.write("| upload | route | client p50 ms | p99 | server latency_ms parts (p50) | 16 clients | 64 clients |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
