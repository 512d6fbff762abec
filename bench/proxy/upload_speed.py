#!/usr/bin/env python3
"""How fast one large upload goes through `mpm serve --proxy`, and the serving process's peak RSS.

  python3 bench/proxy/upload_speed.py --ours target/release/mpm
  python3 bench/proxy/upload_speed.py --ours target/release/mpm --mpm event,uring --mib 1024 --runs 2

For each MPM: an origin in this script (a thread per connection that reads each request's body,
Content-Length or chunked, drops it and answers its length), `OURS serve --mpm M --server-limit 1
--proxy /=ORIGIN --limit-request-body 2^31-1`, then `curl -T -` of MIB MiB of zeros, once announced
(Content-Length) and once chunked, RUNS times each: seconds per upload, and the serving process's
VmHWM at the end (its peak resident memory). Under event and uring the proxy's future reads the
upload as it arrives (HttpHandler::awaits_body); under worker and prefork a thread does.

Needs curl. The origin is Python: its own speed bounds the figures (compare MPMs, and builds, in
one run).
"""
import argparse
import os
import socket
import subprocess
import sys
import threading
import time


def origin(listener):
    def serve(conn):
        f = conn.makefile("rb")
        while True:
            line = f.readline()
            if not line:
                return
            fields = {}
            while True:
                h = f.readline()
                if h in (b"\r\n", b""):
                    break
                name, _, value = h.partition(b":")
                fields[name.strip().lower()] = value.strip()
            got = 0
            if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
                while True:
                    size = int(f.readline().split(b";")[0], 16)
                    if size == 0:
                        while f.readline() not in (b"\r\n", b""):
                            pass
                        break
                    left = size
                    while left:
                        b = f.read(min(left, 1 << 16))
                        if not b:
                            return
                        left -= len(b)
                        got += len(b)
                    f.readline()
            else:
                n = int(fields.get(b"content-length", b"0"))
                while got < n:
                    b = f.read(min(n - got, 1 << 16))
                    if not b:
                        return
                    got += len(b)
            body = b"%d\n" % got
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def child_hwm_kib(master):
    try:
        with open(f"/proc/{master}/task/{master}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        return None
    peak = 0
    for k in kids:
        try:
            with open(f"/proc/{k}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
    return peak


def upload(port, size, chunked):
    fields = [] if chunked else ["-H", f"Content-Length: {size}", "-H", "Transfer-Encoding:"]
    head = subprocess.Popen(["head", "-c", str(size), "/dev/zero"], stdout=subprocess.PIPE)
    t0 = time.time()
    out = subprocess.run(["curl", "-s", "-T", "-", "-X", "POST", *fields, f"http://127.0.0.1:{port}/up"],
                         stdin=head.stdout, capture_output=True, timeout=600)
    took = time.time() - t0
    head.wait()
    got = out.stdout.decode(errors="replace").strip()
    if got != str(size):
        sys.exit(f"the origin got {got!r}, not {size} bytes")
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True, help="the mpm binary")
    ap.add_argument("--mpm", default="event,uring,worker", help="comma list of MPMs")
    ap.add_argument("--mib", type=int, default=1024, help="MiB per upload")
    ap.add_argument("--runs", type=int, default=2, help="uploads of each framing per MPM")
    args = ap.parse_args()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    threading.Thread(target=origin, args=(listener,), daemon=True).start()
    up = listener.getsockname()[1]
    size = args.mib << 20
    print(f"| MPM | {args.mib} MiB, Content-Length: s | chunked: s | peak RSS of the serving process MiB |")
    print("|---|---|---|---|")
    for mpm in args.mpm.split(","):
        port = free_port()
        server = subprocess.Popen([args.ours, "serve", "--mpm", mpm, "--listen", f"127.0.0.1:{port}",
                                   "--server-limit", "1", "--proxy", f"/=http://127.0.0.1:{up}",
                                   "--limit-request-body", str((1 << 31) - 1)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 20
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.time() > deadline or server.poll() is not None:
                        sys.exit(f"mpm serve --mpm {mpm} did not listen")
                    time.sleep(0.05)
            announced = [upload(port, size, False) for _ in range(args.runs)]
            chunked = [upload(port, size, True) for _ in range(args.runs)]
            hwm = child_hwm_kib(server.pid)
            print(f"| {mpm} | {', '.join(f'{t:.2f}' for t in announced)} | "
                  f"{', '.join(f'{t:.2f}' for t in chunked)} | {hwm / 1024 if hwm else float('nan'):.1f} |",
                  flush=True)
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
