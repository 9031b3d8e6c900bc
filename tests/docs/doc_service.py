#!/usr/bin/env python3
"""The service's commands as the docs write them, which must run as
written: README.md's `prism texture serve` block and docs/SERVICE.md's "One machine" block, run
against a real server on 127.0.0.1, each answer checked, not only its arrival.

usage: doc_service.py SOURCE_DIR PRISM_EXE DATA_DIR

What is substituted, and nothing else: the listening address becomes 127.0.0.1 and a free port
(the docs' 8080 may be taken; `--listen 127.0.0.1:0` is added where the docs give none), `prism`
is the build's, /etc/prism/keys a temporary keys file, and the images the curl lines name are real
ones made in the temporary folder: tea-brick-17.jpg is Oxford graf img1, photo.jpg the same wall
from another viewpoint (img2), new.jpg another scene (boat img1). Every curl runs as written, inside
a shell where `curl` adds `-sS` and prints the status after the body.

- README: every curl line's status and answer (enrol 201, verify accepted with the fields its
  comment names, search identifies tea-17, PUT 200, DELETE, then GET 404, stats, health, metrics).
  A curl line this script has no expectation for fails: a new example gets checked, not skipped.
- The server stopped and started again as written on the same gallery and the same port: the
  delete stays deleted, the PUT's image stays the product.
- SERVICE.md: the second command (`--keys`) refuses a request without a key (401) and a write with
  a read key (403), accepts a write key, and answers /healthz without one.

Exit 0 when all agree, 1 naming each difference, 77 (skipped loudly) without DATA_DIR, curl or cv2.
"""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
failures = []


def fail(msg):
    failures.append(msg)
    print("doc_service: FAIL: " + msg)


def ok(msg):
    print("doc_service: " + msg)


def block_with(text, needle):
    for m in re.finditer(r"```sh\n(.*?)```", text, re.S):
        if needle in m.group(1):
            return m.group(1)
    return None


def command_of(line):
    """A documented command line without its trailing comment."""
    return shlex.split(line, comments=True)


