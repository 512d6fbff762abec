#!/usr/bin/env python3
"""How the event MPM spreads over cores, on this machine.

Four measurements, each printing a Markdown table (--json FILE writes the
figures). The load is `mpm bench` (the same binary), so only `fairness`
needs anything else (nginx, for its comparison row; `bench/peers.py --install`
installs it).

  balance   For the shared listening socket with --epoll-exclusive on (the
            default) and off, and for --reuseport on (a socket per process),
            with --server-limit N (default: this machine's CPUs): keep-alive
            load (-c 50) and a connection per request (--close -c 20).
            Reports, per load, the connections each serving process accepted
            (from the status page's per-slot counters), max/min across
            processes, and wake-ups per accepted connection: the loops'
            sleeps (voluntary context switches of each serving process's
            main thread, where its loop runs), and the listener events
            epoll_wait returned (each process's exit line: "woken W times by
            a listener, E of them for nothing"; a wake-up whose connection a
            sibling took first goes back to sleep inside epoll_wait, so only
            the first column sees the thundering herd).
  wakeups   Loop sleeps per connection when connections arrive one at a
            time (every loop asleep): --epoll-exclusive on against off.
  scaling   --server-limit 1, 2 ... N: req/s and the server tree's CPU time
            per request (user+system of the master and every child, from
            /proc) under keep-alive and close loads. Per-core efficiency
            holds if CPU us/request does not rise with the processes;
            loop sleeps per request (the serving processes' main threads'
            voluntary context switches) say how much each wake-up batches.
  fairness  p99 of small keep-alive requests (-c 50) while 8 clients
            download a 1 GiB (sparse) file as fast as they can, for
            ours-event (its defaults) and nginx (worker_processes auto,
            sendfile on) in the same run. The servers take turns for
            --rounds rounds (default 5): on a shared 2-core machine one
            round's p99 can be half or twice the next one's, so the table
            reports each server's median of the rounds beside every
            round's figures.

Needs a release build:
  cargo build --release -p mpm --bin mpm
  python3 scripts/event_scaling.py balance  [--processes N] [--secs 5]
  python3 scripts/event_scaling.py wakeups  [--processes N]
  python3 scripts/event_scaling.py scaling  [--processes N] [--secs 5] [--mpm worker]
  python3 scripts/event_scaling.py fairness [--secs 5] [--rounds 5] [--ours-flag=--server-limit --ours-flag=1]
A quiet machine is needed for figures worth quoting; the load generator
runs on the same cores as the server.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPM = os.path.join(ROOT, "target", "release", "mpm")
TICK = os.sysconf("SC_CLK_TCK")
PAGE = b"x" * 1456


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ours:
    """`mpm serve --mpm event` on a docroot, its stderr kept in a file."""

    def __init__(self, root, work, flags, mpm="event"):
        self.port = free_port()
        self.log = os.path.join(work, f"mpm-{self.port}.log")
        argv = [MPM, "serve", "--mpm", mpm, "--listen", f"127.0.0.1:{self.port}",
                "--docroot", root, "--max-keepalive-requests", "0", "--backlog", "4096", *flags]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),
                                     start_new_session=True)
        wait_listening(self.port, self.proc)

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def status(self):
        with urllib.request.urlopen(self.url("/server-status?json"), timeout=10) as r:
            return json.loads(r.read())

    def pids(self):
        kids = []
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                kids = [int(p) for p in f.read().split()]
        except OSError:
            pass
        return [self.proc.pid, *kids]

    def stop(self):
        """SIGTERM, wait; the server's stderr."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        with open(self.log) as f:
            return f.read()


def wait_listening(port, proc):
    deadline = time.time() + 20
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited early ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            time.sleep(0.3)  # the serving processes fork after the listener binds
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port}")


def bench(url, conns, secs, close=False):
    argv = [MPM, "bench", "-c", str(conns), "-d", f"{secs}s", "--json", url]
    if close:
        argv.insert(2, "--close")
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"mpm bench failed: {out.stderr[-400:]}")
    return json.loads(out.stdout)


def accepted_per_process(status):
    """Connections accepted so far, by pid (the loop's slot counts them)."""
    per = {}
    for w in status["workers"]:
        if w.get("pid"):
            per[w["pid"]] = per.get(w["pid"], 0) + w["connections"]
    return per


def loop_sleeps(pids):
    """Voluntary context switches of each process's main thread (its loop)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += int(next(l for l in f if l.startswith("voluntary_ctxt_switches")).split()[1])
        except (OSError, StopIteration):
            pass
    return total


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total / TICK


def exit_counters(log):
    """(wake-ups, empty wake-ups, accepted) over every process's exit line."""
    woken = empty = accepted = 0
    for line in log.splitlines():
        m = re.search(r"accepted (\d+) connections;.*woken (\d+) times by a listener, (\d+) of them",
                      line)
        if m:
            accepted += int(m.group(1))
            woken += int(m.group(2))
            empty += int(m.group(3))
    return woken, empty, accepted


