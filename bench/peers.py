#!/usr/bin/env python3
"""Side-by-side benchmark of `mpm serve` against Apache httpd's three MPMs and nginx (and h2o
with --h2).

Every server serves the same docroot on 127.0.0.1 and is measured in the same run
by clients that nobody on this project wrote (wrk, ab; h2load with --h2), so the figures
are ratios that hold on a noisy machine. Stdlib only.

  python3 bench/peers.py --ours target/release/mpm
  python3 bench/peers.py --only apache-event,ours-event --idle 2000
  python3 bench/peers.py --h2 --ours target/release/mpm --idle 1000

Needs: apt-get install -y wrk apache2 apache2-utils nginx-light h2o nghttp2-client curl
(--install does it). Writes a Markdown table to stdout and JSON to --json.

'ours' is started as:
  OURS serve --mpm MPM --listen 127.0.0.1:PORT --docroot DIR --max-request-workers N
for MPM in prefork, worker, event, and uring when `OURS serve --mpm uring --help` exits 0
(otherwise one line on stderr says why ours-uring is skipped). It must serve DIR/index.html
(1456 bytes, the page size of the 2004 sendfile thread) and DIR/big.bin (1 MiB) with
keep-alive on and no access log.

--tls serves every server over TLS instead (one self-signed ECDSA P-256 certificate made
with the openssl CLI; TLS 1.2 and 1.3; a shared session cache where the server has one),
and 'ours' is started with `--tls-cert FILE --tls-key FILE` and the first of `--listen-tls ADDR`,
`--listen https://ADDR`, `--listen ADDR` that serves TLS. The close columns are then full
handshakes (ab makes no session resumption), and the idle column holds TLS connections.

--h2 serves HTTP/2 over TLS (ALPN h2; the --tls certificate and docroot) from nginx (`http2`),
h2o (one thread per CPU, no access log), httpd event with mod_http2 (`Protocols h2 http/1.1`)
and ours (started as with --tls, nothing more), and measures them with h2load -t1 (nghttp2):
the small page with `-c 100 -m 10` and the 1 MiB file with `-c 10 -m 1`, each for --secs
(p99 from h2load's per-request --log-file), the server tree's CPU us per request, and KiB per
idle h2 connection (--idle connections, each left idle after the TLS handshake, the client
preface and the SETTINGS exchange; measured first, on the fresh server). httpd starts all its
children at once here. A server whose ALPN does not give h2 (curl --http2) gets a "no HTTP/2"
row instead of figures.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

APACHE_MODS = "/usr/lib/apache2/modules"
SMALL = 1456
BIG = 1 << 20


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def make_docroot(root):
    os.makedirs(root, exist_ok=True)
    head = b"<html><body><h1>It works!</h1><p>"
    tail = b"</p></body></html>\n"
    with open(os.path.join(root, "index.html"), "wb") as f:
        f.write(head + b"x" * (SMALL - len(head) - len(tail)) + tail)
    with open(os.path.join(root, "big.bin"), "wb") as f:
        f.write(os.urandom(BIG))
    os.chmod(root, 0o755)
    for name in os.listdir(root):
        os.chmod(os.path.join(root, name), 0o644)


def apache_conf(mpm, port, root, work, workers, tls=None, h2=False):
    threads = 25
    mods = ["authz_core", "mime", "dir"] + (["socache_shmcb", "ssl"] if tls else []) + (["http2"] if h2 else [])
    lines = [f"LoadModule mpm_{mpm}_module {APACHE_MODS}/mod_mpm_{mpm}.so"]
    lines += [f"LoadModule {m}_module {APACHE_MODS}/mod_{m}.so" for m in mods]
    lines += [
        f"ServerRoot {work}", "ServerName localhost", f"Listen 127.0.0.1:{port}",
        f"PidFile {work}/httpd.pid", f"ErrorLog {work}/error.log", "LogLevel warn",
        "User www-data", "Group www-data", f"DocumentRoot {root}",
        f"<Directory {root}>\n  Require all granted\n</Directory>",
        "DirectoryIndex index.html", "TypesConfig /etc/mime.types",
        "KeepAlive On", "MaxKeepAliveRequests 0", "KeepAliveTimeout 60",
        "EnableSendfile On", "ListenBacklog 4096",
    ]
    if tls:
        lines = [f"Listen 127.0.0.1:{port} https" if l.startswith("Listen ") else l for l in lines]
        lines += ["SSLEngine on", f"SSLCertificateFile {tls[0]}", f"SSLCertificateKeyFile {tls[1]}",
                  "SSLProtocol -all +TLSv1.2 +TLSv1.3",
                  f"SSLSessionCache shmcb:{work}/ssl_scache(512000)", f"Mutex file:{work} default"]
    if h2:
        lines += ["Protocols h2 http/1.1"]
    if mpm == "prefork":
        lines += [f"ServerLimit {workers}", f"MaxRequestWorkers {workers}",
                  "StartServers 8", "MinSpareServers 8", "MaxSpareServers 64",
                  "MaxConnectionsPerChild 0"]
    else:
        procs = max(2, -(-workers // threads))
        # h2: every child from the start, as nginx and h2o start every worker. While event spawns
        # children under load, a child whose threads are all busy closes its connections waiting
        # on the loop, idle h2 connections with streams in flight among them (h2load: "failed").
        lines += [f"ServerLimit {procs}", f"ThreadsPerChild {threads}",
                  f"MaxRequestWorkers {procs * threads}", f"StartServers {procs if h2 else 2}",
                  "MinSpareThreads 25", f"MaxSpareThreads {procs * threads}",
                  "MaxConnectionsPerChild 0"]
    path = os.path.join(work, "httpd.conf")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return ["/usr/sbin/apache2", "-DFOREGROUND", "-f", path]


def nginx_version():
    try:
        m = re.search(r"nginx/(\d+)\.(\d+)\.(\d+)", sh(["/usr/sbin/nginx", "-v"]).stderr)
    except OSError:
        m = None
    return tuple(map(int, m.groups())) if m else (0, 0, 0)


def nginx_conf(port, root, work, workers, tls=None, h2=False):
    ssl_flag = " ssl" if tls else ""
    http2 = ""
    if h2 and nginx_version() >= (1, 25, 1):
        http2 = "http2 on;"
    elif h2:  # before 1.25.1, a parameter of listen
        ssl_flag += " http2"
    ssl = (f"ssl_certificate {tls[0]};\n    ssl_certificate_key {tls[1]};\n"
           "    ssl_protocols TLSv1.2 TLSv1.3;\n    ssl_session_cache shared:SSL:10m;") if tls else ""
    conf = f"""
