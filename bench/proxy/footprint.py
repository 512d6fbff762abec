#!/usr/bin/env python3
"""What a request's user code costs the kernel: the floor (floor/, a byte relay) against the same
floor built to run a block of straight-line code of its own after each receive, and against the same
work from a few statements in a loop (the control: as much user time in a few bytes of code), in the
same run, under proxy_peers.py's `fast` load. The system calls are the same in all three; only the
user code between them differs. `sys` growing in both built rows says that user time alone raises
the kernel's cost of a request (a reading, not measured here: its peers, wrk and the origin, wait longer and sleep
more, and a send that wakes a sleeper costs more); the straight-line row above the control is what
the code's footprint adds (the kernel's code and data pushed out of the CPU's caches).

  python3 bench/proxy/footprint.py
  python3 bench/proxy/footprint.py --statements 0,1500,3000 --rounds 3 --secs 5
  python3 bench/proxy/footprint.py --statements 1250 --hold --rounds 5 --secs 4

--hold runs each build a second time with FLOOR_HOLD_SENDS=1 (its row marked `held`): the same
receives, code and sends, but a turn's sends go out together after all its receives, as mpm's event
loop sends what its steps held (docs/design.md, "Sends held to the end of a turn"). The difference in
`sys` is what sending each answer as it is made costs the peers' wake-ups.

Each build (FLOOR_CODE_STATEMENTS=N, see floor/build.rs; about 25 bytes of code a statement, the
code's size read from the symbol table; N/D: the same N statements' work from D distinct ones run
in a loop, the control: as much user time in little code) runs in turn, --rounds times, each time started afresh
with 2 threads in front of one origin (upstream/, 1456-byte answers at once): a 1 s warm-up, then
SECS of wrk -t1 -c50 keep-alive while the floor's user and system CPU time are read from /proc.
The block runs after each receive: twice a request (the client's and the origin's).
Columns: req/s, user and sys CPU microseconds per request (medians over the rounds), the block's
code KiB. Compare with proxy_instructions.py's `hot code KiB` of a server (nginx's and ours).
Needs wrk (proxy_peers.py --install installs it) and cargo.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import peers  # noqa: E402
import proxy_peers as pp  # noqa: E402


def build(spec, base):
    """The floor built with spec's statements of its own code ("N" or "N/D": N run, D distinct, in
    a loop), and that code's size in KiB."""
    n, _, d = spec.partition("/")
    target = os.path.join(base, f"floor-{n}-{d or n}")
    env = dict(os.environ, FLOOR_CODE_STATEMENTS=n, FLOOR_CODE_DISTINCT=d or n)
    r = subprocess.run(["cargo", "build", "--release", "-q", "--manifest-path",
                        os.path.join(pp.FLOOR_DIR, "Cargo.toml"), "--target-dir", target],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("could not build floor/: " + r.stderr.strip()[-300:])
    binary = os.path.join(target, "release", "floor")
    size = 0
    nm = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True).stdout
    for line in nm.splitlines():
        parts = line.split()
        if len(parts) == 4 and "4code4code" in parts[3]:
            size = int(parts[1], 16)
    return binary, size / 1024


def cpu_ticks(pid):
    """(user, system) clock ticks of a process, its threads included."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def measure(binary, port, up, secs, work, hold=False):
    argv = [binary, str(port), str(up.port), "2"]
    # The floor reads FLOOR_HOLD_SENDS when it starts (wrk, started with it, ignores it).
    os.environ.pop("FLOOR_HOLD_SENDS", None)
    if hold:
        os.environ["FLOOR_HOLD_SENDS"] = "1"
    with pp.Proxy("floor", argv, port, work, pp.SMALL) as srv:
        peers.wrk(srv.port, "/", 50, 1)  # warm-up
        u0, s0 = cpu_ticks(srv.proc.pid)
        row = pp.parse_wrk(peers.sh(["wrk", "-t1", "-c50", f"-d{secs}s", "--latency",
                                     f"http://127.0.0.1:{srv.port}/"]).stdout)
        u1, s1 = cpu_ticks(srv.proc.pid)
    os.environ.pop("FLOOR_HOLD_SENDS", None)
    tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
    n = max(1, row["requests"])
    return row["rps"], (u1 - u0) * tick_us / n, (s1 - s0) * tick_us / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--statements", default="0,3000,3000/30",
                    help="the builds, comma-separated: N statements of code run after each receive, "
                         "or N/D: N run, of D distinct ones in a loop (the same work in little code)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each build, taken in turn")
    ap.add_argument("--secs", type=int, default=5, help="seconds of wrk a run")
    ap.add_argument("--hold", action="store_true",
                    help="also run each build with a turn's sends held to its end (FLOOR_HOLD_SENDS=1)")
    args = ap.parse_args()
    if not shutil.which("wrk") or not shutil.which("nm"):
        sys.exit("needs wrk (proxy_peers.py --install installs it) and nm (binutils)")
    counts = args.statements.split(",")
    if not all(part.isdigit() for c in counts for part in c.split("/")) or any(c.count("/") > 1 for c in counts):
        sys.exit(f"--statements {args.statements!r}: comma-separated N or N/D (whole numbers), such as 0,3000,3000/30")
    pp.ensure_upstream()
    base = tempfile.mkdtemp(prefix="footprint-")
    os.chmod(base, 0o755)
    try:
        builds = {n: build(n, base) for n in counts}
        rows = [(n, False) for n in counts] + ([(n, True) for n in counts] if args.hold else [])
        runs = {row: [] for row in rows}
        with pp.Upstream(18991, 2, 0, pp.SMALL, base) as up:
            for _ in range(args.rounds):
                for n, hold in rows:
                    work = tempfile.mkdtemp(prefix=f"run-{n.replace('/', '-')}-", dir=base)
                    runs[(n, hold)].append(measure(builds[n][0], 18400, up, args.secs, work, hold))
                    time.sleep(0.5)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"The floor with a block of code of its own per receive (`fast`: wrk -t1 -c50, {args.secs} s, "
          f"medians of {args.rounds} runs taken in turn)")
    print("| statements (run/distinct) | code KiB | req/s | user us/req | sys us/req |")
    print("|---|---|---|---|---|")
    for n, hold in runs:
        rps, user, sys_ = (statistics.median(r[i] for r in runs[(n, hold)]) for i in range(3))
        label = f"{n} held" if hold else n
        print(f"| {label} | {builds[n][1]:.1f} | {rps:.0f} | {user:.2f} | {sys_:.2f} |")


if __name__ == "__main__":
    main()
