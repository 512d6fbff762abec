#!/usr/bin/env python3
"""Where a proxied request's CPU goes: proxy_peers.py's `fast` scenario (the origin answers 1456
bytes at once, wrk -t1 -c50 keep-alive) under `perf record`, each server's samples sorted by what
they were doing, in microseconds a request.

  python3 bench/proxy/proxy_cost.py --ours target/release/mpm
  python3 bench/proxy/proxy_cost.py --ours target/release/mpm --only floor,ours-event --secs 4

For each server (nginx, floor, ours-MPM, as proxy_peers.py starts them) in front of one origin:
a 1 s warm-up; SECS of wrk with the context switches of the proxy's and the origin's threads read
from /proc before and after (req/s is this run's); then SECS of wrk again while `perf record -F 999
-g -p` samples the proxy's processes (sampling slows the proxy a little: compare rows, not these
sums with proxy_peers.py's CPU column). Columns, per request:
  user        samples in user space
  sends       samples inside send/sendto/writev/sendmsg; on loopback a send also runs the
              receiver's TCP processing (tcp_v4_rcv) and wakes it (sock_def_readable)
  wake        of which in sock_def_readable: waking the receiver (dear when it sleeps)
  receives    inside recv/recvfrom/read/readv/recvmsg
  waits       inside epoll_wait/epoll_pwait/poll/io_uring_enter
  other       the rest of the kernel (preemption on the way back to user space, interrupts)
  proxy inv   involuntary context switches of the proxy's threads (preempted)
  origin vol  voluntary context switches of the origin's threads (it went to sleep)
The sum is the proxy's CPU per request as perf saw it. Needs perf (and what proxy_peers.py needs).

With --symbols N, also the kernel's functions (their own samples, not their callees'), in
nanoseconds a request for each server: the N where the last server listed pays most above the
first, and the kernel's total. Two servers making the same system calls and TCP segments a
request (the floor and ours-event) differ there by where the difference lies.

  python3 bench/proxy/proxy_cost.py --ours target/release/mpm --only floor,ours-event --secs 5 --symbols 20
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import peers  # noqa: E402
import proxy_peers as pp  # noqa: E402

FREQ = 999  # low: perf's own cost per sample is charged to the proxy
SENDS = ("send", "sendto", "writev", "sendmsg", "write")
RECVS = ("recv", "recvfrom", "read", "readv", "recvmsg")
WAITS = ("epoll_wait", "epoll_pwait", "poll", "io_uring_enter")


def split(perf_data):
    """Samples by column, from `perf script` of perf_data."""
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "ip,sym"], capture_output=True,
                         text=True).stdout
    counts = collections.Counter()
    for block in out.split("\n\n"):
        frames = [line.split(None, 1) for line in block.strip().splitlines()]
        frames = [(ip, name.removesuffix(" (inlined)")) for ip, name in (f for f in frames if len(f) == 2)]
        if not frames:
            continue
        if not frames[0][0].startswith("ffffffff"):
            counts["user"] += 1
            continue
        names = [n for _, n in frames]
        call = next((m.group(1) for n in names if (m := re.match(r"__(?:x64|do)_sys_(\w+)", n))), None)
        column = ("sends" if call in SENDS else "receives" if call in RECVS else "waits" if call in WAITS
                  else "other")
        # writev's entry can be inlined away: a send is also known by its TCP send path
        if column == "other" and "tcp_sendmsg" in names:
            column = "sends"
        counts[column] += 1
        if column == "sends" and "sock_def_readable" in names:
            counts["wake"] += 1
    return counts


def kernel_symbols(perf_data):
    """Samples by kernel function (its own, not its callees'), from `perf report` of perf_data."""
    out = subprocess.run(["perf", "report", "-i", perf_data, "--no-children", "--sort", "sym", "--stdio",
                          "-n"], capture_output=True, text=True).stdout
    counts = {}
    for line in out.splitlines():
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+\[k\]\s+(\S+)", line)
        if m:
            counts[m.group(2)] = counts.get(m.group(2), 0) + int(m.group(1))
    return counts


def measure(name, build, up, base, secs, symbols=False):
    work = os.path.join(base, name)
    os.makedirs(work, exist_ok=True)
    os.chmod(work, 0o777)
    argv, _ = build(18300, up.port, work, False)
    with pp.Proxy(name, argv, 18300, work, pp.SMALL) as srv:
        peers.wrk(srv.port, "/", 50, 1)  # warm-up
        pids, origin = srv.pids(), [up.proc.pid]
        # The switches in a run of their own: sampling changes how the threads are scheduled.
        v0, i0 = pp.switches(pids)
        ov0, _ = pp.switches(origin)
        plain = pp.parse_wrk(peers.sh(["wrk", "-t1", "-c50", f"-d{secs}s", "--latency",
                                       f"http://127.0.0.1:{srv.port}/"]).stdout)
        v1, i1 = pp.switches(pids)
        ov1, _ = pp.switches(origin)
        data = os.path.join(work, "perf.data")
        perf = subprocess.Popen(["perf", "record", "-q", "-F", str(FREQ), "-g", "-o", data, "-p",
                                 ",".join(map(str, pids)), "--", "sleep", str(secs)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        row = pp.parse_wrk(peers.sh(["wrk", "-t1", "-c50", f"-d{secs}s", "--latency",
                                     f"http://127.0.0.1:{srv.port}/"]).stdout)
        perf.wait()
    m = max(1, plain["requests"])
    n = max(1, row["requests"])
    us = 1e6 / FREQ / n
    counts = split(data)
    row = {"rps": plain["rps"], **{k: v * us for k, v in counts.items()},
           "proxy_inv": (i1 - i0) / m, "proxy_vol": (v1 - v0) / m, "origin_vol": (ov1 - ov0) / m}
    if symbols:
        row["symbols"] = {k: v * us * 1000 for k, v in kernel_symbols(data).items()}
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", help="path to the mpm binary")
    ap.add_argument("--only", default="nginx,floor,ours-event", help="servers, comma-separated "
                    "(nginx, floor, ours-prefork, ours-worker, ours-event, ours-uring)")
    ap.add_argument("--secs", type=int, default=4, help="seconds of wrk (and of perf) per server")
    ap.add_argument("--symbols", type=int, default=0, metavar="N",
                    help="also the N kernel functions where the last server pays most above the first "
                         "(ns a request)")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep each server's perf.data in DIR/NAME/ (DIR a new directory), for perf report")
    args = ap.parse_args()
    if not shutil.which("perf") or not shutil.which("wrk"):
        sys.exit("needs perf and wrk (proxy_peers.py --install installs wrk)")
    pp.ensure_upstream()
    if args.keep:
        os.makedirs(args.keep)  # a new directory: an error if it exists, so no run's files mix
        base = os.path.abspath(args.keep)
    else:
        base = tempfile.mkdtemp(prefix="proxy-cost-")
    os.chmod(base, 0o755)
    plan = {"nginx": lambda p, u, d, pre: pp.nginx_conf(p, u, d, 64),
            "floor": lambda p, u, d, pre: pp.floor_cmd(base, p, u)}
    if args.ours:
        binary = os.path.abspath(args.ours)
        for mpm in ("prefork", "worker", "event", "uring"):
            plan[f"ours-{mpm}"] = lambda p, u, d, pre, m=mpm: pp.ours_cmd(binary, m, p, u, 1064, [], pre)
    wanted = args.only.split(",")
    unknown = [w for w in wanted if w not in plan]
    if unknown:
        sys.exit(f"unknown server {', '.join(unknown)}: choose from {', '.join(plan)} (ours-* need --ours)")
    rows = {}
    try:
        with pp.Upstream(18990, 2, 0, pp.SMALL, base) as up:
            for name in wanted:
                print(f"# {name}", file=sys.stderr, flush=True)
                try:
                    rows[name] = measure(name, plan[name], up, base, args.secs, args.symbols > 0)
                except Exception as e:  # a server that fails is reported, not fatal
                    rows[name] = {"error": repr(e)[:120]}
                time.sleep(0.5)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    cols = ["user", "sends", "wake", "receives", "waits", "other"]
    print(f"CPU of the proxy a request, µs, by what perf saw it doing (`fast`: wrk -t1 -c50, {args.secs} s); "
          "context switches a request")
    print("| server | req/s | " + " | ".join(cols) + " | total | proxy inv | origin vol |")
    print("|---|" + "---|" * (len(cols) + 5))
    for name, r in rows.items():
        if "error" in r:
            print(f"| {name} | {r['error']} |")
            continue
        total = sum(r.get(c, 0.0) for c in cols if c != "wake")
        print(f"| {name} | {r['rps']:.0f} | " + " | ".join(f"{r.get(c, 0.0):.2f}" for c in cols)
              + f" | {total:.1f} | {r['proxy_inv']:.3f} | {r['origin_vol']:.3f} |")
    measured = [n for n, r in rows.items() if "symbols" in r]
    if args.symbols and len(measured) >= 2:
        first, last = rows[measured[0]]["symbols"], rows[measured[-1]]["symbols"]
        names = sorted(set(first) | set(last), key=lambda k: first.get(k, 0.0) - last.get(k, 0.0))
        print()
        print(f"Kernel functions, ns a request (their own samples): the {args.symbols} where "
              f"{measured[-1]} pays most above {measured[0]}")
        print("| function | " + " | ".join(measured) + " |")
        print("|---|" + "---|" * len(measured))
        for k in names[:args.symbols] + ["(all the kernel)"]:
            def ns(n):
                sym = rows[n]["symbols"]
                return sum(sym.values()) if k == "(all the kernel)" else sym.get(k, 0.0)
            print(f"| {k} | " + " | ".join(f"{ns(n):.0f}" for n in measured) + " |")


if __name__ == "__main__":
    main()