worker_processes {os.cpu_count()};
pid {work}/nginx.pid;
error_log {work}/error.log warn;
worker_rlimit_nofile {workers * 2 + 1024};
events {{ worker_connections {workers + 512}; }}
http {{
  include /etc/nginx/mime.types;
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
  server {{
    listen 127.0.0.1:{port} backlog=4096{ssl_flag};
    {ssl}
    {http2}
    root {root};
    index index.html;
  }}
}}
"""
    path = os.path.join(work, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    return ["/usr/sbin/nginx", "-c", path, "-g", "daemon off;"]


def h2o_conf(port, root, work, workers, tls):
    """h2o over TLS: no access log (none is configured), one thread per CPU."""
    conf = f"""
num-threads: {os.cpu_count()}
max-connections: {workers + 512}  # default 1024 would cap --idle
pid-file: {work}/h2o.pid
error-log: {work}/error.log
http2-idle-timeout: 60  # as the others' keep-alive; default 10 s would close --idle connections
listen:
  host: 127.0.0.1
  port: {port}
  ssl:
    certificate-file: {tls[0]}
    key-file: {tls[1]}
    minimum-version: TLSv1.2
    ocsp-update-interval: 0  # no stapling: else a fetch-ocsp-response child per certificate
hosts:
  "localhost":
    paths:
      "/":
        file.dir: {root}
