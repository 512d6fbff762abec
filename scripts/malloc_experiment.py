#!/usr/bin/env python3
"""The malloc experiment: each MPM x allocator under the same loads.

Why was threaded Apache 2.0 slower than prefork? Its malloc/free took a
process-wide lock. This runs `mpm serve` under prefork, worker and event with
the system allocator, mimalloc, and `locked` (the system allocator behind one
global mutex, the 2001 situation), and reads the server's own counters from
/server-status?json before and after each load.

Loads (wrk, keep-alive unless said):
  page    the 1456-byte page (cached in memory: about 3 allocations a request)
  close   the same page, a connection per request
  alloc   the `streaming` example's /lines?count=200: some 200 small
          allocations a request, the allocation-heavy case

Needs wrk (apt-get install wrk) and a release build:
  cargo build --release -p server --bin mpm --examples
  python3 scripts/malloc_experiment.py [--secs 5] [--conns 50]
Prints a Markdown table.
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPM = os.path.join(ROOT, "target", "release", "mpm")
STREAMING = os.path.join(ROOT, "target", "release", "examples", "streaming")


def wait_listening(port, proc):
    deadline = time.time() + 20
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited early ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listening on {port}")


def status(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/server-status?json", timeout=10) as r:
        return json.load(r)


def tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def pss_mib(pid):
    total = 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def wrk(port, path, conns, secs, close=False):
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{secs}s", f"http://127.0.0.1:{port}{path}"]
    if close:
        cmd[1:1] = ["-H", "Connection: close"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    m = re.search(r"Requests/sec:\s*([\d.]+)", out)
    return float(m.group(1)) if m else 0.0


def measure(port, path, conns, secs, close=False):
    before = status(port)
    rps = wrk(port, path, conns, secs, close)
    after = status(port)
    reqs = max(1, after["total_requests"] - before["total_requests"] - 1)
    ctx = lambda s: s["voluntary_ctxt_switches"] + s["involuntary_ctxt_switches"]
    return {
        "rps": rps,
        "allocs": (after["allocations"] - before["allocations"]) / reqs,
        "contended": (after["lock_contended"] - before["lock_contended"]) / reqs,
        "wait_us": (after["lock_wait_us"] - before["lock_wait_us"]) / reqs,
        "ctx": (ctx(after) - ctx(before)) / reqs,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--conns", type=int, default=50)
    args = ap.parse_args()
    for tool in (MPM, STREAMING):
        if not os.path.exists(tool):
            sys.exit(f"{tool} missing: cargo build --release -p server --bin mpm --examples")
    root = tempfile.mkdtemp(prefix="malloc-")
    with open(os.path.join(root, "index.html"), "wb") as f:
        f.write(b"<html><body>" + b"x" * (1456 - 27) + b"</body></html>\n")
    port = 19300
    rows = []
    for mpm in ("prefork", "worker", "event"):
        for allocator in ("system", "mimalloc", "locked"):
            common = ["--mpm", mpm, "--allocator", allocator, "--max-request-workers", "64"]
            if mpm == "prefork":
                common += ["--start-servers", "64"]
            row = {"mpm": mpm, "allocator": allocator}
            for load, binary, path, close in (
                ("page", MPM, "/index.html", False),
                ("close", MPM, "/index.html", True),
                ("alloc", STREAMING, "/lines?count=200", False),
            ):
                port += 1
                argv = [binary, "serve", "--listen", f"127.0.0.1:{port}"] + common
                if binary == MPM:
                    argv += ["--docroot", root]
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
                try:
                    wait_listening(port, proc)
                    wrk(port, path, args.conns if not close else 20, 1, close)  # warm-up
                    row[load] = measure(port, path, args.conns if not close else 20, args.secs, close)
                    if load == "page":
                        row["pss"] = pss_mib(proc.pid)
                finally:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
            rows.append(row)
            print(f"# {mpm} {allocator}: {json.dumps(row)}", file=sys.stderr, flush=True)
    print("| MPM | allocator | page req/s | close req/s | alloc-heavy req/s | allocs/req (page, heavy) "
          "| contended lock waits/req (heavy) | lock wait µs/req (heavy) | ctx switches/req (page, heavy) | PSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        p, c, a = r["page"], r["close"], r["alloc"]
        print(f"| {r['mpm']} | {r['allocator']} | {p['rps']:.0f} | {c['rps']:.0f} | {a['rps']:.0f} | "
              f"{p['allocs']:.1f}, {a['allocs']:.0f} | {a['contended']:.3f} | {a['wait_us']:.2f} | "
              f"{p['ctx']:.2f}, {a['ctx']:.2f} | {r['pss']:.1f} |")


if __name__ == "__main__":
    main()