def docroot(work):
    root = os.path.join(work, "root")
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "index.html"), "wb") as f:
        f.write(PAGE)
    return root


def balance(args, work):
    root = docroot(work)
    rows = []
    variants = (("shared, exclusive", ["--epoll-exclusive", "on"]),
                ("shared, not exclusive", ["--epoll-exclusive", "off"]),
                ("reuseport", ["--reuseport", "on"]))
    for variant, flags in variants:
        for load, close, conns in (("keep-alive", False, 50), ("close", True, 20)):
            server = Ours(root, work, ["--server-limit", str(args.processes), *flags])
            kids = server.pids()[1:]
            before = accepted_per_process(server.status())
            sleeps = loop_sleeps(kids)
            r = bench(server.url("/index.html"), conns, args.secs, close)
            sleeps = loop_sleeps(kids) - sleeps
            after = accepted_per_process(server.status())
            per = sorted(after.get(p, 0) - before.get(p, 0) for p in after)
            woken, empty, accepted = exit_counters(server.stop())
            rows.append({"listeners": variant, "load": load, "req_per_s": r["requests_per_s"],
                         "accepted_per_process": per,
                         "max_over_min": per[-1] / per[0] if per and per[0] else None,
                         "loop_sleeps_per_accept": sleeps / sum(per) if sum(per) else None,
                         "wakeups_per_accept": woken / accepted if accepted else None,
                         "empty_wakeups_per_accept": empty / accepted if accepted else None})
    print(f"\n--server-limit {args.processes}, {args.secs} s per load\n")
    print("| listeners | load | req/s | accepted per process | max/min | loop sleeps per accepted connection | listener events per accepted connection | of which found nothing |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['max_over_min']:.2f}" if r["max_over_min"] else "–"
        wake = f"{r['wakeups_per_accept']:.2f}" if r["wakeups_per_accept"] is not None else "–"
        nothing = f"{r['empty_wakeups_per_accept']:.2f}" if r["empty_wakeups_per_accept"] is not None else "–"
        sleeps = f"{r['loop_sleeps_per_accept']:.2f}" if r["loop_sleeps_per_accept"] is not None else "–"
        print(f"| {r['listeners']} | {r['load']} | {r['req_per_s']:.0f} | "
              f"{' / '.join(map(str, r['accepted_per_process']))} | {ratio} | {sleeps} | {wake} | {nothing} |")
    return rows


def wakeups(args, work):
    root = docroot(work)
    rows = []
    for exclusive in ("on", "off"):
        server = Ours(root, work, ["--server-limit", str(args.processes), "--epoll-exclusive", exclusive])
        kids = server.pids()[1:]
        time.sleep(0.3)
        before = loop_sleeps(kids)
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            s.sendall(b"GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            while s.recv(65536):
                pass
            s.close()
            time.sleep(0.005)
        rows.append({"epoll_exclusive": exclusive,
                     "loop_sleeps_per_connection": (loop_sleeps(kids) - before) / 200})
        server.stop()
    print(f"\n--server-limit {args.processes}, 200 connections one at a time\n")
    print("| epoll-exclusive | loop wake-ups per connection (all processes) |")
    print("|---|---|")
    for r in rows:
        print(f"| {r['epoll_exclusive']} | {r['loop_sleeps_per_connection']:.2f} |")
    return rows


def scaling(args, work):
    root = docroot(work)
    rows = []
    for n in range(1, args.processes + 1):
        for load, close, conns in (("keep-alive", False, 50), ("close", True, 20)):
            server = Ours(root, work, ["--server-limit", str(n)], args.mpm)
            pids = server.pids()
            cpu0 = cpu_seconds(pids)
            sleeps0 = loop_sleeps(pids[1:])
            r = bench(server.url("/index.html"), conns, args.secs, close)
            cpu = cpu_seconds(pids) - cpu0
            sleeps = loop_sleeps(pids[1:]) - sleeps0
            server.stop()
            served = max(r["responses"], 1)
            rows.append({"processes": n, "load": load, "req_per_s": r["requests_per_s"],
                         "cpu_us_per_req": cpu * 1e6 / served,
                         "loop_sleeps_per_req": sleeps / served,
                         "p99_ms": r["latency_us"]["p99"] / 1000})
    print(f"\n--mpm {args.mpm}, {args.secs} s per load; CPU is the server tree's user+system time\n")
    # Loop sleeps per request: the inverse of how many requests a loop
    # serves per wake-up. More of them with more processes means less
    # batching per wake-up.
    print("| serving processes | load | req/s | CPU us/req | loop sleeps/req | p99 ms |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['processes']} | {r['load']} | {r['req_per_s']:.0f} | {r['cpu_us_per_req']:.2f} | "
              f"{r['loop_sleeps_per_req']:.3f} | {r['p99_ms']:.2f} |")
    return rows


def nginx(root, work):
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(binary):
        return None, None
    port = free_port()
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""
worker_processes auto;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 60;
  keepalive_requests 1000000000;
  client_body_temp_path {work}/body;
  proxy_temp_path {work}/proxy;
  fastcgi_temp_path {work}/fastcgi;
  uwsgi_temp_path {work}/uwsgi;
  scgi_temp_path {work}/scgi;
  server {{ listen 127.0.0.1:{port} backlog=4096; root {root}; }}
}}
""")
    proc = subprocess.Popen([binary, "-c", conf, "-g", "daemon off;"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    wait_listening(port, proc)
    return proc, port


def download(port, done, got, i):
    """GET /huge.bin again and again, as fast as it reads, until `done`."""
    buf = bytearray(1 << 20)
    while not done.is_set():
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"GET /huge.bin HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        while not done.is_set():
            n = s.recv_into(buf)
            if n == 0:
                break
            got[i] += n
        s.close()


def fairness_round(base, secs):
    """One server's round: small requests alone, then beside 8 downloads."""
    alone = bench(base + "/index.html", 50, secs)
    port = int(base.rsplit(":", 1)[1])
    done = threading.Event()
    got = [0] * 8
    downloaders = [threading.Thread(target=download, args=(port, done, got, i)) for i in range(8)]
    for d in downloaders:
        d.start()
    time.sleep(1)
    start = sum(got)
    t0 = time.time()
    beside = bench(base + "/index.html", 50, secs)
    rate = (sum(got) - start) / (time.time() - t0)
    done.set()
    for d in downloaders:
        d.join()
    return {"p99_alone_ms": alone["latency_us"]["p99"] / 1000,
            "p99_beside_ms": beside["latency_us"]["p99"] / 1000,
            "p50_beside_ms": beside["latency_us"]["p50"] / 1000,
            "req_per_s_beside": beside["requests_per_s"],
            "download_mib_per_s": rate / (1 << 20)}