"""
    path = os.path.join(work, "h2o.conf")
    with open(path, "w") as f:
        f.write(conf)
    return ["h2o", "-c", path]


def ours_cmd(binary, mpm, port, root, workers, tls=None):
    """ours' command line; with TLS, a list of the spellings to try in turn."""
    rest = ["--docroot", root, "--max-request-workers", str(workers)]
    if not tls:
        return [binary, "serve", "--mpm", mpm, "--listen", f"127.0.0.1:{port}", *rest]
    keys = ["--tls-cert", tls[0], "--tls-key", tls[1]]
    return [[binary, "serve", "--mpm", mpm, *listen, *rest, *keys]
            for listen in (["--listen-tls", f"127.0.0.1:{port}"], ["--listen", f"https://127.0.0.1:{port}"],
                           ["--listen", f"127.0.0.1:{port}"])]


TLS = None  # (cert, key) once --tls made them: every client below then speaks TLS
SCHEME = "http"


def make_cert(work):
    cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    r = sh(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "30", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", key, "-out", cert])
    if r.returncode != 0:
        sys.exit("openssl could not make a certificate: " + r.stderr[-300:])
    os.chmod(key, 0o644)
    return cert, key


def port_taken(port):
    """Whether something on this machine (another run of this script, say) listens on port."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if TLS is None:
        return s
    import ssl
    ctx = ssl.create_default_context(cafile=TLS[0])
    return ctx.wrap_socket(s, server_hostname="localhost")


class Server:
    def __init__(self, name, argv, port, work):
        self.name, self.argv, self.port, self.work = name, argv, port, work
        self.proc = None

    def __enter__(self):
        log = open(os.path.join(self.work, "stdout.log"), "w")
        self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited early; see {self.work}")
            try:
                get(self.port, "/index.html")
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer on port {self.port}")

    def __exit__(self, *exc):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def pids(self):
        """The server's whole process tree."""
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            try:
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/children") as f:
                        todo += [int(c) for c in f.read().split()]
            except OSError:
                pass
        return out

    def footprint(self):
        """(PSS kB, RSS kB, processes, threads) summed over the tree."""
        pss = rss = threads = 0
        pids = self.pids()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/smaps_rollup") as f:
                    for line in f:
                        if line.startswith("Pss:"):
                            pss += int(line.split()[1])
                        elif line.startswith("Rss:"):
                            rss += int(line.split()[1])
                threads += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
        return pss, rss, len(pids), threads


def get(port, path, keep=None):
    s = keep or connect(port)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("closed before headers")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    m = re.search(rb"(?i)content-length:\s*(\d+)", head)
    need = int(m.group(1)) if m else 0
    while len(body) < need:
        chunk = s.recv(65536)
        if not chunk:
            raise OSError("closed mid-body")
        body += chunk
    if keep is None:
        s.close()
    return head.split(b" ", 2)[1], body


def cpu_ticks(pids):
    """CPU time of these processes, in clock ticks, from the scheduler's
    own run time (/proc/PID/task/TID/schedstat, nanoseconds): utime and
    stime in /proc/PID/stat are sampled at each tick, and a process that
    runs in bursts shorter than a tick (each of 256 prefork children
    serving a request now and then) is charged almost nothing there: 0.04 s
    for 2 s of CPU, measured."""
    total_ns = 0
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total_ns += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total_ns * os.sysconf("SC_CLK_TCK") / 1e9


def wrk(port, path, conns, secs, server=None):
    """wrk's figures; with server, also its CPU-us and syscalls per request."""
    perf = None
    if server is not None:
        pids = server.pids()
        before = cpu_ticks(pids)
        if shutil.which("perf"):
            perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter",
                                     "-p", ",".join(map(str, pids)), "--", "sleep", str(secs)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    out = sh(["wrk", "-t1", f"-c{conns}", f"-d{secs}s", "--latency",
              f"{SCHEME}://127.0.0.1:{port}{path}"]).stdout
    rps = float(re.search(r"Requests/sec:\s*([\d.]+)", out).group(1))
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    extra = {}
    if server is not None:
        ticks = cpu_ticks(pids) - before
        extra["cpu_us_per_req"] = ticks * 1e6 / os.sysconf("SC_CLK_TCK") / max(1, reqs)
        if perf is not None:
            err = perf.communicate()[1]
            m = re.search(r"^([\d.]+),", err, re.M)
            if m:
                extra["syscalls_per_req"] = float(m.group(1)) / max(1, reqs)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out)
    return {"rps": rps, "p99_ms": float(p99.group(1)) * scale[p99.group(2)] if p99 else None,
            "errors": errors.group(0) if errors else "", **extra}


