#!/usr/bin/env bash
# TCP segments a proxied request costs, counted by the kernel (nstat), for a proxy
# in front of proxy_peers.py's origin under its `fast` load (wrk -t1 -c50, 5 s after
# a 2 s warm-up). The counters are the whole machine's: the client's, the proxy's and
# the origin's segments together, so compare rows, measured one after the other.
#
#   bench/proxy/segments.sh NAME PROXY-COMMAND...
#
# The proxy must listen on 127.0.0.1:19002 and proxy to 127.0.0.1:19001, where this
# script starts the origin (bench/proxy/upstream, built by proxy_peers.py). E.g.:
#
#   bench/proxy/segments.sh ours target/release/mpm serve --mpm event \
#       --listen 127.0.0.1:19002 --proxy /=http://127.0.0.1:19001
#   bench/proxy/segments.sh floor FLOOR-BINARY 19002 19001 2
#
# Four segments a request (the request and the answer, each way, the acknowledgements
# riding on them) is the least; more means split writes or acknowledgements of their
# own. Needs wrk and nstat (iproute2).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ $# -ge 2 ] || { sed -n '2,19p' "$0"; exit 2; }
name=$1
shift
origin="$here/upstream/target/release/upstream"
[ -x "$origin" ] || { echo "segments.sh: build $origin first (proxy_peers.py does)" >&2; exit 2; }
work=$(mktemp -d)
trap 'kill $proxy $up 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
"$origin" 19001 2 0 1456 > "$work/origin.log" 2>&1 &
up=$!
sleep 0.5
"$@" > "$work/proxy.log" 2>&1 &
proxy=$!
sleep 1.5
wrk -t1 -c50 -d2s http://127.0.0.1:19002/ > /dev/null
nstat -n > /dev/null
out=$(wrk -t1 -c50 -d5s http://127.0.0.1:19002/)
requests=$(echo "$out" | grep -oE "[0-9]+ requests in" | grep -oE "^[0-9]+")
echo "$name: $requests requests"
nstat -z TcpOutSegs TcpExtTCPPureAcks TcpExtDelayedACKs |
  awk -v n="$requests" 'NR > 1 { printf "  %-20s %10d  %.3f a request\n", $1, $2, $2 / n }'
