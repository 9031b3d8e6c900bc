#!/usr/bin/env python3
"""Load benchmark of the texture service (docs/benchmarks/service.md, "Under load"): wrk posting
real uploads to `prism texture serve --gallery` and to the sharded front (`serve --redis` + `prism
texture shard` workers), at several connection counts, every answer checked. First the decode step
alone: the service's decoder (bench_service_load decode) beside OpenCV's cv2.imdecode when Python
has cv2. Then one markdown row per case: requests, requests/s (wrk's), right answers/s, wrk's p50
and p99, errors. Last, per case, the server's mean stage times over the run (from /metrics) and the
prism processes' and redis-server's CPU time per answered request: where the time went under that load.

  run.py [--products 10000] [--connections 1,16,64,256] [--duration 3] [--out FILE] ...

Fixture (made under --work, removed at the end): a gallery of --products generated products
(bench_service_load gallery: real SIFT rows, hard-linked into the shard galleries), plus one real
product enrolled through the API: Oxford's leuven img2, as PNG or PPM from --data. The uploads are
leuven img3 (the same scene in other light), cropped to 4:3 and scaled by gst-launch-1.0: 640x480
PNG, 1280x960 JPEG (quality 40, ~200 KB), 4000x3000 JPEG (quality 80, ~1.9 MB: a phone photo).
verify asks /v1/products/leuven/verify (right: accepted), search /v1/search (right: leuven
identified).

Server: --threads is the largest connection count plus --reserved-threads (4, the default), so
that no request is refused for want of a thread (the server answers 503 beyond threads - reserved
image requests at once); other 503s (the decode memory budget, the 10 s default deadline) count as
errors. wrk: -t min(connections, 16, cores) -c connections -d D --timeout 60s --latency, D at
least --duration, 4 requests alone and 3 x connections / the best right answers per second seen at
fewer connections (closed loop: each connection then waits for several answers), at most
--max-duration; a row with fewer than 2 answers per connection says so (latencies of the start).
The next case starts once the server has finished every request of the last (its connections
closed, its processes idle). Exit status: 0; with --check 1 when a row has no request or an error, or a case was not
run (the CI test); 77 (skipped) without wrk, unless PRISM_REQUIRE_WRK=1.
"""
import argparse
import ctypes
import http.client
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ENROLLED = "leuven"
UPLOADS = {  # name: (label, width, height, encoder, content type)
    "png": ("640x480 PNG", 640, 480, "pngenc", "image/png"),
    # I420 before jpegenc: YCbCr 4:2:0 as cameras write it (given RGB, jpegenc stores RGB 4:4:4);
    # quality 95 for the photo: about 2 MB, as a phone's
    "jpeg640": ("640x480 JPEG", 640, 480, "video/x-raw,format=I420 ! jpegenc quality=90", "image/jpeg"),
    "jpeg1280": ("1280x960 JPEG", 1280, 960, "video/x-raw,format=I420 ! jpegenc quality=40", "image/jpeg"),
    "jpeg4000": ("4000x3000 JPEG", 4000, 3000, "video/x-raw,format=I420 ! jpegenc quality=95", "image/jpeg"),
}
ROUTES = {  # name: (path, what a right answer's body holds: the JSON's keys are sorted)
    "verify": (f"/v1/products/{ENROLLED}/verify", ['"decision":"accepted"', f'"id":"{ENROLLED}"']),
    "search": ("/v1/search", [f'"id":"{ENROLLED}","identified":true']),
}
BYTES_PER_PRODUCT = 117_000  # one entry file; each gallery's pack holds as much again


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def die(msg, code=1):
    log(f"service-load: {msg}")
    sys.exit(code)


def find(name, given):
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            die(f"{given}: no such executable")
        return os.path.abspath(given)
    p = shutil.which(name)
    for c in [p, os.path.join(ROOT, "build/tools/prism", name), os.path.join(ROOT, "build/bench", name)]:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def image_size(path):
    """(width, height) of a PNG or binary PNM file, from its header."""
    with open(path, "rb") as f:
        head = f.read(512)
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return struct.unpack(">II", head[16:24])
    m = re.match(rb"P[56](?:\s+|#[^\n]*\n)+(\d+)(?:\s+|#[^\n]*\n)+(\d+)", head)
    if m:
        return int(m.group(1)), int(m.group(2))
    die(f"{path}: neither PNG nor binary PNM")


