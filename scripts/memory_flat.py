#!/usr/bin/env python3
"""Does memory stay flat under a long mixed load? For each MPM.

Starts `mpm serve` (release build) on a docroot with a small page and a
1 MiB file, warms it up for --warmup seconds, then runs --secs seconds
(60 by default) of mixed load at once:

  wrk GET   keep-alive GETs over the page, the 1 MiB file, a 404 and a
            refused dotfile (wrk -c 50)
  wrk POST  8 KiB request bodies, read whole and refused with 405 (wrk -c 20)
  slow      50 slowloris connections trickling heads, cut off by the header
            timeout (2s here) and reopened
  churn     a connection per request, half of them malformed (400)

It reads RSS and PSS of the whole server tree (master and children, from
/proc/PID/smaps_rollup) after start, after the warm-up and after the load,
and prints a Markdown table. "Flat" means the figure after the load is
about the one after the warm-up: nothing grows with the number of requests.

Needs wrk (apt-get install wrk) and a release build:
  cargo build --release -p mpm --bin mpm
  python3 scripts/memory_flat.py [--secs 60] [--warmup 10]
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPM = os.path.join(ROOT, "target", "release", "mpm")
MPMS = ["prefork", "worker", "event"]

GET_LUA = """
local paths = {"/index.html", "/big.bin", "/missing", "/.env"}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", paths[(i % #paths) + 1])
end
"""

POST_LUA = """
wrk.method = "POST"
wrk.body = string.rep("b", 8192)
wrk.headers["Content-Type"] = "application/octet-stream"
"""


def tree(pid):
    """The pid and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def memory(pid):
    """(RSS, PSS) in KiB, summed over the server tree."""
    rss = pss = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                text = f.read()
        except OSError:
            continue
        rss += int(re.search(r"^Rss:\s+(\d+)", text, re.M).group(1))
        pss += int(re.search(r"^Pss:\s+(\d+)", text, re.M).group(1))
    return rss, pss


def start(mpm, docroot):
    args = [MPM, "serve", "--mpm", mpm, "--docroot", docroot,
            "--listen", "127.0.0.1:0", "--request-header-timeout", "2s",
            "--max-request-workers", "64"]
    if mpm == "event":
        args += ["--threads-per-child", "16"]
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    m = re.search(r"listening on (?:http://)?(\S+)", line)
    if not m:
        proc.kill()
        sys.exit(f"{mpm}: no 'listening on' line: {line!r}")
    # Keep draining stderr so that the server never blocks on it.
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    host, port = m.group(1).rsplit(":", 1)
    return proc, (host, int(port))


def slow_clients(addr, stop, n=50):
    head = b"GET /index.html HTTP/1.1\r\nHost: t\r\nX-Slow: " + b"a" * 200
    conns = []
    while not stop.is_set():
        while len(conns) < n:
            try:
                s = socket.create_connection(addr)
                s.setblocking(False)
                conns.append([s, 0])
            except OSError:
                break
        for c in list(conns):
            try:
                c[0].send(head[c[1] % len(head):c[1] % len(head) + 1])
                c[1] += 1
            except OSError:
                c[0].close()
                conns.remove(c)
        time.sleep(0.2)
    for c in conns:
        c[0].close()


def churn(addr, stop):
    bad = b"GET / HTTP/1.1\r\nHost: t\r\nX: a\r\n b\r\n\r\n"
    good = b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    i = 0
    while not stop.is_set():
        i += 1
        try:
            with socket.create_connection(addr, timeout=5) as s:
                s.sendall(bad if i % 2 else good)
                while s.recv(65536):
                    pass
        except OSError:
            pass


def load(addr, secs, lua_dir):
    url = f"http://{addr[0]}:{addr[1]}"
    stop = threading.Event()
    helpers = [threading.Thread(target=slow_clients, args=(addr, stop)),
               threading.Thread(target=churn, args=(addr, stop))]
    for t in helpers:
        t.start()
    wrks = [
        subprocess.Popen(["wrk", "-t1", "-c50", f"-d{secs}s", "-s",
                          os.path.join(lua_dir, "get.lua"), url],
                         stdout=subprocess.PIPE, text=True),
        subprocess.Popen(["wrk", "-t1", "-c20", f"-d{secs}s", "-s",
                          os.path.join(lua_dir, "post.lua"), url],
                         stdout=subprocess.PIPE, text=True),
    ]
    requests = 0
    for w in wrks:
        out = w.communicate()[0]
        m = re.search(r"(\d+) requests in", out)
        requests += int(m.group(1)) if m else 0
    stop.set()
    for t in helpers:
        t.join()
    return requests


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--secs", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--mpm", action="append", choices=MPMS)
    args = ap.parse_args()
    if not os.path.exists(MPM):
        sys.exit(f"no release build at {MPM}: cargo build --release -p mpm --bin mpm")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "index.html"), "wb") as f:
            f.write(b"<p>hello</p>\n" * 100)
        with open(os.path.join(d, "big.bin"), "wb") as f:
            f.write(os.urandom(1 << 20))
        with open(os.path.join(d, ".env"), "wb") as f:
            f.write(b"SECRET=1\n")
        with open(os.path.join(d, "get.lua"), "w") as f:
            f.write(GET_LUA)
        with open(os.path.join(d, "post.lua"), "w") as f:
            f.write(POST_LUA)
        print(f"| MPM | RSS start | RSS after {args.warmup}s warm-up | RSS after {args.secs}s"
              " | PSS after warm-up | PSS after load | requests in the load |")
        print("|---|---|---|---|---|---|---|")
        for mpm in args.mpm or MPMS:
            proc, addr = start(mpm, d)
            try:
                time.sleep(1)
                rss0, _ = memory(proc.pid)
                load(addr, args.warmup, d)
                time.sleep(3)  # let slow connections time out
                rss1, pss1 = memory(proc.pid)
                n = load(addr, args.secs, d)
                time.sleep(3)
                rss2, pss2 = memory(proc.pid)
                mib = lambda k: f"{k / 1024:.1f} MiB"
                print(f"| {mpm} | {mib(rss0)} | {mib(rss1)} | {mib(rss2)} | {mib(pss1)} "
                      f"| {mib(pss2)} | {n} |", flush=True)
            finally:
                proc.terminate()
                proc.wait()


if __name__ == "__main__":
    main()
