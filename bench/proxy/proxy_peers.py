#!/usr/bin/env python3
"""Side-by-side benchmark of reverse proxies: `mpm serve --proxy` against nginx and Apache httpd's
three MPMs, every one forwarding everything to the same origin, measured in one run.

  python3 bench/proxy/proxy_peers.py --ours target/release/mpm
  python3 bench/proxy/proxy_peers.py --only nginx,apache-event --secs 2 --slow-conns 300 --waiting 300
  python3 bench/proxy/proxy_peers.py --ours target/release/mpm --scenarios uploading --uploading 1000

The origin is upstream/ (a small Rust epoll server, built here with cargo on first use or with
--build): one per scenario, started with that scenario's delay and body size, counting the
connections it accepts and the requests it gets. Each proxy is started afresh for each scenario
with its own port, forwarding / to that origin. Clients are wrk and a selector-based Python client;
the figures are ratios that hold on a noisy machine (the origin and the clients share it).

Scenarios:
  fast     origin answers at once, 1456 bytes; wrk -t1 -c50 keep-alive, --secs: req/s, p99, CPU us per
           request of the proxy's processes (not the origin's, not wrk's; perf's syscalls per request
           too where perf works), origin connections opened per 1,000 requests (reuse of connections
           to the origin: near 0 when the proxy keeps them alive, 1000 when it does not)
  big      origin answers at once, 1 MiB; wrk -t1 -c10: req/s
  slow     origin answers after 100 ms, 1456 bytes; wrk -t1 -c SLOW_CONNS --timeout 10s: req/s against
           the ceiling SLOW_CONNS / 0.1 s, p99, mid-run the proxy's processes, threads and PSS, and
           origin connections opened per 1,000 requests over the run's second half
  waiting  origin answers after 10 s; WAITING connections each send one GET and wait. 3 s later (or
           later while requests are still reaching the origin, at most 8 s after the first is sent)
           the proxy's PSS, threads and processes against its idle figures, per request that reached
           the origin: KiB and threads per waiting request. Then the connections are closed.
  uploading  (not in the default list) UPLOADING connections each send a POST announcing a
           1,000,000-byte body and its first 96 KiB, then send nothing more: uploads from slow
           clients, each past what a proxy reads into memory first (nginx's client_body_buffer_size,
           ours' 64 KiB). 3 s after the last byte went out, the proxy's PSS, threads and processes
           against its idle figures, per upload it holds (a client connection it accepted; one in
           its listen queue costs it nothing yet): KiB and threads per slow upload, and the requests
           the origin got meanwhile (nginx spools what came to a file and calls the origin once the
           body is whole, so never here; httpd and ours stream it; the floor relays the origin's
           answer, which comes with the head, so its uploads end early). Then the connections close.
Each wrk load is preceded by a 1 s warm-up with the same load.

--rounds N runs fast and big N times, the servers in turn (in reverse order every other round), and
shows each server's medians; fast then also gets a table of each round's ratios to nginx's figures
of the same round (req/s, and the proxy's CPU per request), and their medians. The machine's speed
drifts between runs, and a ratio taken within one round is what holds.

Servers and their settings (workers W = max(SLOW_CONNS, WAITING, UPLOADING when run) + 64, as peers.py sizes for its idle
connections; prefork, httpd's and ours, is capped at 256 processes):
  nginx           worker_processes auto; upstream keepalive 64; proxy_http_version 1.1 with the
                  Connection header cleared; access_log off; worker_connections max(20000, 2W)
  apache-MPM      peers.py's httpd.conf for W workers (ServerLimit x ThreadsPerChild 25) plus mod_proxy,
                  mod_proxy_http and `ProxyPass "/" "http://127.0.0.1:UP/" enablereuse=on keepalive=On`
                  (keepalive= is TCP keep-alive; HTTP keep-alive to the origin is mod_proxy's default).
                  It starts small as in peers.py (it grows by 1, 2, 4 ... 32 processes a second) except
                  in slow, where every process starts at once (StartServers = ServerLimit), so that slow
                  measures the steady state rather than the climb; waiting measures the climb's cost
  ours-MPM        OURS serve --mpm MPM --listen 127.0.0.1:PORT --proxy /=http://127.0.0.1:UP
                  --max-request-workers W [--start-servers W --max-spare W: prefork, in slow]
                  [--ours-flag ...], for MPM in prefork, worker, event, and uring when
                  `OURS serve --mpm uring --help` exits 0; no access log (its default)
  floor           floor/ (built with cargo on first use): a byte relay, a thread per CPU, each client
                  connection with its own origin connection, no parsing. Not a proxy: the least
                  an epoll proxy can pay per request (2 recv, 2 send, a share of epoll_wait), so that
                  the other rows' CPU and req/s can be read against that floor measured in the same run
A server that exits while starting gets a row saying why ("not supported (exit 2: error: ...)")
instead of figures, and is not started again.

Needs: apt-get install -y wrk nginx-light apache2 apache2-utils (--install does it) and cargo.
Writes a Markdown table per scenario to stdout, progress to stderr and every figure to --json.
"""
import argparse
import errno
import json
import os
import re
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import peers  # noqa: E402  (bench/peers.py: Server, get, wrk, sh, apache_conf)

