#!/usr/bin/env python3
"""User-space instructions per proxied request, counted by callgrind: a yardstick that does not
move with the machine's noise (the same binary and load give the same count, within a fraction of a
percent, whatever else runs), for work that a req/s or CPU-time ratio cannot resolve.

  python3 bench/proxy/proxy_instructions.py --build
  python3 bench/proxy/proxy_instructions.py --ours target/callgrind/release/mpm --top 30

Each server (nginx, the floor, ours under one MPM) runs under `valgrind --tool=callgrind` with one
serving process (nginx: `master_process off`, one worker; ours: `--server-limit 1`), proxying / to
upstream/ (1456-byte answers at once). A client sends N keep-alive GETs, one at a time, over 4
connections, reconnecting when the server closes one; the count is taken twice, after --small and
after --large requests, and the difference divided by the difference of requests, so start-up and
shutdown are not counted. Only user space is counted (callgrind does not see the kernel): compare
with proxy_cost.py's `user` column, not its total. One request at a time means a loop turn per
event: loop overhead that wrk's concurrency would spread over several requests is counted whole
here.

`hot code KiB` is the code a request runs through: the 64-byte lines holding the instructions run at
least once every other request. It shares the CPU's caches with the kernel's work for the request;
footprint.py measures what that costs the kernel (little, against what user time itself costs it).

Ours needs a build with rustix's libc backend (its own vDSO lookup faults under valgrind):
`--build` makes one in target/callgrind (RUSTFLAGS="--cfg rustix_use_libc", the release profile).
Needs valgrind (callgrind_annotate with it) and, for the nginx row, nginx (proxy_peers.py --install).
"""

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import proxy_peers as pp  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
CG_TARGET = os.path.join(ROOT, "target", "callgrind")
REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def client(port, n, conns=4):
    """n keep-alive GETs, one at a time, round-robin over conns connections."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(conns)]

    def one(k, again=True):
        s = socks[k]
        s.sendall(REQUEST)
        buf = b""
        while True:
            got = s.recv(65536)
            if not got:  # closed (a keep-alive limit): once more on a new connection
                s.close()
                socks[k] = socket.create_connection(("127.0.0.1", port))
                if not again:
                    raise RuntimeError("the server closed a new connection without answering")
                return one(k, again=False)
            buf += got
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                continue
            head = buf[:end].decode("latin-1").lower()
            m = re.search(r"\r\ncontent-length:\s*(\d+)", head)
            if not m:
                raise RuntimeError("an answer without Content-Length: " + head[:200])
            while len(buf) < end + 4 + int(m.group(1)):
                more = s.recv(65536)
                if not more:
                    raise RuntimeError("the server closed in the middle of a body")
                buf += more
            if "\r\nconnection: close" in head:
                s.close()
                socks[k] = socket.create_connection(("127.0.0.1", port))
            return

    for i in range(n):
        one(i % conns)
    for s in socks:
        s.close()


def wait_ready(port, proc, log, secs=60):
    deadline = time.time() + secs
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited {proc.returncode}: {tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(12).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"not answering 200 on port {port} after {secs} s: {tail(log)}")


def tail(path):
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip() and not line.startswith("==")]
        return " | ".join(lines[-3:])[-400:]
    except OSError:
        return ""


def totals(path):
    """(total instructions, {function: exclusive instructions}) of one callgrind output."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", path],
                         capture_output=True, text=True).stdout
    total, funcs = None, {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(\S.*)", line)
        if not m:
            continue
        value, name = int(m.group(1).replace(",", "")), m.group(2)
        if "PROGRAM TOTALS" in name:
            total = value
        elif not name.startswith(("=>", "*")):
            name = re.sub(r"^[^ ]*?/[^ ]*?:(?=\S)", "", name)  # the source file, kept: the function
            name = re.sub(r" \[[^\]]*\]$", "", name)
            funcs[name] = funcs.get(name, 0) + value
    if total is None:
        raise RuntimeError(f"callgrind_annotate read no totals from {path}")
    return total, funcs


def executed(path):
    """{instruction address: times executed} of one callgrind output written with --dump-instr=yes
    (addresses are absolute, relative to the line before (+N, -N) or the same (*); the line after a
    `calls=` line is the call's inclusive cost, not an instruction's own)."""
    counts, last, positions, after_call = {}, [], ["instr"], False
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("positions:"):
                positions = line.split()[1:]
                last = [0] * len(positions)
                continue
            if not line or not (line[0].isdigit() or line[0] in "+-*"):
                after_call = after_call or line.startswith("calls=")
                continue
            parts = line.split()
            for i in range(len(positions)):
                t = parts[i]
                last[i] = (last[i] if t == "*" else last[i] + int(t[1:], 0) if t[0] == "+"
                           else last[i] - int(t[1:], 0) if t[0] == "-" else int(t, 0))
            if after_call:
                after_call = False
            elif len(parts) > len(positions):
                counts[last[0]] = counts.get(last[0], 0) + int(parts[len(positions)])
    return counts


def hot_code_kib(small, large, requests):
    """KiB of the 64-byte cache lines holding the instructions run at least once every other request
    between the two counts: the code a request passes through, which it shares with the kernel in
    the CPU's caches (the larger it is, the more the kernel's own work a request misses in them)."""
    a, b = executed(small), executed(large)
    lines = {k >> 6 for k, v in b.items() if v - a.get(k, 0) >= requests / 2}
    return len(lines) * 64 / 1024


def count(name, argv, port, n, work):
    """The callgrind output (path) of the serving process after n requests."""
    out_dir = tempfile.mkdtemp(prefix=f"{name}-{n}-", dir=work)
    log = os.path.join(out_dir, "log")
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--dump-instr=yes",
           f"--callgrind-out-file={out_dir}/cg.%p"] + argv
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=f, start_new_session=True)
    try:
        wait_ready(port, proc, log)
        client(port, n)
    finally:
        # nginx writes its profile on SIGQUIT (a graceful stop), mpm on SIGTERM (its fast stop).
        os.killpg(proc.pid, 3 if name == "nginx" else 15)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
    if "SIGSEGV" in open(log, errors="replace").read():
        raise RuntimeError("a process died of SIGSEGV under valgrind (ours: build with --build, "
                           "which uses rustix's libc backend)")
    outs = [os.path.join(out_dir, f) for f in os.listdir(out_dir) if f.startswith("cg.")]
    if not outs:
        raise RuntimeError("callgrind wrote no output: " + tail(log))
    # The serving process is the one that ran the most instructions.
    return max(outs, key=lambda p: totals(p)[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", help="an mpm binary built with RUSTFLAGS='--cfg rustix_use_libc'")
    ap.add_argument("--build", action="store_true", help="build that binary in target/callgrind and use it")
    ap.add_argument("--only", default="nginx,floor,ours-event",
                    help="servers, comma-separated (nginx, floor, ours-prefork, ours-worker, ours-event, ours-uring)")
    ap.add_argument("--small", type=int, default=1000, help="requests of the first count")
    ap.add_argument("--large", type=int, default=11000, help="requests of the second count")
    ap.add_argument("--port", type=int, default=18350,
                    help="the proxy's port; the origin's is PORT + 645 (runs at once need ports of their own)")
    ap.add_argument("--top", type=int, default=0, help="list each server's N costliest functions (exclusive)")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep the callgrind outputs in DIR (a new directory) for callgrind_annotate")
    args = ap.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        sys.exit("needs valgrind (Debian's valgrind package)")
    if args.large <= args.small:
        sys.exit("--large must be more than --small")
    if args.build:
        env = dict(os.environ, RUSTFLAGS="--cfg rustix_use_libc", CARGO_TARGET_DIR=CG_TARGET)
        r = subprocess.run(["cargo", "build", "--release", "-q", "-p", "mpm"], cwd=ROOT, env=env)
        if r.returncode != 0:
            sys.exit("the build failed")
        args.ours = os.path.join(CG_TARGET, "release", "mpm")
    pp.ensure_upstream()
    if args.keep:
        os.makedirs(args.keep)  # a new directory: an error if it exists, so no run's files mix
        work = os.path.abspath(args.keep)
    else:
        work = tempfile.mkdtemp(prefix="proxy-instructions-")
    os.chmod(work, 0o755)
    port, up_port = args.port, args.port + 645

    def nginx_argv():
        argv, _ = pp.nginx_conf(port, up_port, work, 64)
        conf = argv[argv.index("-c") + 1]
        with open(conf) as f:
            text = f.read().replace("worker_processes auto;", "worker_processes 1;\nmaster_process off;")
        with open(conf, "w") as f:
            f.write(text)
        for d in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(work, d), exist_ok=True)
        return argv

    plan = {"nginx": nginx_argv,
            "floor": lambda: [pp.floor_cmd(work, port, up_port)[0][0], str(port), str(up_port), "1"]}
    if args.ours:
        binary = os.path.abspath(args.ours)
        for mpm in ("prefork", "worker", "event", "uring"):
            plan[f"ours-{mpm}"] = lambda m=mpm: [binary, "serve", "--mpm", m, "--listen", f"127.0.0.1:{port}",
                                                 "--proxy", f"/=http://127.0.0.1:{up_port}",
                                                 "--server-limit", "1", "--start-servers", "1"]
    wanted = args.only.split(",")
    unknown = [w for w in wanted if w not in plan]
    if unknown:
        sys.exit(f"unknown server {', '.join(unknown)}: choose from {', '.join(plan)} (ours-* need --ours or --build)")
    rows = {}
    try:
        with pp.Upstream(up_port, 2, 0, pp.SMALL, work):
            for name in wanted:
                print(f"# {name}", file=sys.stderr, flush=True)
                try:
                    argv = plan[name]()
                    small = count(name, argv, port, args.small, work)
                    large = count(name, argv, port, args.large, work)
                    a, b = totals(small), totals(large)
                    per = args.large - args.small
                    funcs = {k: (b[1].get(k, 0) - a[1].get(k, 0)) / per for k in set(a[1]) | set(b[1])}
                    rows[name] = ((b[0] - a[0]) / per, funcs, hot_code_kib(small, large, per))
                except Exception as e:  # a server that fails is reported, not fatal
                    rows[name] = (None, repr(e)[:300])
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    base = rows.get("nginx", (None,))[0]
    code = rows.get("nginx", (None, None, None))[2]
    print(f"User-space instructions per proxied request (callgrind; one serving process; "
          f"{args.large} - {args.small} requests, one at a time, keep-alive)")
    print("| server | instructions/request | to nginx | hot code KiB | to nginx |")
    print("|---|---|---|---|---|")
    for name, (per, extra, *kib) in rows.items():
        if per is None:
            print(f"| {name} | {extra} | | | |")
            continue
        ratio = f"{per / base:.2f}x" if base else ""
        kratio = f"{kib[0] / code:.2f}x" if code else ""
        print(f"| {name} | {per:,.0f} | {ratio} | {kib[0]:.1f} | {kratio} |")
    if args.top:
        for name, (per, funcs, *_) in rows.items():
            if per is None:
                continue
            print(f"\n{name}: the {args.top} costliest functions, instructions per request (exclusive)")
            for k, v in sorted(funcs.items(), key=lambda kv: -kv[1])[:args.top]:
                print(f"{v:8.0f}  {k[:140]}")


if __name__ == "__main__":
    main()
