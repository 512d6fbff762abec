#!/usr/bin/env python3
"""Allocations per request, by MPM and --request-pool, from the server's own counters.

For each MPM and `--request-pool on|off`, starts `mpm serve` on a docroot of
its own (a 1456-byte index.html, a 1 MiB file, a directory), then for each
request below reads /server-status?json, sends it with `ab -k -n N -c 4`,
reads the status page again, and prints the difference of `allocations`
over the difference of `total_requests`, less what one status request costs
(its JSON has an object per worker slot: the median of three reads in a
row, just before); each figure is the median of three such trials:

  cached 1456 B page            GET /index.html
  1 MiB file (sendfile)         GET /big.bin (a quarter of N)
  missing file (404)            GET /missing.html
  directory without slash (301) GET /dir

Needs ab (apt-get install -y apache2-utils); not part of the tests.

    cargo build --release -p mpm --bin mpm
    python3 scripts/allocs_per_request.py
    python3 scripts/allocs_per_request.py --mpm event -n 5000       # quicker, noisier
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

# Name, path, and the share of -n it is sent (the 1 MiB file is slower to send).
REQUESTS = [
    ("cached 1456 B page", "/index.html", 1),
    ("1 MiB file (sendfile)", "/big.bin", 0.25),
    ("missing file (404)", "/missing.html", 1),
    ("directory without slash (301)", "/dir", 1),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/server-status?json", timeout=5) as r:
        return json.load(r)


def wait_ready(port, proc):
    deadline = time.time() + 20
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"mpm exited with {proc.returncode}: {proc.stderr.read().decode(errors='replace')}")
        try:
            return status(port)
        except OSError:
            time.sleep(0.1)
    sys.exit("mpm did not answer within 20 s")


def measure(port, path, n):
    """Allocations per request of `n` keep-alive GETs of `path`."""
    # What answering one status request allocates (the one that reads
    # `before` is inside the window): the median of three reads in a row.
    reads = [status(port) for _ in range(4)]
    costs = sorted(b["allocations"] - a["allocations"] for a, b in zip(reads, reads[1:]))
    before = reads[-1]
    subprocess.run(["ab", "-q", "-k", "-n", str(n), "-c", "4", f"http://127.0.0.1:{port}{path}"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = status(port)
    if "allocations" not in after:
        sys.exit("the server counts no allocations (it needs mpm's allocator)")
    requests = after["total_requests"] - before["total_requests"] - 1
    if requests <= 0:
        sys.exit(f"no request to {path} was answered")
    return (after["allocations"] - before["allocations"] - costs[1]) / requests


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/mpm", help="the mpm binary (default: %(default)s)")
    ap.add_argument("--mpm", default="prefork,worker,event", help="comma list (default: %(default)s)")
    ap.add_argument("-n", type=int, default=20000,
                    help="requests per measurement, a quarter of it for the 1 MiB file (default: %(default)s)")
    args = ap.parse_args()
    if shutil.which("ab") is None:
        sys.exit("needs ab: apt-get install -y apache2-utils")
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"{args.bin} is not built: cargo build --release -p mpm --bin mpm")
    root = tempfile.mkdtemp(prefix="mpm-allocs-")
    with open(os.path.join(root, "index.html"), "wb") as f:
        f.write(b"x" * 1456)
    with open(os.path.join(root, "big.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))
    os.mkdir(os.path.join(root, "dir"))
    with open(os.path.join(root, "dir", "index.html"), "wb") as f:
        f.write(b"dir\n")
    print("| MPM | request pool | " + " | ".join(r[0] for r in REQUESTS) + " |")
    print("|---|---|" + "---|" * len(REQUESTS))
    try:
        for mpm in args.mpm.split(","):
            for pool in ("on", "off"):
                port = free_port()
                proc = subprocess.Popen(
                    [args.bin, "serve", "--mpm", mpm, "--listen", f"127.0.0.1:{port}", "--docroot", root,
                     "--request-pool", pool],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                try:
                    wait_ready(port, proc)
                    cells = []
                    for _, path, share in REQUESTS:
                        # The median of three trials: the status page's own
                        # cost, subtracted, varies from read to read (under
                        # prefork, by the child that answers it).
                        n = max(100, int(args.n * share))
                        trials = sorted(measure(port, path, n) for _ in range(3))
                        cells.append(f"{trials[1]:.2f}")
                    print(f"| {mpm} | {pool} | " + " | ".join(cells) + " |", flush=True)
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