def source_image(data, name):
    for ext in ("png", "ppm"):
        p = os.path.join(data, "oxford-affine", "leuven", f"{name}.{ext}")
        if os.path.exists(p):
            return p
    if os.environ.get("PRISM_REQUIRE_DATA") != "1":
        log(f"service-load: SKIPPED: no oxford-affine/leuven/{name}.png or .ppm under {data} (--data; "
            "PRISM_REQUIRE_DATA=1 makes this a failure)")
        sys.exit(77)
    die(f"no oxford-affine/leuven/{name}.png or .ppm under {data} (--data)")


def make_upload(src, dst, width, height, encoder):
    """src scaled to width x height (cropped to that aspect first, centred) and encoded, by gst-launch-1.0."""
    w, h = image_size(src)
    crop = ""
    if w * height > h * width:  # wider: crop left and right
        cut = w - h * width // height
        crop = f"videocrop left={cut // 2} right={cut - cut // 2} ! "
    elif w * height < h * width:
        cut = h - w * height // width
        crop = f"videocrop top={cut // 2} bottom={cut - cut // 2} ! "
    dec = "pngdec" if src.endswith(".png") else "pnmdec"
    pipeline = (f"filesrc location={src} ! {dec} ! videoconvert ! {crop}videoscale add-borders=false ! "
                f"video/x-raw,width={width},height={height} ! videoconvert ! {encoder} ! filesink location={dst}")
    r = subprocess.run(["gst-launch-1.0", "-q"] + pipeline.split(), capture_output=True, text=True)
    if r.returncode != 0 or not os.path.getsize(dst):
        die(f"gst-launch-1.0 could not make {dst}: {r.stderr.strip()[-400:]}")


class Http:
    def __init__(self, port):
        self.port = port

    def ask(self, method, path, body=None, ctype=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers={"Content-Type": ctype} if ctype else {})
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        finally:
            c.close()

    def connections(self):
        """The server's connections still open (established, or closed by the client while the server
        still works on its request: CLOSE_WAIT), from /proc/net/tcp: 0 once it has finished every request
        of a wrk run that has ended."""
        n = 0
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(table) as f:
                    next(f)
                    for line in f:
                        local, state = line.split()[1], line.split()[3]
                        if int(local.rsplit(":", 1)[1], 16) == self.port and state in ("01", "08"):
                            n += 1
            except OSError:
                pass
        return n


STAGES = ("queue", "decode", "extract", "match", "verify", "shard_queue", "shard_transport")


def stage_sums(api, route):
    """{stage: (seconds, count)} of `route` from the server's /metrics (its stage histograms' sums and
    counts), the handler's whole time under "total"; {} when /metrics does not answer."""
    try:
        status, text = api.ask("GET", "/metrics", timeout=10)
    except OSError:
        return {}
    if status != 200:
        return {}
    sums = {}
    pat = re.compile(r'^prism_http_request(?:_stage)?_duration_seconds_(sum|count)\{route="([^"]+)"'
                     r'(?:,stage="([^"]+)")?\} (\S+)$')
    for line in text.splitlines():
        m = pat.match(line)
        if m and m.group(2) == route:
            stage = m.group(3) or "total"
            got = sums.setdefault(stage, [0.0, 0.0])
            got[0 if m.group(1) == "sum" else 1] = float(m.group(4))
    return sums


def stage_means(before, after):
    """{stage: mean ms} of the requests answered between two stage_sums."""
    means = {}
    for stage, (total, n) in after.items():
        t0, n0 = before.get(stage, (0.0, 0.0))
        if n > n0:
            means[stage] = (total - t0) / (n - n0) * 1e3
    return means


