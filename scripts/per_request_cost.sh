#!/bin/bash
# What a request costs the server and the client, under wrk -t1 -c256 (the
# rust_peers load): CPU us, syscalls and context switches per request for
# the server's processes (by command name) and for wrk itself, from
# `perf stat` over 4 s in the middle of a 10 s run. Needs wrk and perf.
#
#   scripts/per_request_cost.sh NAME PORT PATH [DEPTH]
#   scripts/per_request_cost.sh techempower 8080 /plaintext        # a server started beforehand
#   scripts/per_request_cost.sh techempower 8080 /plaintext 16     # pipelined 16 deep
#
# A client at ~1.00 CPUs is the bottleneck: req/s then says more about wrk
# than about the server, and the server's CPU per request is the figure to
# compare.
set -euo pipefail
name=$1 port=$2 path=$3 depth=${4:-}
lua=()
if [ -n "$depth" ]; then
  lua=(-s "$(dirname "$0")/../../shared/bench/rust_peers/pipeline.lua")
  [ -f "${lua[1]}" ] || { echo "pipeline.lua not found at ${lua[1]}" >&2; exit 2; }
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
wrk -t1 -c256 -d10s "${lua[@]}" "http://127.0.0.1:$port$path" ${depth:+-- "$depth"} > "$out/wrk" &
sleep 3
servers=$(pgrep -d, -x "$name") || { echo "no process named $name" >&2; exit 2; }
client=$(pgrep -n -x wrk)
perf stat -e task-clock,raw_syscalls:sys_enter,context-switches -p "$servers" -o "$out/server" -- sleep 4 &
perf stat -e task-clock,raw_syscalls:sys_enter,context-switches -p "$client" -o "$out/client" -- sleep 4
wait
python3 - "$out" "$name" <<'PY'
import re, sys
out, name = sys.argv[1], sys.argv[2]
rps = float(re.search(r"Requests/sec:\s*([\d.]+)", open(f"{out}/wrk").read()).group(1))
def counts(f):
    c = {}
    for line in open(f):
        m = re.match(r"\s*([\d,.]+)\s+(?:msec\s+)?(task-clock|raw_syscalls:sys_enter|context-switches)", line)
        if m:
            c[m.group(2)] = float(m.group(1).replace(",", ""))
    return c
n = rps * 4
print(f"{rps:.0f} req/s")
for who, f in ((name, "server"), ("wrk", "client")):
    c = counts(f"{out}/{f}")
    print(f"{who}: {c['task-clock'] / 4000:.2f} CPUs, {c['task-clock'] * 1000 / n:.2f} CPU us/req, "
          f"{c['raw_syscalls:sys_enter'] / n:.2f} syscalls/req, {c['context-switches'] / n:.3f} context switches/req")
PY
