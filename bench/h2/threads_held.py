"""What an idle HTTP/2 connection holds under the worker MPM: a thread.
Opens N h2c connections (prior knowledge), one GET / each, leaves them
idle, then asks on one more: with N = the server's threads, it is answered
only once an idle connection closes.

    mpm serve --mpm worker --max-request-workers 4 --h2c on \
        --keepalive-timeout 30s --listen 127.0.0.1:18880 --docroot DIR
    python3 bench/h2/threads_held.py 18880 4      # DIR/index.html holds MARKER

Measured 2026-12-02 (debug build): the 4 answered at once; the fifth not
within 3 s while they sat idle; answered in under 1 ms once one closed.
"""
import socket, time, sys
port=int(sys.argv[1]); n=int(sys.argv[2])
MARKER=sys.argv[3].encode() if len(sys.argv) > 3 else b"hello-h2"
def frame(t,f,s,p): return len(p).to_bytes(3,'big')+bytes([t,f])+s.to_bytes(4,'big')+p
get = bytes([0x82,0x86,0x84,0x41,0x01])+b'a'
def conn():
    s=socket.create_connection(("127.0.0.1",port)); s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"+frame(4,0,0,b"")+frame(1,5,1,get)); return s
def answered(s, within):
    s.settimeout(within); got=b""; t=time.time()
    try:
        while MARKER not in got: got+=s.recv(65536)
        return time.time()-t
    except socket.timeout: return None
idle=[conn() for i in range(n)]
print("first", n, "answered in", [round(answered(s,5) or -1,3) for s in idle])
extra=conn()
print("one more, while", n, "h2 connections sit idle:", answered(extra, 3))
idle[0].close()
print("after one idle connection closed:", answered(extra, 5))