def die_with_parent():
    """In a child before exec: SIGTERM when the driver dies, however it dies (prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)


class Processes:
    """Child processes (each its own log under `work`), ended at stop() in reverse order."""

    def __init__(self, work):
        self.work, self.procs = work, []

    def start(self, name, argv):
        logf = open(os.path.join(self.work, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             preexec_fn=die_with_parent)
        self.procs.append((name, p, logf))
        return p

    def check(self):
        for name, p, _ in self.procs:
            if p.poll() is not None:
                die(f"{name} ended (status {p.returncode}): {self.tail(name)}")

    def tail(self, name):
        try:
            with open(os.path.join(self.work, name + ".log"), errors="replace") as f:
                return " | ".join(f.read().strip().splitlines()[-8:])
        except OSError:
            return ""

    def cpu_seconds(self, redis=False):
        """CPU time the prism processes (serve, shard workers) have used so far; with redis, redis-server's."""
        ticks = 0
        for name, p, _ in self.procs:
            if name.startswith("redis") == redis:
                try:
                    with open(f"/proc/{p.pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    ticks += int(fields[11]) + int(fields[12])  # utime, stime
                except (OSError, IndexError, ValueError):
                    pass
        return ticks / os.sysconf("SC_CLK_TCK")

    def idle(self, window=0.3):
        """Whether the prism processes used under 10% of one core over `window` seconds: a shard worker
        may still answer reads a front has given up on (its deadline passed) after the front's
        connections have closed."""
        before = self.cpu_seconds()
        time.sleep(window)
        return self.cpu_seconds() - before < 0.1 * window

    def stop(self):
        for name, p, logf in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            logf.close()
        self.procs = []


def wait_for(what, cond, procs, seconds):
    until = time.time() + seconds
    while time.time() < until:
        procs.check()
        try:
            if cond():
                return
        except (OSError, http.client.HTTPException, ValueError):
            pass
        time.sleep(0.2)
    die(f"gave up waiting for {what} after {seconds} s")


def start_redis(procs, redis_server, work, name):
    port = free_port()
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    procs.start(name, [redis_server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                       "--dir", d])

    def pong():
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")

    wait_for("redis-server", pong, procs, 20)
    return f"redis://127.0.0.1:{port}"


def start_deployment(dep, a, tools, work, gallery_root, products, prism, tag):
    """Starts one deployment of `prism` (its processes' logs named with `tag`); returns (Processes, Http,
    the server's threads)."""
    procs = Processes(work)
    port = free_port()
    threads = a.threads or max(16, max(a.connections) + a.reserved_threads)
    front = ["--listen", f"127.0.0.1:{port}", "--threads", str(threads), "--reserved-threads",
             str(a.reserved_threads)] + a.serve_args.split()
    if dep == "gallery":
        procs.start(f"serve-{products}{tag}", [prism, "texture", "serve", "--gallery",
                                               os.path.join(gallery_root, "all")] + front)
    else:
        shards = int(dep.split("-")[1])
        url = start_redis(procs, tools["redis-server"], work, f"redis-{dep}-{products}{tag}")
        for k in range(shards):
            g = os.path.join(gallery_root, "all") if shards == 1 else \
                os.path.join(gallery_root, f"shards-{shards}", str(k))
            procs.start(f"shard-{k}-of-{shards}-{products}{tag}",
                        [prism, "texture", "shard", "--redis", url, "--shard", str(k), "--shards", str(shards),
                         "--gallery", g, "--replica", "load", "--readers", str(a.readers)] + a.shard_args.split())
        procs.start(f"front-{dep}-{products}{tag}",
                    [prism, "texture", "serve", "--redis", url, "--shards", str(shards)] + front)
    api = Http(port)

    def ready():
        status, text = api.ask("GET", "/v1/stats", timeout=30)
        if status != 200:
            return False
        s = json.loads(text)
        return s["images"] >= products and all(sh.get("answered") for sh in s.get("shards", [])) and \
            len(s.get("shards", [])) >= s.get("shards_expected", 0)

    wait_for(f"{dep} to serve {products} products", ready, procs, a.start_timeout)
    return procs, api, threads


def enrol(api, path, procs):
    ctype = "image/png" if path.endswith(".png") else "image/x-portable-pixmap"
    status, _ = api.ask("GET", f"/v1/products/{ENROLLED}")
    if status == 404:
        with open(path, "rb") as f:
            status, text = api.ask("POST", f"/v1/products/{ENROLLED}?collection=load", f.read(), ctype)
        if status not in (200, 201):
            die(f"enrolling {path}: {status} {text[:300]}")
    elif status != 200:
        die(f"GET /v1/products/{ENROLLED}: {status}")
    wait_for("the enrolled product", lambda: api.ask("GET", f"/v1/products/{ENROLLED}")[0] == 200, procs, 30)


CV2_DECODE = """
import json, statistics, sys, time
try:
    import cv2
    import numpy as np
except ImportError as e:
    print(json.dumps({"skipped": f"skipped: this Python has no cv2 ({e})"}))
    sys.exit()
cv2.setNumThreads(1)
out = {"version": f"OpenCV {cv2.__version__}"}
for path in sys.argv[2:]:
    buf = np.frombuffer(open(path, "rb").read(), np.uint8)
    out[path] = []
    for flag in (cv2.IMREAD_GRAYSCALE, cv2.IMREAD_REDUCED_GRAYSCALE_2):
        cv2.imdecode(buf, flag)
        ts = []
        for _ in range(int(sys.argv[1])):
            t = time.perf_counter()
            cv2.imdecode(buf, flag)
            ts.append((time.perf_counter() - t) * 1e3)
        out[path].append(statistics.median(ts))
print(json.dumps(out))
"""

WRK_LINE = re.compile(r"^service-load: (.*?) first_bad=(.*)$", re.M)


def run_wrk(tools, url, conns, seconds, upload, ctype, expect):
    threads = max(1, min(conns, 16, os.cpu_count() or 1))
    argv = [tools["wrk"], "-t", str(threads), "-c", str(conns), "-d", f"{math.ceil(seconds)}s", "--timeout", "60s",
            "--latency", "-s", os.path.join(HERE, "post.lua"), url, "--", upload, ctype] + expect
    r = subprocess.run(argv, capture_output=True, text=True)
    m = WRK_LINE.search(r.stdout)
    if r.returncode != 0 or not m:
        die(f"wrk failed ({r.returncode}): {' '.join(argv)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    out = {}
    for kv in m.group(1).split():
        k, v = kv.split("=", 1)
        out[k] = v if k == "codes" else int(v)
    out["first_bad"] = m.group(2).strip()
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", r.stdout, re.M)  # wrk's own: every answer, errors included
    out["rps"] = float(rps.group(1)) if rps else out["completed"] / max(out["duration_us"] / 1e6, 1e-9)
    out["wrk"] = r.stdout
    return out


def errors_of(w):
    """(total, words) of a wrk result: non-200 answers by status, wrong answers, socket errors."""
    parts = []
    for c in filter(None, w["codes"].split(",")):
        code, n = c.split(":")
        parts.append(f"{n} x {code}")
    wrong_200 = w["wrong"] - sum(int(c.split(":")[1]) for c in filter(None, w["codes"].split(",")))
    if wrong_200:
        parts.append(f"{wrong_200} wrong answers")
    for k in ("connect", "read", "write", "timeout"):
        if w[k]:
            parts.append(f"{w[k]} {k}")
    total = w["wrong"] + w["connect"] + w["read"] + w["write"] + w["timeout"]
    return total, ", ".join(parts)


def decode_table(a, tools, uploads):
    """The decode step alone: the service's decoder and cv2.imdecode, one thread, --decode-reps each."""
    files = [uploads[k][0] for k in a.uploads]
    r = subprocess.run([tools["bench_service_load"], "decode", str(a.decode_reps)] + files, capture_output=True,
                       text=True)
    if r.returncode != 0:
        die(f"bench_service_load decode: {r.stderr.strip()}")
    ours = {}
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0] in {os.path.basename(f) for f in files}:
            ours[cells[0]] = cells
    # OpenCV in a child Python without the GPU bundle's LD_LIBRARY_PATH (its Debian libraries are not
    # the ones that Python's cv2 was built against); the GPU machine has cv2, the build machine may not.
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    r = subprocess.run([sys.executable, "-c", CV2_DECODE, str(a.decode_reps)] + files, capture_output=True, text=True,
                       env=env)
    try:
        cv = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        cv = {"skipped": f"cv2 timing failed: {r.stderr.strip()[-300:]}"}
    peer = cv.pop("skipped", None) or cv.pop("version")
    rows = ["| upload | bytes | full decode p50 | service decode p50 | decoded as | cv2.imdecode grey p50 "
            "| cv2.imdecode reduced 1/2 p50 |", "|---|---:|---:|---:|---|---:|---:|"]
    for k in a.uploads:
        path, label = uploads[k][0], UPLOADS[k][0]
        o = ours[os.path.basename(path)]
        c = [f"{ms:.2f} ms" for ms in cv[path]] if path in cv else ["-", "-"]
        rows.append(f"| {label} | {int(o[1]):,} | {o[3]} | {o[5]} | {o[7]} | {c[0]} | {c[1]} |")
    return rows, peer


CV2_EXTRACT = """
import json, statistics, sys, time
try:
    import cv2
    import numpy as np
except ImportError as e:
    print(json.dumps({"skipped": f"this Python has no cv2 ({e})"}))
    sys.exit()
sift = cv2.SIFT_create(768)
out = {"version": f"OpenCV {cv2.__version__}"}
for path in sys.argv[2:]:
    buf = np.frombuffer(open(path, "rb").read(), np.uint8)
    def once():
        g = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
        s = 1024 / max(g.shape)
        if s < 1:
            g = cv2.resize(g, (round(g.shape[1] * s), round(g.shape[0] * s)), interpolation=cv2.INTER_AREA)
        return len(sift.detectAndCompute(g, None)[0])
    once()
    ts = []
    for _ in range(int(sys.argv[1])):
        t = time.perf_counter()
        once()
        ts.append((time.perf_counter() - t) * 1e3)
    out[path] = statistics.median(ts)
print(json.dumps(out))
"""


def extract_table(a, tools, uploads):
    """Decode and extraction on the CPU, one request at a time (bench_service_load extract), beside
    OpenCV's own imdecode + resize (INTER_AREA) + SIFT(768) of the same bytes in Python's cv2: what a
    verify costs a server without a GPU, against the peer it is held to."""
    files = [uploads[k][0] for k in a.uploads]
    r = subprocess.run([tools["bench_service_load"], "extract", str(a.extract_reps)] + files, capture_output=True,
                       text=True)
    if r.returncode != 0:
        die(f"bench_service_load extract: {r.stderr.strip()}")
    ours = {}
    for line in r.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] in {os.path.basename(f) for f in files}:
            ours[cells[0]] = cells
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}  # as decode_table
    r = subprocess.run([sys.executable, "-c", CV2_EXTRACT, str(a.extract_reps)] + files, capture_output=True,
                       text=True, env=env)
    try:
        cv = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        cv = {"skipped": f"cv2 timing failed: {r.stderr.strip()[-300:]}"}
    peer = cv.pop("skipped", None) or cv.pop("version")
    rows = ["| upload | service decode + extract p50 (clahe-4-8) | without clahe | features | OpenCV imdecode + resize "
            "+ SIFT p50 | service / OpenCV |", "|---|---:|---:|---:|---:|---:|"]
    for k in a.uploads:
        path, label = uploads[k][0], UPLOADS[k][0]
        o = ours[os.path.basename(path)]
        if path in cv:
            ratio = float(o[1].split()[0]) / cv[path]
            c, rr = f"{cv[path]:.2f} ms", f"{ratio:.2f}x"
        else:
            c, rr = "-", "-"
        rows.append(f"| {label} | {o[1]} | {o[3]} | {o[2]} | {c} | {rr} |")
    return rows, peer


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    lst = lambda f: lambda s: [f(x) for x in s.split(",") if x]  # noqa: E731
    p.add_argument("--products", type=lst(int), default=[10000], help="gallery sizes, e.g. 10000,100000")
    p.add_argument("--deployments", type=lst(str), default=["gallery", "shards-1", "shards-4"],
                   help="gallery (serve --gallery) and shards-S (serve --redis + S workers)")
    p.add_argument("--uploads", type=lst(str), default=list(UPLOADS), help=",".join(UPLOADS))
    p.add_argument("--routes", type=lst(str), default=list(ROUTES), help="verify,search")
    p.add_argument("--connections", type=lst(int), default=[1, 16, 64, 256])
    p.add_argument("--duration", type=float, default=3, help="seconds per wrk run at least (default 3)")
    p.add_argument("--max-duration", type=float, default=10,
                   help="seconds a run may be stretched to, for several answers per connection (default 10)")
    p.add_argument("--budget", type=float, default=0,
                   help="start no deployment or case after this many seconds of load runs (default 0: no limit)")
    p.add_argument("--verify-products", type=int, default=0,
                   help="run verify only at this gallery size (default: the first of --products)")
    p.add_argument("--threads", type=int, default=0, help="serve --threads (default: connections + reserved)")
    p.add_argument("--reserved-threads", type=int, default=4)
    p.add_argument("--readers", type=int, default=8, help="each shard worker's --readers (default 8)")
    p.add_argument("--serve-args", default="", help="more options of every serve (e.g. '--deadline 60000')")
    p.add_argument("--shard-args", default="", help="more options of every shard worker")
    p.add_argument("--decode-reps", type=int, default=20)
    p.add_argument("--extract-reps", type=int, default=0,
                   help="also time decode + extraction on the CPU against OpenCV's pipeline, p50 of N (0: not)")
    p.add_argument("--data", default=os.environ.get("PRISM_DATA_DIR", os.path.join(ROOT, "..", "shared", "data")))
    p.add_argument("--work", default=None, help="fixture folder (default: a new one under TMPDIR, removed)")
    p.add_argument("--prism"), p.add_argument("--tool", help="bench_service_load"), p.add_argument("--wrk")
    p.add_argument("--redis-server")
    p.add_argument("--peer-prism", help="another build's prism: every deployment is run with it too (its rows "
                   "named with --peer-label), e.g. the build before a change of the decoder")
    p.add_argument("--peer-label", default="peer")
    p.add_argument("--start-timeout", type=float, default=300)
    p.add_argument("--drain-timeout", type=float, default=180,
                   help="seconds the server may take to finish the requests of a run once wrk has ended")
    p.add_argument("--out", help="also write the tables here")
    p.add_argument("--check", action="store_true", help="exit 1 when a row has no request or an error (CI)")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # children stopped and the fixture removed
    for k in a.uploads:
        if k not in UPLOADS:
            die(f"--uploads: no '{k}' ({', '.join(UPLOADS)})", 2)
    for k in a.routes:
        if k not in ROUTES:
            die(f"--routes: no '{k}' (verify, search)", 2)
    for d in a.deployments:
        if d != "gallery" and not re.fullmatch(r"shards-[1-9]\d*", d):
            die(f"--deployments: '{d}' is neither gallery nor shards-S", 2)

    tools = {"prism": find("prism", a.prism), "bench_service_load": find("bench_service_load", a.tool),
             "wrk": find("wrk", a.wrk), "redis-server": find("redis-server", a.redis_server),
             "peer": find("prism-peer", a.peer_prism) if a.peer_prism else None}
    if not tools["wrk"]:
        if os.environ.get("PRISM_REQUIRE_WRK") == "1":
            die("no wrk on PATH (tools/install-deps installs it) and PRISM_REQUIRE_WRK=1")
        log("service-load: SKIPPED: no wrk on PATH (tools/install-deps installs Debian's wrk; "
            "PRISM_REQUIRE_WRK=1 makes this a failure)")
        sys.exit(77)
    for k in ("prism", "bench_service_load"):
        if not tools[k]:
            die(f"no {k} (--prism, --tool, or build it)")
    if any(d != "gallery" for d in a.deployments) and not tools["redis-server"]:
        if os.environ.get("PRISM_REQUIRE_REDIS") == "1":
            die("no redis-server for the sharded deployments and PRISM_REQUIRE_REDIS=1")
        log("service-load: SKIPPED the sharded deployments: no redis-server on PATH")
        a.deployments = [d for d in a.deployments if d == "gallery"]

    own_work = a.work is None
    work = tempfile.mkdtemp(prefix="service-load-") if own_work else os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    try:
        measure(a, tools, work, own_work)
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)


