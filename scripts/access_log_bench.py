#!/usr/bin/env python3
"""What an access log costs, end to end: `mpm serve` with the log off, unbuffered
by writev, unbuffered by copy+write, and buffered, against nginx with its access
log off, on, and buffered, in the same run, with wrk.

Needs wrk and nginx (apt-get install wrk nginx-light); not part of the tests.

    cargo build --release -p mpm --bin mpm
    python3 scripts/access_log_bench.py --mpm event --secs 5 --rounds 2

Each configuration serves the same 1456-byte page on a keep-alive connection
(wrk -t2 -c50) and is run `--rounds` times, interleaved; the table gives the
best round's req/s and the least server CPU time per request (user+system of
the server's processes, from /proc, over the requests wrk completed), which
other load on a shared machine disturbs far less than req/s.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PAGE = 1456


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not listen")


def cpu_ticks(pid):
    """User+system clock ticks of a process and its children (nginx workers)."""
    total = 0
    pids = [pid]
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(c) for c in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


def nginx_argv(port, root, work, log):
    if log == "off":
        access = "access_log off;"
    elif log == "on":
        access = f"access_log {work}/access.log combined;"
    else:
        access = f"access_log {work}/access.log combined buffer=64k flush=1s;"
    conf = f"""
worker_processes {os.cpu_count()};
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  include /etc/nginx/mime.types;
  {access}
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 60;
  keepalive_requests 1000000000;
  open_file_cache max=100 inactive=20s;
  open_file_cache_valid 1s;
  client_body_temp_path {work}/body;
  proxy_temp_path {work}/proxy;
  fastcgi_temp_path {work}/fastcgi;
  uwsgi_temp_path {work}/uwsgi;
  scgi_temp_path {work}/scgi;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    root {root};
  }}
}}
"""
    path = os.path.join(work, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    return ["nginx", "-c", path, "-g", "daemon off;"]


def ours_argv(binary, mpm, port, root, work, log):
    argv = [binary, "serve", "--mpm", mpm, "--listen", f"127.0.0.1:{port}", "--docroot", root,
            "--max-request-workers", "64"]
    if log == "off":
        return argv
    argv += ["--access-log", f"{work}/access.log", "--log-format", "combined"]
    if log == "writev":
        argv += ["--log-write", "writev", "--log-buffer", "0"]
    elif log == "copy":
        argv += ["--log-write", "copy", "--log-buffer", "0"]
    else:
        argv += ["--log-buffer", "65536"]
    return argv


def run_one(name, argv_for, secs, root):
    work = tempfile.mkdtemp(prefix="mpm-log-bench-")
    port = free_port()
    proc = subprocess.Popen(argv_for(port, work), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        url = f"http://127.0.0.1:{port}/page.html"
        subprocess.run(["wrk", "-t2", "-c50", "-d1s", url], capture_output=True)  # warm up
        before = cpu_ticks(proc.pid)
        out = subprocess.run(["wrk", "-t2", "-c50", f"-d{secs}s", url], capture_output=True,
                             text=True).stdout
        ticks = cpu_ticks(proc.pid) - before
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        requests = int(re.search(r"(\d+) requests in", out).group(1))
        us_per_req = ticks * 1e6 / os.sysconf("SC_CLK_TCK") / max(requests, 1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    log = os.path.join(work, "access.log")
    lines = sum(1 for _ in open(log, "rb")) if os.path.exists(log) else 0
    shutil.rmtree(work, ignore_errors=True)
    return rps, us_per_req, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ours", default="target/release/mpm")
    ap.add_argument("--mpm", default="event")
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="mpm-log-bench-root-")
    with open(os.path.join(root, "page.html"), "wb") as f:
        f.write(b"x" * PAGE)
    binary = os.path.abspath(args.ours)
    plan = [(f"ours-{args.mpm} log {log}",
             (lambda log: lambda p, w: ours_argv(binary, args.mpm, p, root, w, log))(log))
            for log in ["off", "writev", "copy", "buffered"]]
    if shutil.which("nginx"):
        plan += [(f"nginx log {log}", (lambda log: lambda p, w: nginx_argv(p, root, w, log))(log))
                 for log in ["off", "on", "buffered"]]
    best = {}
    for _ in range(args.rounds):
        for name, argv_for in plan:
            rps, cpu, lines = run_one(name, argv_for, args.secs, root)
            print(f"{name:28} {rps:10.0f} req/s {cpu:6.2f} us CPU/req  {lines} log lines",
                  file=sys.stderr)
            old = best.get(name)
            best[name] = (max(rps, old[0]) if old else rps, min(cpu, old[1]) if old else cpu)
    base_rps, base_cpu = best[plan[0][0]]
    print("| server | log | req/s (best) | vs ours, log off | server CPU us/req (least) | vs ours, log off |")
    print("|---|---|---|---|---|---|")
    for name, _ in plan:
        rps, cpu = best[name]
        server, log = name.split(" log ")
        print(f"| {server} | {log} | {rps:.0f} | {rps / base_rps:.2f} | {cpu:.2f} | {cpu / base_cpu:.2f} |")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
