#!/usr/bin/env python3
"""`mpm bench` against wrk on the same server in the same run, for one
workload: a server is started, then the two tools take turns (bench, wrk,
bench, wrk, ...) for `--rounds` rounds of `--secs` each, and the medians of
their req/s and the ratio bench/wrk are printed. A check that the bench
measures what wrk measures, on this machine, now.

Needs wrk (apt-get install -y wrk); not part of the tests.

    cargo build --release -p mpm --bin mpm --examples
    python3 scripts/bench_vs_wrk.py                                  # the 1456-byte page, event, keep-alive
    python3 scripts/bench_vs_wrk.py --close -c 20                    # a connection per request
    python3 scripts/bench_vs_wrk.py --example shop --path /api/items/7 --mpm worker

The workload is one GET of `--path` on `-c` connections (wrk sends one
request; a mix would need a Lua script for wrk, and the point here is the
same load from both tools). Both use one client thread (`mpm bench -t1`,
`wrk -t1`). The server gets `--server-flags` after its own.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from access_log_bench import PAGE, free_port, wait_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wrk_rate(text):
    m = re.search(r"Requests/sec:\s+([0-9.]+)", text)
    if not m:
        raise RuntimeError(f"no Requests/sec in wrk's output:\n{text}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mpm", default="event", help="process model (default event)")
    ap.add_argument("--example", help="serve with target/release/examples/NAME instead of mpm")
    ap.add_argument("--path", default="/index.html", help="the request (default /index.html)")
    ap.add_argument("-c", "--connections", type=int, default=50)
    ap.add_argument("--close", action="store_true", help="a connection per request")
    ap.add_argument("--secs", type=float, default=3.0, help="each round (default 3)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per tool (default 5)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/mpm"))
    ap.add_argument("--server-flags", default="", help="extra `serve` flags, one string")
    args = ap.parse_args()

    wrk = shutil.which("wrk")
    if not wrk:
        print("wrk is not installed: apt-get install -y wrk", file=sys.stderr)
        return 2
    if not os.path.isfile(args.bin):
        print(f"{args.bin} is missing: cargo build --release -p mpm --bin mpm --examples",
              file=sys.stderr)
        return 2
    server_bin = args.bin
    if args.example:
        server_bin = os.path.join(os.path.dirname(args.bin), "examples", args.example)
    port = free_port()
    url = f"http://127.0.0.1:{port}{args.path}"
    with tempfile.TemporaryDirectory(prefix="bench-vs-wrk-") as docroot:
        page = b"<html><body>" + b"x" * (PAGE - 27) + b"</body></html>\n"
        with open(os.path.join(docroot, "index.html"), "wb") as f:
            f.write(page)
        cmd = [server_bin, "serve", "--mpm", args.mpm, "--listen", f"127.0.0.1:{port}"]
        if not args.example:
            cmd += ["--docroot", docroot]
        cmd += args.server_flags.split()
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port, server)
            time.sleep(1.0)  # prefork forks its children after listening
            bench, wrk_runs = [], []
            secs = f"{args.secs}s"
            for r in range(args.rounds):
                b = ["-c", str(args.connections), "-d", secs, "-t", "1", "--json"]
                if args.close:
                    b.append("--close")
                out = subprocess.run([args.bin, "bench", *b, url], capture_output=True,
                                     text=True, check=True).stdout
                summary = json.loads(out)
                bad = summary["unexpected"] + sum(summary["errors"].values())
                bench.append(summary["requests_per_s"])
                w = [wrk, "-t1", f"-c{args.connections}", f"-d{int(round(args.secs))}s"]
                if args.close:
                    w += ["-H", "Connection: close"]
                wrk_runs.append(wrk_rate(subprocess.run([*w, url], capture_output=True,
                                                         text=True, check=True).stdout))
                print(f"round {r + 1}: mpm bench {bench[-1]:.0f} req/s"
                      f"{f' ({bad} unexpected or failed)' if bad else ''}, wrk {wrk_runs[-1]:.0f}")
        finally:
            server.terminate()
            server.wait(timeout=20)
    b, w = statistics.median(bench), statistics.median(wrk_runs)
    how = "a connection per request" if args.close else "keep-alive"
    print(f"\n{args.mpm}{' ' + args.example if args.example else ''}, GET {args.path}, "
          f"{args.connections} connections, {how}, {args.rounds} rounds of {args.secs:g} s:")
    print(f"  median mpm bench {b:.0f} req/s (range {min(bench):.0f}-{max(bench):.0f})")
    print(f"  median wrk       {w:.0f} req/s (range {min(wrk_runs):.0f}-{max(wrk_runs):.0f})")
    print(f"  bench / wrk      x{b / w:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