def measure(a, tools, work, own_work):
    """The uploads, the decode table, then every case; one row each."""
    uploads = {}
    for k in a.uploads:
        _, w, h, enc, ctype = UPLOADS[k]
        path = os.path.join(work, f"upload-{w}x{h}.{'png' if 'png' in enc else 'jpg'}")
        make_upload(source_image(a.data, "img3"), path, w, h, enc)
        uploads[k] = (path, ctype)
    enrolled = source_image(a.data, "img2")

    gpu = subprocess.run("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1", shell=True,
                         capture_output=True, text=True).stdout.strip()
    host = f"{gpu or 'no GPU'}, {os.cpu_count()} cores"
    lines = []

    def emit(*new):
        """Prints lines and rewrites --out with everything so far (a run cut short keeps its rows)."""
        for line in new:
            print(line, flush=True)
        lines.extend(new)
        if a.out:
            with open(a.out, "w") as f:
                f.write("\n".join(lines) + "\n")

    emit(f"service-load on {host}, {time.strftime('%Y-%m-%d %H:%M')}: `{shlex.join(sys.argv)}`", "",
         "uploads: " + ", ".join(f"{UPLOADS[k][0]} {os.path.getsize(uploads[k][0]):,} bytes" for k in a.uploads), "")
    dec, peer = decode_table(a, tools, uploads)
    emit(f"decode step alone, one thread, p50 of {a.decode_reps}: full size (image::decode_grey), as the service "
         f"decodes for extraction (decode_grey_reduced, min_side 1024), {peer}:", "", *dec, "")
    if a.extract_reps > 0:
        ext, cv_peer = extract_table(a, tools, uploads)
        emit(f"decode + extraction on the CPU (cv::SIFT), one request at a time, p50 of {a.extract_reps}, against "
             f"OpenCV's own imdecode + resize (INTER_AREA) + SIFT of the same bytes ({cv_peer}):", "", *ext, "")
    emit("| deployment | products | upload | route | connections | requests | requests/s | right/s | p50 | p99 "
         "| errors | note |", "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|---|")
    failures, skipped, stage_rows = [], [], []
    verify_at = a.verify_products or a.products[0]
    started = time.time()
    for n in a.products:
        if a.budget and time.time() - started > a.budget:
            skipped.append(f"{n:,} products")
            continue
        g = make_gallery(a, tools, work, n)
        # each deployment with --prism, then with --peer-prism (the same load against another build)
        runs = [(d, tools["prism"], d, "") for d in a.deployments]
        if tools["peer"]:
            runs = [r for d in a.deployments
                    for r in ((d, tools["prism"], d, ""), (d, tools["peer"], f"{d} ({a.peer_label})", "-peer"))]
        for dep, prism, name, tag in runs:
            if a.budget and time.time() - started > a.budget:
                skipped.append(f"{name} at {n:,} products")
                continue
            t0 = time.time()
            procs, api, threads = start_deployment(dep, a, tools, work, g, n, prism, tag)
            try:
                enrol(api, enrolled, procs)
                log(f"service-load: {name} serving {n} + 1 products with --threads {threads} "
                    f"(started in {time.time() - t0:.1f} s)")
                for k in a.uploads:
                    for route in a.routes:
                        if route == "verify" and n != verify_at:
                            continue
                        if a.budget and time.time() - started > a.budget:
                            skipped.append(f"{name} {n:,} {UPLOADS[k][0]} {route}")
                            continue
                        case = (name, n, k, route)
                        for row, failure, stage_row in run_cases(a, tools, api, procs, case, uploads[k]):
                            emit(row)
                            if failure:
                                failures.append(failure)
                            if stage_row:
                                stage_rows.append(stage_row)
            finally:
                procs.stop()
        if own_work:
            shutil.rmtree(g, ignore_errors=True)
    emit("", "Where the time went, per case: the server's mean stage times in ms over the run (its /metrics "
         "stage histograms: latency_ms's parts; total is the handler's, after queue), and the CPU time of the "
         "prism processes (front and workers) and of redis-server per answered request:", "",
         "| deployment | upload | route | connections | " + " | ".join(STAGES) +
         " | total | CPU ms/request | Redis CPU ms/request |",
         "|---|---|---|---:|" + "---:|" * (len(STAGES) + 3), *stage_rows)
    emit("", f"load runs: {time.time() - started:.0f} s" +
         (f"; not run (--budget {a.budget:.0f} s spent): {'; '.join(skipped)}" if skipped else ""))
    for f in failures:
        log(f"service-load: FAILED {f}")
    if a.check and (failures or skipped):
        sys.exit(1)


