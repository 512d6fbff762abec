#!/usr/bin/env python3
"""TechEmpower-style plaintext and JSON: an mpm-based server against the Rust servers users would
pick instead (actix-web 4, axum 0.8 on tokio + hyper 1, may_minihttp), measured in one run.

  python3 bench/rust_peers/rust_peers.py --ours target/release/examples/techempower

'ours' is any mpm-based binary that answers, as TechEmpower's rules ask (Server and Date headers,
Content-Type, Content-Length):
  GET /plaintext  -> 200 text/plain        "Hello, World!"
  GET /json       -> 200 application/json  {"message":"Hello, World!"}
It is started as `OURS serve --mpm MPM --listen 127.0.0.1:PORT` plus the flags in OURS_FLAGS below
(only what 256 held connections need from the blocking models); the event and uring MPMs run on
their defaults. --mpms defaults to prefork,worker,event, plus uring when `OURS serve --mpm uring
--help` exits 0 (otherwise one line on stderr says why ours-uring is skipped).
The peers run one worker per CPU. Loads, with wrk -t1 -c256 (as TechEmpower, one client thread here
since the client shares this machine): /plaintext pipelined 16 deep (pipeline.lua), /plaintext,
/json. Prints a Markdown table; --json FILE writes the figures. Needs wrk and cargo (the peers are
built on first use into --target-dir, a few minutes).
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIN = b"Hello, World!"
JSON = b'{"message":"Hello, World!"}'
# Blocking models hold one connection per process or thread: give them room for 256.
OURS_FLAGS = {
    "prefork": ["--max-request-workers", "300", "--start-servers", "300", "--min-spare", "16",
                "--max-spare", "300"],
    "worker": ["--max-request-workers", "300"],
    "event": [],
    "uring": [],
}
COMMON = ["--max-keepalive-requests", "0", "--status-path", "off", "--backlog", "4096"]


def get(port, path):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("closed before the head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
    need = int(m.group(1)) if m else 0
    while len(body) < need:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("closed mid-body")
        body += chunk
    s.close()
    return head, body


def start(argv, port, env=None):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    deadline = time.time() + 20
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[0]} exited early ({proc.returncode})")
        try:
            get(port, "/plaintext")
            return proc
        except OSError:
            time.sleep(0.1)
    stop(proc)
    raise RuntimeError(f"{argv[0]} did not answer on {port}")


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def wrk(port, path, secs, depth=None):
    argv = ["wrk", "-t1", "-c256", f"-d{secs}s", "--latency", "-H", "Connection: keep-alive"]
    if depth:
        argv += ["-s", os.path.join(HERE, "pipeline.lua")]
    argv.append(f"http://127.0.0.1:{port}{path}")
    if depth:
        argv += ["--", str(depth)]
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    m = re.search(r"Requests/sec:\s*([\d.]+)", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    errors = re.findall(r"(Non-2xx or 3xx responses: \d+|Socket errors: .*)", out)
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    return {"rps": float(m.group(1)) if m else None,
            "p99_ms": float(p99.group(1)) * scale[p99.group(2)] if p99 else None,
            "errors": "; ".join(errors)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", help="an mpm-based binary serving /plaintext and /json")
    ap.add_argument("--mpms", help="which MPMs of ours to run (default: prefork,worker,event, and uring "
                                   "where OURS accepts --mpm uring)")
    ap.add_argument("--only", help="comma list of server names to run (ours-event, actix, axum, may)")
    ap.add_argument("--secs", type=int, default=5, help="seconds per wrk run")
    ap.add_argument("--target-dir", default=os.path.expanduser("~/.cache/mpm-rust-peers"),
                    help="where the peers are built")
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args()

    r = subprocess.run(["cargo", "build", "--release", "-q", "--manifest-path",
                        os.path.join(HERE, "Cargo.toml"), "--target-dir", args.target_dir])
    if r.returncode != 0:
        sys.exit("could not build the peers")
    rel = os.path.join(args.target_dir, "release")
    workers = str(os.cpu_count())
    plan, port = [], 18600
    if args.ours:
        ours = os.path.abspath(args.ours)
        mpms = args.mpms.split(",") if args.mpms else ["prefork", "worker", "event"]
        if not args.mpms:
            probe = subprocess.run([ours, "serve", "--mpm", "uring", "--help"], capture_output=True, text=True)
            if probe.returncode == 0:
                mpms.append("uring")
            else:
                why = (probe.stderr.strip() or probe.stdout.strip()).splitlines() or ["no output"]
                print(f"# ours-uring skipped: `{args.ours} serve --mpm uring --help` exited {probe.returncode}: "
                      f"{why[0][:160]}", file=sys.stderr, flush=True)
        for mpm in mpms:
            plan.append((f"ours-{mpm}", lambda p, m=mpm: ([ours, "serve", "--mpm", m, "--listen", f"127.0.0.1:{p}",
                                                           *COMMON, *OURS_FLAGS.get(m, [])], None)))
    for name, binary in (("actix", "te-actix"), ("axum", "te-axum"), ("may", "te-may")):
        plan.append((name, lambda p, b=binary: ([os.path.join(rel, b)],
                                                {**os.environ, "PORT": str(p), "WORKERS": workers})))
    if args.only:
        keep = set(args.only.split(","))
        plan = [x for x in plan if x[0] in keep]

    results = {}
    for name, build in plan:
        port += 1
        argv, env = build(port)
        row = {}
        try:
            proc = start(argv, port, env)
            try:
                time.sleep(1)  # let a prefork server finish forking
                for path, want in (("/plaintext", PLAIN), ("/json", JSON)):
                    head, body = get(port, path)
                    if not head.startswith(b"HTTP/1.1 200") or body != want:
                        raise RuntimeError(f"{path} answered {head[:40]!r} {body[:60]!r}")
                    for field in (b"\r\nserver:", b"\r\ndate:", b"\r\ncontent-length:", b"\r\ncontent-type:"):
                        if field not in head.lower():
                            raise RuntimeError(f"{path} lacks the {field.decode().strip()} header")
                wrk(port, "/plaintext", 1)  # warm-up
                row["pipelined"] = wrk(port, "/plaintext", args.secs, depth=16)
                row["plaintext"] = wrk(port, "/plaintext", args.secs)
                row["json"] = wrk(port, "/json", args.secs)
            finally:
                stop(proc)
        except Exception as e:  # a server that fails is reported, not fatal
            row["error"] = repr(e)
        results[name] = row
        print(f"# {name}: {json.dumps(row)}", file=sys.stderr, flush=True)

    print(f"wrk -t1 -c256 -d{args.secs}s; {os.cpu_count()} CPUs; load average before the last run "
          f"{open('/proc/loadavg').read().split()[0]}")
    print("| server | plaintext pipelined 16 req/s | p99 ms | plaintext req/s | p99 ms | json req/s | p99 ms | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for name, row in results.items():
        if "error" in row:
            print(f"| {name} | error: {row['error'][:90]} | | | | | | |")
            continue
        cells = []
        for k in ("pipelined", "plaintext", "json"):
            cells += [f"{row[k]['rps']:.0f}" if row[k]["rps"] else "?", str(row[k]["p99_ms"])]
        errs = "; ".join(f"{k}: {row[k]['errors']}" for k in ("pipelined", "plaintext", "json") if row[k]["errors"])
        print(f"| {name} | " + " | ".join(cells) + f" | {errs} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
