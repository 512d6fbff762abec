# An HTTP/2 client on python-hyper's h2 (sans-IO), driven as its documentation
# shows: GET each path on a stream of its own, all at once on one connection,
# acknowledging received data (flow control), then close the connection.
# Prints each stream's status, in order, and writes its body to OUTDIR/<n>.
# argv: BASE-URL CAFILE-or-"-" OUTDIR PATH...  (tests/tests/h2_serving.rs)
import os, socket, ssl, sys
import h2.config, h2.connection, h2.events
from urllib.parse import urlsplit

base, cafile, outdir, paths = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
u = urlsplit(base)
sock = socket.create_connection((u.hostname, u.port), timeout=20)
if u.scheme == "https":
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.set_alpn_protocols(["h2"])
    sock = ctx.wrap_socket(sock, server_hostname=u.hostname)
    assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
conn.initiate_connection()
streams = {}
for p in paths:
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "GET"), (":path", p), (":scheme", u.scheme),
                            (":authority", u.netloc), ("user-agent", "python-h2")], end_stream=True)
    streams[sid] = {"status": None, "body": bytearray(), "done": False}
sock.sendall(conn.data_to_send())
while not all(s["done"] for s in streams.values()):
    data = sock.recv(65536)
    if not data:
        sys.exit("connection closed early")
    for ev in conn.receive_data(data):
        if isinstance(ev, h2.events.ResponseReceived):
            streams[ev.stream_id]["status"] = dict(ev.headers)[b":status"].decode()
        elif isinstance(ev, h2.events.DataReceived):
            streams[ev.stream_id]["body"] += ev.data
            conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            streams[ev.stream_id]["done"] = True
        elif isinstance(ev, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
            sys.exit(f"server ended it: {ev}")
    sock.sendall(conn.data_to_send())
conn.close_connection()
sock.sendall(conn.data_to_send())
sock.close()
for n, sid in enumerate(sorted(streams)):
    print(streams[sid]["status"])
    with open(os.path.join(outdir, str(n)), "wb") as f:
        f.write(streams[sid]["body"])