def make_gallery(a, tools, work, n):
    """The fixture of n products (bench_service_load gallery) for every deployment; its folder."""
    need = BYTES_PER_PRODUCT * n * (2 + sum(1 for d in a.deployments if d.startswith("shards-") and d != "shards-1"))
    free = shutil.disk_usage(work).free
    if need > free:
        die(f"{n} products need about {need / 1e9:.1f} GB under {work}; {free / 1e9:.1f} GB free (--work)")
    g = os.path.join(work, f"gallery-{n}")
    shard_counts = [d.split("-")[1] for d in a.deployments if d.startswith("shards-")]
    t0 = time.time()
    r = subprocess.run([tools["bench_service_load"], "gallery", g, str(n)] + shard_counts, capture_output=True,
                       text=True)
    if r.returncode != 0:
        die(f"bench_service_load gallery: {r.stderr.strip()}")
    log(r.stdout.strip() + f" ({time.time() - t0:.1f} s)")
    return g


def run_cases(a, tools, api, procs, case, upload):
    """wrk at each connection count for one (deployment, products, upload, route): yields (row, failure)."""
    dep, n, k, route = case
    path, ctype = upload
    rpath, expect = ROUTES[route]
    # one request first: warm, checked, and how long one takes alone
    t = time.time()
    with open(path, "rb") as f:
        status, text = api.ask("POST", rpath, f.read(), ctype)
    alone = time.time() - t
    if status != 200 or not all(e in text for e in expect):
        log(f"service-load: WRONG {dep} {k} {route}: {status} {text[:300]}")
        yield f"| {dep} | {n:,} | {UPLOADS[k][0]} | {route} | 1 (alone) | 1 | | | | | 1 ({status}) | wrong |", \
            f"{dep} {k} {route} alone: {status} {text[:300]}", None
    else:
        log(f"service-load: {dep} {k} {route} alone: {alone * 1e3:.0f} ms, server {json.loads(text).get('latency_ms')}")
    best = 1 / alone  # the most right answers per second seen so far: what the next, larger run may reach
    for c in a.connections:
        # Long enough that each connection waits for several answers, at the throughput seen so far
        # (closed loop: a request waits about c / throughput); up to --max-duration.
        seconds = max(a.duration, min(a.max_duration, max(4 * alone, 3 * c / best)))
        sums, cpu, redis_cpu = stage_sums(api, route), procs.cpu_seconds(), procs.cpu_seconds(redis=True)
        w = run_wrk(tools, f"http://127.0.0.1:{api.port}{rpath}", c, seconds, path, ctype, expect)
        # the requests still running when wrk stopped end before the next case: no connection left
        # and the processes idle
        t = time.time()
        while api.connections() or not procs.idle():
            if time.time() > t + a.drain_timeout:
                die(f"the server still holds {api.connections()} connections or works {a.drain_timeout:.0f} s "
                    "after wrk ended")
            time.sleep(0.05)
        log(f"service-load: {c} connections for {math.ceil(seconds)} s; the server finished {time.time() - t:.1f} s "
            "after wrk")
        procs.check()
        # where the time went under this load: the server's own stage means over the run (/metrics),
        # and the prism processes' CPU time per answered request
        means = stage_means(sums, stage_sums(api, route))
        cpu_ms = (procs.cpu_seconds() - cpu) / max(1, w["completed"]) * 1e3
        redis_ms = (procs.cpu_seconds(redis=True) - redis_cpu) / max(1, w["completed"]) * 1e3
        redis_cell = f"{redis_ms:.2f}" if dep.startswith("shards") else ""
        stages = (f"| {dep} | {UPLOADS[k][0]} | {route} | {c} | " +
                  " | ".join(f"{means[st]:.2f}" if st in means else "" for st in STAGES + ("total",)) +
                  f" | {cpu_ms:.1f} | {redis_cell} |")
        total, words = errors_of(w)
        right_s = w["right"] / (w["duration_us"] / 1e6)
        best = max(best, right_s)
        note = ""
        if w["completed"] < 2 * c:
            note = f"{w['completed'] / c:.1f} answers per connection: latencies of the start, not steady"
        errors = f"{total} ({words})" if words else str(total)
        row = (f"| {dep} | {n:,} | {UPLOADS[k][0]} | {route} | {c} | {w['completed']} | {w['rps']:.1f} | "
               f"{right_s:.1f} | {w['p50_us'] / 1e3:.1f} ms | {w['p99_us'] / 1e3:.1f} ms | {errors} | {note} |")
        failure = None
        if w["completed"] == 0 or total:
            failure = f"{dep} {n} {k} {route} c={c}: {w['completed']} requests, {total} errors; first: {w['first_bad']}"
        yield row, failure, stages


if __name__ == "__main__":
    main()