UPSTREAM_DIR = os.path.join(HERE, "upstream")
UPSTREAM_BIN = os.path.join(UPSTREAM_DIR, "target", "release", "upstream")
FLOOR_DIR = os.path.join(HERE, "floor")
SMALL, BIG = peers.SMALL, peers.BIG
PREFORK_CAP = 256
# scenario: (origin delay ms, body bytes)
SCENARIOS = {"fast": (0, SMALL), "big": (0, BIG), "slow": (100, SMALL), "waiting": (10_000, SMALL),
             "uploading": (0, SMALL)}
UPLOAD_LEN, UPLOAD_SENT = 1_000_000, 96 * 1024  # uploading: announced, and sent before the pause
WAIT_AT_LEAST, WAIT_AT_MOST = 3.0, 8.0  # waiting: seconds after sending (the origin answers at 10 s)


class StartFailed(Exception):
    """The server exited (or could not be run) while starting."""

    def __init__(self, rc, line):
        super().__init__(f"exit {rc}: {line}" if rc is not None else line)
        self.rc, self.line = rc, line


def first_line(path):
    try:
        with open(path, errors="replace") as f:
            return next((line.strip() for line in f if line.strip()), "")
    except OSError:
        return ""


class Proxy(peers.Server):
    """peers.Server with stderr kept apart, so that a server that exits while starting raises
    StartFailed with its exit code and first stderr line, and with a readiness check that fits a
    proxy: a GET through it must bring the origin's BODY bytes back, or, with body None (an origin
    too slow to ask), the port must accept and the process tree must stop growing."""

    def __init__(self, name, argv, port, work, body):
        super().__init__(name, argv, port, work)
        self.body = body

    def __enter__(self):
        err_path = os.path.join(self.work, "stderr.log")
        with open(os.path.join(self.work, "stdout.log"), "w") as out, open(err_path, "w") as err:
            try:
                self.proc = subprocess.Popen(self.argv, stdout=out, stderr=err, start_new_session=True)
            except OSError as e:
                raise StartFailed(None, f"cannot run {self.argv[0]}: {e.strerror}")
        try:
            self._ready(err_path)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        """peers.Server's stop, then a wait until the whole process group is gone (children outlive
        httpd's parent a little), so that the next server's PSS shares no pages with this one's."""
        super().__exit__(*exc)
        deadline = time.time() + 10
        try:
            while True:
                os.killpg(self.proc.pid, 0 if time.time() < deadline else signal.SIGKILL)
                time.sleep(0.1)
        except ProcessLookupError:
            pass

    def _ready(self, err_path):
        deadline, last = time.time() + 30, ""
        while time.time() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                raise StartFailed(rc, first_line(err_path) or first_line(os.path.join(self.work, "stdout.log")))
            try:
                if self.body is None:
                    socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
                    settle(self)
                    return
                status, body = peers.get(self.port, "/")
                if status == b"200" and len(body) == self.body:
                    return
                last = f"answered {status.decode()} with {len(body)} bytes"
            except OSError as e:
                last = repr(e)
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready on port {self.port}: {last}")


def settle(srv, least=1.0, most=6.0):
    """Waits (least..most s) until the server's process and thread counts hold still for 0.5 s."""
    t0 = time.time()
    time.sleep(least)
    last = srv.footprint()[2:]
    while time.time() - t0 < most:
        time.sleep(0.5)
        now = srv.footprint()[2:]
        if now == last:
            return
        last = now


class Upstream:
    """upstream/ serving one scenario's answers on 127.0.0.1:PORT; stats() reads its counters."""

    def __init__(self, port, threads, delay_ms, body, work):
        self.port = port
        self.argv = [UPSTREAM_BIN, str(port), str(threads), str(delay_ms), str(body)]
        self.stats_path = os.path.join(work, f"upstream-{port}.json")
        self.log = os.path.join(work, f"upstream-{port}.log")
        self.proc = None

    def __enter__(self):
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=log, start_new_session=True,
                                         env=dict(os.environ, UPSTREAM_STATS=self.stats_path))
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"upstream exited {self.proc.returncode}: {first_line(self.log)}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"upstream did not listen on port {self.port}")

    def __exit__(self, *exc):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def stats(self):
        """{"connections": accepted so far, "requests": request heads so far}, fresh: the file is
        removed, SIGUSR1 asks for it, and it is read once it is back (it is renamed into place)."""
        try:
            os.remove(self.stats_path)
        except FileNotFoundError:
            pass
        os.kill(self.proc.pid, signal.SIGUSR1)
        deadline = time.time() + 3
        while time.time() < deadline:
            try:
                with open(self.stats_path) as f:
                    return json.load(f)
            except (FileNotFoundError, ValueError):
                time.sleep(0.01)
        raise RuntimeError("upstream wrote no stats")