class Server:
    """`prism texture serve` started as documented; its port read from its 'listening on' line."""

    def __init__(self, prism, args, cwd, port=0):
        args = list(args)
        if "--listen" in args:
            args[args.index("--listen") + 1] = f"127.0.0.1:{port}"
        else:
            args += ["--listen", f"127.0.0.1:{port}"]
        self.args = [prism] + args[1:]
        self.proc = subprocess.Popen(self.args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                return
        self.proc.kill()
        raise RuntimeError(f"{' '.join(self.args)} did not listen: {line!r} {self.proc.stderr.read()[-2000:]}")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = "none (killed after 60 s)"
        if rc != 0:
            fail(f"{' '.join(self.args)} exited {rc} on SIGTERM: {self.proc.stderr.read()[-1000:]}")


def run_curls(line, url, cwd):
    """One documented shell line, as written, with `curl` printing its status after each body."""
    script = ("curl() { command curl -sS --max-time 60 -w '\\n@@%{http_code}@@\\n' \"$@\"; }\n"
              f"U={shlex.quote(url)}\n{line}\n")
    run = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        fail(f"README.md: `{line}` exited {run.returncode}: {run.stderr[-1000:]}")
    parts = re.split(r"\n@@(\d{3})@@\n", run.stdout)
    return [(int(parts[i + 1]), parts[i]) for i in range(0, len(parts) - 1, 2)]


def as_json(body):
    try:
        return json.loads(body)
    except ValueError:
        return None


def curl_calls(line):
    """(method, path) of each curl of a line, in order."""
    calls = []
    for part in line.split(";"):
        words = command_of(part)
        if not words or words[0] != "curl":
            continue
        method = words[words.index("-X") + 1] if "-X" in words else "GET"
        url = next(w for w in words if w.startswith("$U"))
        calls.append((method, url[2:].split("?")[0]))
    return calls


def expect(method, path, status, body, state):
    """The answer each documented call must give, in the block's order; None: no expectation."""
    j = as_json(body)
    key = (method, path)
    if key == ("POST", "/v1/products/tea-17"):
        product = (j or {}).get("product", {})
        good = status == 201 and product.get("id") == "tea-17" and product.get("collection") == "lot-2026-11"
        return good, "created (201, product tea-17 in collection lot-2026-11)"
    if key == ("POST", "/v1/products/tea-17/verify"):
        fields = ("decision", "significance", "inliers")
        good = status == 200 and j is not None and j.get("decision") == "accepted" and all(f in j for f in fields)
        return good, "accepted, with decision, significance and inliers (photo.jpg is the same wall)"
    if key == ("POST", "/v1/search"):
        good = status == 200 and j is not None and j.get("identified") is True and j.get("id") == "tea-17"
        return good, "identified as tea-17"
    if key == ("PUT", "/v1/products/tea-17"):
        good = status == 200 and (j or {}).get("outcome") == "updated" and j["product"].get("id") == "tea-17"
        return good, "updated (200)"
    if key == ("DELETE", "/v1/products/tea-17"):
        state["deleted"] = True
        return status in (200, 204), "deleted (200 or 204)"
    if key == ("GET", "/v1/products/tea-17"):
        want = 404 if state.get("deleted") else 200
        return status == want, f"{want} (after the DELETE)" if want == 404 else "200"
    if key == ("GET", "/v1/stats"):
        return status == 200 and j is not None, "200 with a JSON body"
    if key == ("GET", "/healthz"):
        return status == 200, "200"
    if key == ("GET", "/metrics"):
        return status == 200 and "prism_" in body, "200 with prism_ metrics"
    return None, None


def make_images(data, cwd):
    import cv2

    for name, src in (("tea-brick-17.jpg", "oxford-affine/graf/img1.png"), ("photo.jpg", "oxford-affine/graf/img2.png"),
                      ("new.jpg", "oxford-affine/boat/img1.png")):
        image = cv2.imread(os.path.join(data, src))
        if image is None or not cv2.imwrite(os.path.join(cwd, name), image, [cv2.IMWRITE_JPEG_QUALITY, 90]):
            raise RuntimeError(f"cannot make {name} from {data}/{src}")


def readme_block(source, prism, tmp):
    text = open(os.path.join(source, "README.md")).read()
    block = block_with(text, "prism texture serve --gallery G")
    if block is None:
        return fail("README.md: no sh block running `prism texture serve --gallery G`")
    lines = [l for l in block.splitlines() if l.strip()]
    serve, rest = command_of(lines[0]), lines[1:]
    if not rest or not rest[0].startswith("U="):
        return fail("README.md: the serve block's second line does not set U")
    documented_url = command_of(rest[0])[0][2:]
    if documented_url != "http://127.0.0.1:8080":
        fail(f"README.md: U={documented_url}, but serve's default is http://127.0.0.1:8080")
    server = Server(prism, serve, tmp)
    url = f"http://127.0.0.1:{server.port}"
    state, checked = {}, 0
    try:
        for line in rest[1:]:
            calls = curl_calls(line)
            answers = run_curls(line, url, tmp)
            if len(answers) != len(calls):
                fail(f"README.md: `{line}` made {len(answers)} answers for {len(calls)} curls")
                continue
            for (method, path), (status, body) in zip(calls, answers):
                good, what = expect(method, path, status, body, state)
                if good is None:
                    fail(f"README.md: no expectation for `curl -X {method} $U{path}`: add one to {__file__}")
                elif not good:
                    fail(f"README.md: {method} {path} answered {status} {body[:300]!r}; expected {what}")
                else:
                    checked += 1
        ok(f"README.md: {checked} curl calls of the serve block answered as expected")
    finally:
        server.stop()
    # The same command again on the same gallery and port: what was acknowledged is what it serves.
    again = Server(prism, serve, tmp, server.port)
    try:
        answers = run_curls('curl "$U/v1/products/tea-17"; curl "$U/v1/stats"', url, tmp)
        if [a[0] for a in answers] != [404, 200]:
            fail(f"README.md: restarted on the same gallery, GET tea-17 and stats answered {answers}")
        else:
            ok("README.md: restarted on the same gallery and port, the deleted tea-17 stays deleted")
    finally:
        again.stop()


def service_keys(source, prism, tmp):
    text = open(os.path.join(source, "docs", "SERVICE.md")).read()
    block = block_with(text, "prism texture serve --gallery G --listen")
    if block is None:
        return fail("docs/SERVICE.md: no sh block with `prism texture serve --gallery G --listen ... --keys`")
    line = next((l for l in block.splitlines() if "--keys" in l), None)
    if line is None:
        return fail("docs/SERVICE.md: the One machine block has no --keys command")
    keys = os.path.join(tmp, "keys")
    with open(keys, "w") as f:
        f.write("factory-secret-0001 write appliance\nphone-secret-000001 read app\n")
    args = [a.replace("/etc/prism/keys", keys) for a in command_of(line)]
    server = Server(prism, args, tmp)
    url = f"http://127.0.0.1:{server.port}"
    try:
        lines = [
            ('curl "$U/v1/stats"', 401),
            ('curl -H "Authorization: Bearer phone-secret-000001" "$U/v1/stats"', 200),
            ('curl -X POST -H "X-API-Key: phone-secret-000001" --data-binary @new.jpg -H "Content-Type: image/jpeg" '
             '"$U/v1/products/boat-1"', 403),
            ('curl -X POST -H "Authorization: Bearer factory-secret-0001" --data-binary @new.jpg '
             '-H "Content-Type: image/jpeg" "$U/v1/products/boat-1"', 201),
            ('curl "$U/healthz"', 200),
        ]
        for shell, want in lines:
            got = run_curls(shell, url, tmp)
            if not got or got[0][0] != want:
                fail(f"docs/SERVICE.md: with --keys, `{shell}` answered {got}; expected {want}")
        ok("docs/SERVICE.md: with --keys: no key 401, a read key writing 403, a write key 201, /healthz open")
    finally:
        server.stop()


def main():
    source, prism, data = sys.argv[1:4]
    missing = [what for what, there in (
        (f"{data}/oxford-affine", os.path.isdir(os.path.join(data, "oxford-affine"))),
        ("curl", shutil.which("curl") is not None)) if not there]
    try:
        import cv2  # noqa: F401
    except ImportError:
        missing.append("python3-opencv (cv2)")
    if missing:
        if os.environ.get("PRISM_REQUIRE_DATA") or os.environ.get("PRISM_REQUIRE_PYTHON") == "1":
            sys.exit("doc_service: missing " + ", ".join(missing))
        print("*** SKIPPED LOUDLY: doc_service: missing " + ", ".join(missing) + " ***")
        return SKIP
    with tempfile.TemporaryDirectory() as tmp:
        make_images(data, tmp)
        readme_block(source, prism, tmp)
        service_keys(source, prism, tmp)
    if failures:
        print(f"doc_service: {len(failures)} difference(s) between the docs and what the service does")
        return 1
    ok("the README's and SERVICE.md's service commands answer as documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
