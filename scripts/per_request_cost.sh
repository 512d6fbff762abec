#!/bin/bash
# What a request costs the server and the client, under wrk -t1 -c256 (the
# rust_peers load): CPU us, syscalls and context switches per request for
# the server's processes (by command name) and for wrk itself, from
# `perf stat` over 4 s in the middle of a 10 s run. Needs wrk, perf (with
# access to the raw_syscalls tracepoint: root, or perf_event_paranoid -1)
# and python3.
#
#   scripts/per_request_cost.sh NAME PORT PATH [DEPTH]
#   scripts/per_request_cost.sh techempower 8080 /plaintext        # a server started beforehand
#   scripts/per_request_cost.sh techempower 8080 /plaintext 16     # pipelined 16 deep
#
# Pipelining uses bench/rust_peers/pipeline.lua (or PIPELINE_LUA).
#
# A client at ~1.00 CPUs is the bottleneck: req/s then says more about wrk
# than about the server, and the server's CPU per request is the figure to
# compare. The rate is wrk's over the whole run, the counts perf's over the
# 4 s inside it.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 NAME PORT PATH [DEPTH]  (NAME: the server's command name, as pgrep -x sees it)" >&2
  exit 2
fi
name=$1 port=$2 path=$3 depth=${4:-}
wrk_args=(-t1 -c256 -d10s)
if [ -n "$depth" ]; then
  lua=${PIPELINE_LUA:-$(dirname "$0")/../bench/rust_peers/pipeline.lua}
  [ -f "$lua" ] || { echo "pipeline.lua not found at $lua (set PIPELINE_LUA)" >&2; exit 2; }
  wrk_args+=(-s "$lua")
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
servers=$(pgrep -d, -x "$name") || { echo "no process named $name" >&2; exit 2; }
if [ -n "$depth" ]; then
  wrk "${wrk_args[@]}" "http://127.0.0.1:$port$path" -- "$depth" > "$out/wrk" &
else
  wrk "${wrk_args[@]}" "http://127.0.0.1:$port$path" > "$out/wrk" &
fi
client=$!
sleep 3
perf stat -e task-clock,raw_syscalls:sys_enter,context-switches -p "$servers" -o "$out/server" -- sleep 4 &
perf stat -e task-clock,raw_syscalls:sys_enter,context-switches -p "$client" -o "$out/client" -- sleep 4
wait
python3 - "$out" "$name" <<'PY'
import re, sys
out, name = sys.argv[1], sys.argv[2]
m = re.search(r"Requests/sec:\s*([\d.]+)", open(f"{out}/wrk").read())
if not m:
    sys.exit("wrk printed no rate: " + open(f"{out}/wrk").read()[-300:])
rps = float(m.group(1))
def counts(f):
    c = {}
    for line in open(f):
        m = re.match(r"\s*([\d,.]+)\s+(?:msec\s+)?(task-clock|raw_syscalls:sys_enter|context-switches)", line)
        if m:
            c[m.group(2)] = float(m.group(1).replace(",", ""))
    missing = {"task-clock", "raw_syscalls:sys_enter", "context-switches"} - c.keys()
    if missing:
        sys.exit(f"perf counted no {', '.join(sorted(missing))} in {f} (permissions?)")
    return c
n = rps * 4
print(f"{rps:.0f} req/s")
for who, f in ((name, "server"), ("wrk", "client")):
    c = counts(f"{out}/{f}")
    print(f"{who}: {c['task-clock'] / 4000:.2f} CPUs, {c['task-clock'] * 1000 / n:.2f} CPU us/req, "
          f"{c['raw_syscalls:sys_enter'] / n:.2f} syscalls/req, {c['context-switches'] / n:.3f} context switches/req")
PY
