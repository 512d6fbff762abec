"""KiB per idle connection of a running mpm serving process, HTTP/2 (h2c) or
HTTP/1.1: open N connections, one request each (`GET /`, whose body must
contain MARKER), keep them open, and compare the process's RSS before and
after.

    mpm serve --mpm event --server-limit 1 --h2c on --keepalive-timeout 60s \
        --listen 127.0.0.1:18806 --docroot DIR   # DIR/index.html holds MARKER
    python3 bench/h2/idle_memory.py 18806 1000 CHILD_PID h2 MARKER

CHILD_PID is the serving process (the master's child). Run once per mode
against a fresh server: memory freed by one run is reused by the next.
"""
import socket, sys, time, os
port=int(sys.argv[1]); n=int(sys.argv[2]); pid=int(sys.argv[3]); mode=sys.argv[4]
marker=sys.argv[5].encode() if len(sys.argv) > 5 else b"hello-h2"
def rss(p):
    for l in open(f"/proc/{p}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])
def frame(t,f,s,p): return len(p).to_bytes(3,'big')+bytes([t,f])+s.to_bytes(4,'big')+p
get = bytes([0x82,0x86,0x84,0x41,0x01])+b'a'
socks=[]
time.sleep(0.5)
before=rss(pid)
for i in range(n):
    s=socket.create_connection(("127.0.0.1",port))
    if mode=="h2":
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"+frame(4,0,0,b"")+frame(1,5,1,get))
    else:
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    s.settimeout(5); got=b""
    while (marker not in got): got+=s.recv(65536)
    socks.append(s)
time.sleep(1.5)
after=rss(pid)
print(f"{mode}: {n} idle connections: RSS {before} -> {after} KiB: {(after-before)/n:.2f} KiB each")