def ab(port, path, n, conc):
    out = sh(["ab", "-q", "-n", str(n), "-c", str(conc), f"{SCHEME}://127.0.0.1:{port}{path}"]).stdout
    m = re.search(r"Requests per second:\s*([\d.]+)", out)
    failed = re.search(r"Failed requests:\s*(\d+)", out)
    return {"rps": float(m.group(1)) if m else None,
            "failed": int(failed.group(1)) if failed else None}


def idle_footprint(server, n):
    """Footprint while holding n keep-alive connections that each finished one request."""
    base = server.footprint()
    socks = []
    try:
        for _ in range(n):
            s = connect(server.port)
            get(server.port, "/index.html", keep=s)
            socks.append(s)
        time.sleep(1.0)
        alive = 0
        for s in socks[:: max(1, n // 50)]:  # a sample must still be served
            try:
                get(server.port, "/index.html", keep=s)
                alive += 1
            except OSError:
                pass
        held = server.footprint()
    finally:
        for s in socks:
            s.close()
    sample = len(socks[:: max(1, n // 50)])
    return {"base_pss_kb": base[0], "pss_kb": held[0], "rss_kb": held[1], "procs": held[2],
            "threads": held[3], "per_conn_kb": (held[0] - base[0]) / max(1, n),
            "sample_alive": f"{alive}/{sample}"}


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def h2_read_frame(s):
    def exact(n):
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise OSError("h2 connection closed")
            buf += chunk
        return buf
    head = exact(9)
    return head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF, exact(int.from_bytes(head[:3], "big"))


def h2_connect(port, ctx):
    """A TLS connection that chose h2 by ALPN, past the preface and the SETTINGS exchange."""
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="localhost")
    if s.selected_alpn_protocol() != "h2":
        s.close()
        raise OSError(f"ALPN gave {s.selected_alpn_protocol()}")
    s.sendall(H2_PREFACE + h2_frame(4, 0, 0))  # an empty SETTINGS
    while True:
        kind, flags, _, _ = h2_read_frame(s)
        if kind == 4 and not flags & 1:  # the server's SETTINGS (not the ACK of ours)
            break
    s.sendall(h2_frame(4, 1, 0))  # SETTINGS ACK
    return s


def h2_get(s, path, stream):
    """GET path on an h2 connection; the body's length."""
    def literal(index, value):  # literal header field without indexing, indexed name, no Huffman
        return bytes([index, len(value)]) + value.encode()
    block = b"\x82\x87" + literal(4, path) + literal(1, "localhost")  # GET, https, :path, :authority
    s.sendall(h2_frame(1, 0x5, stream, block))  # HEADERS, END_STREAM | END_HEADERS
    got = 0
    while True:
        kind, flags, sid, payload = h2_read_frame(s)
        if kind == 7 or (kind == 3 and sid == stream):
            raise OSError("GOAWAY" if kind == 7 else "RST_STREAM")
        if sid != stream or kind not in (0, 1):
            continue
        if kind == 0:
            got += len(payload) - (payload[0] + 1 if flags & 0x8 else 0)
        if flags & 0x1:
            return got


def h2_version(port):
    """What curl --http2 was given: "2" where ALPN chose h2."""
    r = sh(["curl", "-sk", "--http2", "-o", "/dev/null", "-w", "%{http_version}",
            f"https://127.0.0.1:{port}/index.html"], timeout=30)
    return r.stdout.strip() if r.returncode == 0 else f"? (curl exited {r.returncode})"


H2LOAD_D = None  # whether this h2load has -D (timing-based runs); asked once


def h2load(port, path, conns, streams, secs, server=None, n=None):
    """h2load's figures (one thread, as wrk -t1); with server, also its CPU-us per request.
    p99 comes from h2load's per-request log; without -D, n requests (else ~2000 per second)."""
    global H2LOAD_D
    if H2LOAD_D is None:
        H2LOAD_D = "--duration" in sh(["h2load", "--help"]).stdout
    log = tempfile.NamedTemporaryFile(prefix="h2load-", suffix=".tsv", delete=False)
    log.close()
    argv = ["h2load", "-t1", f"-c{conns}", f"-m{streams}", f"--log-file={log.name}"]
    argv += [f"-D{secs}"] if H2LOAD_D else [f"-n{max(conns * streams, n or 2000 * secs)}"]
    if server is not None:
        pids = server.pids()
        before = cpu_ticks(pids)
    try:
        out = sh(argv + [f"https://127.0.0.1:{port}{path}"]).stdout
        with open(log.name) as f:  # start us, status (-1: failed), us to the response's end
            rows = [line.split("\t") for line in f]
        times = sorted(int(r[2]) for r in rows if len(r) >= 3 and r[1] != "-1")
    finally:
        os.unlink(log.name)
    m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if not m:
        raise RuntimeError("h2load: " + (out.strip().splitlines() or ["no output"])[-1][:200])
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                     r"(\d+) errored, (\d+) timeout", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    proto = re.search(r"Application protocol: (\S+)", out)
    tls = re.search(r"TLS Protocol: (\S+)", out)
    errors = [f"spoke {proto.group(1)}"] if proto and proto.group(1) != "h2" else []
    if done and int(done.group(3)):
        errors.append(f"{done.group(3)} failed ({done.group(4)} errored, {done.group(5)} timeout)")
    if codes and int(codes.group(3)) + int(codes.group(4)):
        errors.append(f"{codes.group(3)} 4xx, {codes.group(4)} 5xx")
    row = {"rps": float(m.group(1)), "requests": int(done.group(2)) if done else None,
           "p99_ms": times[min(len(times) - 1, len(times) * 99 // 100)] / 1000 if times else None,
           "protocol": proto.group(1) if proto else None, "tls": tls.group(1) if tls else None,
           "errors": "; ".join(errors)}
    if server is not None:
        ticks = cpu_ticks(pids) - before
        row["cpu_us_per_req"] = ticks * 1e6 / os.sysconf("SC_CLK_TCK") / max(1, row["requests"] or 0)
    return row


def idle_h2_footprint(server, n):
    """Footprint while holding n idle h2 connections (TLS, ALPN h2, preface, SETTINGS both ways)."""
    import ssl
    ctx = ssl.create_default_context(cafile=TLS[0])
    ctx.set_alpn_protocols(["h2"])
    base = server.footprint()
    socks = []
    try:
        for _ in range(n):
            socks.append(h2_connect(server.port, ctx))
        time.sleep(1.0)
        held = server.footprint()  # before the sample below makes any of them serve a request
        alive = 0
        for s in socks[:: max(1, n // 50)]:  # a sample must still be served
            try:
                alive += h2_get(s, "/index.html", 1) == SMALL
            except OSError:
                pass
    finally:
        for s in socks:
            s.close()
    sample = len(socks[:: max(1, n // 50)])
    return {"base_pss_kb": base[0], "pss_kb": held[0], "rss_kb": held[1], "procs": held[2],
            "threads": held[3], "per_conn_kb": (held[0] - base[0]) / max(1, n),
            "sample_alive": f"{alive}/{sample}"}


def h2_figures(server, secs, idle):
    """The --h2 row, or no_h2 where ALPN did not choose h2. Idle h2 connections first, on the
    fresh server: after the loads, the memory their 100 connections freed would hold them."""
    version = h2_version(server.port)
    if version != "2":
        return {"no_h2": f"ALPN gave http/{version}" if version[:1].isdigit() else version}
    row = {"idle_h2": idle_h2_footprint(server, idle)}
    warm = h2load(server.port, "/index.html", 100, 10, 1)  # warm-up (and, without -D, the pace)
    row["h2_small"] = h2load(server.port, "/index.html", 100, 10, secs, server, n=int(warm["rps"] * secs))
    row["h2_big"] = h2load(server.port, "/big.bin", 10, 1, secs, n=500 * secs)
    return row


def print_h2_table(results, idle):
    print("HTTP/2: every figure below is h2 over TLS (ALPN h2, ECDSA P-256) from h2load -t1; "
          "1456 B with -c 100 -m 10, 1 MiB with -c 10 -m 1")
    cols = ["server", "h2 1456 B req/s", "p99 ms", "CPU us/req", "h2 1 MiB req/s", f"KiB/idle h2 conn ({idle})"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | error: {r['error'][:80]} |")
            continue
        if "no_h2" in r:
            print(f"| {name} | no HTTP/2 ({r['no_h2']}) | – | – | – | – |")
            continue
        k, b, i = r["h2_small"], r["h2_big"], r["idle_h2"]
        errs = "; ".join(f"{x['errors']}" for x in (k, b) if x["errors"])
        p99 = f"{k['p99_ms']:.2f}" if k["p99_ms"] is not None else "–"
        served, sample = i["sample_alive"].split("/")
        alive = "" if served == sample else f" (sample served {i['sample_alive']})"
        print(f"| {name} | {k['rps']:.0f}{' (' + errs + ')' if errs else ''} | {p99} | "
              f"{k.get('cpu_us_per_req', 0):.1f} | {b['rps']:.0f} | {i['per_conn_kb']:.1f}{alive} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", help="path to the mpm binary; omit to measure the peers alone")
    ap.add_argument("--only", help="comma list of server names to run")
    ap.add_argument("--secs", type=int, default=5, help="seconds per wrk (or h2load) run")
    ap.add_argument("--conns", type=int, default=50, help="wrk keep-alive connections")
    ap.add_argument("--ab-n", type=int, default=5000, help="requests per ab run")
    ap.add_argument("--idle", type=int, default=1000, help="idle keep-alive connections held")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--install", action="store_true", help="apt-get install the peers first")
    ap.add_argument("--tls", action="store_true",
                    help="serve and measure every server over TLS (self-signed ECDSA P-256)")
    ap.add_argument("--h2", action="store_true",
                    help="HTTP/2 over TLS instead (ALPN h2): nginx, h2o, apache-event, ours; measured with h2load")
    ap.add_argument("--limit", action="store_true",
                    help="also measure limit/ (a bare epoll responder: the ceiling for keep-alive req/s)")
    args = ap.parse_args()

    if args.install:
        sh(["apt-get", "update", "-qq"])
        sh(["apt-get", "install", "-y", "-qq", "wrk", "apache2", "apache2-utils", "nginx-light",
            "h2o", "nghttp2-client", "curl"])
    for tool in ("h2load", "curl") if args.h2 else ("wrk", "ab"):
        if not shutil.which(tool):
            sys.exit(f"{tool} missing: run with --install")

    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))

    base = tempfile.mkdtemp(prefix="peers-")
    root = os.path.join(base, "www")
    make_docroot(root)
    os.chmod(base, 0o755)
    global TLS, SCHEME
    tls = None
    if args.tls or args.h2:
        tls = TLS = make_cert(base)
        SCHEME = "https"
    workers = args.idle + 64
    plan = []
    port = 18080
    if args.h2:
        plan.append(("apache-event", lambda p, w: apache_conf("event", p, root, w, workers, tls, h2=True)))
        plan.append(("nginx", lambda p, w: nginx_conf(p, root, w, workers, tls, h2=True)))
        plan.append(("h2o", lambda p, w: h2o_conf(p, root, w, workers, tls)))
    else:
        for mpm in ("prefork", "worker", "event"):
            plan.append((f"apache-{mpm}", lambda p, w, m=mpm: apache_conf(m, p, root, w, workers, tls)))
        plan.append(("nginx", lambda p, w: nginx_conf(p, root, w, workers, tls)))
    if args.ours:
        binary = os.path.abspath(args.ours)
        mpms = ["prefork", "worker", "event"]
        probe = sh([binary, "serve", "--mpm", "uring", "--help"])
        if probe.returncode == 0:
            mpms.append("uring")
        else:
            why = (probe.stderr.strip() or probe.stdout.strip()).splitlines() or ["no output"]
            print(f"# ours-uring skipped: `{args.ours} serve --mpm uring --help` exited {probe.returncode}: "
                  f"{why[0][:160]}", file=sys.stderr, flush=True)
        for mpm in mpms:
            plan.append((f"ours-{mpm}", lambda p, w, m=mpm: ours_cmd(binary, m, p, root, workers, tls)))
    if args.limit and not (args.tls or args.h2):
        here = os.path.dirname(os.path.abspath(__file__))
        target = os.path.join(base, "limit-target")
        r = sh(["cargo", "build", "--release", "-q", "--manifest-path",
                os.path.join(here, "limit", "Cargo.toml"), "--target-dir", target])
        if r.returncode != 0:
            sys.exit("could not build limit/: " + r.stderr[-300:])
        lim = os.path.join(target, "release", "limit")
        plan.insert(0, ("limit", lambda p, w: [lim, str(p), str(os.cpu_count())]))
    if args.only:
        keep = set(args.only.split(","))
        plan = [x for x in plan if x[0] in keep]

    results = {}
    for name, build in plan:
        port += 1
        while port_taken(port):  # else the start-up probe below would take its server for ours
            port += 1
        work = os.path.join(base, name)
        os.makedirs(work)
        os.chmod(work, 0o777)
        row = {}
        argvs = build(port, work)
        if argvs and isinstance(argvs[0], list):  # several spellings: the first that serves
            for argv in argvs:
                try:
                    with Server(name, argv, port, work):
                        break
                except RuntimeError:
                    continue
        else:
            argv = argvs
        try:
            with Server(name, argv, port, work) as srv:
                status, body = get(port, "/index.html")
                assert status == b"200" and len(body) == SMALL, (status, len(body))
                if name == "limit":  # serves one page from memory: keep-alive figures only
                    wrk(port, "/index.html", args.conns, 1)
                    row["ka_small"] = wrk(port, "/index.html", args.conns, args.secs, srv)
                    results[name] = row
                    continue
                status, body = get(port, "/big.bin")
                assert status == b"200" and len(body) == BIG, (status, len(body))
                if args.h2:
                    row.update(h2_figures(srv, args.secs, args.idle))
                else:
                    wrk(port, "/index.html", args.conns, 1)  # warm-up
                    row["ka_small"] = wrk(port, "/index.html", args.conns, args.secs, srv)
                    row["ka_big"] = wrk(port, "/big.bin", 8, args.secs)
                    row["close_c1"] = ab(port, "/index.html", args.ab_n, 1)
                    row["close_c20"] = ab(port, "/index.html", args.ab_n, 20)
                    row["idle"] = idle_footprint(srv, args.idle)
        except Exception as e:  # a server that fails is reported, not fatal
            row["error"] = repr(e)
        results[name] = row
        print(f"# {name}: {json.dumps(row)}", file=sys.stderr, flush=True)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.h2:
        print_h2_table(results, args.idle)
        shutil.rmtree(base, ignore_errors=True)
        return
    if args.tls:
        print("TLS: every figure below is over TLS 1.3 (ECDSA P-256); close columns are full handshakes")
    cols = ["server", "keep-alive 1456 B req/s", "p99 ms", "CPU us/req", "syscalls/req", "keep-alive 1 MiB req/s",
            "close c=1 req/s", "close c=20 req/s", f"PSS with {args.idle} idle conns MiB",
            "KiB/conn", "procs/threads"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | error: {r['error'][:80]} |")
            continue
        if "idle" not in r:
            k = r["ka_small"]
            print(f"| {name} | {k['rps']:.0f} | {k['p99_ms']} | {k.get('cpu_us_per_req', 0):.1f} | "
                  f"{k.get('syscalls_per_req', 0):.2f} | – | – | – | – | – | – |")
            continue
        i = r["idle"]
        k = r["ka_small"]
        print(f"| {name} | {k['rps']:.0f} | {k['p99_ms']} | {k.get('cpu_us_per_req', 0):.1f} | "
              f"{k.get('syscalls_per_req', 0):.2f} | "
              f"{r['ka_big']['rps']:.0f} | {r['close_c1']['rps']} | {r['close_c20']['rps']} | "
              f"{i['pss_kb'] / 1024:.1f} | {i['per_conn_kb']:.1f} | {i['procs']}/{i['threads']} |")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