def nginx_conf(port, up, work, conns):
    wc = max(20000, 2 * conns + 512)  # each proxied request holds two connections
    conf = f"""
worker_processes auto;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
worker_rlimit_nofile {wc + 1024};
events {{ worker_connections {wc}; }}
http {{
  access_log off;
  keepalive_timeout 60;
  keepalive_requests 1000000000;
  client_body_temp_path {work}/body;
  proxy_temp_path {work}/proxy;
  fastcgi_temp_path {work}/fastcgi;
  uwsgi_temp_path {work}/uwsgi;
  scgi_temp_path {work}/scgi;
  upstream u {{
    server 127.0.0.1:{up};
    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{
      proxy_pass http://u;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
"""
    path = os.path.join(work, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    return ["/usr/sbin/nginx", "-c", path, "-g", "daemon off;"], \
        f"{os.cpu_count()} worker processes x {wc} connections; upstream keepalive 64"


def apache_conf(mpm, port, up, work, workers, prespawn):
    """peers.py's httpd.conf (its sizing for WORKERS) with mod_proxy appended; the docroot is unused."""
    argv = peers.apache_conf(mpm, port, work, work, workers)
    path = argv[-1]
    lines = [f"LoadModule proxy_module {peers.APACHE_MODS}/mod_proxy.so",
             f"LoadModule proxy_http_module {peers.APACHE_MODS}/mod_proxy_http.so",
             "ProxyRequests Off",
             f'ProxyPass "/" "http://127.0.0.1:{up}/" enablereuse=on keepalive=On']
    with open(path) as f:
        conf = f.read()
    size = {k: int(re.search(rf"^{k} (\d+)$", conf, re.M).group(1))
            for k in ("ServerLimit", "MaxRequestWorkers")}
    if prespawn:  # every process from the start (a later directive wins over peers.py's)
        lines += [f"StartServers {size['ServerLimit']}"]
        if mpm == "prefork":
            lines += [f"MaxSpareServers {size['ServerLimit']}"]
    with open(path, "a") as f:
        f.write("\n".join(lines) + "\n")
    start = re.findall(r"^StartServers (\d+)$", conf + "\n".join(lines), re.M)[-1]
    if mpm == "prefork":
        sizing = f"MaxRequestWorkers {size['MaxRequestWorkers']} processes"
    else:
        sizing = (f"ServerLimit {size['ServerLimit']} x ThreadsPerChild "
                  f"{size['MaxRequestWorkers'] // size['ServerLimit']} = MaxRequestWorkers {size['MaxRequestWorkers']}")
    return argv, f"{sizing}, StartServers {start}"


def ours_cmd(binary, mpm, port, up, workers, flags, prespawn):
    argv = [binary, "serve", "--mpm", mpm, "--listen", f"127.0.0.1:{port}",
            "--proxy", f"/=http://127.0.0.1:{up}", "--max-request-workers", str(workers)]
    if mpm == "prefork" and prespawn:  # as httpd prefork: every process from the start
        argv += ["--start-servers", str(workers), "--max-spare", str(workers)]
    return argv + flags, " ".join(argv[argv.index("--max-request-workers"):] + flags)


def ensure_upstream(rebuild=False):
    """Build upstream/ (the origin) with cargo if it is not built yet, or if asked; exit on failure.
    The other scripts here that start an origin call it too."""
    if rebuild or not os.path.exists(UPSTREAM_BIN):
        r = peers.sh(["cargo", "build", "--release", "-q", "--manifest-path", os.path.join(UPSTREAM_DIR, "Cargo.toml")])
        if r.returncode != 0:
            sys.exit("could not build upstream/: " + r.stderr[-500:])


def floor_cmd(base, port, up):
    """The byte relay, built with cargo into the run's work directory the first time it is asked for."""
    target = os.path.join(base, "floor-target")
    binary = os.path.join(target, "release", "floor")
    if not os.path.exists(binary):
        r = peers.sh(["cargo", "build", "--release", "-q", "--manifest-path", os.path.join(FLOOR_DIR, "Cargo.toml"),
                      "--target-dir", target])
        if r.returncode != 0:
            raise StartFailed(r.returncode, "could not build floor/: " + r.stderr.strip()[-200:])
    return [binary, str(port), str(up), str(os.cpu_count())], f"{os.cpu_count()} threads"


def parse_wrk(out):
    """wrk --latency's req/s, request count, p99 (ms) and error lines."""
    m = re.search(r"Requests/sec:\s*([\d.]+)", out)
    if not m:
        raise RuntimeError("wrk printed no figures: " + out[-300:])
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    errors = re.findall(r"(?:Non-2xx or 3xx responses|Socket errors): .*", out)
    return {"rps": float(m.group(1)), "requests": int(re.search(r"(\d+) requests in", out).group(1)),
            "p99_ms": float(p99.group(1)) * scale[p99.group(2)] if p99 else None,
            "errors": "; ".join(errors)}


def switches(pids):
    """(voluntary, involuntary) context switches summed over the threads of pids, from
    /proc/PID/task/*/status (proxy_cost.py and loops.py read them)."""
    vol = inv = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{pid}/task/{t}/status") as f:
                    text = f.read()
            except OSError:
                continue
            vol += int(re.search(r"^voluntary_ctxt_switches:\s*(\d+)", text, re.M).group(1))
            inv += int(re.search(r"^nonvoluntary_ctxt_switches:\s*(\d+)", text, re.M).group(1))
    return vol, inv


def reuse(before, after):
    """Origin connections opened per 1,000 origin requests between two stats()."""
    conns, reqs = after["connections"] - before["connections"], after["requests"] - before["requests"]
    return {"origin_conns": conns, "origin_requests": reqs,
            "origin_conns_per_1k": conns * 1000 / reqs if reqs else None}


def run_fast(srv, up, args):
    peers.wrk(srv.port, "/", 50, 1)  # warm-up
    before = up.stats()
    row = peers.wrk(srv.port, "/", 50, args.secs, srv)
    time.sleep(0.2)  # answers in flight when wrk stopped
    return {**row, **reuse(before, up.stats())}


def run_big(srv, up, args):
    peers.wrk(srv.port, "/", 10, 1)
    return peers.wrk(srv.port, "/", 10, args.secs)


def run_slow(srv, up, args):
    def start(secs):
        return subprocess.Popen(["wrk", "-t1", f"-c{args.slow_conns}", f"-d{secs}s", "--timeout", "10s",
                                 "--latency", f"http://127.0.0.1:{srv.port}/"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    start(1).communicate()  # warm-up
    t0 = time.time()
    wrk = start(args.secs)
    # origin connections counted over the second half only: the first refills the proxy's pool,
    # which the warm-up's end (its requests cut off) may have emptied
    time.sleep(args.secs / 2)
    before = up.stats()
    pss, rss, procs, threads = srv.footprint()
    time.sleep(max(0.0, t0 + args.secs - 0.2 - time.time()))
    after = up.stats()
    row = parse_wrk(wrk.communicate()[0])
    return {**row, "ceiling_rps": args.slow_conns / 0.1, "pss_kb": pss, "rss_kb": rss, "procs": procs,
            "threads": threads, **reuse(before, after)}


def connect_all(n, port, sel, events):
    """N non-blocking connections to PORT, registered with SEL for EVENTS: (sockets, refused, the
    sockets registered)."""
    socks, refused, registered = [], 0, []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        socks.append(s)
        if s.connect_ex(("127.0.0.1", port)) not in (0, errno.EINPROGRESS):
            refused += 1
            continue
        sel.register(s, events)
        registered.append(s)
    return socks, refused, registered


def heard(data, tally):
    """What a held client heard before it was meant to: an answer (its status counted) or a close."""
    if data:
        tally["early"] += 1
        status = data.split(b" ", 2)[1].decode(errors="replace") if b" " in data else "?"
        tally["statuses"][status] = tally["statuses"].get(status, 0) + 1
    else:
        tally["closed"] += 1


def run_waiting(srv, up, args):
    """Holds WAITING requests in the proxy while the origin sits on them; see the module docstring."""
    n = args.waiting
    pss0, rss0, procs0, threads0 = srv.footprint()
    before = up.stats()["requests"]
    request = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n\r\n".encode()
    sel = selectors.DefaultSelector()
    socks, sent = [], 0
    tally = {"early": 0, "closed": 0, "statuses": {}}
    t0 = time.time()
    try:
        socks, refused, _ = connect_all(n, srv.port, sel, selectors.EVENT_WRITE)
        reached, poll_at = 0, t0 + WAIT_AT_LEAST
        while True:
            now = time.time()
            if now >= poll_at:
                reached = up.stats()["requests"] - before
                if reached >= n - refused - tally["early"] - tally["closed"] or now - t0 >= WAIT_AT_MOST:
                    break
                poll_at = now + 0.5
            for key, ev in sel.select(timeout=min(0.1, max(0.0, poll_at - now))):
                s = key.fileobj
                try:
                    if ev & selectors.EVENT_WRITE:
                        if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                            refused += 1
                            sel.unregister(s)
                            continue
                        s.send(request)  # far below a socket buffer: sent whole
                        sent += 1
                        sel.modify(s, selectors.EVENT_READ)
                        continue
                    data = s.recv(4096)  # anything now is an early answer (an error) or a close
                except OSError:
                    data = b""
                sel.unregister(s)
                heard(data, tally)
        waited = time.time() - t0
        pss, rss, procs, threads = srv.footprint()
    finally:
        sel.close()
        for s in socks:
            s.close()
    per = max(1, reached)
    return {"n": n, "sent": sent, "reached": reached, "refused": refused, "early_answers": tally["early"],
            "early_statuses": tally["statuses"], "early_closes": tally["closed"], "waited_s": round(waited, 2),
            "idle": {"pss_kb": pss0, "rss_kb": rss0, "procs": procs0, "threads": threads0},
            "held": {"pss_kb": pss, "rss_kb": rss, "procs": procs, "threads": threads},
            "kib_per_req": (pss - pss0) / per if reached else None,
            "threads_per_req": (threads - threads0) / per if reached else None}


def accepted_clients(srv):
    """Client connections the proxy has accepted and holds (ESTABLISHED on its port, with a descriptor
    in one of its processes), not those still in its listen queue, which the kernel took in for it."""
    inodes = set()
    for pid in srv.pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "01" and int(parts[1].rsplit(":", 1)[1], 16) == srv.port \
                            and parts[9] in inodes:
                        n += 1
        except OSError:
            pass
    return n


def run_uploading(srv, up, args):
    """Holds UPLOADING uploads half sent; see the module docstring."""
    n = args.uploading
    pss0, rss0, procs0, threads0 = srv.footprint()
    before = up.stats()["requests"]
    head = (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {UPLOAD_LEN}\r\n\r\n").encode()
    first = head + b"u" * UPLOAD_SENT
    sel = selectors.DefaultSelector()
    socks, done = [], 0
    tally = {"early": 0, "closed": 0, "statuses": {}}
    holding = set()  # sockets whose part is sent and that have heard nothing
    t0 = time.time()
    last_sent = t0
    try:
        socks, refused, registered = connect_all(n, srv.port, sel, selectors.EVENT_READ | selectors.EVENT_WRITE)
        at = {s: 0 for s in registered}  # socket -> bytes of `first` sent
        # Until every upload has sent its part (or WAIT_AT_MOST), then WAIT_AT_LEAST more.
        while True:
            now = time.time()
            if done + refused + tally["early"] + tally["closed"] >= n and now - last_sent >= WAIT_AT_LEAST:
                break
            if now - t0 >= WAIT_AT_MOST + WAIT_AT_LEAST:
                break
            for key, ev in sel.select(timeout=0.1):
                s = key.fileobj
                try:
                    if ev & selectors.EVENT_READ:
                        data = s.recv(4096)  # an answer before the body ended (an error), or a close
                        sel.unregister(s)
                        holding.discard(s)
                        heard(data, tally)
                        continue
                    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                        refused += 1
                        sel.unregister(s)
                        continue
                    at[s] += s.send(first[at[s]:])
                    last_sent = time.time()
                    if at[s] == len(first):
                        done += 1
                        holding.add(s)
                        sel.modify(s, selectors.EVENT_READ)
                except OSError:
                    sel.unregister(s)
                    holding.discard(s)
                    tally["closed"] += 1
        waited = time.time() - t0
        pss, rss, procs, threads = srv.footprint()
        accepted = accepted_clients(srv)
        reached = up.stats()["requests"] - before
    finally:
        sel.close()
        for s in socks:
            s.close()
    # Per upload the proxy took in: the rest wait in its listen queue, costing it nothing yet.
    held = min(len(holding), accepted)
    per = max(1, held)
    return {"n": n, "sent_whole_part": done, "sent_and_waiting": len(holding), "held": held,
            "refused": refused, "early_answers": tally["early"],
            "early_statuses": tally["statuses"], "early_closes": tally["closed"], "waited_s": round(waited, 2),
            "origin_requests": reached,
            "idle": {"pss_kb": pss0, "rss_kb": rss0, "procs": procs0, "threads": threads0},
            "during": {"pss_kb": pss, "rss_kb": rss, "procs": procs, "threads": threads},
            "kib_per_upload": (pss - pss0) / per if held else None,
            "threads_per_upload": (threads - threads0) / per if held else None}


RUN = {"fast": run_fast, "big": run_big, "slow": run_slow, "waiting": run_waiting, "uploading": run_uploading}


def fmt(x, spec=".0f"):
    return "–" if x is None else format(x, spec)


def short(errors):
    """wrk's error lines, only their counts that are not 0: 'read 6, non-2xx 3'."""
    out = [f"{k} {v}" for k, v in re.findall(r"(connect|read|write|timeout) (\d+)", errors) if v != "0"]
    out += [f"non-2xx {v}" for v in re.findall(r"Non-2xx or 3xx responses: (\d+)", errors)]
    return ", ".join(out)


# The scenarios --rounds repeats: those measured by wrk's req/s (slow and waiting hold
# connections for seconds each, and are read in one run).
ROUNDED = ("fast", "big")


def median(values):
    """The median of a non-empty list of numbers."""
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def medians(runs):
    """One result from several rounds' of a scenario: the median of each number over the rounds
    that gave one, the errors of every round, the rest from the first round without an error."""
    ok = [x for x in runs if "error" not in x]
    if not ok:
        return runs[-1]
    out = dict(ok[0])
    for key, value in ok[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = median([x[key] for x in ok if isinstance(x.get(key), (int, float))])
    errors = [x.get("errors") or x.get("error") for x in runs]
    out["errors"] = "; ".join(e for e in errors if e)
    out["rounds"] = f"{len(ok)} of {len(runs)}"
    return out


def round_ratios(results, rounds):
    """fast's per-round ratios to nginx's figures of the same round, and their medians."""
    base = results.get("nginx", {}).get("rounds", {}).get("fast")
    if not base:
        return
    print("### fast, each round against nginx in that round: req/s ratio / CPU per request ratio")
    cols = [f"round {k + 1}" for k in range(rounds)] + ["median"]
    print("| server | " + " | ".join(cols) + " |")
    print("|" + "---|" * (len(cols) + 1))
    for name, r in results.items():
        runs = r.get("rounds", {}).get("fast")
        if name == "nginx" or not runs:
            continue
        cells, rps, cpu = [], [], []
        for mine, theirs in zip(runs, base):
            try:
                a = mine["rps"] / theirs["rps"]
                b = mine["cpu_us_per_req"] / theirs["cpu_us_per_req"]
            except (KeyError, TypeError, ZeroDivisionError):
                cells.append("-")
                continue
            rps.append(a)
            cpu.append(b)
            cells.append(f"{a:.2f}x / {b:.2f}x")
        cells.append(f"{median(rps):.2f}x / {median(cpu):.2f}x" if rps else "-")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()


def early(f):
    """A held scenario's clients that heard something before they were meant to, or were refused."""
    return ((f"{f['early_answers']} {f['early_statuses']}" if f["early_answers"] else "0")
            + (f", {f['early_closes']} closed" if f["early_closes"] else "")
            + (f", {f['refused']} refused" if f["refused"] else ""))


def print_tables(results, args, scenarios):
    def rows(scenario, cols, cells):
        print("| " + " | ".join(["server"] + cols) + " |")
        print("|" + "---|" * (len(cols) + 1))
        for name, r in results.items():
            if "error" in r:
                print(f"| {name} | {r['error'][:120]} |")
            elif scenario not in r:
                continue
            elif "error" in r[scenario]:
                print(f"| {name} | error: {r[scenario]['error'][:120]} |")
            else:
                print(f"| {name} | " + " | ".join(cells(r[scenario])) + " |")
        print()

    cpus = os.cpu_count()
    print(f"Proxies in front of upstream/ ({args.upstream_threads} threads), {cpus} CPUs shared by "
          f"everything, wrk runs of {args.secs} s: compare rows, not runs.\n")
    if args.rounds > 1:
        print(f"fast and big: medians of {args.rounds} rounds, the servers in turn.\n")
    if "fast" in scenarios:
        print(f"### fast: origin answers at once, {SMALL} B; wrk -t1 -c50 keep-alive")
        rows("fast", ["req/s", "p99 ms", "proxy CPU us/req", "syscalls/req", "origin conns per 1k req", "errors"],
             lambda f: [fmt(f["rps"]), fmt(f["p99_ms"], ".2f"), fmt(f.get("cpu_us_per_req"), ".1f"),
                        fmt(f.get("syscalls_per_req"), ".2f"), fmt(f["origin_conns_per_1k"], ".2f"),
                        short(f["errors"])])
        if args.rounds > 1:
            round_ratios(results, args.rounds)
    if "big" in scenarios:
        print(f"### big: origin answers at once, {BIG >> 20} MiB; wrk -t1 -c10 keep-alive")
        rows("big", ["req/s", "p99 ms", "errors"],
             lambda f: [fmt(f["rps"]), fmt(f["p99_ms"], ".2f"), short(f["errors"])])
    if "slow" in scenarios:
        print(f"### slow: origin answers after 100 ms; wrk -t1 -c{args.slow_conns} --timeout 10s "
              f"(ceiling {args.slow_conns / 0.1:.0f} req/s); footprint mid-run")
        rows("slow", ["req/s", "% of ceiling", "p99 ms", "procs/threads", "PSS MiB", "origin conns per 1k req",
                      "errors", "sizing"],
             lambda f: [fmt(f["rps"]), fmt(100 * f["rps"] / f["ceiling_rps"]), fmt(f["p99_ms"], ".1f"),
                        f"{f['procs']}/{f['threads']}", fmt(f["pss_kb"] / 1024, ".1f"),
                        fmt(f["origin_conns_per_1k"], ".1f"), short(f["errors"]), f["sizing"]])
    if "waiting" in scenarios:
        print(f"### waiting: {args.waiting} requests held while the origin sits on them (10 s); "
              "per request that reached the origin")
        rows("waiting", ["reached origin", "after s", "idle PSS MiB", "PSS MiB", "KiB/req", "idle procs/threads",
                         "procs/threads", "threads/req", "answered early", "sizing"],
             lambda f: [f"{f['reached']}/{f['n']}", fmt(f["waited_s"], ".1f"),
                        fmt(f["idle"]["pss_kb"] / 1024, ".1f"), fmt(f["held"]["pss_kb"] / 1024, ".1f"),
                        fmt(f["kib_per_req"], ".1f"), f"{f['idle']['procs']}/{f['idle']['threads']}",
                        f"{f['held']['procs']}/{f['held']['threads']}", fmt(f["threads_per_req"], ".2f"),
                        early(f), f["sizing"]])
    if "uploading" in scenarios:
        print(f"### uploading: {args.uploading} uploads of {UPLOAD_LEN:,} bytes paused after their first "
              f"{UPLOAD_SENT // 1024} KiB; per upload the proxy accepted (held), the rest in its listen queue")
        rows("uploading", ["held", "origin requests", "after s", "idle PSS MiB", "PSS MiB", "KiB/upload",
                           "idle procs/threads", "procs/threads", "threads/upload", "answered early", "sizing"],
             lambda f: [f"{f['held']}/{f['sent_and_waiting']}", str(f["origin_requests"]), fmt(f["waited_s"], ".1f"),
                        fmt(f["idle"]["pss_kb"] / 1024, ".1f"), fmt(f["during"]["pss_kb"] / 1024, ".1f"),
                        fmt(f["kib_per_upload"], ".1f"), f"{f['idle']['procs']}/{f['idle']['threads']}",
                        f"{f['during']['procs']}/{f['during']['threads']}", fmt(f["threads_per_upload"], ".2f"),
                        early(f), f["sizing"]])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", help="path to the mpm binary; omit to measure the peers alone")
    ap.add_argument("--ours-flag", action="append", default=[], metavar="X",
                    help="one more argument for ours, repeatable; write those that start with - as "
                         "--ours-flag=--backlog --ours-flag=4096")
    ap.add_argument("--only", help="comma list of server names to run (nginx, apache-event, ours-worker, ...)")
    ap.add_argument("--scenarios", default="fast,big,slow,waiting", help="comma list of scenarios to run")
    ap.add_argument("--secs", type=int, default=5, help="seconds per wrk run")
    ap.add_argument("--rounds", type=int, default=1,
                    help="runs of fast and big, servers in turn; medians and per-round ratios to nginx")
    ap.add_argument("--slow-conns", type=int, default=1000, help="wrk connections in slow")
    ap.add_argument("--waiting", type=int, default=1000, help="requests held in waiting")
    ap.add_argument("--uploading", type=int, default=1000, help="uploads held in uploading")
    ap.add_argument("--upstream-threads", type=int, default=os.cpu_count(), help="origin threads")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (configs, logs) and print its path")
    ap.add_argument("--install", action="store_true", help="apt-get install wrk and the peers first")
    ap.add_argument("--build", action="store_true", help="cargo build --release upstream/ first "
                                                         "(done anyway when its binary is missing)")
    args = ap.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s]
    if not 1 <= args.rounds <= 100:
        ap.error(f"--rounds {args.rounds}: give 1 to 100")
    for s in scenarios:
        if s not in SCENARIOS:
            sys.exit(f"unknown scenario {s}: choose from {', '.join(SCENARIOS)}")

    if args.install:
        peers.sh(["apt-get", "update", "-qq"])
        peers.sh(["apt-get", "install", "-y", "-qq", "wrk", "nginx-light", "apache2", "apache2-utils"])
    if not shutil.which("wrk"):
        sys.exit("wrk missing: run with --install")
    ensure_upstream(args.build)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))

    base = tempfile.mkdtemp(prefix="proxy-peers-")
    os.chmod(base, 0o755)
    workers = max(args.slow_conns, args.waiting, args.uploading if "uploading" in scenarios else 0) + 64
    pworkers = min(workers, PREFORK_CAP)
    capped = f" (capped at {PREFORK_CAP})" if pworkers < workers else ""
    # name -> build(port, origin port, work dir, prespawn) -> (argv, sizing)
    plan = {}
    for mpm in ("prefork", "worker", "event"):
        w = pworkers if mpm == "prefork" else workers
        plan[f"apache-{mpm}"] = lambda p, u, d, pre, m=mpm, w=w: apache_conf(m, p, u, d, w, pre)
    plan["nginx"] = lambda p, u, d, pre: nginx_conf(p, u, d, workers)
    plan["floor"] = lambda p, u, d, pre: floor_cmd(base, p, u)
    if args.ours:
        binary = os.path.abspath(args.ours)
        mpms = ["prefork", "worker", "event"]
        try:
            if peers.sh([binary, "serve", "--mpm", "uring", "--help"], timeout=20).returncode == 0:
                mpms.append("uring")
        except (OSError, subprocess.TimeoutExpired):
            pass  # a binary that cannot run says so in its rows
        for mpm in mpms:
            w = pworkers if mpm == "prefork" else workers
            plan[f"ours-{mpm}"] = lambda p, u, d, pre, m=mpm, w=w: ours_cmd(binary, m, p, u, w, args.ours_flag, pre)
    if args.only:
        keep = args.only.split(",")
        unknown = [k for k in keep if k not in plan]
        if unknown:
            sys.exit(f"unknown server {', '.join(unknown)}: choose from {', '.join(plan)}")
        plan = {k: v for k, v in plan.items() if k in keep}

    results = {name: {} for name in plan}
    port, origin_port = 18200, 18900
    for i, scenario in enumerate(scenarios):
        delay, body = SCENARIOS[scenario]
        rounds = args.rounds if scenario in ROUNDED else 1
        with Upstream(origin_port + i, args.upstream_threads, delay, body, base) as up:
            for rnd in range(rounds):
                order = list(plan.items())
                if rnd % 2:
                    order.reverse()
                for name, build in order:
                    r = results[name]
                    if "error" in r:  # did not start before: it will not now
                        continue
                    port += 1
                    work = os.path.join(base, f"{name}-{scenario}-{rnd}")
                    os.makedirs(work)
                    os.chmod(work, 0o777)
                    try:
                        argv, sizing = build(port, up.port, work, scenario == "slow")
                        sizing += capped if "prefork" in name else ""
                        with Proxy(name, argv, port, work, None if scenario == "waiting" else body) as srv:
                            r[scenario] = {**RUN[scenario](srv, up, args), "sizing": sizing}
                    except StartFailed as e:
                        why = f"{'not supported' if name.startswith('ours') else 'failed to start'} ({e})"
                        if any(s in r for s in SCENARIOS):  # it started before: this scenario's failure
                            r[scenario] = {"error": why}
                        else:
                            r["error"] = why
                    except Exception as e:  # a server that fails is reported, not fatal
                        r[scenario] = {"error": repr(e)}
                    if rounds > 1 and scenario in r:
                        r.setdefault("rounds", {}).setdefault(scenario, []).append(r[scenario])
                    print(f"# {name} {scenario}{f' round {rnd + 1}' if rounds > 1 else ''}: "
                          f"{json.dumps(r.get(scenario, r.get('error')))}", file=sys.stderr, flush=True)
            if rounds > 1:
                for r in results.values():
                    runs = r.get("rounds", {}).get(scenario)
                    if runs:
                        r[scenario] = medians(runs)

    print_tables(results, args, scenarios)
    if args.json:
        run = {"secs": args.secs, "slow_conns": args.slow_conns, "waiting": args.waiting,
               "uploading": args.uploading, "cpus": os.cpu_count(),
               "upstream_threads": args.upstream_threads, "workers": workers, "prefork_workers": pworkers,
               "scenarios": scenarios, "ours": args.ours, "ours_flags": args.ours_flag}
        with open(args.json, "w") as f:
            json.dump({"run": run, "servers": results}, f, indent=1)
    if args.keep:
        print(f"# configs and logs kept in {base}", file=sys.stderr)
    else:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
