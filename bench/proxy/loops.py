#!/usr/bin/env python3
"""What a proxy's loops pay for sharing the CPUs with the load: under proxy_peers.py's `fast` load,
mpm's event model with one serving process per CPU (its default) against one serving process
(`--server-limit 1`), nginx with a worker process per CPU (`worker_processes auto`, as
proxy_peers.py runs it) against one, and the floor (floor/, a byte relay) with a thread per CPU
against one thread, each started afresh, in turn, --rounds times.

  python3 bench/proxy/loops.py --ours target/release/mpm
  python3 bench/proxy/loops.py --ours target/release/mpm --rounds 6 --secs 3

On a machine whose CPUs wrk and the origin share with the proxy (as in `fast`), a loop that finds
nothing ready sleeps, a send wakes wrk or an origin thread onto the loop's CPU and preempts it, and
when the loop runs again what it and the kernel had in that CPU's caches for its connections is
partly gone. One loop alone keeps a CPU nearly to itself (wrk and the origin take the other), so
it is seldom switched out. `switches/req` is the serving processes' context
switches per request (/proc/PID/task/*/status): voluntary (a sleep, in epoll_wait or a lock) and
preempted (another task, often one a send just woke, given the CPU); CPU us/req and req/s as
proxy_peers.py reads them. The difference between the two rows of a server is what its loops'
sleeps and preemptions cost it on this machine; it is not a setting to change: a server with CPUs of its own needs a
loop on each of them to use them.

Measured as proxy_peers.py measures: with perf stat counting system calls meanwhile, when perf is
installed.

Needs wrk and nginx (proxy_peers.py --install installs them; without nginx its rows are left
out) and cargo (the origin and the floor are built on first use).
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import peers  # noqa: E402
import proxy_peers as pp  # noqa: E402

PORT = 18420
ORIGIN = 18992


def nginx(one, work):
    """proxy_peers.py's nginx, with one worker process if `one`."""
    argv = pp.nginx_conf(PORT, ORIGIN, work, 50)[0]
    if one:
        conf = argv[argv.index("-c") + 1]
        with open(conf) as f:
            text = f.read()
        with open(conf, "w") as f:
            f.write(text.replace("worker_processes auto;", "worker_processes 1;", 1))
    return argv


def measure(name, command, secs, base):
    """(req/s, CPU us/req, voluntary and preempted context switches/req) of one fresh start under
    `fast`."""
    work = tempfile.mkdtemp(prefix=f"run-{name}-", dir=base)
    with pp.Proxy(name, command(work), PORT, work, pp.SMALL) as srv:
        peers.wrk(srv.port, "/", 50, 1)  # warm-up
        pids = srv.pids()
        before = pp.switches(pids)
        row = peers.wrk(srv.port, "/", 50, secs, srv)
        after = pp.switches(pids)
    # wrk's req/s times its duration: the requests the switches were counted over.
    n = max(1, int(round(row["rps"] * secs)))
    return row["rps"], row["cpu_us_per_req"], (after[0] - before[0]) / n, (after[1] - before[1]) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True, help="the mpm binary (target/release/mpm)")
    ap.add_argument("--rounds", type=int, default=4, help="runs of each row, taken in turn")
    ap.add_argument("--secs", type=int, default=4, help="seconds of wrk a run")
    args = ap.parse_args()
    if args.rounds < 1 or args.secs < 1:
        ap.error("--rounds and --secs: 1 or more")
    if not shutil.which("wrk"):
        sys.exit("needs wrk (proxy_peers.py --install installs it)")
    if not os.access(args.ours, os.X_OK):
        ap.error(f"--ours {args.ours}: not an executable file")
    cpus = os.cpu_count() or 1
    pp.ensure_upstream()
    base = tempfile.mkdtemp(prefix="loops-")
    os.chmod(base, 0o755)
    try:
        floor = pp.floor_cmd(base, PORT, ORIGIN)[0]
        ours = pp.ours_cmd(os.path.abspath(args.ours), "event", PORT, ORIGIN, 1064, [], False)[0]
        rows = {
            f"ours-event, {cpus} processes (default)": lambda _: ours,
            "ours-event, 1 process (--server-limit 1)": lambda _: ours + ["--server-limit", "1"],
            f"floor, {cpus} threads": lambda _: floor,
            "floor, 1 thread": lambda _: floor[:-1] + ["1"],
        }
        if os.path.exists("/usr/sbin/nginx"):
            rows[f"nginx, {cpus} worker processes"] = lambda work: nginx(False, work)
            rows["nginx, 1 worker process"] = lambda work: nginx(True, work)
        else:
            print("nginx not installed: its rows are left out (proxy_peers.py --install)", file=sys.stderr)
        runs = {name: [] for name in rows}
        with pp.Upstream(ORIGIN, 2, 0, pp.SMALL, base):
            for r in range(args.rounds):
                order = list(rows) if r % 2 == 0 else list(rows)[::-1]
                for name in order:
                    runs[name].append(measure(name.split(",")[0], rows[name], args.secs, base))
                    time.sleep(0.5)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"`fast` (wrk -t1 -c50, {args.secs} s) on {cpus} CPUs shared with wrk and the origin; "
          f"medians of {args.rounds} runs taken in turn")
    print("| server | req/s | CPU us/req | switches/req | of which preempted |")
    print("|---|---|---|---|---|")
    for name, got in runs.items():
        rps, cpu, vol, pre = (statistics.median(g[i] for g in got) for i in range(4))
        print(f"| {name} | {rps:.0f} | {cpu:.2f} | {vol + pre:.3f} | {pre:.3f} |")


if __name__ == "__main__":
    main()