def fairness(args, work):
    root = docroot(work)
    with open(os.path.join(root, "huge.bin"), "wb") as f:
        f.truncate(1 << 30)
    servers = []
    ours = Ours(root, work, args.ours_flag)
    label = " ".join(["ours-event", *args.ours_flag])
    servers.append((label, ours.url(""), ours.stop))
    proc, port = nginx(root, work)
    if proc is None:
        print("nginx is not installed: only ours is measured (bench/peers.py --install installs it)")
    else:
        def stop_nginx(p=proc):
            os.killpg(p.pid, signal.SIGTERM)
            p.wait()
        servers.append(("nginx", f"http://127.0.0.1:{port}", stop_nginx))
    rows = []
    # Taking turns, round after round: a burst of noise on this shared
    # machine then lands on one round of one server, not on all of its.
    for rnd in range(args.rounds):
        for name, base, _ in servers:
            rows.append({"server": name, "round": rnd + 1, **fairness_round(base, args.secs)})
    for _, _, stop in servers:
        stop()
    print(f"\nsmall page keep-alive, -c 50, {args.secs} s; beside 8 clients downloading 1 GiB; "
          f"{args.rounds} rounds, servers taking turns\n")
    print("| server | p99 ms alone | p99 ms beside the downloads | p50 ms beside | req/s beside "
          "| downloads MiB/s |")
    print("|---|---|---|---|---|---|")
    keys = ("p99_alone_ms", "p99_beside_ms", "p50_beside_ms", "req_per_s_beside", "download_mib_per_s")
    for name, _, _ in servers:
        mine = [r for r in rows if r["server"] == name]
        med = {k: statistics.median(r[k] for r in mine) for k in keys}
        print(f"| {name} (median) | {med['p99_alone_ms']:.2f} | {med['p99_beside_ms']:.2f} | "
              f"{med['p50_beside_ms']:.2f} | {med['req_per_s_beside']:.0f} | {med['download_mib_per_s']:.0f} |")
    for r in rows:
        print(f"| {r['server']} round {r['round']} | {r['p99_alone_ms']:.2f} | {r['p99_beside_ms']:.2f} | "
              f"{r['p50_beside_ms']:.2f} | {r['req_per_s_beside']:.0f} | {r['download_mib_per_s']:.0f} |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["balance", "wakeups", "scaling", "fairness"])
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 2,
                    help="serving processes (balance), or the most tried (scaling)")
    ap.add_argument("--secs", type=int, default=5, help="seconds per load")
    ap.add_argument("--ours-flag", action="append", default=[],
                    help="fairness: a flag for ours (repeat: --ours-flag=--server-limit --ours-flag=1)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="fairness: rounds the servers take turns in (medians reported)")
    ap.add_argument("--mpm", default="event", choices=["event", "worker"],
                    help="scaling: the model measured (worker, to see whether more processes help it)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    if not os.path.exists(MPM):
        sys.exit(f"{MPM} is missing: cargo build --release -p mpm --bin mpm")
    with tempfile.TemporaryDirectory(prefix="mpm-scaling-") as work:
        # nginx's workers run as an unprivileged user: let them read it.
        os.chmod(work, 0o755)
        rows = {"balance": balance, "wakeups": wakeups, "scaling": scaling,
                "fairness": fairness}[args.what](args, work)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
